// Small helpers the dlopen'ed DeviceLibrary bindings share (Kunlunxin XPU ML,
// MetaX MX-SML, Moore Threads MTML, Cambricon CNDev): PCI bus spelling, the
// NUMA node of a PCI device from sysfs, fixed-size C strings, the error text
// of a failed vendor call, and zero-padded out-structs so that a newer
// library writing a longer struct than the one declared here cannot overrun
// the caller's memory.
//
// Thread-safety: pure functions; PciNumaNode reads sysfs.
#ifndef ACCELPOOL_VENDORS_LIBRARY_UTIL_H_
#define ACCELPOOL_VENDORS_LIBRARY_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors {

// "0000:3b:00.0" from any "domain:bus:device.function" spelling
// ("00000000:3B:00.0", "3b:00.0"); "" when it does not parse.
std::string NormalizePciBus(std::string_view bus);

// The NUMA node of a PCI device from <sysfs_root>/bus/pci/devices/<bus>/numa_node;
// -1 when the file is absent, unreadable or says -1.
int32_t PciNumaNode(const std::string& pci_bus, const std::string& sysfs_root = "/sys");

// The text of a fixed-size C char buffer, up to its first NUL or its end.
std::string FixedString(const char* buf, size_t size);

// kUnavailable: "<call> failed with <library> status <code>; <hint>".
Status VendorCallError(std::string_view call, std::string_view library, int64_t code,
                       std::string_view hint);

// The lowest set bit of a node bitmask of `words` 32-bit words; -1 when empty.
int32_t FirstSetBit(const uint32_t* words, size_t count);

// The NVML-style topology level shared by XPU ML, MTML and MX-SML (INTERNAL,
// SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM) as a LinkKind.
enum class PcieLevel : uint8_t { kInternal, kSingle, kMultiple, kHostBridge, kNode, kSystem };
LinkKind LinkKindForLevel(PcieLevel level);

// An out-struct with room to spare: vendors grow their structs between
// driver releases, so every struct handed to a vendor call is zeroed and
// followed by padding; only the leading fields declared in T are read.
template <typename T>
struct Padded {
  T value{};
  unsigned char spare[1024] = {};
};

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_LIBRARY_UTIL_H_
