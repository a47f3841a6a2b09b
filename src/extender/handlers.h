// Handlers: request body in, status and body out, for each extender verb.
//
// Independent of the HTTP server so that the server, the fuzz targets and the
// benchmark drive exactly the same code. Error policy:
//   - a body that is not the extender v1 JSON (truncated, wrong types, too
//     large, too deep) -> HTTP 400 with {"Error": "..."}, a log line and
//     accelpool_extender_bad_requests_total;
//   - a well-formed request that cannot be served (missing pod, a device
//     request that does not parse) -> HTTP 200 with the verb's own Error field
//     (filter, bind), which kube-scheduler shows on the pod; prioritize, whose
//     answer has no error field, answers 400 (kube-scheduler then ignores
//     this extender's scores for the cycle);
//   - an unexpected exception -> 500 with {"Error": ...}; never a crash.
// Unknown top-level keys are ignored (forward compatibility) and logged at
// debug level.
//
// Thread-safety: every method may be called concurrently.
#ifndef ACCELPOOL_EXTENDER_HANDLERS_H_
#define ACCELPOOL_EXTENDER_HANDLERS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/log.h"
#include "common/status.h"
#include "extender/extender.h"

namespace accelpool::extender {

// Filter's reason for every node while the caches are not synced.
inline constexpr const char* kNotSyncedReason =
    "accelpool-extender is still reading nodes and pods after a start; kube-scheduler retries";

struct Reply {
  int status = 200;
  std::string body;
};

// Reads a pod by name when bind arrives for a pod this replica has not
// filtered (after a restart, or on another replica).
class PodSource {
 public:
  virtual ~PodSource() = default;
  // `uid`: the pod bind was asked for ("" = whichever has the name). A
  // cached copy of another uid may be a stale one of a pod deleted and
  // re-created under the same name (a StatefulSet's): the source then reads
  // the apiserver instead of answering it. kNotFound when the pod does not
  // exist.
  virtual StatusOr<nlohmann::json> GetPod(const std::string& ns, const std::string& name,
                                          const std::string& uid) = 0;
};

struct HandlerOptions {
  // Larger bodies get 400 (the HTTP server also enforces its own limit).
  size_t max_body_bytes = 64 << 20;
  // The scheduler name whose pods the extender's pod cache watches
  // (--scheduler-name). A pod asking for devices under another name (a
  // second profile of the same kube-scheduler, such as the host-pod one) is
  // refused by filter with what to set: its grant would be in no watched
  // pod, so its deletion would never free the devices. "": no check.
  std::string scheduler_name;
};

class Handlers {
 public:
  // `pods` and `metrics` may be null.
  Handlers(Extender& ext, PodSource* pods, const ExtenderMetrics* metrics, Logger log,
           HandlerOptions options = {});

  Reply Filter(std::string_view body);
  Reply Prioritize(std::string_view body);
  Reply Bind(std::string_view body);
  Reply Preempt(std::string_view body);

  // Bind is answered with an error while `gate` returns a reason (a replica
  // that does not lead); an empty string lets it through. Set before serving.
  void SetBindGate(std::function<std::string()> gate) { bind_gate_ = std::move(gate); }

  // Until `synced` returns true (the node and pod informers have listed
  // everything once), the cache may miss pods that hold devices, so nothing is
  // decided from it: filter answers every candidate node as failed with
  // kNotSyncedReason, prioritize answers 0 for every node, bind answers its
  // Error field and preempt HTTP 503 with {"Error": ...} (its answer has no
  // error field). kube-scheduler calls the extender whether it is ready or not
  // and retries the pod. Unset: always synced. Set before serving.
  void SetSyncGate(std::function<bool()> synced) { synced_ = std::move(synced); }

 private:
  Reply Run(std::string_view verb, std::string_view body,
            const std::function<Reply(std::string_view)>& fn);
  Reply BadRequest(std::string_view verb, const Status& st);
  StatusOr<PodInfo> PodFromArgs(const Json& pod) const;
  bool Synced() const { return !synced_ || synced_(); }

  Extender& ext_;
  PodSource* const pods_;
  const ExtenderMetrics* const metrics_;
  const Logger log_;
  const HandlerOptions options_;
  std::function<std::string()> bind_gate_;
  std::function<bool()> synced_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_HANDLERS_H_
