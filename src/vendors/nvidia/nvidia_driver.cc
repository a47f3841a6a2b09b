#include "vendors/nvidia/nvidia_driver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "core/profiles.h"
#include "vendors/library_util.h"
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

std::string MigProfileName(int32_t gpu_slices, int32_t compute_slices, int64_t memory_mib,
                           int64_t gpu_memory_mib, std::string_view nvml_name) {
  std::string prefix;
  if (compute_slices > 0 && compute_slices < gpu_slices) {
    prefix = std::to_string(compute_slices) + "c.";
  }
  std::string named(nvml_name);
  std::replace(named.begin(), named.end(), '+', '.');
  const std::string slices = std::to_string(gpu_slices) + "g.";
  if (!named.empty() && named.rfind(slices, 0) == 0 && core::ValidMigProfile(named)) {
    return prefix + named;
  }
  int64_t gb = 0;
  if (gpu_memory_mib > 0 && memory_mib > 0) {
    const double eighths =
        std::ceil(8.0 * static_cast<double>(memory_mib) / static_cast<double>(gpu_memory_mib));
    const double gpu_gb = static_cast<double>((gpu_memory_mib + 1023) / 1024);
    gb = static_cast<int64_t>(std::round(eighths / 8.0 * gpu_gb));
  }
  return prefix + slices + std::to_string(gb) + "gb";
}

std::string ImexChannelPath(int32_t channel) {
  return "/dev/nvidia-caps-imex-channels/channel" + std::to_string(channel);
}

std::map<std::string, int32_t> ParseMigMinors(const std::string& text) {
  std::map<std::string, int32_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t minor = -1;
    std::string extra;
    if ((fields >> name >> minor) && !(fields >> extra) && minor >= 0 && minor < (1 << 20)) {
      out[name] = static_cast<int32_t>(minor);
    }
  }
  return out;
}

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

std::vector<int32_t> NvidiaDriver::MeasureLinks(const std::vector<NvmlDeviceInfo>& infos,
                                                const std::vector<bool>& readable,
                                                bool* all_switched, DiscoveryLog* notes) {
  const size_t n = infos.size();
  std::map<std::string, size_t> by_bus;
  for (size_t i = 0; i < n; ++i) {
    if (readable[i]) by_bus[NormalizeBus(infos[i].pci_bus)] = i;
  }
  // direct[i][j]: NVLinks from i that end on GPU j; switched[i]: links to NVSwitches.
  std::vector<std::vector<int32_t>> direct(n, std::vector<int32_t>(n, 0));
  std::vector<int32_t> switched(n, 0);
  std::vector<bool> unread_remotes(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (!readable[i]) {
      unread_remotes[i] = true;  // not offered; said by Discover
      continue;
    }
    StatusOr<std::vector<NvLinkRemote>> remotes = nvml_->NvLinkRemotes(static_cast<int32_t>(i));
    if (!remotes.ok()) {
      // The GPU is served all the same, as one without NVLinks: a link
      // query that fails (some boards and VMs answer errors where others
      // answer "not supported") must not take every GPU of the node away.
      notes->Add(DiscoveryLog::Level::kError,
                 fmt::format("nvidia: GPU {} ({}): its NVLinks could not be read ({}); it is "
                             "placed as a GPU without NVLink. Check nvidia-smi nvlink -s",
                             i, infos[i].uuid, remotes.status().message()));
      unread_remotes[i] = true;
      continue;
    }
    for (const NvLinkRemote& r : *remotes) {
      auto it = by_bus.find(NormalizeBus(r.bus));
      if (it != by_bus.end()) {
        ++direct[i][it->second];
      } else if (r.peer == NvLinkPeer::kSwitch || r.peer == NvLinkPeer::kUnknown) {
        // Another bus is an NVSwitch; with the peer unknown (drivers before
        // R450) it is taken for one.
        ++switched[i];
      }
      // A GPU that is not served (left out at start) or a CPU (IBM POWER)
      // joins no two served GPUs.
    }
  }
  // Switched when every GPU whose NVLinks were read reaches NVSwitches.
  size_t read = 0;
  *all_switched = true;
  for (size_t i = 0; i < n; ++i) {
    if (unread_remotes[i]) continue;
    ++read;
    *all_switched = *all_switched && switched[i] > 0;
  }
  *all_switched = *all_switched && read > 0;
  std::vector<int32_t> links(n * n, 0);
  size_t unread = 0;
  std::string first_unread;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i == j || !readable[i] || !readable[j]) {
        continue;
      }
      StatusOr<P2PLevel> level =
          nvml_->CommonAncestor(static_cast<int32_t>(i), static_cast<int32_t>(j));
      if (!level.ok()) {
        // Scored from the NUMA nodes instead (the PCIe path is at best the
        // node's, at worst across the interconnect), so the pair is neither
        // preferred nor shunned by a path nobody measured.
        const bool same_numa = infos[i].numa >= 0 && infos[i].numa == infos[j].numa;
        if (unread++ == 0) {
          first_unread = fmt::format("GPU {} and GPU {}: {}", i, j, level.status().message());
        }
        level = same_numa ? P2PLevel::kNode : P2PLevel::kSystem;
      }
      int32_t nv = std::max(direct[i][j], direct[j][i]) + std::min(switched[i], switched[j]);
      links[i * n + j] = NvidiaLinkScore(*level, nv);
    }
  }
  if (unread > 0) {
    notes->Add(DiscoveryLog::Level::kError,
               fmt::format("nvidia: the PCIe path of {} GPU pair(s) could not be read (first, {}); "
                           "those pairs are scored by their NUMA nodes instead. Check "
                           "nvidia-smi topo -m",
                           unread, first_unread));
  }
  return links;
}

void BridgedPairs(const std::vector<int32_t>& links, core::NodeInventory* inv) {
  const size_t n = inv->devices.size();
  if (links.size() != n * n) return;
  // A pair's score is at most 60 without NVLink, 100 more per NVLink.
  constexpr int32_t kNvlinked = 100;
  std::vector<int32_t> peer(n, -1), peers(n, 0);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a != b && links[a * n + b] >= kNvlinked) {
        ++peers[a];
        peer[a] = static_cast<int32_t>(b);
      }
    }
  }
  inv->topology.modules.clear();
  for (core::Device& d : inv->devices) d.module = -1;
  for (size_t a = 0; a < n; ++a) {
    const int32_t b = peer[a];
    if (peers[a] == 1 && b > static_cast<int32_t>(a) && peers[static_cast<size_t>(b)] == 1 &&
        peer[static_cast<size_t>(b)] == static_cast<int32_t>(a)) {
      const auto m = static_cast<int32_t>(inv->topology.modules.size());
      inv->topology.modules.push_back({static_cast<int32_t>(a), b});
      inv->devices[a].module = m;
      inv->devices[static_cast<size_t>(b)].module = m;
    }
  }
}

std::string NvidiaDriver::NvlinkDomain(const std::vector<bool>& readable, DiscoveryLog* notes) {
  std::string domain;
  for (size_t i = 0; i < readable.size(); ++i) {
    if (!readable[i]) continue;
    StatusOr<NvmlFabric> f = nvml_->FabricInfo(static_cast<int32_t>(i));
    if (!f.ok()) {
      if (f.status().code() != StatusCode::kUnimplemented) {
        notes->Add(DiscoveryLog::Level::kWarn,
                   fmt::format("nvidia: GPU {} does not say which NVLink domain it is in ({}); "
                               "the node is published without one (accelpool.io/super-node)",
                               i, f.status().message()));
      }
      return "";
    }
    switch (f->state) {
      case NvmlFabric::State::kNotSupported:
        return "";  // no fabric registration (PCIe cards, older GPUs and drivers)
      case NvmlFabric::State::kNotStarted:
      case NvmlFabric::State::kInProgress:
        notes->Add(
            DiscoveryLog::Level::kWarn,
            fmt::format(
                "nvidia: GPU {} has not finished registering with the NVLink "
                "fabric ({}); the node is published without its NVLink domain "
                "until a later device check finds it registered (check "
                "nvidia-fabricmanager and nvidia-imex on the node, and "
                "nvidia-smi -q | grep -A4 Fabric)",
                i, f->state == NvmlFabric::State::kNotStarted ? "not started" : "in progress"));
        return "";
      case NvmlFabric::State::kCompleted:
        break;
    }
    if (!f->ok) {
      notes->Add(DiscoveryLog::Level::kWarn,
                 fmt::format("nvidia: GPU {} failed to register with the NVLink fabric ({}); the "
                             "node is published without its NVLink domain. Check "
                             "nvidia-fabricmanager on the NVSwitch trays and nvidia-smi -q",
                             i, f->error));
      return "";
    }
    if (f->cluster_uuid.empty()) {
      return "";  // a single-node NVSwitch board: the node is the whole domain
    }
    // As NVIDIA's GPU feature discovery labels it (nvidia.com/gpu.clique).
    const std::string id = f->cluster_uuid + "." + std::to_string(f->clique);
    if (domain.empty()) {
      domain = id;
    } else if (id != domain) {
      notes->Add(
          DiscoveryLog::Level::kError,
          fmt::format("nvidia: the GPUs of this node are in different NVLink domains "
                      "(the first GPU: {}, GPU {}: {}); the node is published without one. Check "
                      "the NVLink partition configuration of the fabric manager",
                      domain, i, id));
      return "";
    }
  }
  if (!domain.empty()) {
    notes->Add(
        DiscoveryLog::Level::kInfo,
        fmt::format("nvidia: NVLink domain {} (published as the node's super node)", domain));
  }
  return domain;
}

StatusOr<std::vector<core::NodeInventory>> NvidiaDriver::DiscoverDevices(bool partial) {
  ACCELPOOL_RETURN_IF_ERROR(EnsureInit());
  StatusOr<int32_t> count = nvml_->DeviceCount();
  if (!count.ok()) {
    return count.status();
  }
  if (*count == 0) {
    return std::vector<core::NodeInventory>{};
  }
  std::vector<std::string> unread;  // the error lines of the devices left out
  // At start (`partial`), a GPU that cannot be read is not offered, and the
  // others are: one GPU answering an error must not take every GPU of the
  // node away. Its place stays (infos, ids_ and the health watch go by NVML
  // index) and the other GPUs keep their ids (UUIDs); only when none can be
  // read does discovery fail. Later, GPUs are served: one that cannot be
  // read fails the discovery, which keeps them and the tables below (ids_,
  // minors_, gpu_uuids_, unhealthy_) as they are.
  std::vector<NvmlDeviceInfo> infos(static_cast<size_t>(*count));
  std::vector<bool> readable(infos.size(), false);
  size_t served = 0;
  Status first_error;
  for (int32_t i = 0; i < *count; ++i) {
    StatusOr<NvmlDeviceInfo> info = nvml_->DeviceInfo(i);
    if (!info.ok()) {
      Status st = info.status().WithPrefix("GPU " + std::to_string(i));
      if (!partial) {
        return st;
      }
      unread.push_back(
          fmt::format("nvidia: {}; it is not offered, the other GPUs are. Check it with "
                      "nvidia-smi -q -i {} and the kernel log (dmesg | grep -i xid), reset "
                      "it (nvidia-smi -r -i {}) or reload the driver; a device check of the "
                      "plugin offers it once it answers",
                      st.message(), i, i));
      if (first_error.ok()) first_error = std::move(st);
      continue;
    }
    infos[static_cast<size_t>(i)] = std::move(info).value();
    readable[static_cast<size_t>(i)] = true;
    ++served;
  }
  if (served == 0) {
    return first_error;
  }
  DiscoveryLog notes(&discovery_lines_);
  for (std::string& line : unread) {
    notes.Add(DiscoveryLog::Level::kError, std::move(line));
  }
  bool all_switched = false;
  const std::vector<int32_t> links = MeasureLinks(infos, readable, &all_switched, &notes);

  core::NodeInventory inv;
  inv.node = options_.node;
  inv.vendor = core::Vendor::kNvidia;
  std::set<std::string> seen;
  std::vector<size_t> parent;  // per inventory device: its GPU's NVML index
  std::vector<std::vector<std::string>> ids(infos.size());
  std::map<std::string, int32_t> minors;
  std::map<std::string, MigPlace> mig;
  bool any_mig = false;
  std::set<std::string> profiles;  // of the MIG devices offered
  auto add = [&](core::Device d, size_t gpu) -> Status {
    if (d.id.empty() || !seen.insert(d.id).second) {
      return InternalError("GPU " + std::to_string(gpu) + " reports an empty or repeated UUID \"" +
                           d.id + "\"; check the driver with nvidia-smi -L");
    }
    d.index = static_cast<int32_t>(inv.devices.size());
    d.vendor = core::Vendor::kNvidia;
    ids[gpu].push_back(d.id);
    minors[d.id] = infos[gpu].minor;
    parent.push_back(gpu);
    inv.devices.push_back(std::move(d));
    return Status::Ok();
  };
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!readable[i]) continue;
    const NvmlDeviceInfo& info = infos[i];
    core::Device d;
    d.id = info.uuid;
    d.model = Model(info.name);
    d.memory_mib = info.memory_mib;
    d.numa = info.numa;
    d.pci_bus = info.pci_bus;
    d.max_shares = std::max(1, options_.max_shares);
    if (!info.mig_enabled) {
      ACCELPOOL_RETURN_IF_ERROR(add(std::move(d), i));
      continue;
    }
    any_mig = true;
    if (info.uuid.empty() || !seen.insert(info.uuid).second) {
      return InternalError("GPU " + std::to_string(i) + " reports an empty or repeated UUID \"" +
                           info.uuid + "\"; check the driver with nvidia-smi -L");
    }
    StatusOr<std::vector<NvmlMigInfo>> migs = nvml_->MigDevices(static_cast<int32_t>(i));
    if (!migs.ok()) {
      notes.Add(
          DiscoveryLog::Level::kError,
          fmt::format("nvidia: GPU {} ({}) is in MIG mode but its MIG devices cannot be read ({}); "
                      "it is not offered until a device check of the plugin reads them",
                      i, info.uuid, migs.status().ToString()));
      continue;
    }
    if (migs->empty()) {
      notes.Add(DiscoveryLog::Level::kWarn,
                fmt::format(
                    "nvidia: GPU {} ({}) is in MIG mode with no MIG devices, so it offers nothing; "
                    "create GPU and compute instances (nvidia-smi mig -cgi <profiles> -C, or "
                    "mig-parted) or disable MIG mode; the device plugin serves them at its next "
                    "device checks (--rediscover-every), or at once on SIGHUP",
                    i, info.uuid));
      continue;
    }
    for (const NvmlMigInfo& m : *migs) {
      core::Device md = d;
      md.id = m.uuid;
      md.partition = MigProfileName(m.gpu_slices, m.compute_slices, m.memory_mib, info.memory_mib,
                                    m.profile_name);
      md.memory_mib = m.memory_mib;
      md.compute_units = m.multiprocessors;
      md.max_shares = 1;
      if (!core::ValidMigProfile(md.partition)) {
        notes.Add(
            DiscoveryLog::Level::kError,
            fmt::format("nvidia: MIG device {} on GPU {} reports {} GPU slices, {} compute slices "
                        "and {} MiB, which name no MIG profile; it is not offered",
                        m.uuid, i, m.gpu_slices, m.compute_slices, m.memory_mib));
        continue;
      }
      mig[m.uuid] = MigPlace{info.minor, m.gpu_instance, m.compute_instance};
      notes.Add(
          DiscoveryLog::Level::kInfo,
          fmt::format("nvidia: GPU {} MIG device {}: profile {}, {} MiB, GPU instance {}, compute "
                      "instance {}",
                      i, m.uuid, md.partition, m.memory_mib, m.gpu_instance, m.compute_instance));
      profiles.insert(md.partition);
      if (options_.mig_single) {
        md.partition.clear();  // advertised as nvidia.com/gpu
      }
      ACCELPOOL_RETURN_IF_ERROR(add(std::move(md), i));
    }
  }
  if (inv.devices.empty()) {
    return std::vector<core::NodeInventory>{};  // every GPU in MIG mode without instances
  }
  if (options_.mig_single &&
      (profiles.size() > 1 || (!profiles.empty() && mig.size() < inv.devices.size()))) {
    notes.Add(
        DiscoveryLog::Level::kWarn,
        fmt::format(
            "nvidia: --mig-strategy=single, but this node offers {} MIG profile(s) and {} whole "
            "GPU(s) as nvidia.com/gpu: a pod gets whichever the extender picks. Give every GPU "
            "the same MIG layout, or use --mig-strategy=mixed (nvidia.com/mig-<profile>)",
            profiles.size(), inv.devices.size() - mig.size()));
  }
  // Pairs of MIG devices score as their GPUs do; two on one GPU as one board.
  // By inventory index: a GPU left out at start has no row.
  const size_t n = infos.size();
  const size_t m = inv.devices.size();
  std::vector<int32_t> served_links(m * m, 0);
  for (size_t a = 0; a < m; ++a) {
    for (size_t b = 0; b < m; ++b) {
      if (a == b) continue;
      served_links[a * m + b] = parent[a] == parent[b] ? NvidiaLinkScore(P2PLevel::kInternal, 0)
                                                       : links[parent[a] * n + parent[b]];
    }
  }
  const std::string profile = (all_switched && served == 8) ? "nvidia-hgx-8" : "nvidia-pcie-8";
  Status st =
      any_mig ? FailedPreconditionError("GPUs in MIG mode") : core::ApplyProfile(profile, &inv);
  if (st.ok()) {
    // The profile's halves and pairs go by index; NVML says where each GPU
    // sits: the groups follow its NUMA nodes, and on PCIe boards the pairs
    // kept together are those its NVLinks bridge.
    core::ApplyNumaDefault(&inv);
    if (!all_switched) {
      BridgedPairs(served_links, &inv);
    }
  }
  if (!st.ok()) {
    notes.Add(DiscoveryLog::Level::kInfo,
              fmt::format("nvidia: profile {} does not fit {} GPUs ({}); using NUMA groups",
                          profile, served, st.message()));
    core::ApplyNumaDefault(&inv);
  }
  inv.topology.links = std::move(served_links);

  // Multi-node NVLink (GB200/GB300 NVL72): the node's NVLink domain is its
  // super node, so the extender keeps a job's pods inside one domain.
  inv.topology.super_node = NvlinkDomain(readable, &notes);
  if (options_.imex_channel >= 0 &&
      !DeviceNodeExists(options_.device_root, ImexChannelPath(options_.imex_channel))) {
    notes.Add(DiscoveryLog::Level::kWarn,
              fmt::format("nvidia: --imex-channel={} but {} is not on this node, so containers "
                          "start without it; create it (mknod with the major number of "
                          "nvidia-caps-imex-channels in /proc/devices, minor {}), or load the "
                          "driver with NVreg_CreateImexChannel0=1 for channel 0",
                          options_.imex_channel, ImexChannelPath(options_.imex_channel),
                          options_.imex_channel));
  }

  // The recovery query, on every GPU: one that fails it starts unhealthy.
  std::vector<std::string> probe_failed(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!readable[i]) continue;
    if (Status p = nvml_->Probe(static_cast<int32_t>(i)); !p.ok()) {
      probe_failed[i] = p.message();
      notes.Add(DiscoveryLog::Level::kWarn,
                fmt::format("nvidia: GPU {} ({}) fails its health query at discovery ({}); its "
                            "devices are unhealthy until it answers",
                            i, infos[i].uuid, p.message()));
    }
  }

  std::lock_guard<std::mutex> lock(mu_);
  ids_ = std::move(ids);
  minors_ = std::move(minors);
  mig_ = std::move(mig);
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!probe_failed[i].empty() && !unhealthy_.contains(infos[i].uuid)) {
      // Due for the recovery query at the watch's next turn.
      unhealthy_[infos[i].uuid] = {Clock::now() - options_.recovery_quiet,
                                   "fails its health query: " + probe_failed[i], false};
    }
  }
  gpu_uuids_.clear();
  for (const NvmlDeviceInfo& info : infos) {
    gpu_uuids_.push_back(info.uuid);
  }
  // A GPU that is gone takes its XID state with it; one still here that had
  // an XID offers its devices, new MIG devices too, as unhealthy.
  std::erase_if(unhealthy_, [this](const auto& u) { return IndexOfLocked(u.first) < 0; });
  for (size_t k = 0; k < inv.devices.size(); ++k) {
    if (unhealthy_.contains(infos[parent[k]].uuid)) {
      inv.devices[k].healthy = false;
    }
  }
  return std::vector<core::NodeInventory>{std::move(inv)};
}

StatusOr<std::vector<std::pair<int32_t, std::string>>> NvidiaDriver::WholeGpus() const {
  std::vector<std::pair<int32_t, std::string>> whole;  // NVML index, UUID
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) {
    return FailedPreconditionError("nvidia: memory usage read before discovery");
  }
  for (size_t i = 0; i < ids_.size() && i < gpu_uuids_.size(); ++i) {
    if (ids_[i].size() == 1 && ids_[i][0] == gpu_uuids_[i]) {
      whole.emplace_back(static_cast<int32_t>(i), gpu_uuids_[i]);
    }
  }
  return whole;
}

StatusOr<std::map<std::string, int64_t>> NvidiaDriver::MemoryInUse() {
  StatusOr<std::vector<std::pair<int32_t, std::string>>> whole = WholeGpus();
  if (!whole.ok()) {
    return whole.status();
  }
  return ReadPerDevice<int64_t>(*whole, [this](int32_t i) { return nvml_->MemoryUsedMib(i); });
}

StatusOr<std::map<std::string, std::vector<ProcessMemory>>> NvidiaDriver::MemoryHolders() {
  StatusOr<std::vector<std::pair<int32_t, std::string>>> whole = WholeGpus();
  if (!whole.ok()) {
    return whole.status();
  }
  return ReadPerDevice<std::vector<ProcessMemory>>(
      *whole, [this](int32_t i) -> StatusOr<std::vector<ProcessMemory>> {
        StatusOr<std::vector<NvmlProcess>> procs = nvml_->RunningProcesses(i);
        if (!procs.ok()) return procs.status();
        std::vector<ProcessMemory> list;
        for (const NvmlProcess& p : *procs) {
          list.push_back({static_cast<int64_t>(p.pid), p.used_mib});
        }
        return list;
      });
}

int32_t NvidiaDriver::IndexOfLocked(const std::string& gpu_uuid) const {
  for (size_t i = 0; i < gpu_uuids_.size(); ++i) {
    if (gpu_uuids_[i] == gpu_uuid) {
      return static_cast<int32_t>(i);
    }
  }
  return -1;
}

Status NvidiaDriver::WatchHealth(std::stop_token stop, const HealthSink& sink) {
  ACCELPOOL_RETURN_IF_ERROR(EnsureInit());
  {
    // Registration is tried again below: a GPU that could not be watched
    // by the last watch recovers as any other once it can be.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [uuid, u] : unhealthy_) u.unwatched = false;
  }
  // Without XID events (none of the GPUs, or the driver, supports them) the
  // watch still runs: it announces what discovery's probes found unhealthy
  // and brings GPUs back once they answer; the device check's discoveries
  // find GPUs that start failing. What fails to register (the event set, or
  // one GPU) is tried again every recovery_quiet while the watch runs.
  bool events = false;
  bool no_set = false;                // the event set could not be made
  std::vector<int32_t> unregistered;  // NVML indices whose registration failed
  auto adopt = [&](const XidRegistration& reg) {
    if (!reg.unsupported.empty()) {
      std::string which;
      for (int32_t i : reg.unsupported) {
        which += (which.empty() ? "" : ",") + std::to_string(i);
      }
      spdlog::warn(
          "nvidia: GPU(s) {} do not support XID events; a failure there is found by the "
          "plugin's device checks (its health query), not at its XID",
          which);
    }
    // A GPU whose registration failed cannot be monitored: unhealthy until
    // its registration succeeds (as NVIDIA's device plugin marks it), said
    // by announce() below.
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [i, error] : reg.failed) {
      if (i < 0 || static_cast<size_t>(i) >= gpu_uuids_.size() ||
          gpu_uuids_[static_cast<size_t>(i)].empty()) {
        continue;  // not a GPU this node's discovery serves
      }
      const std::string& uuid = gpu_uuids_[static_cast<size_t>(i)];
      spdlog::error(
          "nvidia: GPU {} ({}) cannot be watched for XIDs: its event registration failed ({}); "
          "it is unhealthy until its registration, tried again every {} s, succeeds. Check it "
          "with nvidia-smi -q -i {} and the kernel log (dmesg | grep -i xid), reset it "
          "(nvidia-smi -r -i {}) or reload the driver",
          i, uuid, error, options_.recovery_quiet.count() / 1000, i, i);
      auto [it, inserted] = unhealthy_.try_emplace(uuid);
      if (inserted) {
        it->second.last_xid = Clock::now();
        it->second.reason = "cannot be monitored: XID event registration failed: " + error;
        it->second.announced = false;
      }
      it->second.unwatched = true;
      unregistered.push_back(i);
    }
    // Something registered to wait on.
    events = gpu_uuids_.empty() || reg.unsupported.size() + reg.failed.size() < gpu_uuids_.size();
  };
  auto register_all = [&](bool first) {
    StatusOr<XidRegistration> registered = nvml_->RegisterXidEvents();
    if (registered.ok()) {
      if (!first) spdlog::info("nvidia: XID events registered");
      no_set = false;
      adopt(*registered);
    } else if (registered.status().code() == StatusCode::kUnimplemented) {
      no_set = false;
      spdlog::warn(
          "nvidia: {}; a failing GPU is found by the plugin's device checks (its health "
          "query), not at its XID",
          registered.status().message());
    } else if (first) {
      // No event set: the watch polls, as without event support, rather
      // than leaving every GPU of the node without recovery.
      no_set = true;
      spdlog::error(
          "nvidia: XID events cannot be registered ({}); no GPU is watched for XIDs until a "
          "registration, tried again every {} s, succeeds, and a failing GPU is found by the "
          "plugin's device checks (its health query). Check the driver with nvidia-smi",
          registered.status().message(), options_.recovery_quiet.count() / 1000);
    }
  };
  // Tries again what failed to register; a GPU registered now is no longer
  // held unhealthy for it, and recovers once it answers its health query.
  auto retry = [&]() {
    if (no_set) {
      register_all(false);
      return;
    }
    for (auto it = unregistered.begin(); it != unregistered.end();) {
      const int32_t i = *it;
      Status st = nvml_->RegisterXidEventsFor(i);
      if (!st.ok() && st.code() != StatusCode::kUnimplemented) {
        ++it;
        continue;
      }
      it = unregistered.erase(it);
      events = events || st.ok();
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<size_t>(i) >= gpu_uuids_.size()) continue;
      auto u = unhealthy_.find(gpu_uuids_[static_cast<size_t>(i)]);
      if (u == unhealthy_.end() || !u->second.unwatched) continue;
      u->second.unwatched = false;
      u->second.last_xid = Clock::now() - options_.recovery_quiet;  // probed at once
      spdlog::info("nvidia: GPU {} ({}) {}; healthy once it answers its health query", i, u->first,
                   st.ok() ? "is watched for XIDs now" : "has no XID events");
    }
  };
  register_all(true);
  Clock::time_point retry_at = Clock::now() + options_.recovery_quiet;
  std::string last_error;
  bool lost_unplaced = false;  // the last "GPU lost" found no GPU failing: said once
  // A GPU's devices: the GPU, or every MIG device on it.
  auto ids_of = [this](int32_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return i >= 0 && static_cast<size_t>(i) < ids_.size() ? ids_[static_cast<size_t>(i)]
                                                          : std::vector<std::string>();
  };
  auto all = [this]() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(ids_.size());
  };
  // Says which GPUs are unhealthy: at the start, all of them (a watch that
  // starts again goes on from the last one, and the device state may have
  // been rebuilt from a discovery since); then those a discovery found. At
  // the start it also says every other GPU is healthy: one that recovered
  // after the discovery the device state was rebuilt from is served
  // unhealthy there (the device plugin ignores a report that changes
  // nothing).
  auto announce = [&](bool all_of_them) {
    std::vector<std::pair<int32_t, std::string>> said;  // index, reason
    std::vector<int32_t> healthy;                       // indices
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [uuid, u] : unhealthy_) {
        if (all_of_them || !u.announced) {
          u.announced = true;
          said.emplace_back(IndexOfLocked(uuid), u.reason);
        }
      }
      for (size_t i = 0; all_of_them && i < gpu_uuids_.size(); ++i) {
        if (!gpu_uuids_[i].empty() && !unhealthy_.contains(gpu_uuids_[i])) {
          healthy.push_back(static_cast<int32_t>(i));
        }
      }
    }
    for (const auto& [i, reason] : said) {
      for (const std::string& id : ids_of(i)) {
        spdlog::warn("nvidia: GPU {} ({}) is unhealthy: {}", i, id, reason);
        sink({core::Vendor::kNvidia, id, false, reason});
      }
    }
    for (int32_t i : healthy) {
      for (const std::string& id : ids_of(i)) {
        sink({core::Vendor::kNvidia, id, true, "healthy when the health watch started"});
      }
    }
  };
  announce(true);
  while (!stop.stop_requested()) {
    if ((no_set || !unregistered.empty()) && Clock::now() >= retry_at) {
      retry();
      retry_at = Clock::now() + options_.recovery_quiet;
    }
    announce(false);
    if (!events) {
      std::this_thread::sleep_for(options_.event_wait);
    } else {
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
            // The wait does not say which GPU. For a lost GPU, those that
            // still answer their health query are not it: NVML may keep
            // answering every wait this way until the driver is reloaded,
            // and marking (and re-stamping) every GPU would hold the
            // healthy ones out of service all that time.
            for (int32_t i = 0; i < all(); ++i) {
              if (!x.gpu_lost || !nvml_->Probe(i).ok()) {
                hit.push_back(i);
              }
            }
            if (hit.empty() && !lost_unplaced) {
              spdlog::warn(
                  "nvidia: NVML reports a GPU is lost but every GPU answers its health query; "
                  "none is marked. Check `nvidia-smi` and the kernel log for the GPU that fell "
                  "off the bus");
            }
            lost_unplaced = x.gpu_lost && hit.empty();
          }
          for (int32_t i : hit) {
            bool was_healthy = false;
            {
              std::lock_guard<std::mutex> lock(mu_);
              if (i < 0 || static_cast<size_t>(i) >= gpu_uuids_.size() ||
                  gpu_uuids_[static_cast<size_t>(i)].empty()) {
                continue;  // not a GPU this node's discovery serves
              }
              auto [it, inserted] = unhealthy_.try_emplace(gpu_uuids_[static_cast<size_t>(i)]);
              it->second.last_xid = Clock::now();
              if (inserted) {
                it->second.reason = what;
              }
              if (!x.gpu_lost && x.xid == kXidDoubleBitEcc && x.device >= 0) {
                it->second.dbe = true;
              }
              was_healthy = inserted;
            }
            for (const std::string& id : was_healthy ? ids_of(i) : std::vector<std::string>()) {
              spdlog::warn("nvidia: GPU {} ({}) is unhealthy: {}", i, id, what);
              sink({core::Vendor::kNvidia, id, false, what});
            }
          }
        }
      }
    }
    struct Quiet {
      std::string uuid;
      int32_t index;
      bool dbe;
    };
    std::vector<Quiet> quiet;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [uuid, u] : unhealthy_) {
        if (!u.unwatched && Clock::now() - u.last_xid >= options_.recovery_quiet) {
          quiet.push_back({uuid, IndexOfLocked(uuid), u.dbe});
        }
      }
    }
    for (const auto& [uuid, i, dbe] : quiet) {
      if (i < 0 || !nvml_->Probe(i).ok()) {
        continue;
      }
      // After a double-bit ECC error a GPU before Ampere (V100, T4: no row
      // remapping, which Probe reads) retires the page at the next driver
      // load; until then the page can be handed out again. A page pending
      // retirement without such an error (repeated single-bit errors) leaves
      // the GPU usable, so only a GPU that reported XID 48 is held.
      if (StatusOr<bool> pending = dbe ? nvml_->RetiredPagesPending(i) : StatusOr<bool>(false);
          pending.ok() && *pending) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = unhealthy_.find(uuid);
        if (it != unhealthy_.end() && !it->second.retire_said) {
          it->second.retire_said = true;
          spdlog::warn(
              "nvidia: GPU {} ({}) had a double-bit ECC error and a memory page is pending "
              "retirement, which takes effect only when the driver is loaded again; it stays "
              "unhealthy until then. Drain the node and reboot it or reload the driver "
              "(nvidia-smi -q -d PAGE_RETIREMENT -i {} shows the page)",
              i, uuid, i);
        }
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = unhealthy_.find(uuid);
        if (it == unhealthy_.end() ||
            Clock::now() - it->second.last_xid < options_.recovery_quiet) {
          continue;  // an XID came in meanwhile
        }
        unhealthy_.erase(it);
      }
      for (const std::string& id : ids_of(i)) {
        spdlog::info("nvidia: GPU {} ({}) answers again and had no XID for {} ms; healthy", i, id,
                     options_.recovery_quiet.count());
        sink({core::Vendor::kNvidia, id, true, "recovered"});
      }
    }
  }
  return Status::Ok();
}

StatusOr<ContainerSpec> NvidiaDriver::BuildContainerSpec(
    const std::vector<GrantedDevice>& grants) const {
  std::map<std::string, int32_t> minors;
  std::map<std::string, MigPlace> mig;
  {
    std::lock_guard<std::mutex> lock(mu_);
    minors = minors_;
    mig = mig_;
  }
  std::map<std::string, std::vector<std::string>> mig_nodes;
  std::optional<std::map<std::string, int32_t>> caps;
  for (const GrantedDevice& g : grants) {
    if (minors.find(g.device.id) == minors.end()) {
      return InvalidArgumentError("GPU " + g.device.id +
                                  " is not on this node; the assignment is stale or foreign");
    }
    auto place = mig.find(g.device.id);
    if (place == mig.end()) {
      // Its node is /dev/nvidia<minor>; the inventory index is no stand-in
      // (MIG devices before it shift it), and a guess can be another GPU's.
      if (minors.at(g.device.id) < 0) {
        return FailedPreconditionError(
            "GPU " + g.device.id +
            ": NVML did not report its minor number, so its device node is unknown; check the "
            "driver with nvidia-smi");
      }
      continue;
    }
    // A MIG device: its GPU's node and the capability nodes that open its
    // GPU instance and compute instance.
    if (!caps.has_value()) {
      std::ifstream in(options_.mig_minors);
      std::stringstream text;
      text << in.rdbuf();
      caps = ParseMigMinors(text.str());
    }
    const MigPlace& p = place->second;
    if (p.gpu_minor < 0) {
      return FailedPreconditionError("MIG device " + g.device.id +
                                     ": NVML did not report its GPU's minor number, so its "
                                     "device nodes are unknown; check the driver with nvidia-smi");
    }
    const std::string gi =
        "gpu" + std::to_string(p.gpu_minor) + "/gi" + std::to_string(p.gpu_instance);
    std::vector<std::string> nodes = {"/dev/nvidia" + std::to_string(p.gpu_minor)};
    for (const std::string& cap :
         {gi + "/access", gi + "/ci" + std::to_string(p.compute_instance) + "/access"}) {
      auto it = caps->find(cap);
      if (it == caps->end()) {
        return FailedPreconditionError(
            "MIG device " + g.device.id + ": " + options_.mig_minors + " has no entry " + cap +
            "; check that the device plugin can read the host's /proc/driver/nvidia-caps and "
            "that the MIG instance still exists (nvidia-smi -L)");
      }
      nodes.push_back("/dev/nvidia-caps/nvidia-cap" + std::to_string(it->second));
    }
    mig_nodes[g.device.id] = std::move(nodes);
  }
  StatusOr<ContainerSpec> spec = GenericContainerSpec(
      TraitsFor(core::Vendor::kNvidia), grants,
      [&minors](const core::Device& d) { return minors.at(d.id); }, options_.device_root,
      [&mig_nodes](const core::Device& d) {
        auto it = mig_nodes.find(d.id);
        return it == mig_nodes.end() ? std::vector<std::string>() : it->second;
      });
  if (spec.ok() && options_.imex_channel >= 0 && !grants.empty()) {
    // A node without the channel (not an NVLink domain, or not created yet:
    // discovery logs it) starts its containers without.
    const std::string channel = ImexChannelPath(options_.imex_channel);
    if (DeviceNodeExists(options_.device_root, channel)) {
      spec->devices.push_back(DeviceNode{channel, channel, "rw"});
    }
  }
  return spec;
}

}  // namespace accelpool::vendors::nvidia
