#include "vendors/fake/fake_driver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <system_error>
#include <thread>
#include <utility>

#include "vendors/ascend/vnpu.h"
#include "vendors/fake/inventory_file.h"

namespace accelpool::vendors::fake {

FakeDriver::FakeDriver(FakeDriverOptions options) : options_(std::move(options)) {}

StatusOr<std::vector<core::NodeInventory>> FakeDriver::Discover() {
  StatusOr<std::vector<core::NodeInventory>> invs = LoadInventoryFile(options_.path, options_.node);
  if (!invs.ok()) {
    return invs.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  last_ = *invs;
  return invs;
}

StatusOr<MemoryUse> FakeDriver::ReadMemoryUse() const {
  MemoryUse use;
  StatusOr<std::vector<core::NodeInventory>> invs =
      LoadInventoryFile(options_.path, options_.node, &use);
  if (!invs.ok()) {
    return invs.status();
  }
  return use;
}

StatusOr<std::map<std::string, int64_t>> FakeDriver::MemoryInUse() {
  StatusOr<MemoryUse> use = ReadMemoryUse();
  if (!use.ok()) return use.status();
  return std::move(use->used);
}

StatusOr<std::map<std::string, std::vector<ProcessMemory>>> FakeDriver::MemoryHolders() {
  StatusOr<MemoryUse> use = ReadMemoryUse();
  if (!use.ok()) return use.status();
  return std::move(use->processes);
}

void FakeDriver::Refresh(const HealthSink& sink) {
  StatusOr<std::vector<core::NodeInventory>> invs = LoadInventoryFile(options_.path, options_.node);
  if (!invs.ok()) {
    spdlog::error("fake backend: {}; device health stays as last read", invs.status().ToString());
    return;
  }
  std::vector<HealthEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, bool> before;
    for (const core::NodeInventory& inv : reported_) {
      for (const core::Device& d : inv.devices) {
        before[d.id] = d.healthy;
      }
    }
    for (const core::NodeInventory& inv : *invs) {
      for (const core::Device& d : inv.devices) {
        auto it = before.find(d.id);
        if (it != before.end() && it->second != d.healthy) {
          events.push_back({inv.vendor, d.id, d.healthy,
                            d.healthy ? "marked healthy in the inventory file"
                                      : "marked unhealthy in the inventory file"});
        }
      }
    }
    last_ = *invs;
    reported_ = std::move(invs).value();
  }
  for (const HealthEvent& e : events) {
    sink(e);
  }
}

Status FakeDriver::WatchHealth(std::stop_token stop, const HealthSink& sink) {
  {
    // The plugin serves the discovery it started the watch after.
    std::lock_guard<std::mutex> lock(mu_);
    reported_ = last_;
  }
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(options_.path, ec);
  Refresh(sink);  // an edit between that discovery and now
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(options_.poll);
    std::error_code now_ec;
    auto now = std::filesystem::last_write_time(options_.path, now_ec);
    bool changed = !now_ec && (ec || now != mtime);
    if (changed || reload_.exchange(false)) {
      mtime = now;
      ec = now_ec;
      Refresh(sink);
    }
  }
  return Status::Ok();
}

StatusOr<ContainerSpec> FakeDriver::BuildContainerSpec(
    const std::vector<GrantedDevice>& grants) const {
  if (grants.empty()) {
    return ContainerSpec{};
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const GrantedDevice& g : grants) {
    bool known = false;
    for (const core::NodeInventory& inv : last_) {
      for (const core::Device& d : inv.devices) {
        known = known || d.id == g.device.id;
      }
    }
    if (!known) {
      return InvalidArgumentError("device " + g.device.id +
                                  " is not in the fake inventory; re-read the file");
    }
  }
  // An Ascend share of a chip with more than one slot is a dynamic vNPU, as
  // the Ascend backend serves it with --ascend-vnpu (the device's index
  // stands for its physical id); a chip with one slot is held whole.
  const GrantedDevice& first = grants.front();
  if (first.device.vendor == core::Vendor::kAscend &&
      std::any_of(grants.begin(), grants.end(), ascend::IsVnpuGrant)) {
    return ascend::VnpuContainerSpec(grants, first.device.index);
  }
  // The fake backend has no device nodes: only the env tells the container
  // which devices it got, in the vendor's own variables.
  VendorTraits traits = TraitsFor(grants.front().device.vendor);
  traits.device_nodes.clear();
  traits.shared_nodes.clear();
  return GenericContainerSpec(traits, grants, nullptr, "");
}

}  // namespace accelpool::vendors::fake
