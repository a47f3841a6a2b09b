#include "vendors/fake/fake_driver.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
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

Status FakeDriver::Refresh(const HealthSink& sink) {
  StatusOr<std::vector<core::NodeInventory>> invs = LoadInventoryFile(options_.path, options_.node);
  if (!invs.ok()) {
    return invs.status();
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
  return Status::Ok();
}

FakeDriver::FileStamp FakeDriver::Stamp() const {
  struct stat st {};
  if (::stat(options_.path.c_str(), &st) != 0) {
    return FileStamp{};
  }
  return FileStamp{true, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                   static_cast<int64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

Status FakeDriver::WatchHealth(std::stop_token stop, const HealthSink& sink) {
  {
    // The plugin serves the discovery it started the watch after.
    std::lock_guard<std::mutex> lock(mu_);
    reported_ = last_;
  }
  // A read that fails (a file caught half written, or an edit that does not
  // pass the checks) is tried again at every poll until one succeeds: the
  // edit that completes it may leave the same stamp (its modification time
  // falls in the same clock tick). Each new error is logged once.
  std::string failed;
  auto refresh = [&]() {
    Status st = Refresh(sink);
    if (!st.ok() && st.message() != failed) {
      spdlog::error("fake backend: {}; device health stays as last read", st.ToString());
    }
    failed = st.ok() ? std::string() : st.message();
    return st.ok();
  };
  FileStamp seen = Stamp();
  bool retry = !refresh();  // an edit between that discovery and now
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(options_.poll);
    const FileStamp now = Stamp();
    const bool changed = now.exists && !(now == seen);
    if (changed || retry || reload_.exchange(false)) {
      seen = now;
      retry = !refresh();
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
  traits.optional_device_nodes.clear();  // handed over where they exist: not the host's
  return GenericContainerSpec(traits, grants, nullptr, "");
}

}  // namespace accelpool::vendors::fake
