// MTML entry points used, declared here from Moore Threads' published MTML
// API reference (mtml_2.2.0.h; MtmlReturn, 0 = success, 999 = unknown):
//   mtmlLibraryInit(MtmlLibrary**)
//   mtmlLibraryCountDevice(const MtmlLibrary*, unsigned* count)
//   mtmlLibraryInitDeviceByIndex(const MtmlLibrary*, unsigned, MtmlDevice**)
//   mtmlDeviceGetUUID(const MtmlDevice*, char*, unsigned)   buffer 48
//   mtmlDeviceGetName(const MtmlDevice*, char*, unsigned)   buffer 32
//   mtmlDeviceGetPciInfo(const MtmlDevice*, MtmlPciInfo*)   sbdf[32] first
//   mtmlDeviceInitMemory(const MtmlDevice*, MtmlMemory**)
//   mtmlMemoryGetTotal(const MtmlMemory*, unsigned long long* bytes)
//   mtmlMemoryGetUsed(const MtmlMemory*, unsigned long long* bytes)
// The device and memory objects the two Init calls allocate (re-initialising
// one leaks, per the MTML reference) are made once per device index and kept
// until mtmlLibraryShutDown.
// Optional: mtmlLibraryShutDown(MtmlLibrary*) on destruction, mtmlDeviceCountGpuCores(const
// MtmlDevice*, unsigned*),
//   mtmlDeviceGetTopologyLevel(const MtmlDevice*, const MtmlDevice*, int* level):
//   0 internal, 1 single switch, 2 multiple switches, 3 host bridge, 4 NUMA node,
//   5 system;
//   mtmlDeviceGetMtLinkSpec(const MtmlDevice*, MtmlMtLinkSpec*) {version; bandWidth; linkNum},
//   mtmlDeviceGetMtLinkState(const MtmlDevice*, unsigned link, unsigned* state) 1 up,
//   2 downgraded, mtmlDeviceGetMtLinkRemoteDevice(const MtmlDevice*, unsigned link,
//   MtmlDevice** remote): an up (or downgraded) MtLink to the other GPU is a vendor link.
//   mtmlDeviceGetProperty(const MtmlDevice*, MtmlDeviceProperty*): two 32-bit
//   words of bit-fields, the first virtCap:1, virtRole:3, mpcCap:1, mpcType:3,
//   mtLinkCap:1 from its lowest bit (GCC's order on the little-endian hosts
//   MTML ships for); mpcType 0 no MPC, 1 the MPC parent, 2 an MPC instance.
//   With MPC on MTML counts each instance and the parent, which is only a
//   control point (its memory is the whole GPU's), so a parent is not
//   offered. MTML_ERROR_NOT_SUPPORTED (4), or no such entry point: no MPC.
//   mtmlDeviceGetGpuPath(const MtmlDevice*, char* path, unsigned length)
//   (MTML_DEVICE_PATH_BUFFER_SIZE 64): the GPU's /dev/mtgpu node, whose number
//   need not be the MTML index. Where it answers a path of that form, the path
//   is mounted; else (not exported, an error such as "not supported" for a
//   virtual device, another form) /dev/mtgpu.<MTML index>, as before. The
//   host number (MTHREADS_VISIBLE_DEVICES) is the MTML index either way.
#include "vendors/mthreads/mtml_library.h"

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::mthreads {
namespace {

using Ret = int;
using Lib = void*;
using Dev = void*;
using Mem = void*;

struct PciInfo {
  char sbdf[32];
};

struct MtLinkSpec {
  unsigned version, bandwidth, links;
};

// MtmlDeviceProperty's first word: mpcType in bits 5-7; MTML_MPC_TYPE_PARENT.
constexpr unsigned kMpcTypeShift = 5;
constexpr unsigned kMpcTypeMask = 0x7;
constexpr unsigned kMpcTypeParent = 1;

constexpr const char* kLib = "MTML";
constexpr const char* kHint = "check the GPU driver with mthreads-gmi";

class Mtml : public BoundLibrary {
 public:
  Mtml(std::unique_ptr<DlLibrary> lib, std::string sysfs_root)
      : BoundLibrary(std::move(lib), std::move(sysfs_root), kLib, kHint) {}

  ~Mtml() override {
    auto shutdown = lib_->OptionalSymbol<Ret(Lib)>("mtmlLibraryShutDown");
    if (lib_handle_ != nullptr && shutdown != nullptr) {
      shutdown(lib_handle_);
    }
  }

  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_) {
      return Status::Ok();
    }
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&init_, "mtmlLibraryInit"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&count_, "mtmlLibraryCountDevice"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&device_, "mtmlLibraryInitDeviceByIndex"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&uuid_, "mtmlDeviceGetUUID"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&name_, "mtmlDeviceGetName"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&pci_, "mtmlDeviceGetPciInfo"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&memory_, "mtmlDeviceInitMemory"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&total_, "mtmlMemoryGetTotal"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&used_, "mtmlMemoryGetUsed"));
    cores_ = lib_->OptionalSymbol<Ret(Dev, unsigned*)>("mtmlDeviceCountGpuCores");
    topology_ = lib_->OptionalSymbol<Ret(Dev, Dev, int*)>("mtmlDeviceGetTopologyLevel");
    link_spec_ = lib_->OptionalSymbol<Ret(Dev, MtLinkSpec*)>("mtmlDeviceGetMtLinkSpec");
    link_state_ = lib_->OptionalSymbol<Ret(Dev, unsigned, unsigned*)>("mtmlDeviceGetMtLinkState");
    link_remote_ =
        lib_->OptionalSymbol<Ret(Dev, unsigned, Dev*)>("mtmlDeviceGetMtLinkRemoteDevice");
    property_ = lib_->OptionalSymbol<Ret(Dev, uint32_t*)>("mtmlDeviceGetProperty");
    gpu_path_ = lib_->OptionalSymbol<Ret(Dev, char*, unsigned)>("mtmlDeviceGetGpuPath");
    Lib handle = nullptr;
    ACCELPOOL_RETURN_IF_ERROR(Check(init_(&handle), "mtmlLibraryInit"));
    if (handle == nullptr) {
      return Broken("mtmlLibraryInit returned no library handle");
    }
    lib_handle_ = handle;
    ready_ = true;
    return Status::Ok();
  }

  StatusOr<int32_t> Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    unsigned n = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(count_(lib_handle_, &n), "mtmlLibraryCountDevice"));
    return CheckedCount(n, "mtmlLibraryCountDevice");
  }

  StatusOr<LibraryDevice> Device(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<Dev> dev = DeviceAt(index);
    if (!dev.ok()) {
      return dev.status();
    }
    LibraryDevice d;
    if (property_ != nullptr) {
      // Two words; more room for a newer library's longer struct.
      Padded<std::array<uint32_t, 2>> prop;
      // Any error (not supported; a library and driver of different
      // versions) reads as "no MPC", as before the query was used: an
      // optional probe must not take a working GPU out of service.
      const Ret r = property_(*dev, prop.value.data());
      if (r == 0 && ((prop.value[0] >> kMpcTypeShift) & kMpcTypeMask) == kMpcTypeParent) {
        d.not_offered =
            "it is the MPC parent of a GPU with MPC on (a control point; its MPC instances are "
            "offered)";
        return d;
      }
    }
    StatusOr<std::string> uuid = UuidOf(*dev);
    if (!uuid.ok()) {
      return uuid.status();
    }
    d.uuid = *uuid;
    char name[32] = {};
    ACCELPOOL_RETURN_IF_ERROR(Check(name_(*dev, name, sizeof(name)), "mtmlDeviceGetName"));
    d.name = FixedString(name, sizeof(name));
    Padded<PciInfo> pci;
    ACCELPOOL_RETURN_IF_ERROR(Check(pci_(*dev, &pci.value), "mtmlDeviceGetPciInfo"));
    d.pci_bus = NormalizePciBus(FixedString(pci.value.sbdf, sizeof(pci.value.sbdf)));
    if (d.pci_bus.empty()) {
      return Broken("mtmlDeviceGetPciInfo returned an unreadable SBDF \"" +
                           FixedString(pci.value.sbdf, sizeof(pci.value.sbdf)) + "\"");
    }
    StatusOr<Mem> mem = MemoryOf(index, *dev);
    if (!mem.ok()) {
      return mem.status();
    }
    unsigned long long bytes = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(total_(*mem, &bytes), "mtmlMemoryGetTotal"));
    d.memory_mib = static_cast<int64_t>(bytes >> 20);
    unsigned cores = 0;
    if (cores_ != nullptr && cores_(*dev, &cores) == 0) {
      d.compute_units = static_cast<int32_t>(cores);
    }
    d.numa = PciNumaNode(d.pci_bus, sysfs_root_);
    // MUSA needs the GPU's DRM nodes beside its /dev/mtgpu node; their numbers
    // are the kernel's (a BMC's VGA is often card0), so sysfs names them.
    const std::string path = GpuPath(*dev);
    std::vector<std::string> drm = PciDrmNodes(d.pci_bus, sysfs_root_);
    if (!path.empty()) {
      // The node is mounted; the host number (MTHREADS_VISIBLE_DEVICES) stays
      // the MTML index, as mt-container-toolkit's meaning of it is not
      // confirmed (docs/vendors.md).
      d.nodes.push_back(path);
    } else if (!drm.empty()) {
      d.nodes.push_back("/dev/mtgpu." + std::to_string(index));
    }
    d.nodes.insert(d.nodes.end(), drm.begin(), drm.end());
    return d;
  }

  StatusOr<LinkKind> Link(int32_t a, int32_t b) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<Dev> da = DeviceAt(a);
    if (!da.ok()) {
      return da.status();
    }
    StatusOr<Dev> db = DeviceAt(b);
    if (!db.ok()) {
      return db.status();
    }
    StatusOr<bool> mtlink = MtLinked(*da, *db);
    if (!mtlink.ok()) {
      return mtlink.status();
    }
    if (*mtlink) {
      return LinkKind::kVendorLink;
    }
    if (topology_ == nullptr) {
      return UnimplementedError("mtmlDeviceGetTopologyLevel is not exported; NUMA is used");
    }
    int level = -1;
    ACCELPOOL_RETURN_IF_ERROR(Check(topology_(*da, *db, &level), "mtmlDeviceGetTopologyLevel"));
    if (level < 0 || level > 5) {
      return LinkKind::kUnknown;
    }
    return LinkKindForLevel(static_cast<PcieLevel>(level));
  }

  // A device answers when its memory in use can be read.
  StatusOr<bool> Healthy(int32_t index) override { return HealthyIfMemoryReads(index); }

  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<Dev> dev = DeviceAt(index);
    if (!dev.ok()) {
      return dev.status();
    }
    StatusOr<Mem> mem = MemoryOf(index, *dev);
    if (!mem.ok()) {
      return mem.status();
    }
    unsigned long long used = 0;  // NOLINT(runtime/int)
    ACCELPOOL_RETURN_IF_ERROR(Check(used_(*mem, &used), "mtmlMemoryGetUsed"));
    return static_cast<int64_t>(used >> 20);
  }

 private:
  // The device object of `index`, made once: every mtmlLibraryInitDeviceByIndex
  // (and mtmlDeviceInitMemory) makes a new object that lives until the library
  // shuts down, and the health poll asks every few seconds.
  StatusOr<Dev> DeviceAt(int32_t index) {
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    if (index < 0 || index >= kMaxDevices) {
      return Broken("device index " + std::to_string(index) + " is out of range");
    }
    const auto i = static_cast<size_t>(index);
    if (i < devices_.size() && devices_[i] != nullptr) {
      return devices_[i];
    }
    Dev dev = nullptr;
    ACCELPOOL_RETURN_IF_ERROR(Check(device_(lib_handle_, static_cast<unsigned>(index), &dev),
                                    "mtmlLibraryInitDeviceByIndex"));
    if (dev == nullptr) {
      return Broken("mtmlLibraryInitDeviceByIndex returned no device");
    }
    if (devices_.size() <= i) {
      devices_.resize(i + 1, nullptr);
    }
    devices_[i] = dev;
    return dev;
  }

  // True when an up or downgraded MtLink of `a` ends at `b` (compared by
  // UUID, not by handle). False when the MtLink calls are not exported or
  // `a` has no MtLinks.
  StatusOr<bool> MtLinked(Dev a, Dev b) {
    if (link_spec_ == nullptr || link_state_ == nullptr || link_remote_ == nullptr) {
      return false;
    }
    Padded<MtLinkSpec> spec;
    if (link_spec_(a, &spec.value) != 0 || spec.value.links == 0) {
      return false;  // no MtLink on this GPU (MTML answers "not supported")
    }
    StatusOr<std::string> want = UuidOf(b);
    if (!want.ok()) {
      return want.status();
    }
    for (unsigned l = 0; l < spec.value.links && l < 64; ++l) {
      unsigned state = 0;
      ACCELPOOL_RETURN_IF_ERROR(Check(link_state_(a, l, &state), "mtmlDeviceGetMtLinkState"));
      if (state != 1 && state != 2) {
        continue;
      }
      Dev remote = nullptr;
      if (link_remote_(a, l, &remote) != 0 || remote == nullptr) {
        continue;  // an up link to no GPU (a switch port)
      }
      StatusOr<std::string> got = UuidOf(remote);
      if (got.ok() && *got == *want) {
        return true;
      }
    }
    return false;
  }

  // The number N of a path /dev/mtgpu.N (or /dev/mtgpuN); -1 for another form.
  static int32_t MtgpuNumber(const std::string& path) {
    const std::string prefix = "/dev/mtgpu";
    if (path.rfind(prefix, 0) != 0) return -1;
    size_t at = prefix.size();
    if (at < path.size() && path[at] == '.') ++at;
    const std::string digits = path.substr(at);
    if (digits.empty() || digits.size() > 6 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return -1;
    }
    return static_cast<int32_t>(std::stoi(digits));
  }

  // MTML's /dev/mtgpu node of `dev`; "" when it does not say one (see the top).
  std::string GpuPath(Dev dev) {
    if (gpu_path_ == nullptr) return "";
    char path[128] = {};  // MTML_DEVICE_PATH_BUFFER_SIZE is 64
    if (gpu_path_(dev, path, 64) != 0) return "";
    std::string p = FixedString(path, sizeof(path));
    return MtgpuNumber(p) >= 0 ? p : "";
  }

  StatusOr<std::string> UuidOf(Dev dev) {
    char uuid[48] = {};
    ACCELPOOL_RETURN_IF_ERROR(Check(uuid_(dev, uuid, sizeof(uuid)), "mtmlDeviceGetUUID"));
    return FixedString(uuid, sizeof(uuid));
  }

  // The memory object of device `index` (`dev`), made once as DeviceAt's.
  StatusOr<Mem> MemoryOf(int32_t index, Dev dev) {
    const auto i = static_cast<size_t>(index);  // DeviceAt checked it
    if (i < memories_.size() && memories_[i] != nullptr) {
      return memories_[i];
    }
    Mem mem = nullptr;
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(dev, &mem), "mtmlDeviceInitMemory"));
    if (mem == nullptr) {
      return Broken("mtmlDeviceInitMemory returned no handle");
    }
    if (memories_.size() <= i) {
      memories_.resize(i + 1, nullptr);
    }
    memories_[i] = mem;
    return mem;
  }

  static constexpr int32_t kMaxDevices = 1024;  // as CheckedCount
  Lib lib_handle_ = nullptr;
  std::vector<Dev> devices_;   // by index; guarded by mu_
  std::vector<Mem> memories_;  // by index; guarded by mu_
  Ret (*init_)(Lib*) = nullptr;
  Ret (*count_)(Lib, unsigned*) = nullptr;
  Ret (*device_)(Lib, unsigned, Dev*) = nullptr;
  Ret (*uuid_)(Dev, char*, unsigned) = nullptr;
  Ret (*name_)(Dev, char*, unsigned) = nullptr;
  Ret (*pci_)(Dev, PciInfo*) = nullptr;
  Ret (*memory_)(Dev, Mem*) = nullptr;
  Ret (*total_)(Mem, unsigned long long*) = nullptr;
  Ret (*used_)(Mem, unsigned long long*) = nullptr;
  Ret (*cores_)(Dev, unsigned*) = nullptr;
  Ret (*topology_)(Dev, Dev, int*) = nullptr;
  Ret (*link_spec_)(Dev, MtLinkSpec*) = nullptr;
  Ret (*link_state_)(Dev, unsigned, unsigned*) = nullptr;
  Ret (*link_remote_)(Dev, unsigned, Dev*) = nullptr;
  Ret (*property_)(Dev, uint32_t*) = nullptr;
  Ret (*gpu_path_)(Dev, char*, unsigned) = nullptr;
};

}  // namespace

StatusOr<DeviceLibraryPtr> NewMtmlLibrary(const std::vector<std::string>& candidates,
                                          const std::string& sysfs_root) {
  return OpenBinding<Mtml>(core::Vendor::kMthreads, candidates, sysfs_root);
}

}  // namespace accelpool::vendors::mthreads
