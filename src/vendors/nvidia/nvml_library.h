// NvmlLibrary: the narrow slice of NVML the NVIDIA backend reads. The real
// implementation (NewDlNvml) loads libnvidia-ml with dlopen; tests pass a fake
// holding values from nvidia-smi's documented output.
//
// Thread-safety: implementations may be called from two threads at once (the
// discovery caller and the health watcher); NVML itself is thread-safe.
#ifndef ACCELPOOL_VENDORS_NVIDIA_NVML_LIBRARY_H_
#define ACCELPOOL_VENDORS_NVIDIA_NVML_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace accelpool::vendors::nvidia {

// nvmlGpuTopologyLevel_t values.
enum class P2PLevel : int32_t {
  kInternal = 0,     // same board (multi-GPU board)
  kSingle = 10,      // one PCIe switch
  kMultiple = 20,    // several PCIe switches
  kHostBridge = 30,  // same host bridge
  kNode = 40,        // same NUMA node, different host bridges
  kSystem = 50,      // across the SMP interconnect
};

struct NvmlDeviceInfo {
  std::string uuid;     // "GPU-5f1d..."
  std::string name;     // "NVIDIA H200"
  std::string pci_bus;  // "00000000:19:00.0" as NVML prints it
  int64_t memory_mib = 0;
  int32_t minor = -1;  // /dev/nvidia<minor>
  int32_t numa = -1;   // -1 when NVML and sysfs do not say
  bool mig_enabled = false;
};

// One MIG device (a compute instance inside a GPU instance) of a GPU in MIG
// mode, as nvmlDeviceGetMigDeviceHandleByIndex and the queries on its handle
// report it.
// A process holding memory on a GPU.
struct NvmlProcess {
  uint32_t pid = 0;
  int64_t used_mib = -1;  // -1: NVML does not say (NVML_VALUE_NOT_AVAILABLE)
};

struct NvmlMigInfo {
  std::string uuid;               // "MIG-..."
  int32_t gpu_instance = -1;      // nvmlDeviceGetGpuInstanceId
  int32_t compute_instance = -1;  // nvmlDeviceGetComputeInstanceId
  int32_t gpu_slices = 0;         // nvmlDeviceAttributes_t::gpuInstanceSliceCount
  int32_t compute_slices = 0;     // ::computeInstanceSliceCount
  int64_t memory_mib = 0;         // ::memorySizeMB
  int32_t multiprocessors = 0;    // ::multiprocessorCount
  // NVIDIA's name of its GPU instance profile without "MIG " ("1g.18gb",
  // "1g.18gb+me", "1g.24gb-me", "1g.24gb+me.all"); empty when NVML does not
  // say. Read from the profile of its GPU instance (nvmlDeviceGetGpuInstanceById,
  // nvmlGpuInstanceGetInfo: needs the privileges the plugin runs with), or else
  // the one profile of its parent whose slices, memory and media engines are
  // the device's.
  std::string profile_name = {};
};

// What one active NVLink ends on, as nvmlDeviceGetNvLinkRemoteDeviceType
// says (kUnknown where the driver lacks that query or cannot tell), and the
// PCI bus id at its far end.
enum class NvLinkPeer : uint8_t { kUnknown, kGpu, kSwitch, kCpu };
struct NvLinkRemote {
  std::string bus;
  NvLinkPeer peer = NvLinkPeer::kUnknown;
};

// A GPU's place in an NVLink fabric that spans nodes (GB200/GB300 NVL72 and
// other multi-node NVLink systems), as nvmlDeviceGetGpuFabricInfoV reports it.
struct NvmlFabric {
  enum class State : uint8_t { kNotSupported, kNotStarted, kInProgress, kCompleted };
  State state = State::kNotSupported;
  // The registration's outcome ("Success", or NVML's error text); read only
  // when state is kCompleted.
  bool ok = false;
  std::string error = {};
  // The fabric's cluster UUID as text ("8-4-4-4-12" lowercase hex), "" when
  // NVML reports all zeroes (single-node NVSwitch boards such as HGX H100
  // report "completed" with a zero UUID: no domain beyond the node).
  std::string cluster_uuid = {};
  uint32_t clique = 0;  // the NVLink partition (clique) inside the cluster
};

// One critical XID event; device is the NVML index (-1: not known). gpu_lost:
// the wait itself answered NVML_ERROR_GPU_IS_LOST (a GPU fell off the bus and
// NVML does not say which); xid is 0 then.
struct XidEvent {
  int32_t device = -1;
  uint64_t xid = 0;
  bool gpu_lost = false;
};

// What registering the GPUs for critical XID events found. A GPU in neither
// list is watched.
struct XidRegistration {
  // NVML_ERROR_NOT_SUPPORTED: the GPU has no XID events; nothing is watched
  // there.
  std::vector<int32_t> unsupported;
  // Any other error (NVML_ERROR_UNKNOWN, NVML_ERROR_GPU_IS_LOST): the GPU
  // cannot be monitored. NVML index and NVML's error.
  std::vector<std::pair<int32_t, std::string>> failed;
};

class NvmlLibrary {
 public:
  virtual ~NvmlLibrary() = default;

  // nvmlInit. kUnavailable with NVML's error text on failure.
  virtual Status Init() = 0;
  virtual StatusOr<int32_t> DeviceCount() = 0;
  virtual StatusOr<NvmlDeviceInfo> DeviceInfo(int32_t index) = 0;
  // nvmlDeviceGetTopologyCommonAncestor for two devices.
  virtual StatusOr<P2PLevel> CommonAncestor(int32_t a, int32_t b) = 0;
  // The far end of every active NVLink of the device (another GPU, an
  // NVSwitch, or an IBM POWER CPU). Empty when the device has no NVLink.
  virtual StatusOr<std::vector<NvLinkRemote>> NvLinkRemotes(int32_t index) = 0;
  // Registers every device that supports them for critical XID events on a
  // fresh event set and says which were not registered, and why; one GPU
  // that fails does not stop the others' registration. kUnimplemented when
  // the driver, or no device, supports events; another error when the event
  // set cannot be made (no GPU is watched).
  virtual StatusOr<XidRegistration> RegisterXidEvents() = 0;
  // Registers one GPU whose registration failed on the event set the last
  // RegisterXidEvents made. kUnimplemented when the GPU has no XID events;
  // kFailedPrecondition without an event set; another error when it fails
  // again.
  virtual Status RegisterXidEventsFor(int32_t index) = 0;
  // Waits up to timeout_ms for a critical XID. nullopt on timeout; an event
  // with gpu_lost when NVML reports a lost GPU instead of an event.
  virtual StatusOr<std::optional<XidEvent>> WaitXid(int32_t timeout_ms) = 0;
  // Succeeds when the device answers a query (memory info) and has no memory
  // rows pending remapping or failed to remap (both need a GPU reset).
  virtual Status Probe(int32_t index) = 0;
  // Whether a memory page waits for retirement (GPUs before Ampere retire
  // pages; a driver reload applies it). kUnimplemented where the GPU or the
  // driver has no page retirement (Ampere and newer remap rows instead).
  virtual StatusOr<bool> RetiredPagesPending(int32_t index) = 0;
  // The device memory processes hold on a GPU now, in MiB:
  // nvmlDeviceGetMemoryInfo_v2's `used` (without what the driver reserves),
  // or, from a driver without it, the first call's (which includes it).
  virtual StatusOr<int64_t> MemoryUsedMib(int32_t /*index*/) {
    return UnimplementedError("this management library has no memory usage query");
  }
  // The processes holding memory on a GPU now (compute and graphics, one
  // entry per process), from the _v3, _v2 or first call, whichever the
  // library has. kUnimplemented when it has none of them.
  virtual StatusOr<std::vector<NvmlProcess>> RunningProcesses(int32_t /*index*/) {
    return UnimplementedError("this management library has no process queries");
  }
  // The MIG devices of a GPU in MIG mode (empty when none are created).
  // kUnimplemented when the library has no MIG queries.
  virtual StatusOr<std::vector<NvmlMigInfo>> MigDevices(int32_t /*index*/) {
    return UnimplementedError("this management library has no MIG device queries");
  }
  // The GPU's NVLink fabric registration: nvmlDeviceGetGpuFabricInfoV (struct
  // v2), else the first call. kUnimplemented when the library has neither
  // (drivers before R550, NVML-shaped libraries of other vendors).
  virtual StatusOr<NvmlFabric> FabricInfo(int32_t /*index*/) {
    return UnimplementedError("this management library has no NVLink fabric query");
  }
};
using NvmlLibraryPtr = std::unique_ptr<NvmlLibrary>;

// Loads the first of `candidates` that opens (empty: libnvidia-ml.so.1, then
// libnvidia-ml.so) with dlopen. kUnavailable when none does. NUMA nodes that
// NVML does not report are read under `sysfs_root`.
StatusOr<NvmlLibraryPtr> NewDlNvml(const std::vector<std::string>& candidates = {},
                                   const std::string& sysfs_root = "/sys");

// The same binding for a library with NVML's API under another prefix
// (T-Head HGML: "hgml" in libhgml.so). `smi` is the CLI named in errors.
StatusOr<NvmlLibraryPtr> NewDlNvmlShaped(const std::vector<std::string>& libraries,
                                         const std::string& prefix, const std::string& smi,
                                         const std::string& sysfs_root = "/sys");

}  // namespace accelpool::vendors::nvidia

#endif  // ACCELPOOL_VENDORS_NVIDIA_NVML_LIBRARY_H_
