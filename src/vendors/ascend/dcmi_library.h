// DcmiLibrary: the slice of Huawei's DCMI (libdcmi.so) the Ascend backend
// reads. The real implementation (NewDlDcmi) loads it with dlopen; tests pass a
// fake holding values from npu-smi's documented output.
//
// Thread-safety: implementations may be called from two threads at once (the
// discovery caller and the health poller).
#ifndef ACCELPOOL_VENDORS_ASCEND_DCMI_LIBRARY_H_
#define ACCELPOOL_VENDORS_ASCEND_DCMI_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/driver.h"

namespace accelpool::vendors::ascend {

// One NPU (a chip, or one die of a 910C module) as DCMI addresses it.
struct DcmiChipId {
  int32_t card = 0;
  int32_t device = 0;  // index inside the card
};

struct DcmiDeviceInfo {
  int32_t logic_id = -1;
  int32_t phy_id = -1;    // /dev/davinci<phy_id>
  std::string chip_name;  // "910B3", "910_9392" (A3), "310P3"
  int32_t aicore = 0;
  int64_t memory_mib = 0;  // HBM (or DDR on 310P)
  std::string pci_bus;     // "0000:c1:00.0"
  int32_t numa = -1;
  std::string super_pod_id;  // "" when the node is not in a super pod
};

class DcmiLibrary {
 public:
  virtual ~DcmiLibrary() = default;
  virtual Status Init() = 0;
  // Every chip on the node, card by card.
  virtual StatusOr<std::vector<DcmiChipId>> Chips() = 0;
  virtual StatusOr<DcmiDeviceInfo> Info(const DcmiChipId& chip) = 0;
  // dcmi_get_device_health: 0 ok, 1 minor alarm, 2 major alarm, 3 critical.
  virtual StatusOr<uint32_t> Health(const DcmiChipId& chip) = 0;
  // dcmi_get_device_resource_info: the processes holding memory on the chip
  // (host PIDs, MiB). kUnimplemented when this DCMI has no such query.
  virtual StatusOr<std::vector<ProcessMemory>> Processes(const DcmiChipId& chip) {
    (void)chip;
    return UnimplementedError("this DCMI lists no processes per NPU");
  }
};
using DcmiLibraryPtr = std::unique_ptr<DcmiLibrary>;

// Loads the first of `candidates` that opens (empty: libdcmi.so, then
// /usr/local/dcmi/libdcmi.so) with dlopen. kUnavailable when none does. The
// NUMA node of each chip is read under `sysfs_root`.
StatusOr<DcmiLibraryPtr> NewDlDcmi(const std::vector<std::string>& candidates = {},
                                   const std::string& sysfs_root = "/sys");

}  // namespace accelpool::vendors::ascend

#endif  // ACCELPOOL_VENDORS_ASCEND_DCMI_LIBRARY_H_
