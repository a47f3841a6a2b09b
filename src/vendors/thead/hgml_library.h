// The T-Head PPU DeviceLibrary over HGML (libhgml.so), whose API has NVML's
// shape under the "hgml" prefix; it reuses the NVML binding with that prefix
// and adapts it to DeviceLibrary. PPUs are all joined by ICN, so pairwise
// PCIe levels are not reported as links (the profile's ICN/NUMA levels stay).
//
// Thread-safety: see DeviceLibrary.
#ifndef ACCELPOOL_VENDORS_THEAD_HGML_LIBRARY_H_
#define ACCELPOOL_VENDORS_THEAD_HGML_LIBRARY_H_

#include "common/status.h"
#include "vendors/device_library.h"
#include "vendors/nvidia/nvml_library.h"

namespace accelpool::vendors::thead {

// Adapts an NVML-shaped library (tests pass a fake).
DeviceLibraryPtr HgmlDeviceLibrary(nvidia::NvmlLibraryPtr hgml);

// Loads libhgml.so with dlopen. kUnavailable when it is absent.
StatusOr<DeviceLibraryPtr> NewHgmlLibrary();

}  // namespace accelpool::vendors::thead

#endif  // ACCELPOOL_VENDORS_THEAD_HGML_LIBRARY_H_
