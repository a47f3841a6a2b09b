#include "vendors/library_driver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "core/profiles.h"
#include "vendors/library_util.h"

namespace accelpool::vendors {

int32_t LinkKindScore(LinkKind kind) {
  switch (kind) {
    case LinkKind::kVendorLink:
      return 100;
    case LinkKind::kPcieSwitch:
      return 50;
    case LinkKind::kPcieHostBridge:
      return 30;
    case LinkKind::kSameNuma:
      return 20;
    case LinkKind::kCrossNuma:
      return 10;
    case LinkKind::kUnknown:
      return 0;
  }
  return 0;
}

std::string PickProfile(const std::vector<ProfileRule>& rules, const std::string& model,
                        size_t count) {
  for (const ProfileRule& r : rules) {
    if (model.rfind(r.model_prefix, 0) == 0 && count == r.count) {
      return r.profile;
    }
  }
  return "";
}

namespace {

// A profile's groups (a P800's wings, a C500's link zones) and its link
// scores go by index; a library may number the devices across the sockets
// alternately. Where it says which NUMA node each device sits on, and those
// nodes split the devices into groups of the profile's sizes, the groups
// follow the NUMA nodes and the profile's link scores follow the devices
// they are mapped to (the k-th NUMA node's j-th device stands where the
// profile's k-th group has its j-th). Profiles with modules keep their
// layout: a module's members are placed by the board, not the socket.
void GroupsFollowNuma(core::NodeInventory* inv) {
  core::Topology& t = inv->topology;
  const size_t n = inv->devices.size();
  if (t.groups.size() < 2 || !t.modules.empty()) {
    return;
  }
  std::map<int32_t, std::vector<int32_t>> by_numa;
  for (const core::Device& d : inv->devices) {
    if (d.numa < 0) {
      return;
    }
    by_numa[d.numa].push_back(d.index);
  }
  if (by_numa.size() != t.groups.size()) {
    return;
  }
  std::vector<int32_t> position(n, -1);  // device index -> the profile's index it stands for
  size_t k = 0;
  for (const auto& [numa, members] : by_numa) {
    const std::vector<int32_t>& group = t.groups[k++];
    if (group.size() != members.size()) {
      return;
    }
    for (size_t j = 0; j < members.size(); ++j) {
      position[static_cast<size_t>(members[j])] = group[j];
    }
  }
  if (std::find(position.begin(), position.end(), -1) != position.end()) {
    return;  // the profile's groups do not hold every device once
  }
  t.groups.clear();
  for (auto& [numa, members] : by_numa) {
    t.groups.push_back(std::move(members));
  }
  if (t.links.size() == n * n) {
    std::vector<int32_t> links(n * n, 0);
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        links[a * n + b] =
            t.links[static_cast<size_t>(position[a]) * n + static_cast<size_t>(position[b])];
      }
    }
    t.links = std::move(links);
  }
}

}  // namespace

LibraryDriver::LibraryDriver(DeviceLibraryPtr library, LibraryDriverSpec spec, std::string node)
    : library_(std::move(library)), spec_(std::move(spec)), node_(std::move(node)) {}

StatusOr<std::vector<core::NodeInventory>> LibraryDriver::DiscoverDevices(bool partial) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!initialized_) {
      ACCELPOOL_RETURN_IF_ERROR(library_->Init());
      initialized_ = true;
    }
  }
  StatusOr<int32_t> count = library_->Count();
  if (!count.ok()) {
    return count.status();
  }
  core::NodeInventory inv;
  inv.node = node_;
  inv.vendor = spec_.vendor;
  std::vector<std::string> left_out;  // the error lines of the devices left out
  std::vector<std::string> ids;       // by library index; "" for a device that is not offered
  std::vector<int32_t> where;         // library index by inventory index
  std::map<std::string, int32_t> minors;
  std::map<std::string, std::vector<std::string>> nodes;
  Status first_error;
  DiscoveryLog notes(&discovery_lines_);
  // A device that cannot be read, or whose id another device shares: at
  // start (`partial`) it is not offered; the others are, under their own ids
  // (UUID or PCI bus, never the index), and discovery fails only when none
  // can be read. Later, devices are served: the discovery fails, which keeps
  // them and the tables below as they are.
  auto leave_out = [&](Status st, const char* also, const char* until) {
    left_out.push_back(fmt::format(
        "{}: {}; it is not offered, the other devices are. Check it with {} and {}; a device "
        "check of the plugin offers it once it {}",
        Name(), st.message(), TraitsFor(spec_.vendor).tool, also, until));
    if (first_error.ok()) first_error = std::move(st);
  };
  struct Read {
    int32_t index;
    std::string id;
    LibraryDevice device;
  };
  std::vector<Read> read;
  std::map<std::string, int> uses;  // devices answering each id
  for (int32_t i = 0; i < *count; ++i) {
    ids.emplace_back();  // set below when the device is offered
    StatusOr<LibraryDevice> ld = library_->Device(i);
    if (!ld.ok()) {
      Status st = ld.status().WithPrefix(std::string(library_->LibraryName()) + " device " +
                                         std::to_string(i));
      if (!partial) {
        return st;
      }
      leave_out(std::move(st), "the kernel log", "answers");
      continue;
    }
    if (!ld->not_offered.empty()) {
      // Not for workloads (LibraryDevice::not_offered): left out, with no
      // error; logged once while it stays so.
      notes.Add(DiscoveryLog::Level::kInfo,
                fmt::format("{}: {} device {} is not offered: {}", Name(), library_->LibraryName(),
                            i, ld->not_offered));
      continue;
    }
    std::string id = !ld->uuid.empty() ? ld->uuid : spec_.id_prefix + "-" + ld->pci_bus;
    std::replace(id.begin(), id.end(), ':', '-');
    ++uses[id];
    read.push_back({i, std::move(id), std::move(ld).value()});
  }
  for (Read& r : read) {
    // The id keys a device's grants and health: two devices answering one id
    // (or none) cannot both be told apart, so neither is offered.
    if (uses[r.id] > 1 || r.id == spec_.id_prefix + "-") {
      Status st = InternalError(std::string(library_->LibraryName()) + " device " +
                                std::to_string(r.index) + " has no unique id (\"" + r.id + "\"" +
                                (uses[r.id] > 1 ? ", which " + std::to_string(uses[r.id] - 1) +
                                                      " other device(s) of the node also answer"
                                                : "") +
                                "); check the driver with the vendor's smi tool");
      if (!partial) {
        return st;
      }
      leave_out(std::move(st), "the ids it reports", "has an id of its own");
      continue;
    }
    const LibraryDevice& ld = r.device;
    core::Device d;
    d.id = r.id;
    d.index = static_cast<int32_t>(inv.devices.size());
    d.vendor = spec_.vendor;
    d.model = spec_.model ? spec_.model(ld.name) : ld.name;
    d.memory_mib = ld.memory_mib;
    d.compute_units = ld.compute_units;
    d.numa = ld.numa;
    d.pci_bus = ld.pci_bus;
    d.max_shares = std::max(1, TraitsFor(spec_.vendor).default_max_shares);
    ids[static_cast<size_t>(r.index)] = d.id;
    where.push_back(r.index);
    // A device that names no node number is numbered by its library index
    // (the inventory index differs once a device before it is not offered).
    minors[d.id] = ld.minor >= 0 ? ld.minor : r.index;
    if (!ld.nodes.empty()) {
      nodes[d.id] = ld.nodes;
    }
    inv.devices.push_back(std::move(d));
  }
  if (inv.devices.empty()) {
    if (!first_error.ok()) return first_error;
    return std::vector<core::NodeInventory>{};
  }
  const std::string profile =
      PickProfile(spec_.profiles, inv.devices.front().model, inv.devices.size());
  Status st = profile.empty() ? NotFoundError("no profile for this shape")
                              : core::ApplyProfile(profile, &inv);
  if (!st.ok()) {
    core::ApplyNumaDefault(&inv);
  } else {
    GroupsFollowNuma(&inv);
  }
  const size_t n = inv.devices.size();
  for (std::string& line : left_out) {
    notes.Add(DiscoveryLog::Level::kError, std::move(line));
  }
  std::vector<int32_t> links(n * n, 0);
  bool any = false;
  std::optional<std::string> unread;
  std::optional<std::string> unknown;  // the first pair the library answers "unknown" for
  for (size_t a = 0; a < n && !unread; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) {
        continue;
      }
      StatusOr<LinkKind> k = library_->Link(where[a], where[b]);
      if (!k.ok() && k.status().code() != StatusCode::kUnimplemented) {
        // A pair that could not be read would score 0 beside pairs that
        // were: the half-measured matrix does not replace the profile's.
        unread = "devices " + std::to_string(where[a]) + " and " + std::to_string(where[b]) + ": " +
                 k.status().message();
        break;
      }
      if (k.ok() && *k != LinkKind::kUnknown) {
        links[a * n + b] = LinkKindScore(*k);
        any = true;
      } else if (k.ok() && !unknown) {
        unknown = "devices " + std::to_string(where[a]) + " and " + std::to_string(where[b]) +
                  ": the library answers a link kind it does not name";
      }
    }
  }
  // A pair answered "unknown" beside measured pairs is as good as unread: it
  // would score 0, below two devices across the sockets. (A library that
  // answers "unknown" for every pair measured nothing: the profile's links
  // stay, as for one that cannot say.)
  if (!unread && any && unknown) {
    unread = unknown;
  }
  if (unread) {
    notes.Add(DiscoveryLog::Level::kError,
              std::string(library_->LibraryName()) + ": a link between two devices could not be " +
                  "read (" + *unread + "); the devices are placed by " +
                  (inv.topology.kind.empty() ? std::string("their NUMA nodes")
                                             : "profile " + inv.topology.kind) +
                  " without measured links. Check the topology with the vendor's smi tool");
  } else if (any) {
    inv.topology.links = std::move(links);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ids_ = std::move(ids);
  minors_ = std::move(minors);
  nodes_ = std::move(nodes);
  return std::vector<core::NodeInventory>{std::move(inv)};
}

Status LibraryDriver::WatchHealth(std::stop_token stop, const HealthSink& sink) {
  std::map<std::string, bool> last;
  while (!stop.stop_requested()) {
    std::vector<std::string> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids = ids_;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i].empty()) continue;  // not offered
      StatusOr<bool> h = library_->Healthy(static_cast<int32_t>(i));
      bool ok = h.ok() && *h;
      auto it = last.find(ids[i]);
      bool before = it == last.end() ? true : it->second;
      if (ok != before) {
        std::string reason = !h.ok() ? h.status().message()
                             : ok    ? "fault cleared"
                                     : std::string(library_->LibraryName()) + " reports a fault";
        spdlog::log(ok ? spdlog::level::info : spdlog::level::warn, "{}: device {} {}: {}", Name(),
                    ids[i], ok ? "is healthy again" : "is unhealthy", reason);
        sink({spec_.vendor, ids[i], ok, reason});
      }
      last[ids[i]] = ok;
    }
    auto until = std::chrono::steady_clock::now() + spec_.health_poll;
    while (!stop.stop_requested() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(
          std::min<std::chrono::milliseconds>(spec_.health_poll, std::chrono::milliseconds(100)));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<std::pair<int32_t, std::string>>> LibraryDriver::Discovered(
    const char* what) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) {
    return FailedPreconditionError(std::string(Name()) + ": " + what + " read before discovery");
  }
  std::vector<std::pair<int32_t, std::string>> devices;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!ids_[i].empty()) devices.emplace_back(static_cast<int32_t>(i), ids_[i]);
  }
  return devices;
}

StatusOr<std::map<std::string, int64_t>> LibraryDriver::MemoryInUse() {
  StatusOr<std::vector<std::pair<int32_t, std::string>>> devices = Discovered("memory usage");
  if (!devices.ok()) return devices.status();
  return ReadPerDevice<int64_t>(*devices, [this](int32_t i) -> StatusOr<int64_t> {
    StatusOr<int64_t> used = library_->MemoryUsedMib(i);
    if (!used.ok()) return used.status();
    return std::max<int64_t>(0, *used);
  });
}

StatusOr<std::map<std::string, std::vector<ProcessMemory>>> LibraryDriver::MemoryHolders() {
  StatusOr<std::vector<std::pair<int32_t, std::string>>> devices = Discovered("process list");
  if (!devices.ok()) return devices.status();
  return ReadPerDevice<std::vector<ProcessMemory>>(
      *devices, [this](int32_t i) { return library_->Processes(i); });
}

StatusOr<ContainerSpec> LibraryDriver::BuildContainerSpec(
    const std::vector<GrantedDevice>& grants) const {
  std::map<std::string, int32_t> minors;
  std::map<std::string, std::vector<std::string>> nodes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    minors = minors_;
    nodes = nodes_;
  }
  for (const GrantedDevice& g : grants) {
    if (minors.find(g.device.id) == minors.end()) {
      return InvalidArgumentError("device " + g.device.id +
                                  " is not on this node; the assignment is stale or foreign");
    }
    if (spec_.nodes_from_sysfs_only && nodes.find(g.device.id) == nodes.end()) {
      return FailedPreconditionError(
          std::string(Name()) + " device " + g.device.id + " (PCI " + g.device.pci_bus +
          "): its device nodes are not listed under /sys/bus/pci/devices/<address>/drm, and a " +
          "node numbered by the device's index could be another device's (a BMC's VGA counts " +
          "too). Check that the vendor driver is loaded and that the plugin sees the host's /sys");
    }
  }
  return GenericContainerSpec(
      TraitsFor(spec_.vendor), grants, [&minors](const core::Device& d) { return minors.at(d.id); },
      spec_.device_root,
      [&nodes](const core::Device& d) {
        auto it = nodes.find(d.id);
        return it == nodes.end() ? std::vector<std::string>{} : it->second;
      });
}

}  // namespace accelpool::vendors
