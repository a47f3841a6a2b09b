#include "vendors/nvidia/nvidia_driver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "core/profiles.h"
#include "vendors/nvidia/xid.h"

namespace accelpool::vendors::nvidia {
namespace {

using Clock = std::chrono::steady_clock;

std::string Model(const std::string& name) {
  const std::string prefix = "NVIDIA ";
  if (name.rfind(prefix, 0) == 0) {
    return name.substr(prefix.size());
  }
  return name.empty() ? "GPU" : name;
}

// NVML bus ids carry an 8-digit domain, sysfs and some link queries 4.
std::string NormalizeBus(std::string bus) {
  for (char& c : bus) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return bus.size() > 12 ? bus.substr(bus.size() - 12) : bus;
}

}  // namespace

int32_t NvidiaLinkScore(P2PLevel level, int32_t nvlinks) {
  int32_t pcie = 10;
  switch (level) {
    case P2PLevel::kInternal:
      pcie = 60;
      break;
    case P2PLevel::kSingle:
      pcie = 50;
      break;
    case P2PLevel::kMultiple:
      pcie = 40;
      break;
    case P2PLevel::kHostBridge:
      pcie = 30;
      break;
    case P2PLevel::kNode:
      pcie = 20;
      break;
    case P2PLevel::kSystem:
      pcie = 10;
      break;
  }
  return pcie + 100 * std::max(0, nvlinks);
}

NvidiaDriver::NvidiaDriver(NvmlLibraryPtr nvml, NvidiaOptions options)
    : nvml_(std::move(nvml)), options_(std::move(options)) {}

Status NvidiaDriver::EnsureInit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) {
    ACCELPOOL_RETURN_IF_ERROR(nvml_->Init());
    initialized_ = true;
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> NvidiaDriver::MeasureLinks(const std::vector<NvmlDeviceInfo>& infos,
                                                          bool* all_switched) {
  const size_t n = infos.size();
  std::map<std::string, size_t> by_bus;
  for (size_t i = 0; i < n; ++i) {
    by_bus[NormalizeBus(infos[i].pci_bus)] = i;
  }
  // direct[i][j]: NVLinks from i that end on GPU j; switched[i]: links to NVSwitches.
  std::vector<std::vector<int32_t>> direct(n, std::vector<int32_t>(n, 0));
  std::vector<int32_t> switched(n, 0);
  for (size_t i = 0; i < n; ++i) {
    StatusOr<std::vector<std::string>> remotes = nvml_->NvLinkRemotes(static_cast<int32_t>(i));
    if (!remotes.ok()) {
      return remotes.status();
    }
    for (const std::string& r : *remotes) {
      auto it = by_bus.find(NormalizeBus(r));
      if (it != by_bus.end()) {
        ++direct[i][it->second];
      } else {
        ++switched[i];
      }
    }
  }
  *all_switched = n > 0;
  for (size_t i = 0; i < n; ++i) {
    *all_switched = *all_switched && switched[i] > 0;
  }
  std::vector<int32_t> links(n * n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i == j) {
        continue;
      }
      StatusOr<P2PLevel> level =
          nvml_->CommonAncestor(static_cast<int32_t>(i), static_cast<int32_t>(j));
      if (!level.ok()) {
        return level.status();
      }
      int32_t nv = std::max(direct[i][j], direct[j][i]) + std::min(switched[i], switched[j]);
      links[i * n + j] = NvidiaLinkScore(*level, nv);
    }
  }
  return links;
}

StatusOr<std::vector<core::NodeInventory>> NvidiaDriver::Discover() {
  ACCELPOOL_RETURN_IF_ERROR(EnsureInit());
  StatusOr<int32_t> count = nvml_->DeviceCount();
  if (!count.ok()) {
    return count.status();
  }
  if (*count == 0) {
    return std::vector<core::NodeInventory>{};
  }
  std::vector<NvmlDeviceInfo> infos;
  for (int32_t i = 0; i < *count; ++i) {
    StatusOr<NvmlDeviceInfo> info = nvml_->DeviceInfo(i);
    if (!info.ok()) {
      return info.status().WithPrefix("GPU " + std::to_string(i));
    }
    infos.push_back(std::move(info).value());
  }
  bool all_switched = false;
  StatusOr<std::vector<int32_t>> links = MeasureLinks(infos, &all_switched);
  if (!links.ok()) {
    return links.status();
  }

  core::NodeInventory inv;
  inv.node = options_.node;
  inv.vendor = core::Vendor::kNvidia;
  std::set<std::string> seen;
  for (size_t i = 0; i < infos.size(); ++i) {
    const NvmlDeviceInfo& info = infos[i];
    if (info.uuid.empty() || !seen.insert(info.uuid).second) {
      return InternalError("GPU " + std::to_string(i) + " reports an empty or repeated UUID \"" +
                           info.uuid + "\"; check the driver with nvidia-smi -L");
    }
    core::Device d;
    d.id = info.uuid;
    d.index = static_cast<int32_t>(i);
    d.vendor = core::Vendor::kNvidia;
    d.model = Model(info.name);
    d.memory_mib = info.memory_mib;
    d.numa = info.numa;
    d.pci_bus = info.pci_bus;
    d.max_shares = info.mig_enabled ? 1 : std::max(1, options_.max_shares);
    inv.devices.push_back(d);
  }
  const std::string profile =
      (all_switched && infos.size() == 8) ? "nvidia-hgx-8" : "nvidia-pcie-8";
  Status st = core::ApplyProfile(profile, &inv);
  if (!st.ok()) {
    spdlog::info("nvidia: profile {} does not fit {} GPUs ({}); using NUMA groups", profile,
                 infos.size(), st.message());
    core::ApplyNumaDefault(&inv);
  }
  inv.topology.links = std::move(links).value();

  std::lock_guard<std::mutex> lock(mu_);
  uuids_.clear();
  minors_.clear();
  for (const NvmlDeviceInfo& info : infos) {
    uuids_.push_back(info.uuid);
    minors_[info.uuid] = info.minor;
  }
  return std::vector<core::NodeInventory>{std::move(inv)};
}

Status NvidiaDriver::WatchHealth(std::stop_token stop, const HealthSink& sink) {
  ACCELPOOL_RETURN_IF_ERROR(EnsureInit());
  ACCELPOOL_RETURN_IF_ERROR(nvml_->RegisterXidEvents());
  std::map<int32_t, Clock::time_point> unhealthy;  // index -> last critical XID
  std::string last_error;
  auto uuid_of = [this](int32_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return i >= 0 && static_cast<size_t>(i) < uuids_.size() ? uuids_[static_cast<size_t>(i)]
                                                            : std::string();
  };
  auto all = [this]() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(uuids_.size());
  };
  while (!stop.stop_requested()) {
    StatusOr<std::optional<XidEvent>> ev =
        nvml_->WaitXid(static_cast<int32_t>(options_.event_wait.count()));
    if (!ev.ok()) {
      if (ev.status().message() != last_error) {
        spdlog::error("nvidia: waiting for XID events failed: {}", ev.status().ToString());
        last_error = ev.status().message();
      }
      std::this_thread::sleep_for(options_.event_wait);
    } else if (ev->has_value()) {
      last_error.clear();
      const XidEvent& x = **ev;
      const std::string what = x.gpu_lost
                                   ? std::string("NVML reports a GPU is lost (fell off the bus)")
                                   : DescribeXid(x.xid);
      if (x.gpu_lost) {
        // NVML may answer every wait this way: do not spin.
        std::this_thread::sleep_for(options_.event_wait);
      }
      if (!x.gpu_lost && IsIgnoredXid(x.xid, options_.extra_ignored_xids)) {
        spdlog::info("nvidia: GPU {} reported application {}; device stays healthy", x.device,
                     DescribeXid(x.xid));
      } else {
        std::vector<int32_t> hit;
        if (x.device >= 0) {
          hit.push_back(x.device);
        } else {
          for (int32_t i = 0; i < all(); ++i) {
            hit.push_back(i);
          }
        }
        for (int32_t i : hit) {
          bool was_healthy = unhealthy.find(i) == unhealthy.end();
          unhealthy[i] = Clock::now();
          std::string id = uuid_of(i);
          if (was_healthy && !id.empty()) {
            spdlog::warn("nvidia: GPU {} ({}) is unhealthy: {}", i, id, what);
            sink({core::Vendor::kNvidia, id, false, what});
          }
        }
      }
    }
    for (auto it = unhealthy.begin(); it != unhealthy.end();) {
      if (Clock::now() - it->second >= options_.recovery_quiet && nvml_->Probe(it->first).ok()) {
        std::string id = uuid_of(it->first);
        spdlog::info("nvidia: GPU {} ({}) answers again and had no XID for {} ms; healthy",
                     it->first, id, options_.recovery_quiet.count());
        sink({core::Vendor::kNvidia, id, true, "recovered"});
        it = unhealthy.erase(it);
      } else {
        ++it;
      }
    }
  }
  return Status::Ok();
}

StatusOr<ContainerSpec> NvidiaDriver::BuildContainerSpec(
    const std::vector<GrantedDevice>& grants) const {
  std::map<std::string, int32_t> minors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    minors = minors_;
  }
  for (const GrantedDevice& g : grants) {
    if (minors.find(g.device.id) == minors.end()) {
      return InvalidArgumentError("GPU " + g.device.id +
                                  " is not on this node; the assignment is stale or foreign");
    }
  }
  return GenericContainerSpec(
      TraitsFor(core::Vendor::kNvidia), grants,
      [&minors](const core::Device& d) { return minors.at(d.id); }, options_.device_root);
}

}  // namespace accelpool::vendors::nvidia
