// XPU ML entry points used, declared here from Kunlunxin's public xpuml.h
// (all return xpumlReturn_t, 0 = success, 999 = unknown error):
//   xpumlInit(void)
//   xpumlDeviceGetCount(unsigned* count)
//   xpumlDeviceGetHandleByIndex(unsigned index, xpumlDevice_t* device)
//   xpumlDeviceGetName(xpumlDevice_t, char* name, unsigned length)
//   xpumlDeviceGetMemoryInfo(xpumlDevice_t, xpumlMemory_t*)   totalGlobalMemory in bytes
//                                                             (usedGlobalMemory: in use)
//   xpumlDeviceGetPciInfo(xpumlDevice_t, xpumlPciInfo_t*)     busId "%08X:%02X:%02X.%X"
//   xpumlDeviceGetState(xpumlDevice_t, int* state)            0 unused, 201 running,
//                                                             205 in reset, 207 error,
//                                                             208 in exception
// Optional: xpumlDeviceGetUUID (commented out in the published header, used
// when a driver exports it), xpumlDeviceGetId (N of /dev/xpuN),
// xpumlDeviceGetMinorNumber.
#include "vendors/kunlunxin/xpuml_library.h"

#include <mutex>

#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::kunlunxin {
namespace {

using Ret = int;
using Handle = void*;

// xpumlPciInfo_t: the leading fields, as published.
struct PciInfo {
  unsigned domain, bus, device, function, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

// xpumlMemory_t: the leading fields, as published.
struct MemoryInfo {
  unsigned long long page_size_global, total_global, free_global, used_global;
};

constexpr const char* kLib = "XPU ML";
constexpr const char* kHint = "check the XPU driver with xpu-smi";

bool Faulted(int state) { return state == 205 || state == 207 || state == 208; }

class Xpuml : public BoundLibrary {
 public:
  Xpuml(std::unique_ptr<DlLibrary> lib, std::string sysfs_root)
      : BoundLibrary(std::move(lib), std::move(sysfs_root), kLib, kHint) {}

  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&init_, "xpumlInit"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&count_, "xpumlDeviceGetCount"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&handle_, "xpumlDeviceGetHandleByIndex"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&name_, "xpumlDeviceGetName"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&memory_, "xpumlDeviceGetMemoryInfo"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&pci_, "xpumlDeviceGetPciInfo"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&state_, "xpumlDeviceGetState"));
    uuid_ = lib_->OptionalSymbol<Ret(Handle, char*, unsigned)>("xpumlDeviceGetUUID");
    id_ = lib_->OptionalSymbol<Ret(Handle, int*)>("xpumlDeviceGetId");
    minor_ = lib_->OptionalSymbol<Ret(Handle, unsigned*)>("xpumlDeviceGetMinorNumber");
    ACCELPOOL_RETURN_IF_ERROR(Check(init_(), "xpumlInit"));
    ready_ = true;
    return Status::Ok();
  }

  StatusOr<int32_t> Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    unsigned n = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(count_(&n), "xpumlDeviceGetCount"));
    return CheckedCount(n, "xpumlDeviceGetCount");
  }

  StatusOr<LibraryDevice> Device(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<Handle> h = HandleOf(index);
    if (!h.ok()) {
      return h.status();
    }
    LibraryDevice d;
    char name[96] = {};
    ACCELPOOL_RETURN_IF_ERROR(Check(name_(*h, name, sizeof(name)), "xpumlDeviceGetName"));
    d.name = FixedString(name, sizeof(name));
    Padded<MemoryInfo> mem;
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(*h, &mem.value), "xpumlDeviceGetMemoryInfo"));
    d.memory_mib = static_cast<int64_t>(mem.value.total_global >> 20);
    Padded<PciInfo> pci;
    ACCELPOOL_RETURN_IF_ERROR(Check(pci_(*h, &pci.value), "xpumlDeviceGetPciInfo"));
    d.pci_bus = NormalizePciBus(FixedString(pci.value.bus_id, sizeof(pci.value.bus_id)));
    if (d.pci_bus.empty()) {
      return Broken("xpumlDeviceGetPciInfo returned an unreadable bus id \"" +
                           FixedString(pci.value.bus_id, sizeof(pci.value.bus_id)) + "\"");
    }
    char uuid[96] = {};
    if (uuid_ != nullptr && uuid_(*h, uuid, sizeof(uuid)) == 0) {
      d.uuid = FixedString(uuid, sizeof(uuid));
    }
    int id = -1;
    unsigned minor = 0;
    if (id_ != nullptr && id_(*h, &id) == 0 && id >= 0) {
      d.minor = id;
    } else if (minor_ != nullptr && minor_(*h, &minor) == 0) {
      d.minor = static_cast<int32_t>(minor);
    }
    d.numa = PciNumaNode(d.pci_bus, sysfs_root_);
    return d;
  }

  StatusOr<LinkKind> Link(int32_t, int32_t) override {
    return UnimplementedError("XPU ML reports no pairwise topology; the profile's wings apply");
  }

  StatusOr<bool> Healthy(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<Handle> h = HandleOf(index);
    if (!h.ok()) {
      return h.status();
    }
    int state = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(state_(*h, &state), "xpumlDeviceGetState"));
    return !Faulted(state);
  }

  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<Handle> h = HandleOf(index);
    if (!h.ok()) {
      return h.status();
    }
    Padded<MemoryInfo> mem;
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(*h, &mem.value), "xpumlDeviceGetMemoryInfo"));
    return static_cast<int64_t>(mem.value.used_global >> 20);
  }

 private:
  StatusOr<Handle> HandleOf(int32_t index) {
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    Handle h = nullptr;
    ACCELPOOL_RETURN_IF_ERROR(
        Check(handle_(static_cast<unsigned>(index), &h), "xpumlDeviceGetHandleByIndex"));
    if (h == nullptr) {
      return Broken("xpumlDeviceGetHandleByIndex returned no handle");
    }
    return h;
  }

  Ret (*init_)() = nullptr;
  Ret (*count_)(unsigned*) = nullptr;
  Ret (*handle_)(unsigned, Handle*) = nullptr;
  Ret (*name_)(Handle, char*, unsigned) = nullptr;
  Ret (*memory_)(Handle, MemoryInfo*) = nullptr;
  Ret (*pci_)(Handle, PciInfo*) = nullptr;
  Ret (*state_)(Handle, int*) = nullptr;
  Ret (*uuid_)(Handle, char*, unsigned) = nullptr;
  Ret (*id_)(Handle, int*) = nullptr;
  Ret (*minor_)(Handle, unsigned*) = nullptr;
};

}  // namespace

StatusOr<DeviceLibraryPtr> NewXpumlLibrary(const std::vector<std::string>& candidates,
                                           const std::string& sysfs_root) {
  return OpenBinding<Xpuml>(core::Vendor::kKunlunxin, candidates, sysfs_root);
}

}  // namespace accelpool::vendors::kunlunxin
