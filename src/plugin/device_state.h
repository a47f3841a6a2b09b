// DeviceState: the node's devices as the plugin serves them: the inventories
// the drivers discovered, grouped into kubelet resources (one per device
// class), with live health. Readers take an immutable snapshot; every change
// publishes a new one and bumps the version so ListAndWatch streams resend.
//
// Resource names: "huawei.com/<model>" for Ascend (huawei.com/Ascend910B3),
// otherwise the vendor's count resource (nvidia.com/gpu, ...).
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_DEVICE_STATE_H_
#define ACCELPOOL_PLUGIN_DEVICE_STATE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/types.h"
#include "vendors/driver.h"

namespace accelpool::plugin {

// Where a device lives in a snapshot.
struct DeviceRef {
  size_t inventory = 0;
  size_t device = 0;
};

struct Snapshot {
  int64_t version = 0;
  std::vector<core::NodeInventory> inventories;
  std::vector<vendors::VendorDriver*> drivers;              // parallel to inventories; not owned
  std::map<std::string, DeviceRef> by_id;                   // device id -> place
  std::map<std::string, std::vector<DeviceRef>> resources;  // resource -> devices

  const core::Device* Find(const std::string& id) const;
};
using SnapshotPtr = std::shared_ptr<const Snapshot>;

// The kubelet resource a device is advertised under (api::DeviceResource:
// the one resource-name table the extender uses too).
std::string ResourceFor(const core::Device& device);

class DeviceState {
 public:
  DeviceState();

  // Replaces every inventory (after discovery). `drivers[i]` serves
  // `inventories[i]` and must outlive this object.
  void Reset(std::vector<core::NodeInventory> inventories,
             std::vector<vendors::VendorDriver*> drivers);
  // Reset, except that a device of a driver in `keep_health` that is in the
  // current snapshot keeps its current health (its health watch goes on), in
  // one step with respect to SetHealth.
  void Replace(std::vector<core::NodeInventory> inventories,
               std::vector<vendors::VendorDriver*> drivers,
               const std::set<const vendors::VendorDriver*>& keep_health);
  // Sets one device's health; false when the id is unknown or nothing changed.
  bool SetHealth(const std::string& device_id, bool healthy);

  SnapshotPtr Get() const;
  // Waits until the version differs from `seen` or `timeout` passes; returns
  // the current snapshot either way.
  SnapshotPtr WaitNewer(int64_t seen, std::chrono::milliseconds timeout) const;

 private:
  void Publish(std::shared_ptr<Snapshot> next);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  SnapshotPtr current_;  // guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_DEVICE_STATE_H_
