// Conversions between the Kubernetes objects (via src/api codecs) and the
// extender's own types: pod JSON -> PodInfo, node JSON -> cache entry,
// PodAssignment <-> the accelpool.io/assignment document.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_EXTENDER_CONVERT_H_
#define ACCELPOOL_EXTENDER_CONVERT_H_

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/assignment_codec.h"
#include "api/pod_request.h"
#include "common/status.h"
#include "extender/node_state.h"
#include "extender/planner.h"

namespace accelpool::extender {

// Node labels that name a node's network domains (a value in the inventory's
// topology wins when set).
inline constexpr const char* kSuperNodeLabel = "accelpool.io/super-node";
// NVIDIA's label for a node's multi-node NVLink domain (GPU feature
// discovery: "<cluster uuid>.<clique id>"), read as the super node when
// accelpool.io/super-node is not set and the inventory names none.
inline constexpr const char* kNvidiaCliqueLabel = "nvidia.com/gpu.clique";
inline constexpr const char* kRackLabel = "accelpool.io/rack";
inline constexpr const char* kBlockLabel = "accelpool.io/block";

// Node annotation an operator sets to take single devices out of service
// without draining the node: device ids (the inventory's `id`, e.g. a GPU
// UUID) separated by commas. No new grant lands on a listed device; pods that
// hold one keep it. Ids the node does not list are reported and ignored.
inline constexpr const char* kCordonedDevicesAnnotation = "accelpool.io/cordoned-devices";

// A pod as the extender needs it. kInvalidArgument (naming the container and
// resource) when the pod's device request is malformed.
StatusOr<PodInfo> PodInfoFromJson(const nlohmann::json& pod);

// What the cache keeps of a node object.
struct NodeEntry {
  std::string name;
  StatusOr<std::vector<core::NodeInventory>> inventories{
      StatusOr<std::vector<core::NodeInventory>>(std::vector<core::NodeInventory>{})};
  int64_t generation = 0;
  NodeDomains domains;
  bool has_inventory = false;  // the annotation is present
  // Ids of the devices the cordon annotation takes out of service, in the
  // annotation's order.
  std::vector<std::string> cordoned;
  // Entries of the cordon annotation that name no device of the node (a typo,
  // or a card the node no longer lists), in the annotation's order.
  std::vector<std::string> cordon_unknown;
  // status.allocatable CPU and memory; nullopt when absent or malformed
  // (allocatable_error says which).
  std::optional<core::HostResources> allocatable;
  std::string allocatable_error;
};
// kInvalidArgument when the object has no metadata.name. An inventory that
// does not parse is reported inside the entry, not as an error.
StatusOr<NodeEntry> NodeEntryFromJson(const nlohmann::json& node);

// The parts of a Node object NodeEntryFromJson reads besides its name
// (labels, annotations, taints, allocatable), as one string: two objects of
// one name with equal strings give equal entries. A node's status is updated
// every few minutes for its heartbeat; this tells such an update from one
// that changes what the cache holds.
std::string NodeInputs(const nlohmann::json& node);

// The protocol document for `a` (`snap` supplies device ids; `pod` the
// container names and the resources they asked through).
StatusOr<api::Assignment> ToApiAssignment(const PodAssignment& a, const NodeSnapshot& snap,
                                          const PodInfo& pod);

// Back from the document: grants by the device index recorded, slots from the
// slot ids. kInvalidArgument for an unknown vendor or a malformed slot id.
StatusOr<PodAssignment> FromApiAssignment(const api::Assignment& a);

// What the cache needs from a pod watch event: its ref, spec.nodeName, its
// assignment (nullopt when absent or not parseable; `problem` says why), and
// whether it has finished (Succeeded/Failed). An annotation present that does
// not parse sets `unreadable_ids`: the device ids still read from it
// (AssignmentDeviceIds; maybe none), which the cache books instead.
struct ObservedPod {
  PodRef ref;
  std::string node_name;
  std::optional<PodAssignment> assignment;
  std::string problem;
  bool finished = false;
  std::optional<std::vector<std::string>> unreadable_ids = {};
};
ObservedPod ObservePodJson(const nlohmann::json& pod);

// The device ids an accelpool.io/assignment text names, read as loosely as
// it allows: every non-empty string at containers[*].devices[*].id, and the
// device part of every containers[*].devices[*].slot ("<id>::<n>"), whatever
// else in it is wrong. Empty when the text is not JSON or names none.
std::vector<std::string> AssignmentDeviceIds(std::string_view text);

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_CONVERT_H_
