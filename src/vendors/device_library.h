// DeviceLibrary: the narrow view of a vendor management library that the
// vendors without a richer backend share (Kunlunxin, MetaX, Moore Threads,
// Cambricon, Hygon, T-Head). Each vendor folder wraps its own SDK (loaded with
// dlopen) behind this interface; tests pass fakes holding the values of the
// vendors' documented output. LibraryDriver (library_driver.h) turns it into
// the vendor-neutral inventory, so no vendor copies the mapping loop.
//
// Thread-safety: implementations may be called from two threads at once (the
// discovery caller and the health poller).
#ifndef ACCELPOOL_VENDORS_DEVICE_LIBRARY_H_
#define ACCELPOOL_VENDORS_DEVICE_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "vendors/driver.h"

namespace accelpool::vendors {

// How two devices are joined, best first.
enum class LinkKind : uint8_t {
  kUnknown,
  kVendorLink,      // MetaXLink, MtLink, MLULink, XPU link, ICN: a direct device link
  kPcieSwitch,      // one or more PCIe switches (PIX/PXB)
  kPcieHostBridge,  // same host bridge (PHB)
  kSameNuma,        // same NUMA node, different host bridges (NODE)
  kCrossNuma,       // across the SMP interconnect (SYS)
};

// The link score LibraryDriver writes for a kind: 100, 50, 30, 20, 10; 0 unknown.
int32_t LinkKindScore(LinkKind kind);

struct LibraryDevice {
  std::string uuid;  // stable id; "" when the library has none (the PCI bus is used)
  std::string name;  // product name as the library reports it
  int64_t memory_mib = 0;
  std::string pci_bus;  // "0000:3b:00.0"
  int32_t numa = -1;
  int32_t minor = -1;  // device node number; -1: the index
  // The device's own nodes when the library (or sysfs) names them, e.g. the
  // DRM card and render nodes of its PCI function; they replace the vendor's
  // "{minor}" patterns. Empty: the patterns.
  std::vector<std::string> nodes;
  int32_t compute_units = 0;
  // Non-empty: the library counts this device but workloads cannot use it (a
  // management-only function, a control point, another vendor's device); it
  // is not offered, and this says why in one log line. No other field need
  // be set.
  std::string not_offered;
};

class DeviceLibrary {
 public:
  virtual ~DeviceLibrary() = default;
  virtual std::string_view LibraryName() const = 0;  // for messages: "ROCm SMI"
  virtual Status Init() = 0;
  virtual StatusOr<int32_t> Count() = 0;
  virtual StatusOr<LibraryDevice> Device(int32_t index) = 0;
  // kUnimplemented when the library cannot say (NUMA is used instead).
  virtual StatusOr<LinkKind> Link(int32_t a, int32_t b) = 0;
  // False when the device reports a fault; an error means "does not answer".
  virtual StatusOr<bool> Healthy(int32_t index) = 0;
  // The device memory in use now, MiB, as the library reports it (whatever
  // the driver itself holds included, when the library does not report it
  // apart). kUnimplemented when the library has no such query.
  virtual StatusOr<int64_t> MemoryUsedMib(int32_t /*index*/) {
    return UnimplementedError(std::string(LibraryName()) + " has no memory usage query");
  }
  // The processes holding memory on the device now (host PIDs, MiB each).
  // kUnimplemented when the library cannot list them.
  virtual StatusOr<std::vector<ProcessMemory>> Processes(int32_t /*index*/) {
    return UnimplementedError(std::string(LibraryName()) + " has no per-process memory query");
  }
};
using DeviceLibraryPtr = std::unique_ptr<DeviceLibrary>;

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_DEVICE_LIBRARY_H_
