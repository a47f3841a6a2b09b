// ROCm SMI entry points used, declared here from its public API reference
// (rocm_smi.h; all return rsmi_status_t, 0 = success):
//   rsmi_init(uint64_t flags)
//   rsmi_num_monitor_devices(uint32_t* count)
//   rsmi_dev_memory_total_get(uint32_t dv, rsmi_memory_type_t type, uint64_t* bytes)  VRAM = 0
//   rsmi_dev_pci_id_get(uint32_t dv, uint64_t* bdfid)
//   rsmi_dev_busy_percent_get(uint32_t dv, uint32_t* percent)  (the "answers" probe)
// Optional: rsmi_dev_name_get(uint32_t dv, char* name, size_t len),
// rsmi_dev_unique_id_get(uint32_t dv, uint64_t* id),
// rsmi_topo_get_numa_node_number(uint32_t dv, uint32_t* node) (else sysfs),
// rsmi_dev_drm_render_minor_get(uint32_t dv, uint32_t* minor),
// rsmi_topo_get_link_type(uint32_t a, uint32_t b, uint64_t* hops, RSMI_IO_LINK_TYPE* type)
// (1 PCIe, 2 XGMI),
// rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv, rsmi_process_info_t* p),
// rsmi_dev_vendor_id_get(uint32_t dv, uint16_t* id)
//
// librocm_smi64.so is AMD's library, which Hygon's DTK ships: it lists AMD
// GPUs as well as DCUs. Only devices of PCI vendor 0x1d94 (Hygon) are
// offered; another vendor's device is left out with one log line. The vendor
// comes from rsmi_dev_vendor_id_get, else (not exported, or failing) from
// sysfs (<sysfs>/bus/pci/devices/<bus>/vendor); a device whose vendor
// neither says is offered, as before this check.
//
// Memory in use is the VRAM the processes using a DCU hold, summed, not
// rsmi_dev_memory_usage_get: on Hygon DCUs that counts the HBM the driver
// reserves (most of the device, on an idle one; hy-smi shows the same), so it
// would mark every idle DCU as held. The processes are those the kernel's KFD
// lists under <sysfs>/class/kfd/kfd/proc/<pid> (host PIDs; where ROCm SMI
// itself finds them), each asked for its VRAM on the DCU with
// rsmi_compute_process_info_by_device_get; "not found" means it does not use
// that DCU. The enumerating call, rsmi_compute_process_info_get, is not used:
// it fills an array of rsmi_process_info_t, a struct that grew across ROCm
// releases (its rows would be read with the wrong stride), and a public
// report has its rows carry 0 VRAM on Hygon. Only the first three fields
// (process_id, pasid, vram_usage), the same in every release, are read.
#include "vendors/hygon/rocm_smi_library.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::hygon {
namespace {

using Ret = int;

constexpr const char* kLib = "ROCm SMI";
constexpr const char* kHint = "check the DCU driver with hy-smi";
constexpr int kVram = 0;               // RSMI_MEM_TYPE_VRAM
constexpr int kLinkPcie = 1;           // RSMI_IOLINK_TYPE_PCIEXPRESS
constexpr int kLinkXgmi = 2;           // RSMI_IOLINK_TYPE_XGMI
constexpr uint32_t kRenderBase = 128;  // the first DRM render minor
constexpr int kNotFound = 10;          // RSMI_STATUS_NOT_FOUND
constexpr uint16_t kHygonVendor = 0x1d94;  // PCI vendor id of Hygon's DCUs

// The leading fields of rsmi_process_info_t, the same in every ROCm release
// (later ones append sdma_usage and cu_occupancy); read through Padded.
struct rsmi_process_info_head {
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;  // bytes
};

// The PIDs under <sysfs_root>/class/kfd/kfd/proc, ascending; empty when the
// directory is absent (no KFD driver: no compute process can exist).
std::vector<uint32_t> KfdPids(const std::string& sysfs_root) {
  std::vector<uint32_t> pids;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(sysfs_root) / "class/kfd/kfd/proc";
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 7 ||
        name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const unsigned long pid = std::stoul(name);  // NOLINT(runtime/int) at most 7 digits
    if (pid > 0 && pid <= 4194304) pids.push_back(static_cast<uint32_t>(pid));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

class RocmSmi : public BoundLibrary {
 public:
  RocmSmi(std::unique_ptr<DlLibrary> lib, std::string sysfs_root)
      : BoundLibrary(std::move(lib), std::move(sysfs_root), kLib, kHint) {}

  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&init_, "rsmi_init"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&count_, "rsmi_num_monitor_devices"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&memory_, "rsmi_dev_memory_total_get"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&pci_, "rsmi_dev_pci_id_get"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&busy_, "rsmi_dev_busy_percent_get"));
    name_ = lib_->OptionalSymbol<Ret(uint32_t, char*, size_t)>("rsmi_dev_name_get");
    unique_id_ = lib_->OptionalSymbol<Ret(uint32_t, uint64_t*)>("rsmi_dev_unique_id_get");
    numa_ = lib_->OptionalSymbol<Ret(uint32_t, uint32_t*)>("rsmi_topo_get_numa_node_number");
    render_ = lib_->OptionalSymbol<Ret(uint32_t, uint32_t*)>("rsmi_dev_drm_render_minor_get");
    link_ =
        lib_->OptionalSymbol<Ret(uint32_t, uint32_t, uint64_t*, int*)>("rsmi_topo_get_link_type");
    by_device_ = lib_->OptionalSymbol<Ret(uint32_t, uint32_t, void*)>(
        "rsmi_compute_process_info_by_device_get");
    vendor_ = lib_->OptionalSymbol<Ret(uint32_t, uint16_t*)>("rsmi_dev_vendor_id_get");
    ACCELPOOL_RETURN_IF_ERROR(Check(init_(0), "rsmi_init"));
    ready_ = true;
    return Status::Ok();
  }

  StatusOr<int32_t> Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    uint32_t n = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(count_(&n), "rsmi_num_monitor_devices"));
    return CheckedCount(n, "rsmi_num_monitor_devices");
  }

  StatusOr<LibraryDevice> Device(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    const auto i = static_cast<uint32_t>(index);
    LibraryDevice d;
    uint64_t bdf = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(pci_(i, &bdf), "rsmi_dev_pci_id_get"));
    d.pci_bus = BdfFromId(bdf);
    if (std::optional<uint16_t> vendor = VendorOf(i, d.pci_bus);
        vendor.has_value() && *vendor != kHygonVendor) {
      char why[160];
      std::snprintf(why, sizeof(why),
                    "its PCI vendor is 0x%04x, not Hygon's 0x1d94 (ROCm SMI lists another "
                    "vendor's GPU at %s)",
                    static_cast<unsigned>(*vendor), d.pci_bus.c_str());
      LibraryDevice other;
      other.not_offered = why;
      return other;
    }
    char name[128] = {};
    if (name_ != nullptr && name_(i, name, sizeof(name)) == 0) {
      d.name = FixedString(name, sizeof(name));
    }
    uint64_t id = 0;
    if (unique_id_ != nullptr && unique_id_(i, &id) == 0 && id != 0) {
      char s[32];
      std::snprintf(s, sizeof(s), "DCU-%016" PRIx64, id);
      d.uuid = s;
    }
    uint64_t bytes = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(i, kVram, &bytes), "rsmi_dev_memory_total_get"));
    d.memory_mib = static_cast<int64_t>(bytes >> 20);
    uint32_t node = 0;
    if (numa_ != nullptr && numa_(i, &node) == 0 && node < 1024) {
      d.numa = static_cast<int32_t>(node);
    } else {
      d.numa = PciNumaNode(d.pci_bus, sysfs_root_);
    }
    // The container gets /dev/kfd and this DCU's render node, the node ROCm
    // opens for compute: the library's render minor, else the render node
    // sysfs lists for its PCI function. Never 128 + index: another
    // render-capable DRM device on the host shifts the numbers, and the
    // container would get another DCU. With neither, the DCU has no nodes
    // and a grant of it is refused (HygonSpec: nodes_from_sysfs_only).
    uint32_t render = 0;
    if (render_ != nullptr && render_(i, &render) == 0 && render >= kRenderBase) {
      d.minor = static_cast<int32_t>(render);
      d.nodes = {"/dev/dri/renderD" + std::to_string(render)};
    } else {
      for (const std::string& path : PciDrmNodes(d.pci_bus, sysfs_root_)) {
        const std::string prefix = "/dev/dri/renderD";
        // PciDrmNodes lists only digits after the prefix; at most 6 fit.
        if (path.rfind(prefix, 0) == 0 && path.size() <= prefix.size() + 6) {
          d.minor = std::stoi(path.substr(prefix.size()));
          d.nodes = {path};
          break;
        }
      }
    }
    return d;
  }

  StatusOr<LinkKind> Link(int32_t a, int32_t b) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    if (link_ == nullptr) {
      return UnimplementedError("rsmi_topo_get_link_type is not exported");
    }
    uint64_t hops = 0;
    int type = 0;
    ACCELPOOL_RETURN_IF_ERROR(
        Check(link_(static_cast<uint32_t>(a), static_cast<uint32_t>(b), &hops, &type),
              "rsmi_topo_get_link_type"));
    if (type == kLinkXgmi) {
      return LinkKind::kVendorLink;
    }
    if (type == kLinkPcie) {
      return hops <= 2 ? LinkKind::kPcieSwitch : LinkKind::kPcieHostBridge;
    }
    return LinkKind::kUnknown;
  }

  StatusOr<bool> Healthy(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    uint32_t busy = 0;
    ACCELPOOL_RETURN_IF_ERROR(
        Check(busy_(static_cast<uint32_t>(index), &busy), "rsmi_dev_busy_percent_get"));
    return true;
  }

  // The processes' VRAM on the DCU, summed (see the top).
  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    StatusOr<std::vector<ProcessMemory>> procs = Processes(index);
    if (!procs.ok()) return procs.status();
    return HeldMib(*procs);
  }

  StatusOr<std::vector<ProcessMemory>> Processes(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    if (by_device_ == nullptr) {
      return UnimplementedError(
          "rsmi_compute_process_info_by_device_get is not exported, so the processes on each "
          "DCU cannot be listed; update the DCU driver (DTK)");
    }
    std::vector<ProcessMemory> out;
    for (uint32_t pid : KfdPids(sysfs_root_)) {
      Padded<rsmi_process_info_head> p;
      const int r = by_device_(pid, static_cast<uint32_t>(index), &p.value);
      if (r == kNotFound) continue;  // not on this DCU
      if (r != 0 && !std::filesystem::exists(std::filesystem::path(sysfs_root_) /
                                             "class/kfd/kfd/proc" / std::to_string(pid))) {
        continue;  // it exited while it was read
      }
      ACCELPOOL_RETURN_IF_ERROR(Check(r, "rsmi_compute_process_info_by_device_get"));
      const int64_t mib = static_cast<int64_t>(p.value.vram_usage >> 20);
      if (mib > 0) out.push_back({static_cast<int64_t>(pid), mib});
    }
    return out;
  }

 private:
  // The PCI vendor id of device `i` at `bus`: ROCm SMI's, else sysfs's;
  // nullopt when neither says.
  std::optional<uint16_t> VendorOf(uint32_t i, const std::string& bus) const {
    uint16_t id = 0;
    if (vendor_ != nullptr && vendor_(i, &id) == 0) {
      return id;
    }
    if (bus.empty()) {
      return std::nullopt;
    }
    std::ifstream in(sysfs_root_ + "/bus/pci/devices/" + bus + "/vendor");
    unsigned value = 0;
    if (!(in >> std::hex >> value) || value == 0 || value > 0xffff) {
      return std::nullopt;
    }
    return static_cast<uint16_t>(value);
  }

  Ret (*init_)(uint64_t) = nullptr;
  Ret (*count_)(uint32_t*) = nullptr;
  Ret (*memory_)(uint32_t, int, uint64_t*) = nullptr;
  Ret (*pci_)(uint32_t, uint64_t*) = nullptr;
  Ret (*busy_)(uint32_t, uint32_t*) = nullptr;
  Ret (*name_)(uint32_t, char*, size_t) = nullptr;
  Ret (*unique_id_)(uint32_t, uint64_t*) = nullptr;
  Ret (*numa_)(uint32_t, uint32_t*) = nullptr;
  Ret (*render_)(uint32_t, uint32_t*) = nullptr;
  Ret (*link_)(uint32_t, uint32_t, uint64_t*, int*) = nullptr;
  Ret (*by_device_)(uint32_t, uint32_t, void*) = nullptr;
  Ret (*vendor_)(uint32_t, uint16_t*) = nullptr;
};

}  // namespace

std::string BdfFromId(uint64_t bdfid) {
  char s[32];
  std::snprintf(s, sizeof(s), "%04x:%02x:%02x.%x", static_cast<unsigned>((bdfid >> 32) & 0xffff),
                static_cast<unsigned>((bdfid >> 8) & 0xff),
                static_cast<unsigned>((bdfid >> 3) & 0x1f), static_cast<unsigned>(bdfid & 0x7));
  return s;
}

StatusOr<DeviceLibraryPtr> NewRocmSmiLibrary(const std::vector<std::string>& candidates,
                                             const std::string& sysfs_root) {
  return OpenBinding<RocmSmi>(core::Vendor::kHygon, candidates, sysfs_root);
}

}  // namespace accelpool::vendors::hygon
