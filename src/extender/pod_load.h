// PodLoad: what every pod of the cluster tells the fragmentation policies.
//
// The extender sees, through its own pod watch, only the pods of its
// scheduler. The host CPU and memory of a node, and the mix of pods that
// arrive, depend on all of them: PodLoad is fed by a second informer over
// every pod, trimmed (Trim) to the few fields it reads, and
//   - records each pod's host request on its node (Cache::ObserveHostPod):
//     bound and not finished counts, pending or finished does not;
//   - counts each pod seen for the first time as one arrival of its shape
//     (core::ShapeOfRequest) in a core::WorkloadLearner. DaemonSet pods and
//     static (mirror) pods are fixtures of their nodes, not arrivals, and are
//     left out of the learner (their host requests still count).
// Refresh() hands the learned shapes to the extender (Extender::SetWorkload),
// and Start() does so every `refresh` period.
//
// With a WorkloadStore (SetStore), Restore() reads the window a predecessor
// kept before the informer lists, so a restarted extender scores with the
// learned mix at once; pods created up to the stored watermark are in that
// window and are not counted again. Start()'s thread then saves the window
// after each refresh in which pods arrived, and once more at Stop(), while
// `may_write` says this replica is the active one.
//
// A pod whose requests do not parse (the apiserver validates them, so this is
// a test or a corrupted object) is counted in unparsable() and skipped.
//
// Thread-safety: the handlers run on the informer's thread; Refresh, stats and
// Start/Stop may be called from any thread.
#ifndef ACCELPOOL_EXTENDER_POD_LOAD_H_
#define ACCELPOOL_EXTENDER_POD_LOAD_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "core/workload.h"
#include "extender/cache.h"
#include "extender/extender.h"
#include "extender/workload_store.h"
#include "kube/informer.h"

namespace accelpool::extender {

struct PodLoadOptions {
  bool host = true;   // record host requests in the cache
  bool learn = true;  // learn the workload
  core::WorkloadLearnerOptions learner;
  std::chrono::milliseconds refresh{30000};  // Start(): how often Refresh runs
};

class PodLoad {
 public:
  // `metrics` may be null.
  PodLoad(Cache& cache, PodLoadOptions options, const ExtenderMetrics* metrics, Logger log);
  ~PodLoad();  // Stop()
  PodLoad(const PodLoad&) = delete;
  PodLoad& operator=(const PodLoad&) = delete;

  kube::InformerHandlers Handlers();

  // What PodLoad reads of a pod.
  struct Summary {
    std::string uid;
    std::string key;        // "<namespace>/<name>", for logs
    std::string created;    // metadata.creationTimestamp
    std::string node;       // spec.nodeName; "" when not bound
    bool finished = false;  // Succeeded or Failed
    bool fixture = false;   // a DaemonSet's pod or a static pod's mirror
    bool host_ok = false;   // `host` parsed
    core::HostResources host;
    bool shape_ok = false;  // the device requests parsed; `shape` is the pod's
    core::TaskShape shape;
    std::string error;  // why the requests did not parse
  };
  // From a whole pod.
  static Summary Summarize(const nlohmann::json& pod);
  // From a pod Trim left (or, for any other object, Summarize).
  static Summary SummaryOf(const nlohmann::json& pod);
  // The informer transform: the pod becomes its metadata name, namespace,
  // uid, resourceVersion and creationTimestamp plus its Summary packed in one small array (key
  // "accelpool.io/load"), about 1.5 KiB of memory per pod whatever its size.
  static void Trim(nlohmann::json& pod);

  void OnPodAdded(const nlohmann::json& pod);
  void OnPodUpdated(const nlohmann::json& old, const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);

  // Hands the learned workload to `extender` (the built-in mix while too few
  // pods have arrived); true when the extender's workload changed.
  bool Refresh(Extender& extender);
  // Runs Refresh (and Persist) every options.refresh on its own thread until
  // Stop(), which persists once more.
  void Start(Extender& extender);
  void Stop();

  // Keeps the learned window in `store` (not owned; null: nowhere), written
  // only while `may_write` (null: always) returns true. Before Start().
  void SetStore(WorkloadStore* store, std::function<bool()> may_write);
  // Reads the stored window back, before the informer lists. Retries an
  // unreachable apiserver for up to `patience`; any other error, or none
  // stored, leaves the learner empty (the error is logged and returned).
  Status Restore(std::chrono::milliseconds patience = std::chrono::seconds(30));
  // Writes the window when pods arrived since it was last read or written
  // and this replica may write; true when it was written.
  bool Persist();
  // The window as stored.
  WorkloadState Snapshot() const;

  uint64_t arrivals() const;
  // Pods listed after Restore() that the stored window held already.
  uint64_t already_counted() const;
  int64_t unparsable() const { return unparsable_.load(); }

 private:
  static void Identify(const nlohmann::json& pod, Summary* s);  // uid, key, created
  void Run(std::stop_token stop, Extender* extender);
  void RecordHost(const Summary& s);
  bool CountedBefore(const Summary& s) const;  // mu_ held
  void AdvanceWatermark(const Summary& s);     // mu_ held
  void CountStore(const char* op, const char* result) const;

  Cache& cache_;
  const PodLoadOptions options_;
  const ExtenderMetrics* const metrics_;
  const Logger log_;
  std::atomic<int64_t> unparsable_{0};
  mutable std::mutex mu_;
  core::WorkloadLearner learner_;  // guarded by mu_
  // The newest creationTimestamp counted and the pods counted in its second
  // (guarded by mu_), and those of the stored window read back at start.
  std::string watermark_;
  std::vector<std::string> watermark_uids_;
  std::string restored_watermark_;
  std::unordered_set<std::string> restored_uids_;
  uint64_t already_counted_ = 0;  // guarded by mu_
  WorkloadStore* store_ = nullptr;
  std::function<bool()> may_write_;
  std::mutex persist_mu_;            // serialises Persist
  uint64_t persisted_observed_ = 0;  // learner_.observed() last read or written; persist_mu_
  std::string last_store_error_;     // persist_mu_
  std::mutex stop_mu_;
  std::condition_variable_any stop_cv_;
  std::jthread thread_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_POD_LOAD_H_
