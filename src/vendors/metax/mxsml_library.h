// The MetaX GPU DeviceLibrary over MX-SML (libmxsml.so, shipped in
// /opt/mxdriver/lib with the MetaX driver), loaded with dlopen. Per GPU:
// UUID, name, BDF, VRAM, NUMA node (MX-SML node affinity, else sysfs), and
// pairwise topology with MetaXLink; a GPU that answers a memory query is
// healthy. docs/vendors.md lists the entry points and what is assumed.
//
// Thread-safety: see DeviceLibrary; calls into the library are serialized.
#ifndef ACCELPOOL_VENDORS_METAX_MXSML_LIBRARY_H_
#define ACCELPOOL_VENDORS_METAX_MXSML_LIBRARY_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors::metax {

// Loads the first of `candidates` that opens (empty: the MetaX traits'
// library names). kUnavailable when none does.
StatusOr<DeviceLibraryPtr> NewMxsmlLibrary(const std::vector<std::string>& candidates = {},
                                           const std::string& sysfs_root = "/sys");

}  // namespace accelpool::vendors::metax

#endif  // ACCELPOOL_VENDORS_METAX_MXSML_LIBRARY_H_
