// Per-node state the extender keeps: each vendor inventory of a node with
// what is assigned on it (usage and kubelet slot occupancy), and a pod's
// assignment on one node (a placement per vendor plus the slot each grant
// holds). Slot ids follow docs/protocol.md: device d advertises max_shares
// slots `<device-id>::<k>`, k in [0, max_shares).
//
// Slot choice (AssignSlots): per device, a pod's containers reuse the pod's
// own slots the way kubelet reuses devices: an init container may take any slot
// the pod already holds on that device (init containers run one at a time
// before the rest); a regular or sidecar container takes a slot of the pod not
// yet held by another regular or sidecar container, else a new free slot.
// Example: init 4 GiB on gpu0 then main 4 GiB on gpu0 -> both get slot 1 when
// slot 0 is someone else's; the pod occupies one slot.
//
// Thread-safety: plain values and pure functions. NodeSnapshot is shared
// read-only between threads once published by the cache.
#ifndef ACCELPOOL_EXTENDER_NODE_STATE_H_
#define ACCELPOOL_EXTENDER_NODE_STATE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::extender {

struct InventoryState {
  std::shared_ptr<const core::NodeInventory> inventory;
  core::NodeUsage usage;
  std::vector<std::vector<bool>> slots;  // [device][slot] taken

  static InventoryState Empty(std::shared_ptr<const core::NodeInventory> inv);
};

// Network domains of a node, narrowest first after the node itself.
struct NodeDomains {
  std::string super_node;
  std::string rack;
  std::string block;
  // The node has a PreferNoSchedule taint: kube-scheduler's TaintToleration
  // score can prefer other nodes, so filter must not pick one node alone.
  bool prefer_no_schedule = false;
  friend bool operator==(const NodeDomains&, const NodeDomains&) = default;
};

struct NodePlan;  // planner.h

// Plans already made on one snapshot, by request shape (the extender's memo).
// Lives inside the immutable snapshot it belongs to, so it is dropped with
// the snapshot and a new version of the node starts empty: a copy of a
// snapshot never inherits its plans.
class PlanMemo {
 public:
  static constexpr size_t kMaxShapes = 4;

  PlanMemo() = default;
  PlanMemo(const PlanMemo&) {}
  PlanMemo& operator=(const PlanMemo&) {
    std::lock_guard<std::mutex> lock(mu_);
    plans_.clear();
    return *this;
  }

  std::shared_ptr<const NodePlan> Find(const std::string& shape) const;
  void Put(const std::string& shape, std::shared_ptr<const NodePlan> plan) const;

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::string, std::shared_ptr<const NodePlan>>> plans_;  // by mu_
};

struct NodeSnapshot {
  std::string name;
  uint64_t version = 0;     // bumps on every change of this node's state
  int64_t generation = 0;   // the inventory document's generation
  Status inventory_status;  // not OK when the node's inventory did not parse
  std::vector<InventoryState> inventories;
  NodeDomains domains;
  int32_t devices = 0;  // devices over all inventories, set with them
  int32_t pods = 0;     // pods holding devices here
  // Pods bound here whose accelpool.io/assignment does not parse and names
  // no device of the node that could still be read ("ns/name" by uid): the
  // devices they use are unknown, so no new grant lands on the node while any
  // is listed (Cache::ObservePod).
  std::map<std::string, std::string> unreadable_pods;
  // Host CPU and memory, when the cache tracks them (Cache::TrackHost):
  // the Node's status.allocatable, and the requests of the pods bound here
  // (every scheduler's, finished pods left out). Each inventory's
  // usage.host_free is allocatable less requested (SetHostFree).
  std::optional<core::HostResources> host_allocatable;
  core::HostResources host_requested;
  int32_t host_pods = 0;
  std::chrono::steady_clock::time_point updated;
  PlanMemo memo;  // thread-safe; see PlanMemo

  // nullptr when the node has no inventory of `v`.
  const InventoryState* Find(core::Vendor v) const;
  InventoryState* Find(core::Vendor v);
  // True when no pod holds devices here (no assignment is applied).
  bool Idle() const;
  int32_t FreeWholeDevices() const;
  // Sets every inventory's usage.host_free from host_allocatable and
  // host_requested (not below zero); nullopt when `track` is false or the
  // allocatable is unknown.
  void SetHostFree(bool track);
};
using NodeSnapshotPtr = std::shared_ptr<const NodeSnapshot>;

// One vendor's share of a pod's assignment.
struct AssignmentPart {
  core::Vendor vendor = core::Vendor::kUnknown;
  core::Placement placement;
  // slots[c][g]: slot index of placement.containers[c].grants[g].
  std::vector<std::vector<int32_t>> slots;
  // Device::id of each device index the placement names, as the inventory
  // the part was planned on (or the annotation it was read from) had it.
  // Grants follow these ids when the node's inventory changes (a device
  // missing, indices shifted). Empty: learned from the node on first use.
  std::map<int32_t, std::string> device_ids;
  friend bool operator==(const AssignmentPart&, const AssignmentPart&) = default;
};

struct PodAssignment {
  std::string node;
  std::string policy;
  std::vector<AssignmentPart> parts;
  bool empty() const { return parts.empty(); }
  friend bool operator==(const PodAssignment&, const PodAssignment&) = default;
};

// The same grants on the same devices: parts, containers, grants and slots
// alike, with devices compared by id where both sides know it (else by index).
// Tells a reservation from the annotation it was bound with even when the
// node's device indices moved between planning and binding.
bool SameAssignment(const PodAssignment& a, const PodAssignment& b);

// `part` in the indices of `inv`, following part.device_ids (indices without a
// recorded id are kept). kFailedPrecondition naming the device when one it
// needs is no longer in `inv`.
StatusOr<AssignmentPart> ReindexPart(const AssignmentPart& part, const core::NodeInventory& inv);

// The device ids of every index `part` names, from `inv` (planning).
void RecordDeviceIds(AssignmentPart& part, const core::NodeInventory& inv);

// "<device-id>::<slot>".
std::string SlotId(const core::Device& d, int32_t slot);

// Chooses slots for `placement` on `state` (see the file comment).
// kFailedPrecondition when a device has no free slot left.
StatusOr<std::vector<std::vector<int32_t>>> AssignSlots(const InventoryState& state,
                                                        const core::Placement& placement);

// Adds `part` (usage and slots) to `state`; changes nothing and returns
// kFailedPrecondition when it would overcommit a device or take a taken slot.
Status ApplyPart(const AssignmentPart& part, InventoryState* state);
// Adds `part` as it is (core::ForcePlacement): for a bound pod whose grants
// overlap another's. A slot another grant holds (or one that does not exist)
// is left to its holder: the part returned, which is what was added and what
// ReleasePart must be given, names slot -1 there.
StatusOr<AssignmentPart> ForcePart(const AssignmentPart& part, InventoryState* state);
// Removes `part`; tolerant of slots already free.
Status ReleasePart(const AssignmentPart& part, InventoryState* state);

// Adds every part of `a` to `s` (and counts the pod), all or nothing.
Status ApplyAssignment(const PodAssignment& a, NodeSnapshot* s);
// Removes every part of `a` from `s`.
void ReleaseAssignment(const PodAssignment& a, NodeSnapshot* s);

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_NODE_STATE_H_
