#include "vendors/ascend/ascend_driver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <thread>
#include <utility>

#include "core/profiles.h"
#include "vendors/ascend/vnpu.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::ascend {
namespace {

bool StartsWith(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// True when `model` is `family` or a numbered variant of it: Ascend910B3 and
// Ascend910B4-1 are of Ascend910B, Ascend310P3 of Ascend310P, but not of Ascend310.
bool OfFamily(const std::string& model, const std::string& family) {
  return StartsWith(model, family) &&
         (model.size() == family.size() ||
          std::isdigit(static_cast<unsigned char>(model[family.size()])) != 0);
}

std::string IdFromBus(const std::string& bus, int32_t phy_id) {
  if (bus.empty()) {
    return "NPU-phy" + std::to_string(phy_id);
  }
  std::string id = "NPU-" + bus;
  std::replace(id.begin(), id.end(), ':', '-');
  return id;
}

std::string ChipName(const DcmiChipId& c) {
  return "NPU card " + std::to_string(c.card) + " device " + std::to_string(c.device);
}

}  // namespace

std::string AscendModel(const std::string& chip_name) {
  if (StartsWith(chip_name, "910_93") || chip_name == "910C") {
    return "Ascend910C";
  }
  // The first generation: DCMI names its variants 910, 910A, 910B (not the
  // A2 chips, which are 910B1 .. 910B4-1), 910ProA/B and 910PremiumA.
  if (chip_name == "910" || chip_name == "910A" || chip_name == "910B" ||
      StartsWith(chip_name, "910Pro") || StartsWith(chip_name, "910Premium")) {
    return "Ascend910A";
  }
  return "Ascend" + chip_name;
}

std::string AscendProfile(const std::string& model, size_t count) {
  struct Row {
    const char* family;
    size_t count;  // 0: any (the profile checks the node's cards)
    const char* profile;
  };
  static const Row kRows[] = {
      {"Ascend910A", 8, "ascend-910a-x8"},   {"Ascend910A", 4, "ascend-910a-x4"},
      {"Ascend910B", 8, "ascend-910b-x8"},   {"Ascend910B", 16, "ascend-910b-x16"},
      {"Ascend910C", 16, "ascend-910c-x16"}, {"Ascend310P", 0, "ascend-310p-duo"},
      {"Ascend310", 0, "ascend-310-cards"},
  };
  for (const Row& r : kRows) {
    if (OfFamily(model, r.family) && (r.count == 0 || count == r.count)) {
      return r.profile;
    }
  }
  return "";
}

void AscendDriver::ServeVnpu(core::NodeInventory* inv, DiscoveryLog* notes) const {
  // One model per node (checked above): the first chip's templates are every chip's.
  const core::Device& first = inv->devices.front();
  const std::vector<VnpuTemplate> templates =
      VnpuTemplates(first.model, first.compute_units, first.memory_mib);
  const int32_t slots = VnpuSlots(templates, first.memory_mib);
  if (slots < 2) {
    notes->Add(DiscoveryLog::Level::kWarn,
               fmt::format("ascend: --ascend-vnpu is set, but {} ({} AI cores, {} MiB) has no "
                           "dynamic vNPU templates; its chips are granted whole",
                           first.model, first.compute_units, first.memory_mib));
    return;
  }
  std::string names;
  for (const VnpuTemplate& t : templates) {
    names += (names.empty() ? "" : ", ") + t.name;
  }
  notes->Add(DiscoveryLog::Level::kInfo,
             fmt::format("ascend: dynamic vNPU on: {} slots per {} (templates {}); shares need "
                         "the Ascend Docker Runtime",
                         slots, first.model, names));
  for (core::Device& d : inv->devices) {
    d.max_shares = std::max(1, VnpuSlots(templates, d.memory_mib));
  }
  inv->topology.slices = VnpuSliceRule(templates);
}

AscendDriver::AscendDriver(DcmiLibraryPtr dcmi, AscendOptions options)
    : dcmi_(std::move(dcmi)), options_(std::move(options)) {}

StatusOr<std::vector<core::NodeInventory>> AscendDriver::DiscoverDevices(bool partial) {
  DiscoveryLog notes(&discovery_lines_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!initialized_) {
      ACCELPOOL_RETURN_IF_ERROR(dcmi_->Init());
      initialized_ = true;
    }
  }
  StatusOr<std::vector<DcmiChipId>> ids = dcmi_->Chips();
  if (!ids.ok()) {
    return ids.status();
  }
  // At start (`partial`), a chip that cannot be read is not offered, and
  // the others are, under their own ids (PCI bus, never a position): one
  // chip answering an error must not take every NPU of the node away; it
  // fails only when no chip can be read. Later, chips are served: one that
  // cannot be read fails the discovery, which keeps them and chips_ as they
  // are.
  std::vector<std::pair<DcmiDeviceInfo, DcmiChipId>> found;
  Status first_error;
  for (const DcmiChipId& c : *ids) {
    StatusOr<DcmiDeviceInfo> info = dcmi_->Info(c);
    if (!info.ok()) {
      Status st = info.status().WithPrefix(ChipName(c));
      if (!partial) {
        return st;
      }
      notes.Add(DiscoveryLog::Level::kError,
                fmt::format("ascend: {}; it is not offered, the other chips are. Check it with "
                            "npu-smi info -t health -i {} -c {} and the device log (msnpureport); "
                            "a device check of the plugin offers it once it answers",
                            st.message(), c.card, c.device));
      if (first_error.ok()) first_error = std::move(st);
      continue;
    }
    found.emplace_back(std::move(info).value(), c);
  }
  if (found.empty()) {
    if (!first_error.ok()) return first_error;
    return std::vector<core::NodeInventory>{};
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first.logic_id < b.first.logic_id; });
  core::NodeInventory inv;
  inv.node = options_.node;
  inv.vendor = core::Vendor::kAscend;
  std::vector<Chip> chips;
  std::string super_pod;
  // DCMI's answers for two chips must not collide: the id keys a chip's
  // grants and health, and the physical id names its /dev/davinci node.
  std::map<std::string, DcmiChipId> by_id;
  std::map<int32_t, DcmiChipId> by_phy;
  for (const auto& [info, where] : found) {
    const std::string id = IdFromBus(info.pci_bus, info.phy_id);
    std::string clash;
    if (info.phy_id < 0) {
      clash = "physical id " + std::to_string(info.phy_id);
    } else if (auto it = by_id.find(id); it != by_id.end()) {
      clash = "the id " + id + " of " + ChipName(it->second);
    } else if (auto p = by_phy.find(info.phy_id); p != by_phy.end()) {
      clash = "the physical id " + std::to_string(info.phy_id) + " of " + ChipName(p->second);
    }
    if (!clash.empty()) {
      return InternalError(ChipName(where) + " reports " + clash +
                           "; check the NPU driver with npu-smi info");
    }
    by_id.emplace(id, where);
    by_phy.emplace(info.phy_id, where);
  }
  for (size_t i = 0; i < found.size(); ++i) {
    const DcmiDeviceInfo& info = found[i].first;
    core::Device d;
    d.id = IdFromBus(info.pci_bus, info.phy_id);
    d.index = static_cast<int32_t>(i);
    d.vendor = core::Vendor::kAscend;
    d.model = AscendModel(info.chip_name);
    d.memory_mib = info.memory_mib;
    d.compute_units = info.aicore;
    d.numa = info.numa;
    d.pci_bus = info.pci_bus;
    d.max_shares = 1;
    if (!inv.devices.empty() && inv.devices.front().model != d.model) {
      return FailedPreconditionError("node mixes NPU models " + inv.devices.front().model +
                                     " and " + d.model + "; this is not supported");
    }
    if (super_pod.empty()) {
      super_pod = info.super_pod_id;
    }
    inv.devices.push_back(d);
    chips.push_back({found[i].second, d.id, info.phy_id});
  }
  inv.topology.super_node = super_pod;
  // The chips DCMI reports on one card are one module (a 300I card's 4 chips,
  // a Duo's 2, an A3 module's 2 dies), whatever their logic ids.
  std::vector<std::vector<int32_t>> cards;
  std::map<int32_t, size_t> card_module;
  for (size_t i = 0; i < found.size(); ++i) {
    const auto it = card_module.emplace(found[i].second.card, cards.size()).first;
    if (it->second == cards.size()) {
      cards.emplace_back();
    }
    cards[it->second].push_back(static_cast<int32_t>(i));
  }
  const std::string profile = AscendProfile(inv.devices.front().model, inv.devices.size());
  Status st = profile.empty() ? NotFoundError("no profile for this shape")
                              : core::ApplyProfile(profile, &inv, cards);
  const bool die_pairs =
      std::all_of(cards.begin(), cards.end(), [](const auto& c) { return c.size() == 2; });
  // At start a die left out (its chip info unreadable) leaves its card with
  // one die: the complete cards are still modules, and the lone die is in
  // none (it serves single-die requests).
  const bool pairs_but_left_out =
      !first_error.ok() &&
      std::all_of(cards.begin(), cards.end(),
                  [](const auto& c) { return c.size() == 1 || c.size() == 2; }) &&
      std::any_of(cards.begin(), cards.end(), [](const auto& c) { return c.size() == 2; });
  if (!st.ok() && OfFamily(inv.devices.front().model, "Ascend910C") &&
      (die_pairs || pairs_but_left_out)) {
    // An A3 product of another die count than the profile's 16 (an 8-die
    // A3 box, or a 16-die one with a die left out): its dies still pair into
    // HiAM modules by card, and an even request must take whole modules
    // (VENDORS.md 2.2); groups follow NUMA.
    core::ApplyNumaDefault(&inv);
    std::vector<std::vector<int32_t>> modules;
    for (std::vector<int32_t>& card : cards) {
      if (card.size() != 2) {
        continue;
      }
      for (int32_t d : card) {
        inv.devices[static_cast<size_t>(d)].module = static_cast<int32_t>(modules.size());
      }
      modules.push_back(std::move(card));
    }
    notes.Add(
        DiscoveryLog::Level::kInfo,
        fmt::format("ascend: {} x {} has no topology profile ({}); using NUMA groups and its "
                    "{} cards as modules, taken whole by even requests",
                    inv.devices.size(), inv.devices.front().model, st.message(), modules.size()));
    // As the 16-die profile: one die, or an even count of whole modules;
    // never an odd count above one (a lone die and a module, say).
    inv.topology.valid_counts = {1};
    for (size_t c = 2; c <= 2 * modules.size(); c += 2) {
      inv.topology.valid_counts.push_back(static_cast<int32_t>(c));
    }
    inv.topology.modules = std::move(modules);
    inv.topology.module_rule = core::ModuleRule::kWholeForEven;
  } else if (!st.ok()) {
    notes.Add(DiscoveryLog::Level::kInfo,
              fmt::format("ascend: {} x {} has no topology profile ({}); using NUMA groups",
                          inv.devices.size(), inv.devices.front().model, st.message()));
    core::ApplyNumaDefault(&inv);
  }
  inv.topology.super_node = super_pod;
  if (options_.vnpu) {
    ServeVnpu(&inv, &notes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  chips_ = std::move(chips);
  return std::vector<core::NodeInventory>{std::move(inv)};
}

Status AscendDriver::WatchHealth(std::stop_token stop, const HealthSink& sink) {
  std::map<std::string, bool> healthy;  // last reported, by id
  while (!stop.stop_requested()) {
    std::vector<Chip> chips;
    {
      std::lock_guard<std::mutex> lock(mu_);
      chips = chips_;
    }
    for (const Chip& c : chips) {
      StatusOr<uint32_t> h = dcmi_->Health(c.where);
      bool ok = h.ok() && *h <= 1;
      auto it = healthy.find(c.id);
      bool before = it == healthy.end() ? true : it->second;
      if (ok != before) {
        std::string reason = !h.ok() ? h.status().message()
                             : ok    ? "alarm cleared"
                                     : "DCMI health alarm level " + std::to_string(*h);
        spdlog::log(ok ? spdlog::level::info : spdlog::level::warn, "ascend: NPU {} {}: {}", c.id,
                    ok ? "is healthy again" : "is unhealthy", reason);
        sink({core::Vendor::kAscend, c.id, ok, reason});
      }
      healthy[c.id] = ok;
    }
    auto until = std::chrono::steady_clock::now() + options_.health_poll;
    while (!stop.stop_requested() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
          options_.health_poll, std::chrono::milliseconds(100)));
    }
  }
  return Status::Ok();
}

StatusOr<std::map<std::string, std::vector<ProcessMemory>>> AscendDriver::MemoryHolders() {
  std::vector<std::pair<int32_t, std::string>> ids;
  std::vector<DcmiChipId> where;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Chip& c : chips_) {
      ids.emplace_back(static_cast<int32_t>(where.size()), c.id);
      where.push_back(c.where);
    }
  }
  return ReadPerDevice<std::vector<ProcessMemory>>(
      ids, [&](int32_t i) { return dcmi_->Processes(where[static_cast<size_t>(i)]); });
}

StatusOr<std::map<std::string, int64_t>> AscendDriver::MemoryInUse() {
  StatusOr<std::map<std::string, std::vector<ProcessMemory>>> held = MemoryHolders();
  if (!held.ok()) return held.status();
  std::map<std::string, int64_t> out;
  for (const auto& [id, list] : *held) out[id] = HeldMib(list);
  return out;
}

StatusOr<ContainerSpec> AscendDriver::BuildContainerSpec(
    const std::vector<GrantedDevice>& grants) const {
  std::map<std::string, int32_t> phy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Chip& c : chips_) {
      phy[c.id] = c.phy_id;
    }
  }
  bool vnpu = false;
  for (const GrantedDevice& g : grants) {
    if (phy.find(g.device.id) == phy.end()) {
      return InvalidArgumentError("NPU " + g.device.id +
                                  " is not on this node; the assignment is stale or foreign");
    }
    // A share of a chip served with vNPU slots. A chip with one slot (no
    // --ascend-vnpu, or no templates) is held by its share alone: whole.
    vnpu = vnpu || (options_.vnpu && IsVnpuGrant(g));
  }
  if (vnpu) {
    return VnpuContainerSpec(grants, phy.at(grants.front().device.id));
  }
  return GenericContainerSpec(
      TraitsFor(core::Vendor::kAscend), grants,
      [&phy](const core::Device& d) { return phy.at(d.id); }, options_.device_root);
}

}  // namespace accelpool::vendors::ascend
