// The fake backend's inventory file: a JSON description of a node's devices
// of any vendor and topology, for tests, demos and simulated clusters.
//
//   {"version": 1,
//    "inventories": [
//      {"vendor": "ascend", "profile": "ascend-910c-x16", "model": "Ascend910C",
//       "memory_mib": 65536, "max_shares": 1, "super_node": "sp-3",
//       "devices": [{"index": 3, "healthy": false}, {"index": 5, "numa": 1}]}]}
//
// Per inventory: "vendor" (required, core::VendorName spelling), "profile"
// (a core profile; sets the device count and topology) or "count" (devices,
// NUMA default topology), and optional defaults "model", "memory_mib",
// "compute_units", "max_shares" (default: the vendor's split count, 10 for
// NVIDIA, else 1), "super_node", "rack", "block". "devices"
// overrides single devices by "index": "id", "model", "memory_mib", "numa",
// "pci_bus", "healthy", "partition" (NVIDIA only: the device is a MIG
// instance of that profile, e.g. "1g.18gb", granted whole and advertised as
// nvidia.com/mig-<profile>), "used_mib" (memory processes hold on the device
// now, 0..memory_mib, default 0: what the backend's memory usage query
// answers, for foreign memory; partitions report none), "processes" (what
// the backend's per-process query lists for the device: up to 64 entries
// {"pid": 1..4194304, "used_mib": 0..memory_mib or -1 for "not said"}, pids
// unique; partitions list none). Ids default to
// "<VENDOR>-<node>-<index>".
// Device ids must be unique on the node, across vendors too; an integer that
// does not fit its field (NUMA nodes are -1..1023) is refused, never
// truncated.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_VENDORS_FAKE_INVENTORY_FILE_H_
#define ACCELPOOL_VENDORS_FAKE_INVENTORY_FILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"
#include "vendors/driver.h"

namespace accelpool::vendors::fake {

// The memory in use the file gives for its whole devices, by device id.
struct MemoryUse {
  std::map<std::string, int64_t> used;  // "used_mib" of every whole device (0 where not given)
  // "processes" of every whole device (empty where not given).
  std::map<std::string, std::vector<ProcessMemory>> processes;
};

// Parses the document text. kInvalidArgument with the JSON path of the first
// problem (e.g. "inventories[0].devices[2].index: 17 is out of range 0..15",
// "inventories[1] device 0: id \"ACC-7\" is already the id of inventories[0]
// device 1; ...").
// `use` (optional) receives what the file says whole devices' memory is
// used by; nothing of a refused file.
StatusOr<std::vector<core::NodeInventory>> ParseInventoryFile(std::string_view text,
                                                              std::string_view node,
                                                              MemoryUse* use = nullptr);

// Reads and parses `path`. kNotFound when it cannot be read.
StatusOr<std::vector<core::NodeInventory>> LoadInventoryFile(const std::string& path,
                                                             std::string_view node,
                                                             MemoryUse* use = nullptr);

}  // namespace accelpool::vendors::fake

#endif  // ACCELPOOL_VENDORS_FAKE_INVENTORY_FILE_H_
