#include "plugin/foreign_memory.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

namespace accelpool::plugin {
namespace {

constexpr int64_t kGib = 1024;

struct Granted {
  int64_t memory_mib = 0;
  int32_t shares = 0;
  bool whole = false;
};

// What the allocated (or presumed) containers hold, by device id.
std::map<std::string, Granted> GrantedByDevice(const std::vector<PodAssignment>& assignments) {
  std::map<std::string, Granted> out;
  for (const PodAssignment& p : assignments) {
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (!p.allocated.contains(c.name) && !p.presumed.contains(c.name)) continue;
      for (const api::AssignedDevice& d : c.devices) {
        Granted& g = out[d.id];
        if (d.exclusive) {
          g.whole = true;
        } else {
          g.memory_mib += d.memory_mib;
          g.shares += 1;
        }
      }
    }
  }
  return out;
}

std::string Gib(int64_t mib) {
  std::ostringstream out;
  if (mib % kGib == 0) {
    out << mib / kGib << " GiB";
  } else {
    out << mib << " MiB";
  }
  return out.str();
}

}  // namespace

ForeignMemory::ForeignMemory(ForeignMemoryOptions options) : options_(options) {}

std::vector<ForeignChange> ForeignMemory::Observe(
    const std::vector<core::NodeInventory>& inventories, const std::map<std::string, int64_t>& used,
    const std::vector<PodAssignment>& assignments) {
  const std::map<std::string, Granted> granted = GrantedByDevice(assignments);
  const size_t confirm = static_cast<size_t>(std::max(1, options_.confirm));
  std::vector<ForeignChange> changes;
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> present;
  for (const core::NodeInventory& inv : inventories) {
    for (const core::Device& d : inv.devices) {
      if (!d.partition.empty()) continue;
      present.insert(d.id);
      const auto reading = used.find(d.id);
      if (reading == used.end()) continue;
      DeviceState& s = devices_[d.id];
      s.vendor = inv.vendor;
      s.used = reading->second;
      const auto held = granted.find(d.id);
      const Granted g = held == granted.end() ? Granted{} : held->second;
      int64_t level = 0;
      if (!g.whole) {
        const int64_t foreign = reading->second - g.memory_mib -
                                static_cast<int64_t>(g.shares) * options_.per_share_mib;
        if (foreign >= options_.min_mib) {
          level = std::min(foreign / kGib * kGib, d.memory_mib);
        }
      }
      s.recent.push_back(level);
      while (s.recent.size() > confirm) s.recent.pop_front();
      if (s.recent.size() < confirm) continue;
      const auto [lo, hi] = std::minmax_element(s.recent.begin(), s.recent.end());
      int64_t next = s.published;
      if (s.published < *lo) next = *lo;
      if (s.published > *hi) next = *hi;
      if (next == s.published) continue;
      changes.push_back(ForeignChange{.device = d.id,
                                      .vendor = inv.vendor,
                                      .before_mib = s.published,
                                      .after_mib = next,
                                      .used_mib = reading->second,
                                      .granted_mib = g.memory_mib,
                                      .shares = g.shares,
                                      .device_mib = d.memory_mib});
      s.published = next;
    }
  }
  std::erase_if(devices_, [&](const auto& kv) { return !present.contains(kv.first); });
  return changes;
}

void ForeignMemory::Restore(const std::vector<core::NodeInventory>& published) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const core::NodeInventory& inv : published) {
    for (const core::Device& d : inv.devices) {
      if (d.foreign_mib <= 0 || !d.partition.empty() || devices_.contains(d.id)) continue;
      DeviceState& s = devices_[d.id];
      s.vendor = inv.vendor;
      s.published = d.foreign_mib;
    }
  }
}

void ForeignMemory::Apply(std::vector<core::NodeInventory>* inventories) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (core::NodeInventory& inv : *inventories) {
    for (core::Device& d : inv.devices) {
      const auto it = devices_.find(d.id);
      d.foreign_mib = it == devices_.end() || !d.partition.empty()
                          ? 0
                          : std::min(it->second.published, d.memory_mib);
    }
  }
}

std::map<std::string, ForeignReading> ForeignMemory::Readings() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, ForeignReading> out;
  for (const auto& [id, s] : devices_) {
    out[id] = ForeignReading{.vendor = s.vendor, .used_mib = s.used, .foreign_mib = s.published};
  }
  return out;
}

std::string DescribeForeignChange(const ForeignChange& c) {
  std::ostringstream out;
  const std::string vendor(core::VendorName(c.vendor));
  if (c.after_mib == 0) {
    out << "device " << c.device << " (" << vendor << "): the memory in use that no grant "
        << "accounted for is freed (" << Gib(c.used_mib) << " in use, " << Gib(c.granted_mib)
        << " granted); it takes whole-device pods again";
    return out.str();
  }
  out << "device " << c.device << " (" << vendor << "): " << Gib(c.after_mib)
      << " of its memory is in use and no grant on this node accounts for it (" << Gib(c.used_mib)
      << " in use, " << Gib(c.granted_mib) << " granted to " << c.shares
      << " container(s) sharing it). Until it is freed the device takes no whole-device pod, "
      << "and shares only in the " << Gib(std::max<int64_t>(0, c.device_mib - c.after_mib))
      << " beside it. List the device's processes with the vendor's tool on the node "
      << "(nvidia-smi on NVIDIA): a process left from a container that ended, a host "
      << "process, or a pod that sets the visible-devices variable itself (a pod that asks "
      << "for no device and sets NVIDIA_VISIBLE_DEVICES=all reaches every GPU of the node)";
  return out.str();
}

}  // namespace accelpool::plugin
