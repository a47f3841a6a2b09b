// MX-SML entry points used, declared here from MetaX's published MX-SML
// bindings (status: unsigned, 0 = success):
//   mxSmlInit(void)
//   mxSmlGetDeviceCount(void) -> unsigned           (the count itself, no status)
//   mxSmlGetDeviceInfo(unsigned, mxSmlDeviceInfo_t*) deviceId, type, bdfId[32], gpuId,
//                                                    nodeId, uuid[96], brand, mode,
//                                                    deviceName[32]
//   mxSmlGetMemoryInfo(unsigned, mxSmlMemoryInfo_t*) six longs in KB; vramTotal third,
//                                                    vramUse (in use) fourth
//   mode (mxSmlDeviceVirtualizationMode_t): 0 bare metal, 1 physical function
//   with SR-IOV on, 2 virtual function. With SR-IOV on MX-SML counts the PFs
//   and the VFs; workloads run only on VFs, a PF is for management, so PFs
//   are not offered.
// Optional:
//   mxSmlGetDeviceTopology(unsigned, unsigned, int* level): 0 internal, 1 single
//     switch, 2 multiple switches, 3 host bridge, 4 NUMA node, 5 MetaXLink, 6 system
//   mxSmlGetNodeAffinity(unsigned, unsigned words, unsigned* node_bitmask)
#include "vendors/metax/mxsml_library.h"

#include <mutex>

#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::metax {
namespace {

using Ret = unsigned;

struct DeviceInfo {
  unsigned device_id;
  unsigned type;
  char bdf[32];
  unsigned gpu_id;
  unsigned node_id;
  char uuid[96];
  unsigned brand;
  unsigned mode;
  char name[32];
};

struct MemoryInfo {
  long vis_vram_total, vis_vram_use, vram_total, vram_use, xtt_total, xtt_use;  // KB
};

// mxSmlDeviceVirtualizationMode_t: MXSML_Virtualization_Mode_Pf.
constexpr unsigned kModePf = 1;
constexpr unsigned kModeVf = 2;

constexpr const char* kLib = "MX-SML";
constexpr const char* kHint = "check the GPU driver with mx-smi";

class Mxsml : public BoundLibrary {
 public:
  Mxsml(std::unique_ptr<DlLibrary> lib, std::string sysfs_root)
      : BoundLibrary(std::move(lib), std::move(sysfs_root), kLib, kHint) {}

  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&init_, "mxSmlInit"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&count_, "mxSmlGetDeviceCount"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&info_, "mxSmlGetDeviceInfo"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&memory_, "mxSmlGetMemoryInfo"));
    topology_ = lib_->OptionalSymbol<Ret(unsigned, unsigned, int*)>("mxSmlGetDeviceTopology");
    affinity_ = lib_->OptionalSymbol<Ret(unsigned, unsigned, unsigned*)>("mxSmlGetNodeAffinity");
    ACCELPOOL_RETURN_IF_ERROR(Check(init_(), "mxSmlInit"));
    ready_ = true;
    return Status::Ok();
  }

  StatusOr<int32_t> Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    const unsigned n = count_();
    return CheckedCount(n, "mxSmlGetDeviceCount");
  }

  // Whether the library lists a virtual function: only then is a physical
  // function left out (a host with SR-IOV on and no VF listed, its VFs not
  // created or bound to another driver, would offer nothing at all; and
  // some MX-SML versions list PFs apart, mxSmlGetPfDeviceCount). REQUIRES:
  // mu_ held.
  bool AnyVirtualFunction() {
    const unsigned n = count_();
    for (unsigned j = 0; j < n && j < 1024; ++j) {
      Padded<DeviceInfo> other;
      if (info_(j, &other.value) == 0 && other.value.mode == kModeVf) {
        return true;
      }
    }
    return false;
  }

  StatusOr<LibraryDevice> Device(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    const auto i = static_cast<unsigned>(index);
    Padded<DeviceInfo> info;
    ACCELPOOL_RETURN_IF_ERROR(Check(info_(i, &info.value), "mxSmlGetDeviceInfo"));
    LibraryDevice d;
    if (info.value.mode == kModePf && AnyVirtualFunction()) {
      d.not_offered = "it is the physical function " +
                      FixedString(info.value.bdf, sizeof(info.value.bdf)) +
                      " of a GPU with SR-IOV on (management only; its virtual functions are "
                      "offered)";
      return d;
    }
    d.uuid = FixedString(info.value.uuid, sizeof(info.value.uuid));
    d.name = FixedString(info.value.name, sizeof(info.value.name));
    d.pci_bus = NormalizePciBus(FixedString(info.value.bdf, sizeof(info.value.bdf)));
    if (d.pci_bus.empty()) {
      return Broken("mxSmlGetDeviceInfo returned an unreadable BDF \"" +
                           FixedString(info.value.bdf, sizeof(info.value.bdf)) + "\"");
    }
    Padded<MemoryInfo> mem;
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(i, &mem.value), "mxSmlGetMemoryInfo"));
    if (mem.value.vram_total < 0) {
      return Broken("mxSmlGetMemoryInfo reported negative VRAM");
    }
    d.memory_mib = mem.value.vram_total / 1024;
    uint32_t nodes[4] = {};
    if (affinity_ != nullptr && affinity_(i, 4, nodes) == 0) {
      d.numa = FirstSetBit(nodes, 4);
    }
    if (d.numa < 0) {
      d.numa = PciNumaNode(d.pci_bus, sysfs_root_);
    }
    // /dev/dri/card<index> would be another device's node wherever a BMC's
    // VGA (or another GPU) registered with DRM first.
    d.nodes = PciDrmNodes(d.pci_bus, sysfs_root_);
    return d;
  }

  StatusOr<LinkKind> Link(int32_t a, int32_t b) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (topology_ == nullptr) {
      return UnimplementedError("mxSmlGetDeviceTopology is not exported; NUMA is used");
    }
    int level = -1;
    ACCELPOOL_RETURN_IF_ERROR(
        Check(topology_(static_cast<unsigned>(a), static_cast<unsigned>(b), &level),
              "mxSmlGetDeviceTopology"));
    switch (level) {
      case 0:
        return LinkKindForLevel(PcieLevel::kInternal);
      case 1:
        return LinkKindForLevel(PcieLevel::kSingle);
      case 2:
        return LinkKindForLevel(PcieLevel::kMultiple);
      case 3:
        return LinkKindForLevel(PcieLevel::kHostBridge);
      case 4:
        return LinkKindForLevel(PcieLevel::kNode);
      case 5:
        return LinkKind::kVendorLink;  // MetaXLink
      case 6:
        return LinkKindForLevel(PcieLevel::kSystem);
      case 7:  // MXSML_TOPOLOGY_ETH: through the network, the slowest path
        return LinkKindForLevel(PcieLevel::kSystem);
      default:
        // MXSML_TOPOLOGY_UNDEFINED (8) or a level of a newer library: a pair
        // scored 0 beside measured ones would rank below cross-socket, so the
        // matrix is taken as not read (the profile's scores stay).
        return UnavailableError("mxSmlGetDeviceTopology reported level " + std::to_string(level) +
                                " (undefined) for GPUs " + std::to_string(a) + " and " +
                                std::to_string(b) + "; check the topology with mx-smi");
    }
  }

  // A device answers when its memory in use can be read.
  StatusOr<bool> Healthy(int32_t index) override { return HealthyIfMemoryReads(index); }

  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    Padded<MemoryInfo> mem;
    ACCELPOOL_RETURN_IF_ERROR(
        Check(memory_(static_cast<unsigned>(index), &mem.value), "mxSmlGetMemoryInfo"));
    if (mem.value.vram_use < 0) {
      return Broken("mxSmlGetMemoryInfo reported negative VRAM in use");
    }
    return static_cast<int64_t>(mem.value.vram_use / 1024);
  }

 private:
  Ret (*init_)() = nullptr;
  unsigned (*count_)() = nullptr;
  Ret (*info_)(unsigned, DeviceInfo*) = nullptr;
  Ret (*memory_)(unsigned, MemoryInfo*) = nullptr;
  Ret (*topology_)(unsigned, unsigned, int*) = nullptr;
  Ret (*affinity_)(unsigned, unsigned, unsigned*) = nullptr;
};

}  // namespace

StatusOr<DeviceLibraryPtr> NewMxsmlLibrary(const std::vector<std::string>& candidates,
                                           const std::string& sysfs_root) {
  return OpenBinding<Mxsml>(core::Vendor::kMetax, candidates, sysfs_root);
}

}  // namespace accelpool::vendors::metax
