// KubeReporter: the PodReporter that writes to the apiserver, off kubelet's
// path. Allocated -> accelpool.io/allocation {"phase":"Allocated",...};
// Failed -> accelpool.io/allocation {"phase":"Failed","message":...} and a
// Warning Event with reason AccelpoolAllocateFailed on the pod. Writes run on
// one worker thread in order; a failed write is logged and dropped (the next
// Allocate writes the state again).
//
// Thread-safety: Allocated/Failed may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_KUBE_REPORTER_H_
#define ACCELPOOL_PLUGIN_KUBE_REPORTER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "kube/client.h"
#include "plugin/allocator.h"

namespace accelpool::plugin {

inline constexpr const char* kAllocateFailedReason = "AccelpoolAllocateFailed";
inline constexpr const char* kReporterName = "accelpool-device-plugin";

class KubeReporter : public PodReporter {
 public:
  KubeReporter(kube::KubeClient* client, Logger log);
  ~KubeReporter() override;  // drains the queue, then stops

  // Blocks until every queued write was tried (tests).
  void Flush();

  // PodReporter:
  void Allocated(const PodRef& pod, const std::vector<std::string>& containers) override;
  void Failed(const std::optional<PodRef>& pod, const std::string& resource,
              const std::string& message) override;

 private:
  void Post(std::function<void()> work);
  void Run(std::stop_token stop);

  kube::KubeClient* const client_;
  const Logger log_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  int busy_ = 0;                             // guarded by mu_
  std::jthread worker_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_KUBE_REPORTER_H_
