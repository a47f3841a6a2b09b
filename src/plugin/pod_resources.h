// PodResourcesClient: kubelet's pod-resources API (v1, List) over its unix
// socket, read as the KubeletView the allocator asks when several pods could
// be calling (AssignmentStore, "who is calling").
//
// Kubelet adds a pod to its pod manager just before admitting it and admits
// one pod at a time, so during a GetPreferredAllocation or Allocate call the
// pod being admitted is listed, with no devices yet for the container being
// allocated, while pods kubelet has not reached are not.
//
// Thread-safety: List may be called from any thread (one channel, created on
// first use; gRPC reconnects when kubelet recreates the socket).
#ifndef ACCELPOOL_PLUGIN_POD_RESOURCES_H_
#define ACCELPOOL_PLUGIN_POD_RESOURCES_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "plugin/assignment_store.h"

namespace v1 {
class ListPodResourcesResponse;
}

namespace accelpool::plugin {

inline constexpr const char* kDefaultPodResourcesSocket =
    "/var/lib/kubelet/pod-resources/kubelet.sock";

// The view of a List answer: pod "<ns>/<name>" -> container -> resources it
// holds devices of (a resource listed with no device ids holds none).
KubeletView ViewFromList(const v1::ListPodResourcesResponse& list);

class PodResourcesClient {
 public:
  // `timeout` bounds each call: kubelet waits on the plugin's answer while it
  // admits, so a slow List must not hold it long.
  PodResourcesClient(std::string socket_path, std::chrono::milliseconds timeout);
  ~PodResourcesClient();

  // kUnavailable (with what to check) when the socket is missing or kubelet
  // does not answer within the timeout.
  StatusOr<KubeletView> List();

 private:
  struct Channel;
  const std::string socket_path_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::unique_ptr<Channel> channel_;  // guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_POD_RESOURCES_H_
