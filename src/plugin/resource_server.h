// ResourceServer: kubelet's DevicePlugin gRPC service for one resource
// (nvidia.com/gpu, huawei.com/Ascend910C, ...) on a unix socket in kubelet's
// device-plugins directory, and the Register call that announces it.
//
// Each device is advertised as max_shares slots "<device-id>::<n>" with its
// health and NUMA node; ListAndWatch sends the list at once and again after
// every change of it. GetPreferredAllocation and Allocate go to the Allocator;
// a failed Allocate answers a gRPC error with the Allocator's message.
//
// Lifecycle: Start() serves (removing a stale socket first), then Register()
// dials kubelet.sock; kubelet dials back during registration, so the order
// matters. Stop() ends open streams and removes the socket.
//
// Thread-safety: Start/Register/Stop from one owner thread; RPCs run on
// gRPC's threads.
#ifndef ACCELPOOL_PLUGIN_RESOURCE_SERVER_H_
#define ACCELPOOL_PLUGIN_RESOURCE_SERVER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/log.h"
#include "common/status.h"
#include "plugin/allocator.h"
#include "plugin/device_state.h"

namespace grpc {
class Server;
}

namespace accelpool::plugin {

inline constexpr const char* kDevicePluginVersion = "v1beta1";
inline constexpr const char* kKubeletSocket = "kubelet.sock";

// "accelpool-nvidia.com_gpu.sock": the socket file name for a resource.
std::string EndpointFor(const std::string& resource);

struct ResourceServerOptions {
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string resource;
  std::string endpoint;  // file name in plugin_dir; EndpointFor(resource) when empty
  std::chrono::milliseconds register_timeout{5000};
};

class ResourceServer {
 public:
  ResourceServer(ResourceServerOptions options, DeviceState* state, Allocator* allocator,
                 Logger log);
  ~ResourceServer();  // Stop()
  ResourceServer(const ResourceServer&) = delete;
  ResourceServer& operator=(const ResourceServer&) = delete;

  // kUnavailable when the socket cannot be bound (the message names it).
  Status Start();
  // Calls Registration.Register on kubelet.sock. kUnavailable when kubelet
  // does not answer; kubelet's own error otherwise.
  Status Register();
  void Stop();

  bool Serving() const { return server_ != nullptr; }
  // False once the socket file is gone (kubelet removes them when it restarts).
  bool SocketPresent() const;
  // True when kubelet opened a ListAndWatch stream since the last Register,
  // none is open now, and the last one closed at least `grace` ago: kubelet
  // dropped this endpoint (another plugin registered the resource and went,
  // or kubelet's registration server started again on the same socket) and
  // will not call again until the plugin registers again.
  bool Unwatched(std::chrono::milliseconds grace) const;
  // ListAndWatch streams open now.
  int Watchers() const;
  const std::string& resource() const { return options_.resource; }
  std::string SocketPath() const;

 private:
  class Service;
  // Kubelet's ListAndWatch streams, kept across Start (Service reads and
  // writes it).
  struct Watch {
    std::atomic<int> open{0};
    std::atomic<bool> since_register{false};  // a stream opened since the last Register
    std::atomic<int64_t> last_closed_ns{0};   // steady clock
  };

  const ResourceServerOptions options_;
  DeviceState* const state_;
  Allocator* const allocator_;
  const Logger log_;
  std::shared_ptr<std::atomic<bool>> stopping_;
  const std::shared_ptr<Watch> watch_ = std::make_shared<Watch>();
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_RESOURCE_SERVER_H_
