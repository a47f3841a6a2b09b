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
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/log.h"
#include "core/workload.h"
#include "extender/cache.h"
#include "extender/extender.h"
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
  // uid and resourceVersion plus its Summary packed in one small array (key
  // "accelpool.io/load"), about 1.5 KiB of memory per pod whatever its size.
  static void Trim(nlohmann::json& pod);

  void OnPodAdded(const nlohmann::json& pod);
  void OnPodUpdated(const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);

  // Hands the learned workload to `extender` (the built-in mix while too few
  // pods have arrived); true when the extender's workload changed.
  bool Refresh(Extender& extender);
  // Runs Refresh every options.refresh on its own thread until Stop().
  void Start(Extender& extender);
  void Stop();

  uint64_t arrivals() const;
  int64_t unparsable() const { return unparsable_.load(); }

 private:
  static void Identify(const nlohmann::json& pod, Summary* s);  // uid and key
  void Run(std::stop_token stop, Extender* extender);
  void RecordHost(const Summary& s);

  Cache& cache_;
  const PodLoadOptions options_;
  const ExtenderMetrics* const metrics_;
  const Logger log_;
  std::atomic<int64_t> unparsable_{0};
  mutable std::mutex mu_;
  core::WorkloadLearner learner_;  // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable_any stop_cv_;
  std::jthread thread_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_POD_LOAD_H_
