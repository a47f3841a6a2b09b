// WorkloadStore: the learned workload kept in a ConfigMap, so that an
// extender that restarts, or a replica that joins, scores with the mix its
// predecessor learned from its first filter, and counts no running pod twice.
//
// Without it a new process learned from scratch: until `--workload-window`
// new pods had arrived it scored with the pods that happened to be running,
// in which long-lived shapes are over-represented (a pod that runs ten times
// longer is ten times more likely to be found running).
//
// The ConfigMap's data key "workload.json" holds one JSON document:
//
//   {"version": 1,
//    "observed": 51234,                      // arrivals ever counted
//    "watermark": "2026-12-01T12:00:05Z",    // newest creationTimestamp counted
//    "watermark_uids": ["9f0c...", ...],      // the pods counted created in that second
//    "shapes": [[1, 1000, 0, 8000, 16384, ""],   // count, compute (thousandths),
//               [1, 300, 12288, 2000, 8192, "A10"]],  // device memory MiB, CPU
//                                                // milli, host memory MiB, models
//    "arrivals": [0, 0, 1, 0, ...]}          // the window, oldest first: shape indices
//
// A pod created before the watermark (or in its second and listed in
// watermark_uids) is in the window already: PodLoad does not count it again.
// The document is written by the active replica only, and is checked on read:
// one that does not parse, or breaks a bound, is refused with the reason and
// the learner starts empty (it is rewritten on the next save).
//
// Thread-safety: Encode/Decode are pure; a WorkloadStore may be used from
// many threads at once (every call is its own request).
#ifndef ACCELPOOL_EXTENDER_WORKLOAD_STORE_H_
#define ACCELPOOL_EXTENDER_WORKLOAD_STORE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/policy.h"
#include "kube/client.h"

namespace accelpool::extender {

struct WorkloadState {
  std::vector<core::TaskShape> arrivals;  // the window, oldest first (weights ignored)
  uint64_t observed = 0;                  // arrivals ever counted
  std::string watermark;                  // "YYYY-MM-DDTHH:MM:SSZ"; "" = none
  std::vector<std::string> watermark_uids;
  friend bool operator==(const WorkloadState&, const WorkloadState&) = default;
};

// Bounds a document must keep to be read.
inline constexpr size_t kMaxStoredArrivals = 1000000;
inline constexpr size_t kMaxStoredShapes = 100000;
inline constexpr size_t kMaxWatermarkUids = 100000;
inline constexpr size_t kMaxStoredModel = 1024;

// The document for `state`. When it would be longer than `max_bytes` the
// oldest arrivals are left out until it fits (a ConfigMap holds at most
// 1 MiB); `*kept` (when given) is how many arrivals it holds.
std::string EncodeWorkload(const WorkloadState& state, size_t max_bytes = 768 * 1024,
                           size_t* kept = nullptr);

// The state a document holds, or why it cannot be read (not JSON, another
// version, a field missing, of the wrong type or out of bounds).
StatusOr<WorkloadState> DecodeWorkload(std::string_view text);

// "true" when `t` is a creationTimestamp as the apiserver writes it.
bool IsRfc3339Seconds(std::string_view t);

class WorkloadStore {
 public:
  static constexpr const char* kDataKey = "workload.json";

  WorkloadStore(kube::KubeClient& client, std::string ns, std::string name);

  // The stored state; nullopt when the ConfigMap or its key does not exist.
  StatusOr<std::optional<WorkloadState>> Load();
  // Writes `state` with a merge patch of the data key, which needs no
  // resourceVersion (only the active replica writes); creates the ConfigMap
  // when it does not exist, and patches once more when another writer
  // created it meanwhile. `*kept` as for EncodeWorkload.
  Status Save(const WorkloadState& state, size_t* kept = nullptr);

  std::string where() const { return ns_ + "/" + name_; }

 private:
  kube::KubeClient& client_;
  const std::string ns_;
  const std::string name_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_WORKLOAD_STORE_H_
