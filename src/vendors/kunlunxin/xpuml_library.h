// The Kunlunxin XPU DeviceLibrary over XPU ML (libxpuml.so, the management
// library behind xpu-smi; its C API has NVML's shape under the "xpuml"
// prefix), loaded with dlopen. Per XPU: name, memory, PCI bus id, device
// node number, and the device state as health. XPU ML has no pairwise
// topology call, so the profile's wings apply; NUMA comes from sysfs.
// docs/vendors.md lists the entry points and what is assumed about them.
//
// Thread-safety: see DeviceLibrary; calls into the library are serialized.
#ifndef ACCELPOOL_VENDORS_KUNLUNXIN_XPUML_LIBRARY_H_
#define ACCELPOOL_VENDORS_KUNLUNXIN_XPUML_LIBRARY_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors::kunlunxin {

// Loads the first of `candidates` that opens (empty: the Kunlunxin traits'
// library names). kUnavailable when none does.
StatusOr<DeviceLibraryPtr> NewXpumlLibrary(const std::vector<std::string>& candidates = {},
                                           const std::string& sysfs_root = "/sys");

}  // namespace accelpool::vendors::kunlunxin

#endif  // ACCELPOOL_VENDORS_KUNLUNXIN_XPUML_LIBRARY_H_
