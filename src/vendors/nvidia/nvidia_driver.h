// NvidiaDriver: the VendorDriver for NVIDIA GPUs, reading NVML through an
// NvmlLibrary. Discovery reads UUID, name, memory, minor, NUMA, PCI bus and MIG
// mode per GPU, picks the topology profile (8 GPUs all joined through
// NVSwitch -> "nvidia-hgx-8", 8 other GPUs -> "nvidia-pcie-8", other counts
// -> NUMA groups) and overwrites the link matrix with measured scores:
//   PCIe level: same board 60, one switch 50, several switches 40, host
//   bridge 30, same NUMA 20, cross-socket 10; plus 100 per NVLink between the
//   pair (through an NVSwitch: the smaller of the two GPUs' switch links).
// Health comes from critical XID events; application XIDs (xid.h) are
// ignored. A wait that answers NVML_ERROR_GPU_IS_LOST (a GPU fell off the
// bus, NVML does not say which) makes every GPU unhealthy. A device that had an XID becomes healthy
// again once no XID arrived for `recovery_quiet` and it answers a query.
//
// Thread-safety: see VendorDriver.
#ifndef ACCELPOOL_VENDORS_NVIDIA_NVIDIA_DRIVER_H_
#define ACCELPOOL_VENDORS_NVIDIA_NVIDIA_DRIVER_H_

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/driver.h"
#include "vendors/nvidia/nvml_library.h"

namespace accelpool::vendors::nvidia {

struct NvidiaOptions {
  std::string node;         // node name for the inventory
  int32_t max_shares = 10;  // slots per GPU; MIG-enabled GPUs get 1
  std::chrono::milliseconds recovery_quiet = std::chrono::seconds(60);
  std::chrono::milliseconds event_wait = std::chrono::milliseconds(500);
  std::vector<uint64_t> extra_ignored_xids;  // added to the application list
  // Prefix under which device nodes are checked (GenericContainerSpec); ""
  // checks /dev as this process sees it.
  std::string device_root;
};

// Link score of a pair from its PCIe level and NVLink count (see above).
int32_t NvidiaLinkScore(P2PLevel level, int32_t nvlinks);

class NvidiaDriver : public VendorDriver {
 public:
  NvidiaDriver(NvmlLibraryPtr nvml, NvidiaOptions options);

  // VendorDriver:
  std::string_view Name() const override { return "nvidia"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override;
  Status WatchHealth(std::stop_token stop, const HealthSink& sink) override;
  StatusOr<ContainerSpec> BuildContainerSpec(
      const std::vector<GrantedDevice>& grants) const override;

 private:
  Status EnsureInit();
  StatusOr<std::vector<int32_t>> MeasureLinks(const std::vector<NvmlDeviceInfo>& infos,
                                              bool* all_switched);

  const NvmlLibraryPtr nvml_;
  const NvidiaOptions options_;

  mutable std::mutex mu_;
  bool initialized_ = false;               // guarded by mu_
  std::vector<std::string> uuids_;         // by NVML index; guarded by mu_
  std::map<std::string, int32_t> minors_;  // uuid -> minor; guarded by mu_
};

}  // namespace accelpool::vendors::nvidia

#endif  // ACCELPOOL_VENDORS_NVIDIA_NVIDIA_DRIVER_H_
