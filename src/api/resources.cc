#include "api/resources.h"

#include <algorithm>
#include <array>

namespace accelpool::api {

namespace {

using core::Vendor;

ResourceInfo Count(std::string name, Vendor v, std::string mem = "", std::string pct = "",
                   std::string compute = "", std::string family = "") {
  ResourceInfo r;
  r.name = std::move(name);
  r.vendor = v;
  r.role = ResourceRole::kCount;
  r.memory_name = std::move(mem);
  r.memory_percent_name = std::move(pct);
  r.compute_name = std::move(compute);
  r.model_family = std::move(family);
  return r;
}

ResourceInfo Memory(std::string name, Vendor v, int64_t mib_per_unit, bool suffix_bytes = false,
                    std::string family = "") {
  ResourceInfo r;
  r.name = std::move(name);
  r.vendor = v;
  r.role = ResourceRole::kMemory;
  r.unit = mib_per_unit;
  r.suffix_means_bytes = suffix_bytes;
  r.model_family = std::move(family);
  return r;
}

ResourceInfo Percent(std::string name, Vendor v) {
  ResourceInfo r;
  r.name = std::move(name);
  r.vendor = v;
  r.role = ResourceRole::kMemoryPercent;
  r.unit = 1;
  return r;
}

ResourceInfo Compute(std::string name, Vendor v, int64_t units_per_device,
                     std::string family = "") {
  ResourceInfo r;
  r.name = std::move(name);
  r.vendor = v;
  r.role = ResourceRole::kCompute;
  r.unit = units_per_device;
  r.model_family = std::move(family);
  return r;
}

ResourceInfo Ignored(std::string name, Vendor v) {
  ResourceInfo r;
  r.name = std::move(name);
  r.vendor = v;
  r.role = ResourceRole::kIgnored;
  return r;
}

std::vector<ResourceInfo> BuildTable() {
  std::vector<ResourceInfo> t;
  // NVIDIA (official + HAMi).
  t.push_back(Count("nvidia.com/gpu", Vendor::kNvidia, "nvidia.com/gpumem",
                    "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"));
  t.push_back(Memory("nvidia.com/gpumem", Vendor::kNvidia, 1));
  t.push_back(Percent("nvidia.com/gpumem-percentage", Vendor::kNvidia));
  t.push_back(Compute("nvidia.com/gpucores", Vendor::kNvidia, 100));
  t.push_back(Ignored("nvidia.com/priority", Vendor::kNvidia));
  // Huawei Ascend: vendor-wide names; per-chip names are matched as a pattern too.
  t.push_back(Count("huawei.com/npu", Vendor::kAscend));
  for (const char* chip :
       {"Ascend910", "Ascend910A", "Ascend910B", "Ascend910B2", "Ascend910B3", "Ascend910B4",
        "Ascend910B4-1", "Ascend910C", "Ascend310P", "Ascend310"}) {
    const std::string base = std::string("huawei.com/") + chip;
    t.push_back(Count(base, Vendor::kAscend, base + "-memory", "", base + "-core", chip));
    t.push_back(Memory(base + "-memory", Vendor::kAscend, 1, false, chip));
    t.push_back(Compute(base + "-core", Vendor::kAscend, 100, chip));
  }
  // Kunlunxin.
  t.push_back(Count("kunlunxin.com/xpu", Vendor::kKunlunxin));
  t.push_back(Count("kunlunxin.com/vxpu", Vendor::kKunlunxin, "kunlunxin.com/vxpu-memory"));
  t.push_back(Memory("kunlunxin.com/vxpu-memory", Vendor::kKunlunxin, 1));
  // MetaX: vmemory is GiB as a number, bytes with a binary unit (Ki .. Ei).
  t.push_back(Count("metax-tech.com/gpu", Vendor::kMetax));
  t.push_back(Count("metax-tech.com/sgpu", Vendor::kMetax, "metax-tech.com/vmemory", "",
                    "metax-tech.com/vcore"));
  t.push_back(Compute("metax-tech.com/vcore", Vendor::kMetax, 100));
  t.push_back(Memory("metax-tech.com/vmemory", Vendor::kMetax, 1024, true));
  // Moore Threads: memory in 512 MiB units, compute in 1/16 of a card.
  t.push_back(Count("mthreads.com/gpu", Vendor::kMthreads));
  t.push_back(Count("mthreads.com/vgpu", Vendor::kMthreads, "mthreads.com/sgpu-memory", "",
                    "mthreads.com/sgpu-core"));
  t.push_back(Memory("mthreads.com/sgpu-memory", Vendor::kMthreads, 512));
  t.push_back(Compute("mthreads.com/sgpu-core", Vendor::kMthreads, 16));
  // T-Head PPU.
  t.push_back(Count("alibabacloud.com/ppu", Vendor::kThead));
  // Cambricon: sMLU memory in 256 MiB units, vcore percent.
  t.push_back(Count("cambricon.com/mlu", Vendor::kCambricon));
  t.push_back(Count("cambricon.com/vmlu", Vendor::kCambricon, "cambricon.com/mlu.smlu.vmemory", "",
                    "cambricon.com/mlu.smlu.vcore"));
  t.push_back(Memory("cambricon.com/mlu.smlu.vmemory", Vendor::kCambricon, 256));
  t.push_back(Compute("cambricon.com/mlu.smlu.vcore", Vendor::kCambricon, 100));
  // Hygon DCU.
  t.push_back(Count("hygon.com/dcu", Vendor::kHygon));
  t.push_back(
      Count("hygon.com/dcunum", Vendor::kHygon, "hygon.com/dcumem", "", "hygon.com/dcucores"));
  t.push_back(Memory("hygon.com/dcumem", Vendor::kHygon, 1));
  t.push_back(Compute("hygon.com/dcucores", Vendor::kHygon, 100));
  // Iluvatar: vendor-wide names; per-chip names are a pattern.
  t.push_back(Count("iluvatar.ai/gpu", Vendor::kIluvatar));
  t.push_back(Count("iluvatar.com/gpu", Vendor::kIluvatar));
  for (const char* chip : {"MR-V100", "MR-V50", "BI-V150", "BI-V100"}) {
    const std::string base = std::string("iluvatar.ai/") + chip;
    t.push_back(
        Count(base + "-vgpu", Vendor::kIluvatar, base + ".vMem", "", base + ".vCore", chip));
    t.push_back(Memory(base + ".vMem", Vendor::kIluvatar, 256, false, chip));
    t.push_back(Compute(base + ".vCore", Vendor::kIluvatar, 100, chip));
  }
  // Enflame.
  t.push_back(Count("enflame.com/gcu", Vendor::kEnflame, "enflame.com/gcu-memory", "",
                    "enflame.com/gcu-core"));
  t.push_back(Memory("enflame.com/gcu-memory", Vendor::kEnflame, 1));
  t.push_back(Compute("enflame.com/gcu-core", Vendor::kEnflame, 100));
  t.push_back(Count("enflame.com/vgcu", Vendor::kEnflame, "", "enflame.com/vgcu-percentage"));
  t.push_back(Percent("enflame.com/vgcu-percentage", Vendor::kEnflame));
  t.push_back(Count("enflame.com/shared-gcu", Vendor::kEnflame));
  t.push_back(Count("enflame.com/drs-gcu", Vendor::kEnflame));
  return t;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool ValidChip(std::string_view chip) {
  if (chip.empty() || chip.size() > 40) return false;
  for (char c : chip) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const std::vector<ResourceInfo>& KnownResources() {
  static const std::vector<ResourceInfo>* const kTable =
      new std::vector<ResourceInfo>(BuildTable());
  return *kTable;
}

std::optional<ResourceInfo> LookupResource(std::string_view name) {
  for (const ResourceInfo& r : KnownResources()) {
    if (r.name == name) return r;
  }
  // huawei.com/<Chip>, huawei.com/<Chip>-memory, huawei.com/<Chip>-core for
  // chips not in the fixed list (Ascend910B4-2, Ascend950 ...). Static vNPU
  // names (huawei.com/Ascend910-2c) belong to Huawei's own plugin: not ours.
  constexpr std::string_view kHuawei = "huawei.com/";
  if (name.substr(0, kHuawei.size()) == kHuawei) {
    std::string_view rest = name.substr(kHuawei.size());
    if (rest.substr(0, 6) != "Ascend") return std::nullopt;
    ResourceRole role = ResourceRole::kCount;
    if (EndsWith(rest, "-memory")) {
      role = ResourceRole::kMemory;
      rest.remove_suffix(7);
    } else if (EndsWith(rest, "-core")) {
      role = ResourceRole::kCompute;
      rest.remove_suffix(5);
    }
    // A chip name is "Ascend" + digits/letters, with at most a "-<digit>" revision.
    const size_t dash = rest.find('-');
    if (dash != std::string_view::npos &&
        (dash + 2 != rest.size() || rest[dash + 1] < '0' || rest[dash + 1] > '9')) {
      return std::nullopt;
    }
    if (!ValidChip(rest) || rest.size() <= 6) return std::nullopt;
    const std::string chip(rest);
    const std::string base = std::string(kHuawei) + chip;
    if (role == ResourceRole::kMemory)
      return Memory(std::string(name), Vendor::kAscend, 1, false, chip);
    if (role == ResourceRole::kCompute)
      return Compute(std::string(name), Vendor::kAscend, 100, chip);
    return Count(base, Vendor::kAscend, base + "-memory", "", base + "-core", chip);
  }
  // nvidia.com/mig-<profile>: one MIG instance of that profile, whole.
  constexpr std::string_view kMig = "nvidia.com/mig-";
  if (name.substr(0, kMig.size()) == kMig) {
    const std::string_view profile = name.substr(kMig.size());
    if (!core::ValidMigProfile(profile)) return std::nullopt;
    ResourceInfo r = Count(std::string(name), Vendor::kNvidia);
    r.partition = std::string(profile);
    return r;
  }
  // iluvatar.ai/<Chip>-vgpu | <Chip>.vMem | <Chip>.vCore.
  constexpr std::string_view kIluvatar = "iluvatar.ai/";
  if (name.substr(0, kIluvatar.size()) == kIluvatar) {
    std::string_view rest = name.substr(kIluvatar.size());
    std::string chip;
    ResourceRole role;
    if (EndsWith(rest, "-vgpu")) {
      chip = std::string(rest.substr(0, rest.size() - 5));
      role = ResourceRole::kCount;
    } else if (EndsWith(rest, ".vMem")) {
      chip = std::string(rest.substr(0, rest.size() - 5));
      role = ResourceRole::kMemory;
    } else if (EndsWith(rest, ".vCore")) {
      chip = std::string(rest.substr(0, rest.size() - 6));
      role = ResourceRole::kCompute;
    } else {
      return std::nullopt;
    }
    if (!ValidChip(chip)) return std::nullopt;
    const std::string base = std::string(kIluvatar) + chip;
    if (role == ResourceRole::kMemory)
      return Memory(std::string(name), Vendor::kIluvatar, 256, false, chip);
    if (role == ResourceRole::kCompute)
      return Compute(std::string(name), Vendor::kIluvatar, 100, chip);
    return Count(std::string(name), Vendor::kIluvatar, base + ".vMem", "", base + ".vCore", chip);
  }
  return std::nullopt;
}

bool IsAcceleratorResource(std::string_view name) { return LookupResource(name).has_value(); }

std::string_view DefaultCountResource(core::Vendor v) {
  switch (v) {
    case Vendor::kNvidia:
      return "nvidia.com/gpu";
    case Vendor::kAscend:
      return "huawei.com/npu";
    case Vendor::kKunlunxin:
      return "kunlunxin.com/xpu";
    case Vendor::kMetax:
      return "metax-tech.com/gpu";
    case Vendor::kMthreads:
      return "mthreads.com/vgpu";
    case Vendor::kThead:
      return "alibabacloud.com/ppu";
    case Vendor::kCambricon:
      return "cambricon.com/vmlu";
    case Vendor::kHygon:
      return "hygon.com/dcunum";
    case Vendor::kIluvatar:
      return "iluvatar.ai/gpu";
    case Vendor::kEnflame:
      return "enflame.com/gcu";
    case Vendor::kUnknown:
      break;
  }
  return "";
}

std::string DeviceResource(core::Vendor v, std::string_view model, std::string_view partition) {
  if (v == Vendor::kNvidia && !partition.empty()) {
    return "nvidia.com/mig-" + std::string(partition);
  }
  if (v == Vendor::kAscend && model.substr(0, 6) == "Ascend") {
    // 310P chips (310P1, 310P3 ...) go by their family's name, as in
    // Huawei's device plugin and HAMi: pods ask huawei.com/Ascend310P.
    constexpr std::string_view k310P = "Ascend310P";
    if (model.size() > k310P.size() && model.substr(0, k310P.size()) == k310P &&
        std::all_of(model.begin() + k310P.size(), model.end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      return "huawei.com/Ascend310P";
    }
    std::optional<ResourceInfo> r = LookupResource("huawei.com/" + std::string(model));
    if (r && r->vendor == Vendor::kAscend && r->role == ResourceRole::kCount) {
      return r->name;
    }
  }
  for (const ResourceInfo& r : KnownResources()) {
    if (r.vendor == v && r.role == ResourceRole::kCount && r.model_family.empty()) {
      return r.name;
    }
  }
  return "";
}

std::optional<std::string> UnadvertisedCountHint(std::string_view name) {
  std::optional<ResourceInfo> r = LookupResource(name);
  if (!r.has_value() || r->role != ResourceRole::kCount) return std::nullopt;
  switch (r->vendor) {
    case Vendor::kNvidia:
      return std::nullopt;  // nvidia.com/gpu and nvidia.com/mig-<profile>
    case Vendor::kAscend: {
      constexpr std::string_view kChips =
          "the chip's own name, as the node advertises it (huawei.com/Ascend910A, "
          "huawei.com/Ascend910B3, huawei.com/Ascend910C, huawei.com/Ascend310P ...; see the "
          "node's allocatable resources)";
      const std::string_view chip = name.substr(std::string_view("huawei.com/").size());
      if (name == "huawei.com/npu" || chip == "Ascend910" || chip == "Ascend910B") {
        return std::string(kChips);
      }
      const std::string advertised = DeviceResource(Vendor::kAscend, chip);
      if (advertised != name) return advertised;
      return std::nullopt;
    }
    default: {
      const std::string whole = DeviceResource(r->vendor, "");
      if (whole.empty() || whole == name) return std::nullopt;
      return whole + " (whole devices: shares of " + std::string(core::VendorName(r->vendor)) +
             " devices are not offered)";
    }
  }
}

std::optional<std::string_view> DeviceControlledEnv(std::string_view name) {
  static constexpr std::string_view kEnforcementPrefixes[] = {"ACCELPOOL_CUDA_",
                                                              "CUDA_DEVICE_MEMORY_LIMIT"};
  static constexpr std::string_view kEnforcement[] = {"CUDA_DEVICE_SM_LIMIT",
                                                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                                                      "CUDA_MPS_PIPE_DIRECTORY",
                                                      "ASCEND_VNPU_SPECS",
                                                      "CUDA_TASK_PRIORITY"};
  // Read by the vendors' container runtime hooks, which mount what they name.
  // Kunlunxin's XPU_VISIBLE_DEVICES and MetaX's MACA_VISIBLE_DEVICES are read
  // in the process, over the nodes the plugin mounted: a pod's own value
  // only narrows those (docs/vendors.md). NVIDIA_IMEX_CHANNELS=all has the
  // NVIDIA toolkit mount every IMEX channel (the plugin mounts the node's
  // own, --imex-channel); ASCEND_RUNTIME_OPTIONS=VIRTUAL has the Ascend
  // runtime mount the vNPU /dev/vdavinci<N> of the chip number it was
  // given, which may be another pod's.
  static constexpr std::string_view kDeviceSelection[] = {
      "NVIDIA_VISIBLE_DEVICES",    "ASCEND_VISIBLE_DEVICES", "MTHREADS_VISIBLE_DEVICES",
      "CAMBRICON_VISIBLE_DEVICES", "NVIDIA_IMEX_CHANNELS",   "ASCEND_RUNTIME_OPTIONS"};
  for (std::string_view prefix : kEnforcementPrefixes) {
    if (name.substr(0, prefix.size()) == prefix) {
      return "enforcement";
    }
  }
  for (std::string_view n : kEnforcement) {
    if (name == n) {
      return "enforcement";
    }
  }
  for (std::string_view n : kDeviceSelection) {
    if (name == n) {
      return "device selection";
    }
  }
  return std::nullopt;
}

}  // namespace accelpool::api
