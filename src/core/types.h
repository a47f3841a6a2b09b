// Vendor-neutral model of accelerators, node inventories, requests, usage and
// placements. Everything the allocation core reads or returns is defined here.
//
// Units (used everywhere in accelpool):
//   memory  : MiB (int64_t).
//   compute : thousandths of one device (int32_t, 1000 = the whole device).
//             Users write percent (25% -> 250); traces write milli-GPU.
//
// Thread-safety: plain values; no internal synchronisation.
#ifndef ACCELPOOL_CORE_TYPES_H_
#define ACCELPOOL_CORE_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accelpool::core {

inline constexpr int32_t kComputeWhole = 1000;

enum class Vendor : uint8_t {
  kUnknown,
  kNvidia,
  kAscend,
  kKunlunxin,
  kMetax,
  kMthreads,
  kThead,
  kCambricon,
  kHygon,
  kIluvatar,
  kEnflame,
};

// Lower-case stable names used in config, inventories and metrics:
// "nvidia", "ascend", "kunlunxin", "metax", "mthreads", "thead", "cambricon",
// "hygon", "iluvatar", "enflame".
std::string_view VendorName(Vendor v);
std::optional<Vendor> ParseVendor(std::string_view name);
const std::vector<Vendor>& AllVendors();

// True when `profile` is a MIG profile name as NVIDIA's device plugin spells
// them in resource names: an optional "<c>c." compute-instance prefix,
// "<g>g.<m>gb", then up to three attributes, each '.' or '-' and 1-8
// lower-case letters ("1g.18gb", "1c.3g.71gb", "1g.18gb.me" for NVIDIA's
// "1g.18gb+me", "1g.24gb-me", "1g.24gb.me.all"). '+' itself cannot appear in
// a Kubernetes resource name. An instance with attributes has the slices and
// memory of its plain profile but other engines, so it is its own profile.
bool ValidMigProfile(std::string_view profile);

// True when the device model `model` contains `pattern`, ignoring case, so
// "a100" selects "NVIDIA A100-SXM4-80GB" the way users of HAMi's
// use-gputype expect; an empty pattern matches nothing. Request filters
// (Fit) and model-limited workload shapes (TasksForInventory) both match
// through it.
bool ModelMatches(std::string_view model, std::string_view pattern);

// One accelerator (a GPU, an NPU die, an XPU ...).
struct Device {
  // The numbers fit reads for every device of every node come first, in one
  // cache line; the strings (read only for model or id filters) after them.
  int64_t memory_mib = 0;
  // Memory in use on the device that no grant accounts for (a leftover
  // process, a container that set NVIDIA_VISIBLE_DEVICES itself, a host
  // daemon), as the node's plugin measured it; 0 when none or not measured.
  // Shares fit in the memory left beside it; a whole-device request does not
  // fit the device at all while it is there.
  int64_t foreign_mib = 0;
  int32_t index = 0;            // position on the node == position in NodeInventory::devices
  int32_t max_shares = 1;       // containers that may share it; 1 = whole-device only
  int32_t module = -1;          // index into Topology::modules, -1 when none
  int32_t numa = -1;            // NUMA node, -1 when unknown
  int32_t compute_units = 0;    // SMs, AI cores, CUs (informational)
  Vendor vendor = Vendor::kUnknown;
  bool healthy = true;
  // Taken out of service by the operator (the node annotation
  // accelpool.io/cordoned-devices): no new grant lands on it, grants it
  // already holds stay. Not part of the published inventory.
  bool cordoned = false;
  std::string id;               // stable identity: UUID ("GPU-..."), serial, or vendor id
  std::string model;            // "H200", "Ascend910C", "P800", ...
  std::string pci_bus;          // "0000:18:00.0"
  // A hardware partition of a larger device, by its profile name: an NVIDIA
  // MIG instance is "1g.18gb" (advertised as nvidia.com/mig-1g.18gb). ""
  // for a whole device. Only requests naming the same profile fit it, and it
  // is granted whole.
  std::string partition;

  // May take new grants: healthy and not cordoned.
  bool Schedulable() const { return healthy && !cordoned; }
};

// How "groups" constrain a request (rings, wings, link zones, NUMA halves).
enum class GroupRule : uint8_t {
  kNone,      // groups carry no rule
  kPrefer,    // staying inside one group is preferred (scored), never required
  kRequired,  // a request of count <= the largest group must lie inside one group
};

// How a request larger than every group may spread.
enum class SpanRule : uint8_t {
  kAny,           // any devices
  kEvenMirrored,  // split evenly over two groups as mirrored pairs (i, i + group size)
};

// How "modules" (devices that belong together physically) constrain a request.
enum class ModuleRule : uint8_t {
  kNone,
  kWholeForEven,    // even counts take whole modules (Ascend 910C die pairs); a single die
                    // prefers a module whose sibling is already in use
  kStayInside,      // a request of count <= module size stays on one module (310P Duo, 310 card)
  kPreferTogether,  // keep a module's devices together when possible (Cambricon X8 boards)
};

// Fixed-size fractional sharing as vendors implement it.
struct SliceRule {
  int64_t memory_step_mib = 1;        // round memory up to a multiple (Moore Threads 512)
  std::vector<int64_t> memory_sizes;  // ascending fixed slice sizes; round up to the smallest
                                      // that fits; a request above the largest takes the
                                      // whole device (Kunlunxin 24576/49152, Ascend vNPU)
  bool one_size_per_device = false;   // a device hosts slices of one size only (Kunlunxin)
  int32_t node_handle_budget = 0;     // devices + slices on the node <= budget; 0 = none
  bool compute_follows_memory = false;  // compute share = memory share (Kunlunxin vXPU)
  bool fraction_single_device = false;  // a fractional request takes exactly one device
};

// Everything about a node's devices that constrains which sets may be chosen.
// Vendors differ here, in data, not in code.
struct Topology {
  std::string kind;                          // profile name, e.g. "ascend-910c-x16"
  std::vector<int32_t> valid_counts;         // empty: any count 1..N
  std::vector<std::vector<int32_t>> groups;  // device indices per group
  GroupRule group_rule = GroupRule::kNone;
  SpanRule span_rule = SpanRule::kAny;
  std::vector<std::vector<int32_t>> modules;  // device indices per module
  ModuleRule module_rule = ModuleRule::kNone;
  // Pairwise link score, row-major N x N, higher is faster (NVLink > PCIe
  // switch > host bridge > cross-socket). Empty: unknown, NUMA is used.
  std::vector<int32_t> links;
  SliceRule slices;
  std::string super_node;  // super-node / super-pod id; "" when unknown
  std::string rack;
  std::string block;
};

// The devices of one vendor on one node, with their topology. A node with
// devices of two vendors has two inventories.
struct NodeInventory {
  std::string node;
  Vendor vendor = Vendor::kUnknown;
  std::vector<Device> devices;
  Topology topology;

  int32_t LinkScore(int32_t a, int32_t b) const;  // 0 when unknown
};

// What is assigned on one device.
struct DeviceUsage {
  int64_t memory_mib = 0;
  int32_t compute = 0;     // thousandths
  int32_t shares = 0;      // containers holding a grant on it
  bool exclusive = false;  // held whole by an exclusive grant
  int64_t slice_mib = 0;   // slice size in use when SliceRule::one_size_per_device
  int32_t slices = 0;      // fractional slices on it (for the handle budget)

  friend bool operator==(const DeviceUsage&, const DeviceUsage&) = default;
};

// Host CPU (thousandths of a core) and memory (MiB), as kube-scheduler counts
// them: a node's allocatable less the requests of the pods bound to it, or a
// pod's requests.
struct HostResources {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  friend bool operator==(const HostResources&, const HostResources&) = default;
};

// What is assigned on one inventory; devices[i] belongs to inventory device i.
struct NodeUsage {
  std::vector<DeviceUsage> devices;
  // The node's free host CPU and memory, for policies that weigh the host
  // (shared by the node's inventories); nullopt when not tracked. Set by the
  // caller for the node at hand; Fit and the usage accounting leave it alone.
  std::optional<HostResources> host_free;

  static NodeUsage Empty(const NodeInventory& inv) {
    NodeUsage u;
    u.devices.resize(inv.devices.size());
    return u;
  }
  friend bool operator==(const NodeUsage&, const NodeUsage&) = default;
};

enum class ContainerKind : uint8_t {
  kRegular,
  kInit,     // runs to completion before the regular containers, one at a time
  kSidecar,  // restartable init container: runs beside everything after it
};

// One container's ask for devices of one vendor, as users write it.
// Semantics:
//   count only                     -> whole devices, exclusive.
//   memory and/or compute given    -> a share of each of `count` devices.
//   compute only                   -> memory in proportion (25% compute -> 25% memory),
//                                     so every share has a memory cap.
//   memory only                    -> compute 0: no compute reserved (best effort).
//   exclusive or compute 100%      -> whole devices even when memory is given.
// memory_percent is resolved against each candidate device's memory.
struct DeviceRequest {
  std::string container;
  ContainerKind kind = ContainerKind::kRegular;
  Vendor vendor = Vendor::kUnknown;
  int32_t count = 0;
  int64_t memory_mib = 0;      // per device; 0 = not given
  int32_t memory_percent = 0;  // per device, 1..100; 0 = not given
  int32_t compute = 0;         // thousandths per device; 0 = not given
  bool exclusive = false;
  std::vector<std::string> model_include;  // case-insensitive model names
  std::vector<std::string> model_exclude;
  std::vector<std::string> id_include;  // device ids (UUIDs)
  std::vector<std::string> id_exclude;
  bool numa_bind = false;  // all devices on one NUMA node
  // The hardware partition profile the request names (nvidia.com/mig-1g.18gb
  // -> "1g.18gb"); only devices of that profile fit. "" fits whole devices
  // only.
  std::string partition;

  // A share of each device. 100% compute (compute == kComputeWhole) is exclusive.
  bool Fractional() const {
    return !exclusive && compute < kComputeWhole &&
           (memory_mib > 0 || memory_percent > 0 || compute > 0);
  }
};

// A pod's device requests, in pod order (init containers first, in order).
struct PodRequest {
  std::vector<DeviceRequest> containers;
  // The pod's host CPU and memory requests (kube-scheduler's effective
  // request); zero when not known. Only scored, never checked: kube-scheduler
  // checks that they fit.
  HostResources host;
};

// The share of one device granted to one container.
struct Grant {
  int32_t device = 0;  // inventory index
  int64_t memory_mib = 0;
  int32_t compute = 0;
  bool exclusive = false;
  friend bool operator==(const Grant&, const Grant&) = default;
};

struct ContainerPlacement {
  std::string container;
  ContainerKind kind = ContainerKind::kRegular;
  std::vector<Grant> grants;
  friend bool operator==(const ContainerPlacement&, const ContainerPlacement&) = default;
};

// The devices chosen for every container of a pod on one inventory.
struct Placement {
  std::vector<ContainerPlacement> containers;
  // The pod's host requests (PodRequest::host) that the placement brings to
  // the node, for policies that weigh the host. Set by Fit on the placements
  // it scores; not part of an assignment (the extender clears it).
  HostResources host;
  bool empty() const { return containers.empty(); }
  friend bool operator==(const Placement&, const Placement&) = default;
};

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_TYPES_H_
