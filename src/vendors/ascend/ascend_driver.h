// AscendDriver: the VendorDriver for Huawei Ascend NPUs, reading DCMI through
// a DcmiLibrary. Discovery orders chips by logic id and maps them:
//   id      "NPU-<pci bus with ':' as '-'>" (stable across reboots)
//   model   "Ascend" + chip name: 910B3 -> Ascend910B3, 310P3 -> Ascend310P3;
//           910_93xx (Atlas A3) -> Ascend910C; 910 / 910A / 910ProB -> Ascend910A
//   profile by model and count: 910A x8/x4, 910B x8/x16, 910C x16, 310P any
//           count (ascend-310p-duo, 300I Duo cards of 2), 310 any count
//           (ascend-310-cards); other shapes get NUMA groups, and so does a
//           300I Pro (one 310P chip a card: no Duo pairing); a 910C node
//           of another even die count (an 8-die A3 box) gets NUMA groups and
//           its cards as modules, taken whole by even requests
//   cards   the chips DCMI reports under one card id form one module (a 300I
//           card's 4 chips, a 300I Duo's 2, an A3 module's 2 dies), never
//           derived from the index; a card the profile does not allow (5
//           chips on a 310 card, 1 on a 310P card) leaves the node to NUMA
//           groups
//   slots   1 per chip; with AscendOptions::vnpu, one per smallest vNPU
//           template the chip holds, and the templates as the slice sizes
//   NUMA    read per chip (never derived from the index: a 910B2 node reads
//           6,0,6,0,4,2,4,2), super-node from the super-pod query.
// At the plugin's start (DiscoverPartial), a chip whose details cannot be
// read is not offered, with an error logged once; the other chips are, and
// that discovery fails only when no chip can be read. Every other discovery
// fails for one such chip, leaving the chips served as they were.
// Two chips whose ids or physical ids DCMI reports the same (or a physical id
// out of range) fail the discovery: one chip's grants, health and device node
// would be the other's.
// Health is polled (DCMI has no event stream): alarm levels 0 and 1 are
// healthy, 2 (major) and 3 (critical) are not; a device whose level drops
// back is reported healthy again. A DCMI error for one chip marks it
// unhealthy until it answers again.
// Memory in use (foreign memory, --foreign-memory-vendors=ascend): the sum of
// what the processes dcmi_get_device_resource_info lists on a chip hold.
//
// Thread-safety: see VendorDriver.
#ifndef ACCELPOOL_VENDORS_ASCEND_ASCEND_DRIVER_H_
#define ACCELPOOL_VENDORS_ASCEND_ASCEND_DRIVER_H_

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/ascend/dcmi_library.h"
#include "vendors/discovery_log.h"
#include "vendors/driver.h"

namespace accelpool::vendors::ascend {

struct AscendOptions {
  std::string node;
  std::chrono::milliseconds health_poll = std::chrono::seconds(5);
  // Prefix under which device nodes are checked (GenericContainerSpec); ""
  // checks /dev as this process sees it.
  std::string device_root;
  // Dynamic vNPU (vnpu.h): each chip with templates offers as many slots as
  // its smallest template fits, and a share of a chip is served as a vNPU the
  // Ascend Docker Runtime creates. Off: chips are granted whole.
  bool vnpu = false;
};

// "Ascend910B3" from DCMI's chip name (table in the header comment above).
std::string AscendModel(const std::string& chip_name);
// The topology profile for `count` chips of `model` (Ascend310P3 is no
// Ascend310); "" when none fits.
std::string AscendProfile(const std::string& model, size_t count);

class AscendDriver : public VendorDriver {
 public:
  AscendDriver(DcmiLibraryPtr dcmi, AscendOptions options);

  // VendorDriver:
  std::string_view Name() const override { return "ascend"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override { return DiscoverDevices(false); }
  StatusOr<std::vector<core::NodeInventory>> DiscoverPartial() override {
    return DiscoverDevices(true);
  }
  Status WatchHealth(std::stop_token stop, const HealthSink& sink) override;
  StatusOr<ContainerSpec> BuildContainerSpec(
      const std::vector<GrantedDevice>& grants) const override;
  // The memory the processes DCMI lists on each chip hold, summed (not HBM in
  // use, which counts what the chip's firmware reserves), and the processes.
  StatusOr<std::map<std::string, int64_t>> MemoryInUse() override;
  StatusOr<std::map<std::string, std::vector<ProcessMemory>>> MemoryHolders() override;

 private:
  // `partial`: a device that cannot be read is left out (DiscoverPartial).
  StatusOr<std::vector<core::NodeInventory>> DiscoverDevices(bool partial);
  struct Chip {
    DcmiChipId where;
    std::string id;
    int32_t phy_id = -1;
  };

  // Slots and slice sizes of dynamic vNPU (AscendOptions::vnpu), or a
  // warning when the node's chips have no templates.
  void ServeVnpu(core::NodeInventory* inv, DiscoveryLog* notes) const;

  const DcmiLibraryPtr dcmi_;
  const AscendOptions options_;

  mutable std::mutex mu_;
  bool initialized_ = false;  // guarded by mu_
  std::vector<Chip> chips_;   // in inventory order; guarded by mu_
  LoggedLines discovery_lines_;  // what the last Discover logged
};

}  // namespace accelpool::vendors::ascend

#endif  // ACCELPOOL_VENDORS_ASCEND_ASCEND_DRIVER_H_
