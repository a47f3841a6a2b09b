// NvidiaDriver: the VendorDriver for NVIDIA GPUs, reading NVML through an
// NvmlLibrary. Discovery reads UUID, name, memory, minor, NUMA, PCI bus and MIG
// mode per GPU, picks the topology profile (8 GPUs all joined through
// NVSwitch -> "nvidia-hgx-8", 8 other GPUs -> "nvidia-pcie-8", other counts
// -> NUMA groups) and overwrites the link matrix with measured scores:
//   PCIe level: same board 60, one switch 50, several switches 40, host
//   bridge 30, same NUMA 20, cross-socket 10; plus 100 per NVLink between the
//   pair (through an NVSwitch: the smaller of the two GPUs' switch links).
// A GPU in MIG mode is offered as its MIG devices, not whole: each becomes
// a device of its own (id "MIG-<uuid>", partition = its profile name, e.g.
// "1g.18gb", granted whole, advertised as nvidia.com/mig-<profile>), and a
// container granted one gets the parent's /dev/nvidia<minor> and the
// /dev/nvidia-caps nodes of its GPU and compute instance (from
// /proc/driver/nvidia-caps/mig-minors). MIG devices keep their parent's NUMA
// node and PCI bus; a node with any GPU in MIG mode uses NUMA groups.
// On multi-node NVLink systems (GB200/GB300 NVL72) the node's NVLink domain,
// "<cluster uuid>.<clique id>" from nvmlDeviceGetGpuFabricInfoV (the value
// NVIDIA's feature discovery puts in nvidia.com/gpu.clique), becomes the
// inventory's super node when every GPU has registered with the fabric and
// all name the same domain; otherwise there is none, with the reason logged.
// Health comes from critical XID events; application XIDs (xid.h) are
// ignored. A wait that answers NVML_ERROR_GPU_IS_LOST (a GPU fell off the
// bus, NVML does not say which) makes every GPU unhealthy. A device that had an XID becomes healthy
// again once no XID arrived for `recovery_quiet` and it answers a query.
// Which GPUs are unhealthy is kept by GPU UUID across discoveries and health
// watches: a watch started again (the device plugin does so after a MIG
// layout change) goes on from where the last one was (it says which GPUs are
// unhealthy, and that every other is healthy), and a discovery reports the
// devices of an unhealthy GPU (its new MIG devices too) as unhealthy.
// At the plugin's start (DiscoverPartial), a GPU whose details cannot be read
// (its DeviceInfo fails) is not offered, with an error logged once that says
// what to check; the other GPUs are (their ids are UUIDs, so none shifts),
// and that discovery fails only when no GPU can be read. Every other
// discovery fails for one such GPU, leaving the GPUs served and the tables
// below as they were.
// Discovery also probes every GPU (the recovery query: it answers, and no
// rows wait for remapping): one that fails is unhealthy from the start (a
// plugin started after the XID, on a GPU that still needs a reset), and the
// running watch says so; it recovers as above.
// A GPU whose XID event registration fails (an error other than "not
// supported") cannot be monitored: it is unhealthy and does not recover
// until a watch started again registers it. When the event set cannot be
// made at all, the watch polls (recovery and discovery's findings) instead.
//
// Thread-safety: see VendorDriver.
#ifndef ACCELPOOL_VENDORS_NVIDIA_NVIDIA_DRIVER_H_
#define ACCELPOOL_VENDORS_NVIDIA_NVIDIA_DRIVER_H_

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "vendors/discovery_log.h"
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
  // The driver's table of MIG capability minors (lines "gpu0/gi1/access 12").
  std::string mig_minors = "/proc/driver/nvidia-caps/mig-minors";
  // How MIG devices are advertised: false ("mixed") under their profile's
  // nvidia.com/mig-<profile>; true ("single", NVIDIA's strategy of that
  // name) as nvidia.com/gpu, for nodes whose MIG devices all share one
  // profile, so pods written for it ask for nvidia.com/gpu.
  bool mig_single = false;
  // The IMEX channel (/dev/nvidia-caps-imex-channels/channel<N>) handed to
  // every container granted GPUs, for CUDA memory shared across the nodes of
  // a multi-node NVLink domain; -1: none. Left out where the node lacks it.
  int32_t imex_channel = -1;
};

// The device node of IMEX channel `channel`.
std::string ImexChannelPath(int32_t channel);

// The MIG profile name of a MIG device, as NVIDIA names the profiles (and the
// k8s-device-plugin's nvidia.com/mig-<profile> resources): "<g>g.<m>gb", with a
// "<c>c." prefix when the compute instance has fewer slices than its GPU
// instance. <m> is the instance's share of the GPU's memory, rounded up to
// eighths, times the GPU's memory in whole GB, rounded: an H200 (143771 MiB)
// instance of 16384 MiB is "1g.18gb".
// `nvml_name`, NVML's name of the GPU instance profile ("1g.18gb+me"), wins
// when it names a profile of `gpu_slices` slices: it carries the attributes
// the sizes cannot tell ("+me" media extensions, "-me" none, "+me.all",
// "+gfx"), spelled as NVIDIA's device plugin spells them in resource names,
// '+' as '.' ("1g.18gb.me"), since '+' cannot appear in one.
std::string MigProfileName(int32_t gpu_slices, int32_t compute_slices, int64_t memory_mib,
                           int64_t gpu_memory_mib, std::string_view nvml_name = {});

// Reads the driver's mig-minors table: name -> capability minor
// ("gpu0/gi1/ci0/access" -> 13). Lines that do not parse are skipped.
std::map<std::string, int32_t> ParseMigMinors(const std::string& text);

// Link score of a pair from its PCIe level and NVLink count (see above).
int32_t NvidiaLinkScore(P2PLevel level, int32_t nvlinks);

// Sets `inv`'s modules to the NVLink-bridged pairs of the measured link
// scores (n x n, NvidiaLinkScore): two GPUs that are each other's only NVLink
// peer. A GPU in no pair is in no module.
void BridgedPairs(const std::vector<int32_t>& links, core::NodeInventory* inv);

class NvidiaDriver : public VendorDriver {
 public:
  NvidiaDriver(NvmlLibraryPtr nvml, NvidiaOptions options);

  // VendorDriver:
  std::string_view Name() const override { return "nvidia"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override { return DiscoverDevices(false); }
  StatusOr<std::vector<core::NodeInventory>> DiscoverPartial() override {
    return DiscoverDevices(true);
  }
  Status WatchHealth(std::stop_token stop, const HealthSink& sink) override;
  StatusOr<ContainerSpec> BuildContainerSpec(
      const std::vector<GrantedDevice>& grants) const override;
  // Every GPU not in MIG mode, by UUID (nvmlDeviceGetMemoryInfo_v2's used).
  StatusOr<std::map<std::string, int64_t>> MemoryInUse() override;
  StatusOr<std::map<std::string, std::vector<ProcessMemory>>> MemoryHolders() override;

 private:
  // `partial`: a device that cannot be read is left out (DiscoverPartial).
  StatusOr<std::vector<core::NodeInventory>> DiscoverDevices(bool partial);
  Status EnsureInit();
  // The pairwise link scores of the GPUs (n x n). A query that fails is
  // logged in `notes` and scored from what else is known, never failing
  // discovery.
  // GPUs not `readable` (not offered) are left out: no queries, score 0.
  std::vector<int32_t> MeasureLinks(const std::vector<NvmlDeviceInfo>& infos,
                                    const std::vector<bool>& readable, bool* all_switched,
                                    DiscoveryLog* notes);
  // The NVLink domain of the `readable` GPUs (by NVML index), "" when there
  // is none.
  std::string NvlinkDomain(const std::vector<bool>& readable, DiscoveryLog* notes);
  // Where a MIG device lives: its GPU's minor and its instance ids.
  struct MigPlace {
    int32_t gpu_minor = -1;
    int32_t gpu_instance = -1;
    int32_t compute_instance = -1;
  };

  // A GPU made unhealthy by an XID, until it recovers.
  struct Unhealthy {
    std::chrono::steady_clock::time_point last_xid;
    std::string reason;
    bool announced = true;  // false: found by a discovery; the watch has not said it yet
    // Its XID event registration failed: it cannot be monitored, so it does
    // not recover until a registration tried again succeeds. Cleared then,
    // and when a watch starts (set again if its registration fails again).
    bool unwatched = false;
    // It reported a double-bit ECC error (XID 48): a GPU before Ampere then
    // has a page pending retirement, which only a driver reload applies; it
    // stays unhealthy while one is pending. `retire_said`: said once.
    bool dbe = false;
    bool retire_said = false;
  };
  // The NVML index of a GPU UUID now, or -1; mu_ held.
  int32_t IndexOfLocked(const std::string& gpu_uuid) const;
  // The GPUs discovery serves whole (not in MIG mode): NVML index, UUID.
  // kFailedPrecondition before the first discovery.
  StatusOr<std::vector<std::pair<int32_t, std::string>>> WholeGpus() const;

  const NvmlLibraryPtr nvml_;
  const NvidiaOptions options_;

  mutable std::mutex mu_;
  bool initialized_ = false;               // guarded by mu_
  // Device ids by NVML index: the GPU's UUID, or its MIG devices' UUIDs.
  std::vector<std::vector<std::string>> ids_;  // guarded by mu_
  // GPU UUID by NVML index ("" for a GPU discovery could not read); guarded by mu_
  std::vector<std::string> gpu_uuids_;
  std::map<std::string, Unhealthy> unhealthy_;  // by GPU UUID; guarded by mu_
  std::map<std::string, int32_t> minors_;      // id -> GPU minor; guarded by mu_
  std::map<std::string, MigPlace> mig_;        // MIG id -> place; guarded by mu_
  LoggedLines discovery_lines_;                // what the last Discover logged
};

}  // namespace accelpool::vendors::nvidia

#endif  // ACCELPOOL_VENDORS_NVIDIA_NVIDIA_DRIVER_H_
