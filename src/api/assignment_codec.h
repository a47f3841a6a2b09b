// Codecs for the pod annotations accelpool.io/assignment (written by the
// extender) and accelpool.io/allocation (written by the device plugin), and
// the conversion between an assignment and core::Placement.
//
// Parse is strict in the same way as the inventory codec: type-checked,
// errors name the JSON path. Slot ids are "<device-id>::<slot>". Container
// names must be Kubernetes container names (DNS-1123 labels): the device
// plugin builds host paths from them, and any user can write the annotation on
// their own pod, so nothing else is let through.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_API_ASSIGNMENT_CODEC_H_
#define ACCELPOOL_API_ASSIGNMENT_CODEC_H_

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::api {

inline constexpr const char* kAssignmentAnnotation = "accelpool.io/assignment";
inline constexpr const char* kAllocationAnnotation = "accelpool.io/allocation";

struct AssignedDevice {
  std::string id;     // Device::id
  int32_t index = 0;  // Device::index on the node
  std::string slot;   // "<id>::<n>"
  int64_t memory_mib = 0;
  int32_t compute = 0;  // thousandths
  bool exclusive = false;
  friend bool operator==(const AssignedDevice&, const AssignedDevice&) = default;
};

struct AssignedContainer {
  std::string name;
  core::ContainerKind kind = core::ContainerKind::kRegular;
  core::Vendor vendor = core::Vendor::kUnknown;
  std::string resource;  // the count resource the container asked through
  std::vector<AssignedDevice> devices;
  friend bool operator==(const AssignedContainer&, const AssignedContainer&) = default;
};

struct Assignment {
  std::string node;
  std::string policy;
  std::vector<AssignedContainer> containers;
  friend bool operator==(const Assignment&, const Assignment&) = default;
};

enum class AllocationPhase : uint8_t { kAllocated, kFailed };

// A container's devices of one resource, allocated. The extender writes one
// assignment entry per resource a container asks through (a container asking
// for the devices of two vendors has two), and kubelet allocates each on its
// own, so what is allocated is recorded by both. `resource` empty: every
// resource of the container (a record written before resources were
// recorded, which named the container only).
struct AllocatedResource {
  std::string container;
  std::string resource;
  friend auto operator<=>(const AllocatedResource&, const AllocatedResource&) = default;
};

struct Allocation {
  AllocationPhase phase = AllocationPhase::kAllocated;
  // On the wire as "allocated" ([{"container","resource"}]) and, for readers
  // that know names only, the containers' names in "containers". A record
  // without "allocated" (an older plugin's), or a name of "containers" that
  // no entry of "allocated" names, reads as {name, ""}: every resource of
  // that container, which is what the older plugin meant by it.
  std::vector<AllocatedResource> allocated;
  std::string message;
  friend bool operator==(const Allocation&, const Allocation&) = default;
};

// OK when `name` is a DNS-1123 label, as Kubernetes requires of container
// names: 1-63 characters of [a-z0-9-], starting and ending with [a-z0-9].
// kInvalidArgument saying so otherwise.
Status CheckContainerName(std::string_view name);
// OK when `uid` is made of plain uid characters, as the apiserver writes
// metadata.uid (a UUID): 1-64 characters of [A-Za-z0-9-]. kInvalidArgument
// otherwise.
Status CheckPodUid(std::string_view uid);

// kInvalidArgument naming the JSON path for a malformed document, including a
// container name that CheckContainerName refuses.
StatusOr<Assignment> ParseAssignment(std::string_view text);
StatusOr<Assignment> AssignmentFromJson(const nlohmann::json& doc);
nlohmann::json AssignmentToJson(const Assignment& a);
std::string SerializeAssignment(const Assignment& a);

StatusOr<Allocation> ParseAllocation(std::string_view text);
std::string SerializeAllocation(const Allocation& a);
// The state a pod's accelpool.io/allocation holds once `ours` (one device
// plugin's state of the pod) is written over `on_pod` (what is there, which
// another vendor's plugin may have written for its own containers): the
// entries of both, in that order, each once; Failed when either is, with
// the message of ours when ours failed.
Allocation MergeAllocation(const Allocation& on_pod, const Allocation& ours);

std::string_view ContainerKindName(core::ContainerKind k);  // regular|init|sidecar
std::optional<core::ContainerKind> ParseContainerKind(std::string_view s);

// "<device-id>::<slot>".
std::string SlotId(std::string_view device_id, int32_t slot);
// Splits a slot id at the last "::"; kInvalidArgument when malformed.
StatusOr<std::pair<std::string, int32_t>> ParseSlotId(std::string_view slot_id);

// The placement of the containers of `a` whose vendor is inv.vendor. Each
// device is found by id in `inv`; kFailedPrecondition when an id is unknown
// or its index disagrees (the inventory changed since the assignment).
StatusOr<core::Placement> ToPlacement(const Assignment& a, const core::NodeInventory& inv);

// Appends the containers of `placement` (devices of `inv`) to `a`.
// `resource_of(container)` gives the count resource each container asked
// through; `slot_of(device_index, container)` picks the slot number on that
// device (the caller knows which slots are taken). kInvalidArgument when a
// grant names a device index outside `inv`.
Status AppendPlacement(
    Assignment& a, const core::Placement& placement, const core::NodeInventory& inv,
    const std::function<std::string(const std::string& container)>& resource_of,
    const std::function<int32_t(int32_t device_index, const std::string& container)>& slot_of);

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_ASSIGNMENT_CODEC_H_
