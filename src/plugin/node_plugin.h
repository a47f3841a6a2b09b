// NodePlugin: the device plugin of one node, wired together. It discovers the
// devices of every vendor driver (a driver whose library is absent or fails
// contributes nothing and logs one line), serves one ResourceServer per
// resource, registers each with kubelet, keeps registrations alive (kubelet
// removes plugin sockets when it restarts and recreates kubelet.sock: the
// plugin notices within `kubelet_poll`, serves again and re-registers), and
// feeds driver health events into the DeviceState both ways.
//
// The device set is checked again every `rediscover_every` (and at once on
// CheckDevicesNow): an operator who changes a GPU's MIG layout, a card that
// is added, or one that is gone. A change is served once two checks in a row
// see the same new set (a driver answering oddly for a moment changes
// nothing), or at once when asked through CheckDevicesNow. A backend that
// serves devices and fails its check keeps what it serves. On a change the
// removed devices leave ListAndWatch and the published inventory, new ones
// join it, a new resource is served and registered, and the changed
// backends' health watches start again (their devices take the health that
// discovery reads, as after a restart). Grants on a removed device stay with
// their containers; kubelet and the extender keep counting them.
//
// Threads: the supervisor watches kubelet.sock and the plugin sockets and
// registers; the device checker runs the device checks. A discovery that
// stalls (a vendor library on a sick device can take seconds) never holds
// back a re-registration after a kubelet restart.
//
// Thread-safety: Start() and Stop() from the owner thread; the accessors may
// be used from any thread after Start().
#ifndef ACCELPOOL_PLUGIN_NODE_PLUGIN_H_
#define ACCELPOOL_PLUGIN_NODE_PLUGIN_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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

// What a device check changed (NodePlugin::OnDevicesChanged).
struct DeviceChange {
  std::vector<std::string> added;    // device ids
  std::vector<std::string> removed;  // device ids
  // "<namespace>/<pod> (<device>)" for each pod holding a removed device.
  std::vector<std::string> held;
  size_t devices = 0;  // served now
};

struct NodePluginOptions {
  std::string node;
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  EnforcementOptions enforcement;
  // How often kubelet.sock and the plugin sockets are checked.
  std::chrono::milliseconds kubelet_poll{100};
  // Wait between failed registrations.
  std::chrono::milliseconds register_retry{1000};
  // Registers a resource again when kubelet had a ListAndWatch stream open
  // since its registration and none has been open for this long (kubelet
  // dropped the endpoint: ResourceServer::Unwatched). 0: never.
  std::chrono::milliseconds unwatched_grace{10000};
  // How often the device set is discovered again; 0 = only at Start and on
  // CheckDevicesNow.
  std::chrono::milliseconds rediscover_every{0};
  // Wait before a backend's health watch that ended with an error is
  // started again; it doubles at each failure in a row, up to
  // health_retry_max.
  std::chrono::milliseconds health_retry{1000};
  std::chrono::milliseconds health_retry_max{std::chrono::minutes(1)};
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
  // change (for publishing on the Node), from a thread of its own: `fn` may
  // wait on the apiserver (a publish holds its lock across a Get and a Patch
  // of up to 30 s each), and neither a health thread's next change nor the
  // supervisor's re-registration may wait for it. Changes made while `fn`
  // runs are folded: the next call gets the latest inventories. Set before
  // Start().
  void OnInventory(std::function<void(const std::vector<core::NodeInventory>&)> fn) {
    on_inventory_ = std::move(fn);
  }

  // Calls `fn` after a device check served a changed device set, from the
  // device checker's thread (for an Event on the Node). Set before Start().
  void OnDevicesChanged(std::function<void(const DeviceChange&)> fn) {
    on_devices_changed_ = std::move(fn);
  }

  // Calls `fn` after a device's health changed, from the backend's health
  // thread (for an Event on the Node). Set before Start().
  void OnHealthChanged(std::function<void(const vendors::HealthEvent&)> fn) {
    on_health_changed_ = std::move(fn);
  }

  // Asks the device checker to discover again now and to serve a change without
  // waiting for a second check (SIGHUP: the operator changed the devices).
  void CheckDevicesNow() { check_now_.store(true); }

  // Hands the inventories served now to the OnInventory callback again, on
  // its thread (the owner's periodic retry of a publish that failed); never
  // waits for it.
  void PublishAgain() { Publish(state_.Get()->inventories); }

  DeviceState& state() { return state_; }
  Allocator& allocator() { return *allocator_; }
  std::vector<std::string> Resources() const;

 private:
  // One discovery of every driver. `keys[i]` identifies what driver i found
  // (health left out); `failed[i]` is set when it failed. `served` (the
  // snapshot served now, at a device check; null at Start): a driver that
  // fails and serves devices keeps its inventories from it, and no other
  // driver's inventory holding one of their ids is taken.
  struct Discovery {
    std::vector<core::NodeInventory> inventories;
    std::vector<vendors::VendorDriver*> owners;
    std::vector<std::string> keys;
    std::vector<bool> failed;
    size_t devices = 0;
    std::string reasons;
  };
  Discovery DiscoverAll(bool quiet, const Snapshot* served);
  // Starts the health watch of driver `i`.
  void WatchHealth(size_t i);
  // Serves the resources of the current snapshot that have no server yet and
  // adds them to pending_ (registration is the supervisor's); returns them.
  std::vector<std::string> ServeNewResources();
  // Discovers again and serves a change (see the class comment); called from
  // the device checker.
  void CheckDevices(bool at_once);
  // The device checker's loop: a check every rediscover_every and on
  // CheckDevicesNow.
  void CheckLoop(std::stop_token stop);
  // The supervisor's loop: kubelet.sock, the plugin sockets, registration.
  void Supervise(std::stop_token stop);
  void HealthChanged(const vendors::HealthEvent& e);
  // Hands the inventories to the publisher thread (no wait; see OnInventory).
  void Publish(std::vector<core::NodeInventory> inventories);
  void PublishLoop(std::stop_token stop);

  const NodePluginOptions options_;
  std::vector<vendors::VendorDriverPtr> drivers_;
  AssignmentStore* const store_;
  PluginMetrics* const metrics_;
  const Logger log_;
  DeviceState state_;
  std::unique_ptr<Allocator> allocator_;
  // Guards servers_ and pending_. Held only to read or change them: never
  // across a Discover, a socket's start or a registration (Register waits on
  // kubelet, up to its timeout per resource), and no other lock is taken
  // under it. servers_ only grows until Stop (which joins both threads
  // first), so a server's address stays valid outside the lock; Start and
  // Register of a server in servers_ run on the supervisor thread only.
  mutable std::mutex servers_mu_;
  std::vector<std::unique_ptr<ResourceServer>> servers_;
  // Resources to (re)register with kubelet: added by Start, by the device
  // checker for a new resource, and by the supervisor after a kubelet
  // restart or for a socket that went; removed by the supervisor once
  // registered.
  std::set<std::string> pending_;
  std::function<void(const std::vector<core::NodeInventory>&)> on_inventory_;
  std::function<void(const DeviceChange&)> on_devices_changed_;
  std::function<void(const vendors::HealthEvent&)> on_health_changed_;
  // Per driver; changed by Start, then by the device checker only.
  std::vector<std::jthread> health_threads_;
  // The device check (device checker thread only after Start): what each driver
  // serves, and a differing set seen once, waiting for its second sighting.
  std::vector<std::string> served_keys_;
  std::vector<std::string> candidate_keys_;
  std::string last_check_failure_;  // the reasons last warned about
  std::atomic<bool> check_now_{false};
  std::mutex publish_mu_;
  std::condition_variable_any publish_cv_;
  // The latest inventories not handed to on_inventory_ yet; guarded by
  // publish_mu_.
  std::optional<std::vector<core::NodeInventory>> to_publish_;
  std::jthread publisher_;  // runs on_inventory_ (PublishLoop)
  std::jthread supervisor_;
  std::jthread checker_;  // runs the device checks (CheckLoop)
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_NODE_PLUGIN_H_
