// The Hygon DCU DeviceLibrary over ROCm SMI (librocm_smi64.so, shipped with
// Hygon's DTK under /opt/hyhal), loaded with dlopen. Per DCU: name, unique
// id, VRAM, PCI id, NUMA node (ROCm SMI, else sysfs), DRM render minor, and
// XGMI/PCIe links; health is "answers a busy-percent query".
//
// Thread-safety: see DeviceLibrary; calls into the library are serialized.
#ifndef ACCELPOOL_VENDORS_HYGON_ROCM_SMI_LIBRARY_H_
#define ACCELPOOL_VENDORS_HYGON_ROCM_SMI_LIBRARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors::hygon {

// Loads the first of `candidates` that opens (empty: the Hygon traits'
// library names). kUnavailable when none does.
StatusOr<DeviceLibraryPtr> NewRocmSmiLibrary(const std::vector<std::string>& candidates = {},
                                             const std::string& sysfs_root = "/sys");

// "0000:3b:00.0" from ROCm SMI's packed BDF id (domain << 32 | bus << 8 |
// device << 3 | function).
std::string BdfFromId(uint64_t bdfid);

}  // namespace accelpool::vendors::hygon

#endif  // ACCELPOOL_VENDORS_HYGON_ROCM_SMI_LIBRARY_H_
