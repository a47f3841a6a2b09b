// VendorDriver: the node-side face of one accelerator vendor, and VendorTraits,
// the data that describes how a vendor's devices are named, exposed and shared.
//
// A driver discovers the devices of its vendor (through the vendor's own
// management library, loaded with dlopen), watches their health, and says what
// a container needs to use a set of them. It knows nothing about Kubernetes:
// no pods, nodes or annotations. The device plugin owns one driver per vendor.
//
// Thread-safety: Discover() and ContainerSpec() may be called from any thread
// and concurrently with one running WatchHealth(); implementations guard their
// own state. Traits are immutable data.
#ifndef ACCELPOOL_VENDORS_DRIVER_H_
#define ACCELPOOL_VENDORS_DRIVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::vendors {

// What goes into the value of a visible-devices variable.
enum class VisibleIdKind : uint8_t {
  kDeviceId,          // the device's stable id (GPU UUID)
  kHostIndex,         // the device's host number (its minor / physical id; index when unknown)
  kContainerOrdinal,  // 0..n-1 in grant order (in-process filters after the runtime hook)
};

// One process holding memory on a device, as the vendor library lists it.
struct ProcessMemory {
  int64_t pid = 0;        // in the host's PID namespace (> 0)
  int64_t used_mib = -1;  // -1: the library does not say
  friend bool operator==(const ProcessMemory&, const ProcessMemory&) = default;
};

// The memory a process list holds, MiB (a process whose figure the library
// does not give counts 0).
inline int64_t HeldMib(const std::vector<ProcessMemory>& processes) {
  int64_t sum = 0;
  for (const ProcessMemory& p : processes) sum += p.used_mib > 0 ? p.used_mib : 0;
  return sum;
}

struct VisibleEnv {
  std::string name;
  VisibleIdKind kind = VisibleIdKind::kHostIndex;
};

// Data-only description of a vendor. See docs/vendors.md for the table.
struct VendorTraits {
  core::Vendor vendor = core::Vendor::kUnknown;
  std::vector<VisibleEnv> visible_env;    // runtime-hook name first, in-process names after
  std::vector<std::string> device_nodes;  // per device; "{minor}" is replaced
  std::vector<std::string> shared_nodes;  // control nodes every container needs
  // Per-device companion nodes ("{minor}" replaced) handed over only where
  // they exist: not every driver release or board creates them.
  std::vector<std::string> optional_device_nodes;
  std::vector<std::string> libraries;     // management library names tried in order
  bool fractional = false;                // memory/compute shares can be granted
  bool soft_enforcement = false;          // shares enforced by libaccelpool-cuda
  int32_t default_max_shares = 1;         // slots per device when sharing is on
  std::string cdi_kind;                   // "nvidia.com/gpu" for CDI names; "" = none
  std::string tool;                       // the vendor's node tool (nvidia-smi, npu-smi)
};

// The traits of every vendor with a backend; kUnknown yields empty traits.
// The resource a device is advertised under is api::DeviceResource.
const VendorTraits& TraitsFor(core::Vendor vendor);

// One device handed to a container, with its share.
struct GrantedDevice {
  core::Device device;
  int64_t memory_mib = 0;  // 0 = the whole device memory
  int32_t compute = 0;     // thousandths; 0 = whole
  bool exclusive = true;
};

struct DeviceNode {
  std::string host_path;
  std::string container_path;
  std::string permissions = "rw";
};

struct MountSpec {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
};

// What a container needs for a set of devices: kubelet turns it into the
// container's device cgroup entries, env and bind mounts.
struct ContainerSpec {
  std::vector<DeviceNode> devices;
  std::map<std::string, std::string> env;
  std::vector<MountSpec> mounts;
  std::vector<std::string> cdi_devices;
};

// A change of one device's health. Health is two-way: a device that recovers
// is reported healthy again.
struct HealthEvent {
  core::Vendor vendor = core::Vendor::kUnknown;
  std::string device_id;
  bool healthy = true;
  std::string reason;  // operator text, e.g. "XID 79 (GPU fell off the bus)"
};
using HealthSink = std::function<void(const HealthEvent&)>;

class VendorDriver {
 public:
  virtual ~VendorDriver() = default;

  // Stable backend name: "nvidia", "ascend", ..., "fake".
  virtual std::string_view Name() const = 0;

  // The devices of this backend on the node, one inventory per vendor, with
  // the topology filled in (profile + measured links). An empty vector means
  // "no devices" (not an error). kUnavailable when the library is absent or
  // fails; the message names the library and what to check.
  virtual StatusOr<std::vector<core::NodeInventory>> Discover() = 0;

  // Discover(), for a backend none of whose devices is served yet (the
  // plugin's start): a device whose details cannot be read is left out, with
  // an error line naming it and what to check, and the others are returned;
  // it fails only when no device can be read. A later Discover() stays all or
  // nothing (the driver's tables describe the devices served). Backends whose
  // ids are positional, or that cannot leave one device out, discover as
  // Discover() does.
  virtual StatusOr<std::vector<core::NodeInventory>> DiscoverPartial() { return Discover(); }

  // Blocks until `stop` is requested, calling `sink` on every health change.
  // Returns early only when health cannot be watched (the returned Status says
  // why); devices then keep their last known health.
  virtual Status WatchHealth(std::stop_token stop, const HealthSink& sink) = 0;

  // The device nodes, env and mounts a container needs for `grants`.
  // kInvalidArgument when a grant names a device this driver does not know.
  virtual StatusOr<ContainerSpec> BuildContainerSpec(
      const std::vector<GrantedDevice>& grants) const = 0;

  // The device memory processes hold now, in MiB, by device id, for the
  // devices whose library says (whole devices only: a partition's memory is
  // its own). Devices that cannot be read are left out. kUnimplemented when
  // the backend has no such query (foreign memory is then not measured).
  virtual StatusOr<std::map<std::string, int64_t>> MemoryInUse() {
    return UnimplementedError(std::string(Name()) + ": no device memory usage query");
  }

  // The processes that hold memory on each whole device now, by device id,
  // for the devices whose library lists them (a device with none maps to an
  // empty list). Asked only when a device gains foreign memory, to name what
  // holds it. kUnimplemented when the backend cannot list processes.
  virtual StatusOr<std::map<std::string, std::vector<ProcessMemory>>> MemoryHolders() {
    return UnimplementedError(std::string(Name()) + ": no per-process memory query");
  }
};
using VendorDriverPtr = std::unique_ptr<VendorDriver>;

// The spec every vendor shares: the traits' device nodes (with "{minor}"
// replaced by the device's minor number from `minor_of`, or its index when
// that returns -1; or, where `nodes_of` names a device's own nodes, those
// instead), the device's optional companion nodes and the shared control
// nodes that exist, and the visible devices env (none for a vendor whose
// traits list no variable: the mounted nodes are the selection).
// Used by drivers; vendors add their own extras.
//
// Existence is checked at `device_root` + path ("" checks the paths as this
// process sees them; the chart mounts the host's /dev at /dev). A shared
// control node that does not exist is left out (a host without
// /dev/nvidia-modeset, or before /dev/nvidia-uvm is created): a listed node
// that is absent would make the container runtime refuse the container.
// kFailedPrecondition, naming the device and the path, when a granted
// device's own node does not exist: that container cannot use the device.
StatusOr<ContainerSpec> GenericContainerSpec(
    const VendorTraits& traits, const std::vector<GrantedDevice>& grants,
    const std::function<int32_t(const core::Device&)>& minor_of, const std::string& device_root,
    const std::function<std::vector<std::string>(const core::Device&)>& nodes_of = nullptr);

// True when `path` exists under `device_root` ("" = as this process sees it).
bool DeviceNodeExists(const std::string& device_root, const std::string& path);

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_DRIVER_H_
