// The Hygon DCU DeviceLibrary over ROCm SMI (librocm_smi64.so, shipped with
// Hygon's DTK under /opt/hyhal), loaded with dlopen.
//
// Thread-safety: see DeviceLibrary.
#ifndef ACCELPOOL_VENDORS_HYGON_ROCM_SMI_LIBRARY_H_
#define ACCELPOOL_VENDORS_HYGON_ROCM_SMI_LIBRARY_H_

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors::hygon {

// kUnavailable when the library is absent.
StatusOr<DeviceLibraryPtr> NewRocmSmiLibrary();

// "0000:3b:00.0" from ROCm SMI's packed BDF id (domain << 32 | bus << 8 |
// device << 3 | function).
std::string BdfFromId(uint64_t bdfid);

}  // namespace accelpool::vendors::hygon

#endif  // ACCELPOOL_VENDORS_HYGON_ROCM_SMI_LIBRARY_H_
