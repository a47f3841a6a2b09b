// NodePlugin: the device plugin of one node, wired together. It discovers the
// devices of every vendor driver (a driver whose library is absent or fails
// contributes nothing and logs one line), serves one ResourceServer per
// resource, registers each with kubelet, keeps registrations alive (kubelet
// removes plugin sockets when it restarts and recreates kubelet.sock: the
// plugin notices within `kubelet_poll`, serves again and re-registers), and
// feeds driver health events into the DeviceState both ways.
//
// Thread-safety: Start() and Stop() from the owner thread; the accessors may
// be used from any thread after Start().
#ifndef ACCELPOOL_PLUGIN_NODE_PLUGIN_H_
#define ACCELPOOL_PLUGIN_NODE_PLUGIN_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "plugin/allocator.h"
#include "plugin/assignment_store.h"
#include "plugin/device_state.h"
#include "plugin/plugin_metrics.h"
#include "plugin/resource_server.h"
#include "vendors/driver.h"

namespace accelpool::plugin {

struct NodePluginOptions {
  std::string node;
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  EnforcementOptions enforcement;
  // How often kubelet.sock and the plugin sockets are checked.
  std::chrono::milliseconds kubelet_poll{100};
  // Wait between failed registrations.
  std::chrono::milliseconds register_retry{1000};
};

class NodePlugin {
 public:
  // `metrics` and `reporter` may be null. `refresh` re-reads the node's pods
  // when a lookup misses or falls back (may be null; see Allocator). All must
  // outlive the plugin.
  NodePlugin(NodePluginOptions options, std::vector<vendors::VendorDriverPtr> drivers,
             AssignmentStore* store, PluginMetrics* metrics, PodReporter* reporter, Logger log,
             std::function<Status()> refresh = nullptr);
  ~NodePlugin();  // Stop()

  // Discovers devices and starts serving, all or nothing: on any error no
  // resource is served, so the caller may wait and call Start again.
  // kUnavailable when no driver found any device (the message lists each
  // driver's reason) or a resource's socket cannot be served (the message
  // names it). kFailedPrecondition when already started.
  Status Start();
  void Stop();

  // Calls `fn` with the inventories after discovery and after every health
  // change (for publishing on the Node). Set before Start().
  void OnInventory(std::function<void(const std::vector<core::NodeInventory>&)> fn) {
    on_inventory_ = std::move(fn);
  }

  DeviceState& state() { return state_; }
  Allocator& allocator() { return *allocator_; }
  std::vector<std::string> Resources() const;

 private:
  void Supervise(std::stop_token stop);
  void HealthChanged(const vendors::HealthEvent& e);

  const NodePluginOptions options_;
  std::vector<vendors::VendorDriverPtr> drivers_;
  AssignmentStore* const store_;
  PluginMetrics* const metrics_;
  const Logger log_;
  DeviceState state_;
  std::unique_ptr<Allocator> allocator_;
  std::vector<std::unique_ptr<ResourceServer>> servers_;  // owned by the supervisor after Start
  std::function<void(const std::vector<core::NodeInventory>&)> on_inventory_;
  std::vector<std::jthread> health_threads_;
  std::jthread supervisor_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_NODE_PLUGIN_H_
