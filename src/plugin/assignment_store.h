// AssignmentStore: the assignments of the pods on this node, as the extender
// recorded them (accelpool.io/assignment), and which of their containers the
// plugin has already allocated. It answers the two questions kubelet's calls
// raise: "which pending container do these slot ids belong to?" (Allocate)
// and "which slot ids should kubelet pick for the next container?"
// (GetPreferredAllocation).
//
// Identity rule (docs/protocol.md): slot ids are unique on the node and the
// extender chose them, so the container whose assigned slots are exactly the
// requested ids is the one.
//
// Fallback rule: kubelet may allocate ids other than the assigned ones (it
// reuses an init container's devices for the next container, it skips
// GetPreferredAllocation when exactly `size` slots are free, a topology hint
// overrides the preference), and then the ids identify nobody. The store
// then answers the one pending container that asks for the same resource and
// count, but only when it is the only possible caller on the node: exactly
// one such pending container, and no pod that asks for that resource without
// an accelpool assignment for it (SetUnassigned: a pod of another scheduler,
// or one whose assignment was refused). Anything else would hand one pod
// another pod's devices and limits, so the lookup fails instead.
//
// Worked example (1 x nvidia.com/gpu, kubelet sends GPU-b::9, assigned to
// nobody): pending a/main (GPU-a::1) only -> a/main. Pending a/main and
// b/main -> refused (kAborted). Pending a/main plus pod u (default
// scheduler, limits nvidia.com/gpu: 1) -> refused (kAborted). Only pod u ->
// refused (kNotFound), and u is named as the caller.
//
// Thread-safety: all methods may be called from any thread (one mutex, never
// held across I/O). Lookups copy what they return.
#ifndef ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_
#define ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/assignment_codec.h"
#include "common/status.h"

namespace accelpool::plugin {

struct PodRef {
  std::string ns;
  std::string name;
  std::string uid;
  std::string created;  // metadata.creationTimestamp (RFC 3339 sorts as text)
  std::string Key() const { return ns + "/" + name; }
};

struct PodAssignment {
  PodRef pod;
  api::Assignment assignment;
  std::set<std::string> allocated;  // containers already allocated
};

// A container of a pod on this node that asks for a device resource with no
// accelpool assignment for it. Only pods kubelet may still admit (Pending and
// not yet admitted) are recorded: those are the possible Allocate callers.
struct UnassignedRequest {
  std::string container;
  std::string resource;
  int64_t count = -1;  // -1 when the quantity does not parse: any count
  friend bool operator==(const UnassignedRequest&, const UnassignedRequest&) = default;
};

// One container's share of an Allocate answer.
struct ContainerMatch {
  PodRef pod;
  api::AssignedContainer container;
  bool by_fallback = false;  // matched by resource + count, not by slot ids
  bool repeat = false;       // the container was allocated before (kubelet retried)
};

class AssignmentStore {
 public:
  // Adds or replaces the pod's assignment, keeping what was allocated when the
  // pod (uid) is the same.
  void Upsert(const PodRef& pod, const api::Assignment& assignment,
              const std::set<std::string>& allocated);
  // Replaces what the pod asks for without an assignment (empty: nothing).
  void SetUnassigned(const PodRef& pod, std::vector<UnassignedRequest> requests);
  // Both at once, so that a concurrent Match never sees the pod half updated:
  // Upsert when `assignment` is set, else drops the pod's assignment; then
  // SetUnassigned.
  void Replace(const PodRef& pod, const api::Assignment* assignment,
               const std::set<std::string>& allocated, std::vector<UnassignedRequest> unassigned);
  // Forgets the pod: its assignment and its unassigned requests.
  void Remove(const std::string& uid);
  // After a list of the node's Pending pods (their uids in `pending`): drops
  // the pods not in it that have no allocated container (deleted, or done,
  // while the watch lagged) and the unassigned requests of pods not in it
  // (only a pod kubelet may still admit can be a caller). Pods with an
  // allocated container stay until the watch says they are gone.
  void RetainPending(const std::set<std::string>& pending);

  // The container whose `resource` slots equal `slot_ids` (order ignored); a
  // pending container wins over an allocated one. Else, by the fallback rule
  // above, the only pending container with `resource` and that many devices
  // (by_fallback). Errors, whose messages say what to do:
  //   kNotFound  no pending container asks for that resource and count; when
  //              exactly one pod asks for it without an assignment, that pod
  //              is the caller and is stored in `*caller` (when not null).
  //   kAborted   several pods could be the caller; nothing tells them apart.
  StatusOr<ContainerMatch> Match(const std::string& resource,
                                 const std::vector<std::string>& slot_ids,
                                 std::optional<PodRef>* caller = nullptr) const;

  // The slot ids of the oldest pending container of `resource` whose slots
  // number `size`, are all in `available` and include `must_include`.
  std::optional<std::vector<std::string>> Preferred(const std::string& resource,
                                                    const std::set<std::string>& available,
                                                    const std::vector<std::string>& must_include,
                                                    int32_t size) const;

  // Marks containers of the pod allocated; returns every allocated container
  // of the pod afterwards (for the allocation annotation).
  std::vector<std::string> MarkAllocated(const std::string& uid,
                                         const std::vector<std::string>& containers);

  // The allocated containers of the pod, in assignment order (empty when the
  // pod is unknown).
  std::vector<std::string> AllocatedContainers(const std::string& uid) const;

  // Every assignment (for usage metrics) and the number of pending containers.
  std::vector<PodAssignment> All() const;
  size_t PendingContainers() const;

 private:
  struct Unassigned {
    PodRef pod;
    std::vector<UnassignedRequest> requests;
  };

  // REQUIRES: mu_ held.
  void UpsertLocked(const PodRef& pod, const api::Assignment& assignment,
                    const std::set<std::string>& allocated);
  void SetUnassignedLocked(const PodRef& pod, std::vector<UnassignedRequest> requests);

  mutable std::mutex mu_;
  std::map<std::string, PodAssignment> pods_;     // by uid; guarded by mu_
  std::map<std::string, Unassigned> unassigned_;  // by uid; guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_
