// KubeReporter: the PodReporter that writes to the apiserver, off kubelet's
// path. Allocated -> accelpool.io/allocation {"phase":"Allocated",...};
// Failed -> accelpool.io/allocation {"phase":"Failed","message":...} keeping
// the containers allocated so far, and a Warning Event with reason
// AccelpoolAllocateFailed on the pod. The allocation state is merged with the
// one on the pod (api::MergeAllocation: another vendor's plugin writes its
// own containers of a pod that asks both) and written on the condition that
// the pod, the same uid, has not changed since.
//
// Allocated and Failed only queue the write: kubelet's Allocate never waits
// for the apiserver. One worker thread tries the writes; a write that fails
// with a transient error (unavailable, throttled, conflict, timeout) is tried
// again after a backoff that doubles from backoff_initial up to backoff_max,
// at most max_attempts times in all, without holding up the writes queued
// behind it. Writes of one pod's allocation state supersede each other: a
// queued or retrying older state is dropped once a newer one is queued, so a
// late retry never overwrites newer state. A pod that is gone (404) or a
// write the apiserver refuses (400, 403) is not retried.
//
// Thread-safety: Allocated/Failed/Flush may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_KUBE_REPORTER_H_
#define ACCELPOOL_PLUGIN_KUBE_REPORTER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "plugin/allocator.h"

namespace accelpool::plugin {

inline constexpr const char* kAllocateFailedReason = "AccelpoolAllocateFailed";
inline constexpr const char* kDevicesChangedReason = "AccelpoolDevicesChanged";
inline constexpr const char* kReporterName = "accelpool-device-plugin";

struct KubeReporterOptions {
  int max_attempts = 6;                            // per write, the first try included
  std::chrono::milliseconds backoff_initial{250};  // before the second try; doubles
  std::chrono::milliseconds backoff_max{8000};     // cap of one wait (6 tries: ~8 s in all)
};

class KubeReporter : public PodReporter {
 public:
  KubeReporter(kube::KubeClient* client, Logger log, KubeReporterOptions options = {});
  // Tries every queued write once more, without waiting for backoffs, then
  // stops.
  ~KubeReporter() override;

  // Blocks until every queued write succeeded or was given up (tests).
  void Flush();

  // Queues an Event about Node `node` (kDevicesChangedReason: the plugin's
  // device check served a new device set; kDeviceUnhealthyReason /
  // kDeviceHealthyReason: a device's health changed). Its involvedObject
  // carries the node's name as uid, as kubelet's node events do, so that
  // `kubectl describe node` lists it. `action`: the Event's action.
  void NodeEvent(const std::string& node, kube::EventKind kind, const std::string& reason,
                 const std::string& message, const std::string& action = "DeviceCheck");

  // Queues an Event about pod `pod` (kUngrantedDeviceMemoryReason: a
  // process of the pod holds memory on a device it was not granted).
  void PodEvent(const PodRef& pod, kube::EventKind kind, const std::string& reason,
                const std::string& message, const std::string& action);

  // PodReporter:
  void Allocated(const PodRef& pod, const std::vector<api::AllocatedResource>& allocated) override;
  void Failed(const std::optional<PodRef>& pod, const std::string& resource,
              const std::string& message,
              const std::vector<api::AllocatedResource>& allocated) override;

 private:
  struct Write {
    std::string key;  // writes with one key supersede each other; "" never
    uint64_t generation = 0;
    std::string what;  // for logs
    PodRef pod;
    std::function<Status()> fn;
    int attempt = 1;
    std::chrono::steady_clock::time_point due;
  };

  void Post(std::string key, std::string what, const PodRef& pod, std::function<Status()> fn);
  void Run(std::stop_token stop);
  std::chrono::milliseconds Backoff(int failed_attempts) const;
  // REQUIRES: mu_ held. Whether no newer write of w's key was queued since.
  bool Latest(const Write& w) const;
  // REQUIRES: mu_ held. Forgets the key's generation when `w` is its latest.
  void Done(const Write& w);

  kube::KubeClient* const client_;
  const Logger log_;
  const KubeReporterOptions options_;

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Write> queue_;                 // guarded by mu_
  std::map<std::string, uint64_t> latest_;  // key -> newest generation; guarded by mu_
  uint64_t posts_ = 0;                      // guarded by mu_
  int busy_ = 0;                            // guarded by mu_
  std::jthread worker_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_KUBE_REPORTER_H_
