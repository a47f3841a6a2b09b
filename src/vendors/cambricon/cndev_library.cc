// CNDev entry points used, declared here from Cambricon's published cndev.h
// (cndevRet_t, 0 = success). Every struct starts with `int version`, which
// the caller sets (CNDEV_VERSION_5 here); only the leading fields, the same
// in every published version, are read:
//   cndevInit(int reserved)
//   cndevGetDeviceCount(cndevCardInfo_t*)              {version; unsigned number}
//   cndevGetMemoryUsage(cndevMemoryInfo_t*, int dev)   {version; int64 physicalMemoryTotal MB;
//                                                       int64 physicalMemoryUsed MB; ...}
//   cndevGetPCIeInfo(cndevPCIeInfo_t*, int dev)        {version; subsystemId; deviceId;
//                                                       u16 vendor; u16 subsystemVendor;
//                                                       domain; bus; device; function; ...}
//   cndevGetCardHealthState(cndevCardHealthState_t*, int dev)  {version; int health} 0 = fault
// Optional: cndevGetDeviceHandleByIndex(int, int* handle), cndevGetUUID(cndevUUID_t*, dev)
//   {version; uint8 uuid[37]} (without a UUID a chip is named by its PCI bus,
//   MLU-<bus>: never by the card serial, which the two chips of an MLU370-X8
//   board share),
//   cndevGetCardNameStringByDevId(dev) -> const char*,
//   cndevGetNUMANodeIdByDevId(cndevNUMANodeId_t*, dev) {version; int32 nodeId},
//   cndevGetProcessInfo(unsigned* count, cndevProcessInfo_t* rows, dev): rows of
//   {int32 version; uint32 pid; uint64 physicalMemoryUsed KiB; uint64 virtual KiB}
//   (24 bytes in every published cndev.h; each row's version is set); `count`
//   is the room in, the processes out, CNDEV_ERROR_INSUFFICIENT_SPACE (9) when
//   the room is short.
#include "vendors/cambricon/cndev_library.h"

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::cambricon {
namespace {

using Ret = int;
constexpr int kVersion = 5;

struct CardInfo {
  int version;
  unsigned number;
};
struct MemoryInfo {
  int version;
  int64_t physical_total_mb;
  int64_t physical_used_mb;
};
struct PcieInfo {
  int version;
  unsigned subsystem_id, device_id;
  uint16_t vendor, subsystem_vendor;
  unsigned domain, bus, device, function;
};
struct HealthState {
  int version;
  int health;
};
struct Uuid {
  int version;
  unsigned char uuid[37];
};
struct NumaNode {
  int version;
  int32_t node;
};
struct ProcessRow {
  int32_t version;
  uint32_t pid;
  uint64_t physical_kib;
  uint64_t virtual_kib;
};
static_assert(sizeof(ProcessRow) == 24, "cndevProcessInfo_t is 24 bytes");
constexpr int kInsufficientSpace = 9;  // CNDEV_ERROR_INSUFFICIENT_SPACE
constexpr int kCndevNotSupported = 10;  // CNDEV_ERROR_NOT_SUPPORTED
constexpr unsigned kMaxProcesses = 4096;

constexpr const char* kLib = "CNDev";
constexpr const char* kHint = "check the MLU driver with cnmon";

template <typename T>
Padded<T> Versioned() {
  Padded<T> p;
  p.value.version = kVersion;
  return p;
}

class Cndev : public BoundLibrary {
 public:
  Cndev(std::unique_ptr<DlLibrary> lib, std::string sysfs_root)
      : BoundLibrary(std::move(lib), std::move(sysfs_root), kLib, kHint) {}

  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&init_, "cndevInit"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&count_, "cndevGetDeviceCount"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&memory_, "cndevGetMemoryUsage"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&pcie_, "cndevGetPCIeInfo"));
    ACCELPOOL_RETURN_IF_ERROR(Resolve(&health_, "cndevGetCardHealthState"));
    handle_ = lib_->OptionalSymbol<Ret(int, int*)>("cndevGetDeviceHandleByIndex");
    uuid_ = lib_->OptionalSymbol<Ret(Uuid*, int)>("cndevGetUUID");
    name_ = lib_->OptionalSymbol<const char*(int)>("cndevGetCardNameStringByDevId");
    numa_ = lib_->OptionalSymbol<Ret(NumaNode*, int)>("cndevGetNUMANodeIdByDevId");
    process_ = lib_->OptionalSymbol<Ret(unsigned*, ProcessRow*, int)>("cndevGetProcessInfo");
    ACCELPOOL_RETURN_IF_ERROR(Check(init_(0), "cndevInit"));
    ready_ = true;
    return Status::Ok();
  }

  StatusOr<int32_t> Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    Padded<CardInfo> info = Versioned<CardInfo>();
    ACCELPOOL_RETURN_IF_ERROR(Check(count_(&info.value), "cndevGetDeviceCount"));
    return CheckedCount(info.value.number, "cndevGetDeviceCount");
  }

  StatusOr<LibraryDevice> Device(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<int> dev = HandleOf(index);
    if (!dev.ok()) {
      return dev.status();
    }
    LibraryDevice d;
    Padded<Uuid> uuid = Versioned<Uuid>();
    // A chip whose UUID query fails has not told us its id: "MLU-<bus>" in
    // its place would rename a served chip. A library without the query, one
    // that answers "not supported" (a lasting answer) and an empty UUID name
    // the chip by its bus ("" here: LibraryDriver names it MLU-<pci bus>).
    const int uuid_rc = uuid_ != nullptr ? uuid_(&uuid.value, *dev) : kCndevNotSupported;
    if (uuid_rc != kCndevNotSupported) {
      ACCELPOOL_RETURN_IF_ERROR(Check(uuid_rc, "cndevGetUUID"));
      if (uuid.value.uuid[0] != 0) {
        d.uuid = "MLU-" + FixedString(reinterpret_cast<const char*>(uuid.value.uuid),
                                      sizeof(uuid.value.uuid));
      }
    }
    if (name_ != nullptr) {
      const char* name = name_(*dev);
      if (name != nullptr) {
        d.name = FixedString(name, 128);
      }
    }
    Padded<MemoryInfo> mem = Versioned<MemoryInfo>();
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(&mem.value, *dev), "cndevGetMemoryUsage"));
    if (mem.value.physical_total_mb < 0) {
      return Broken("cndevGetMemoryUsage reported negative memory");
    }
    d.memory_mib = mem.value.physical_total_mb;  // cnmon prints the same figure as MiB
    Padded<PcieInfo> pci = Versioned<PcieInfo>();
    ACCELPOOL_RETURN_IF_ERROR(Check(pcie_(&pci.value, *dev), "cndevGetPCIeInfo"));
    char bus[32];
    std::snprintf(bus, sizeof(bus), "%x:%x:%x.%x", pci.value.domain, pci.value.bus,
                  pci.value.device, pci.value.function);
    d.pci_bus = NormalizePciBus(bus);
    if (d.pci_bus.empty()) {
      return Broken(std::string("cndevGetPCIeInfo returned an invalid bus ") + bus);
    }
    d.minor = index;  // /dev/cambricon_dev<index>, as Cambricon's plugin names it
    Padded<NumaNode> numa = Versioned<NumaNode>();
    if (numa_ != nullptr && numa_(&numa.value, *dev) == 0 && numa.value.node >= 0) {
      d.numa = numa.value.node;
    } else {
      d.numa = PciNumaNode(d.pci_bus, sysfs_root_);
    }
    return d;
  }

  StatusOr<LinkKind> Link(int32_t, int32_t) override {
    return UnimplementedError("MLULink rings come from cntopo; the profile's board pairs apply");
  }

  StatusOr<bool> Healthy(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<int> dev = HandleOf(index);
    if (!dev.ok()) {
      return dev.status();
    }
    Padded<HealthState> h = Versioned<HealthState>();
    ACCELPOOL_RETURN_IF_ERROR(Check(health_(&h.value, *dev), "cndevGetCardHealthState"));
    return h.value.health != 0;
  }

  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<int> dev = HandleOf(index);
    if (!dev.ok()) {
      return dev.status();
    }
    Padded<MemoryInfo> mem = Versioned<MemoryInfo>();
    ACCELPOOL_RETURN_IF_ERROR(Check(memory_(&mem.value, *dev), "cndevGetMemoryUsage"));
    if (mem.value.physical_used_mb < 0) {
      return Broken("cndevGetMemoryUsage reported negative memory in use");
    }
    return mem.value.physical_used_mb;
  }

  // cndevGetProcessInfo's rows: physical memory, KiB, as MiB.
  StatusOr<std::vector<ProcessMemory>> Processes(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<int> dev = HandleOf(index);
    if (!dev.ok()) return dev.status();
    if (process_ == nullptr) {
      return UnimplementedError(
          "cndevGetProcessInfo is not exported, so the processes on each "
          "MLU cannot be listed; update the MLU driver");
    }
    unsigned room = 16;
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::vector<ProcessRow> rows(room);
      for (ProcessRow& r : rows) r.version = kVersion;
      unsigned n = room;
      const int r = process_(&n, rows.data(), *dev);
      if (r == kInsufficientSpace && n > room && n <= kMaxProcesses) {
        room = n + 4;  // processes may start between the two calls
        continue;
      }
      ACCELPOOL_RETURN_IF_ERROR(Check(r, "cndevGetProcessInfo"));
      if (n > room) {
        return Broken("cndevGetProcessInfo reported " + std::to_string(n) +
                      " processes in room for " + std::to_string(room));
      }
      std::vector<ProcessMemory> out;
      for (unsigned i = 0; i < n; ++i) {
        if (rows[i].pid == 0) continue;
        out.push_back(
            {static_cast<int64_t>(rows[i].pid), static_cast<int64_t>(rows[i].physical_kib / 1024)});
      }
      return out;
    }
    return Broken(
        "cndevGetProcessInfo kept asking for more room (processes starting faster "
        "than they are read)");
  }

 private:
  // Newer CNDev addresses a card by a handle; older ones by its index.
  StatusOr<int> HandleOf(int32_t index) {
    ACCELPOOL_RETURN_IF_ERROR(Ready());
    if (handle_ == nullptr) {
      return index;
    }
    int h = -1;
    ACCELPOOL_RETURN_IF_ERROR(Check(handle_(index, &h), "cndevGetDeviceHandleByIndex"));
    return h;
  }

  Ret (*init_)(int) = nullptr;
  Ret (*count_)(CardInfo*) = nullptr;
  Ret (*memory_)(MemoryInfo*, int) = nullptr;
  Ret (*pcie_)(PcieInfo*, int) = nullptr;
  Ret (*health_)(HealthState*, int) = nullptr;
  Ret (*handle_)(int, int*) = nullptr;
  Ret (*uuid_)(Uuid*, int) = nullptr;
  const char* (*name_)(int) = nullptr;
  Ret (*numa_)(NumaNode*, int) = nullptr;
  Ret (*process_)(unsigned*, ProcessRow*, int) = nullptr;
};

}  // namespace

StatusOr<DeviceLibraryPtr> NewCndevLibrary(const std::vector<std::string>& candidates,
                                           const std::string& sysfs_root) {
  return OpenBinding<Cndev>(core::Vendor::kCambricon, candidates, sysfs_root);
}

}  // namespace accelpool::vendors::cambricon
