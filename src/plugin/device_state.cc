#include "plugin/device_state.h"

#include <utility>

#include "api/resources.h"

namespace accelpool::plugin {

const core::Device* Snapshot::Find(const std::string& id) const {
  auto it = by_id.find(id);
  if (it == by_id.end()) {
    return nullptr;
  }
  return &inventories[it->second.inventory].devices[it->second.device];
}

std::string ResourceFor(const core::Device& device) {
  return api::DeviceResource(device.vendor, device.model, device.partition);
}

DeviceState::DeviceState() : current_(std::make_shared<Snapshot>()) {}

void DeviceState::Reset(std::vector<core::NodeInventory> inventories,
                        std::vector<vendors::VendorDriver*> drivers) {
  Replace(std::move(inventories), std::move(drivers), {});
}

void DeviceState::Replace(std::vector<core::NodeInventory> inventories,
                          std::vector<vendors::VendorDriver*> drivers,
                          const std::set<const vendors::VendorDriver*>& keep_health) {
  auto next = std::make_shared<Snapshot>();
  next->inventories = std::move(inventories);
  next->drivers = std::move(drivers);
  next->drivers.resize(next->inventories.size(), nullptr);
  for (size_t i = 0; i < next->inventories.size(); ++i) {
    const core::NodeInventory& inv = next->inventories[i];
    for (size_t j = 0; j < inv.devices.size(); ++j) {
      next->by_id[inv.devices[j].id] = {i, j};
      next->resources[ResourceFor(inv.devices[j])].push_back({i, j});
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < next->inventories.size() && !keep_health.empty(); ++i) {
    if (!keep_health.contains(next->drivers[i])) {
      continue;
    }
    for (core::Device& d : next->inventories[i].devices) {
      if (const core::Device* now = current_->Find(d.id); now != nullptr) {
        d.healthy = now->healthy;
      }
    }
  }
  Publish(std::move(next));
}

bool DeviceState::SetHealth(const std::string& device_id, bool healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = current_->by_id.find(device_id);
  if (it == current_->by_id.end()) {
    return false;
  }
  const core::Device& d = current_->inventories[it->second.inventory].devices[it->second.device];
  if (d.healthy == healthy) {
    return false;
  }
  auto next = std::make_shared<Snapshot>(*current_);
  next->inventories[it->second.inventory].devices[it->second.device].healthy = healthy;
  Publish(std::move(next));
  return true;
}

void DeviceState::Publish(std::shared_ptr<Snapshot> next) {
  next->version = current_->version + 1;
  current_ = std::move(next);
  changed_.notify_all();
}

SnapshotPtr DeviceState::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

SnapshotPtr DeviceState::WaitNewer(int64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return current_->version != seen; });
  return current_;
}

}  // namespace accelpool::plugin
