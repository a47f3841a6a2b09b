// The Cambricon MLU DeviceLibrary over CNDev (libcndev.so, the management
// library behind cnmon, in /usr/local/neuware/lib64), loaded with dlopen.
// Per MLU: UUID (else the card serial number, as Cambricon's own plugin
// does), card name, memory, PCI bus, NUMA node (CNDev, else sysfs), and the
// card health state. MLULink rings come from cntopo, not CNDev, so the
// profile's board pairs apply. docs/vendors.md lists the entry points and
// what is assumed.
//
// Thread-safety: see DeviceLibrary; calls into the library are serialized.
#ifndef ACCELPOOL_VENDORS_CAMBRICON_CNDEV_LIBRARY_H_
#define ACCELPOOL_VENDORS_CAMBRICON_CNDEV_LIBRARY_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/device_library.h"

namespace accelpool::vendors::cambricon {

// Loads the first of `candidates` that opens (empty: the Cambricon traits'
// library names). kUnavailable when none does.
StatusOr<DeviceLibraryPtr> NewCndevLibrary(const std::vector<std::string>& candidates = {},
                                           const std::string& sysfs_root = "/sys");

}  // namespace accelpool::vendors::cambricon

#endif  // ACCELPOOL_VENDORS_CAMBRICON_CNDEV_LIBRARY_H_
