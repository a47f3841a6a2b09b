// The Moore Threads GPU DeviceLibrary over MTML (libmtml.so, the management
// library behind mthreads-gmi), loaded with dlopen. Per GPU: UUID, name, PCI
// SBDF, memory, GPU core count, NUMA node (sysfs); pairwise links from MtLink
// (an up link whose remote end is the other GPU) else the PCIe/NUMA topology
// level; a GPU that answers a memory query is healthy. docs/vendors.md lists
// the entry points and what is assumed.
//
// Thread-safety: see DeviceLibrary; calls into the library are serialized.
#ifndef ACCELPOOL_VENDORS_MTHREADS_MTML_LIBRARY_H_
#define ACCELPOOL_VENDORS_MTHREADS_MTML_LIBRARY_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors::mthreads {

// Loads the first of `candidates` that opens (empty: the Moore Threads
// traits' library names). kUnavailable when none does.
StatusOr<DeviceLibraryPtr> NewMtmlLibrary(const std::vector<std::string>& candidates = {},
                                          const std::string& sysfs_root = "/sys");

}  // namespace accelpool::vendors::mthreads

#endif  // ACCELPOOL_VENDORS_MTHREADS_MTML_LIBRARY_H_
