// AssignmentStore: the assignments of the pods on this node, as the extender
// recorded them (accelpool.io/assignment), and which of their entries (a
// container's devices of one resource) the plugin has already allocated. It answers the two
// questions kubelet's calls raise: "which pending container do these slot ids belong to?"
// (Allocate) and "which slot ids should kubelet pick for the next container?"
// (GetPreferredAllocation).
//
// Kubelet's calls do not say which pod is asking, only device ids and a
// count. Who is calling is settled first, most certain evidence first
// (docs/protocol.md, "Who is calling"):
//   1. init reuse: an id an allocated plain init container of pod P held.
//      Kubelet hands such devices only to later containers of the same pod.
//   2. kubelet's own view (KubeletView, from its pod-resources API), asked
//      when several pods could be calling and to confirm a pod rules 3 and 4
//      name: kubelet adds a pod to its pod manager just before admitting it,
//      one pod at a time, so among the pods waiting with this shape the one
//      kubelet lists (without devices yet for the pending container) is the
//      caller. A kubelet before 1.34 (or with KubeletPodResourcesListUseActivePods
//      off) also lists pods it turned away until they are deleted; when it
//      lists several pods of the shape as being admitted, the match names
//      the newest and says `listed_several`: the allocator re-reads the
//      node's pods until the others' Failed status has arrived, and refuses
//      when it does not (creation times tie within a second, and a pod
//      created earlier may reach kubelet later, so no order names the
//      caller for sure). Once the view is read, a pod it does not list is nobody's
//      caller, and a pod it lists that this plugin does not know (a static
//      pod: its mirror pod is created only after kubelet admitted it) counts
//      as a pod asking without an assignment. One exception: a view that
//      lists no pod that may be waiting at all (a kubelet that lists pods
//      only once they run) says nothing about the caller, and rules 3 and 4
//      decide as without it.
//   3. the slot ids: the container whose assigned slots are exactly the ids
//      (GetPreferredAllocation steered kubelet to them). When other pods wait
//      with the same shape this is right only if the steering was for the
//      caller, so the match is marked `ambiguous` and the allocator asks
//      kubelet (2) when it can.
//   4. the only candidate: exactly one pending container on the node asks for
//      that resource and count, and no pod asks for it without an accelpool
//      assignment (SetUnassigned: a pod of another scheduler, or one whose
//      assignment was refused).
// Anything else would hand one pod another pod's devices and limits, so the
// lookup fails instead. The caller's container is then its first pending
// container, in kubelet's order (init containers, then regular ones), that
// asks for that resource and count; it is answered with its own assignment,
// whatever ids kubelet chose.
//
// Worked example (1 x nvidia.com/gpu, kubelet sends GPU-b::9, assigned to
// nobody): pending a/main (GPU-a::1) only -> a/main. Pending a/main and
// b/main -> refused (kAborted), unless kubelet lists b and not a -> b/main.
// Pending a/main plus pod u (default scheduler, limits nvidia.com/gpu: 1) ->
// refused (kAborted). Only pod u -> refused (kNotFound), and u is named as the
// caller. Kubelet sends GPU-a::1 while a/main and b/main wait: a/main,
// ambiguous; with kubelet listing only b: b/main.
//
// Presumed allocations. A container of an admitted pod is presumed allocated
// when nothing recorded its Allocate. It is no candidate while any other
// answer exists, so a pod whose record was lost never makes later pods of its
// shape ambiguous; only when a lookup finds no caller at all is it repeated
// with presumed containers counted as pending (an Allocate kubelet makes
// after the pod reported a status: a kubelet that restarted, or a test
// harness that marks pods running before admitting them).
//
// Admitted again. Kubelet writes its device checkpoint after Allocate and
// before it starts the container; one that dies in between comes back with no
// record of the pod, admits it again, and reports the pod's devices among
// those available. When no pending container can be asking, Preferred offers
// the slots of an allocated (or presumed) container of that shape whose slots
// kubelet reports free: the oldest pod's, or the one kubelet's view lists
// without devices. Kubelet then sends those ids and Match answers the repeat
// with the container's own grant. Were another pod of that shape waiting,
// kubelet's view tells the two apart (it admits pods oldest first and lists
// only those it has reached: the pod admitted again, its container without
// devices); without the view the waiting pod is preferred.
//
// Pods being deleted. An admitted pod with a deletionTimestamp still runs
// through its grace period: it stays in All() (its grants still count for
// usage and foreign memory) but, marked terminating, no lookup sees it.
//
// Thread-safety: all methods may be called from any thread (one mutex, never
// held across I/O). Lookups copy what they return.
#ifndef ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_
#define ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/assignment_codec.h"
#include "common/status.h"

namespace accelpool::plugin {

struct PodRef {
  std::string ns;
  std::string name;
  std::string uid;
  std::string created;  // metadata.creationTimestamp (RFC 3339 sorts as text)
  // Containers (init ones included) that ask for high task priority
  // (nvidia.com/priority 0, api::HighTaskPriority); the others are low.
  std::set<std::string> high_priority = {};
  std::string Key() const { return ns + "/" + name; }
};

// What of a pod is allocated, by (container, resource): an assignment has
// one entry per resource a container asks through (a container asking for
// the devices of two vendors has two), and kubelet allocates each on its own.
// A key with an empty resource (from a record that named containers only)
// stands for every entry of the container.
using AllocatedSet = std::set<api::AllocatedResource>;

// Whether `set` holds the assignment entry `c`.
inline bool Holds(const AllocatedSet& set, const api::AssignedContainer& c) {
  return set.contains({c.name, c.resource}) || set.contains({c.name, ""});
}

struct PodAssignment {
  PodRef pod;
  api::Assignment assignment;
  AllocatedSet allocated;  // entries already allocated
  // Entries presumed allocated: the pod was admitted (kubelet makes every
  // Allocate call of a pod before it reports any status) but neither an
  // Allocate nor the pod's allocation record says so (a record lost to a
  // plugin restart). See "Presumed allocations" above.
  AllocatedSet presumed;
  // The pod is being deleted while its containers still run (their grace
  // period): its grants count for usage and foreign memory, but Match and
  // Preferred never take it for a caller, a repeat or a pod admitted again.
  bool terminating = false;
};

// Whether the grant holds its device whole: marked exclusive, or with no
// memory and no compute share named (an assignment written without them
// grants the whole device). Enforcement, the usage metrics and the foreign
// memory check all go by this one rule.
inline bool GrantsWholeDevice(const api::AssignedDevice& d) {
  return d.exclusive || (d.memory_mib == 0 && d.compute == 0);
}

// A container of a pod on this node that asks for a device resource with no
// accelpool assignment for it. Only pods kubelet may still admit (Pending and
// not yet admitted) are recorded: those are the possible Allocate callers.
struct UnassignedRequest {
  std::string container;
  std::string resource;
  int64_t count = -1;  // -1 when the quantity does not parse: any count
  friend bool operator==(const UnassignedRequest&, const UnassignedRequest&) = default;
};

// What kubelet lists (pod-resources API, List): pod "<ns>/<name>" ->
// container -> the resources it holds devices of. Kubelet lists regular and
// sidecar containers, not plain init containers.
using KubeletView = std::map<std::string, std::map<std::string, std::set<std::string>>>;

// (pod uid, container) pairs already answered earlier in the same Allocate
// call: kubelet may ask for several containers in one call, and the store
// is marked only once the whole call succeeded.
using AnsweredContainers = std::set<std::pair<std::string, std::string>>;

// One container's share of an Allocate answer.
struct ContainerMatch {
  enum class How { kSlots, kInitReuse, kKubelet, kOnlyCandidate };
  PodRef pod;
  api::AssignedContainer container;
  bool by_fallback = false;  // the only candidate by resource + count (How::kOnlyCandidate)
  bool repeat = false;       // the container was allocated before (kubelet retried)
  How how = How::kSlots;
  // By the slot ids while other pods wait with the same shape (rule 3), or
  // the newest of several pods kubelet's view lists (`listed_several`).
  bool ambiguous = false;
  bool listed_several = false;
  std::vector<std::string> listed = {};  // with listed_several: "<ns>/<name>" of each listed pod
  // A container presumed allocated ("Presumed allocations"), answered as if
  // pending because nobody else could be asking.
  bool presumed = false;
};

// Whether kubelet's view lists `pod` as being admitted now, with `container`
// still to be allocated devices of `resource`: the pod is listed, and the
// container is a plain init container (kubelet does not list those), is not
// listed, or is listed without devices of `resource`.
bool KubeletAdmitting(const KubeletView& kubelet, const PodRef& pod,
                      const api::AssignedContainer& container, const std::string& resource);

struct PreferredAnswer {
  std::optional<std::vector<std::string>> slots;  // none: no preference
  // Several pods wait with that shape and the answer is the oldest one's.
  bool ambiguous = false;
  // Kubelet's view lists several of them as being admitted: the answer is
  // slots nobody is promised (with `foreign`), and Allocate settles it.
  bool listed_several = false;
  // No pending container could be asking; the answer is a pod admitted again
  // ("Admitted again"): worth confirming on the node's pods as they are now.
  bool readmitted = false;
  // The only pod waiting with that shape, chosen without kubelet's view: the
  // caller may be a pod this plugin does not know (a static pod, whose mirror
  // pod is created only after kubelet admitted it), so the view is worth
  // asking.
  bool unchecked = false;
  // Kubelet's view lists no pod waiting with that shape but a pod that has no
  // assignment here (a pod of another scheduler, or one the plugin does not
  // know yet): the answer avoids every pending container's slots.
  bool foreign = false;
};

class AssignmentStore {
 public:
  // Adds or replaces the pod's assignment, keeping what was allocated when the
  // pod (uid) is the same; `presumed` replaces the pod's presumed containers.
  void Upsert(const PodRef& pod, const api::Assignment& assignment, const AllocatedSet& allocated,
              const AllocatedSet& presumed = {});
  // Replaces what the pod asks for without an assignment (empty: nothing).
  void SetUnassigned(const PodRef& pod, std::vector<UnassignedRequest> requests);
  // Both at once, so that a concurrent Match never sees the pod half updated:
  // Upsert when `assignment` is set, else drops the pod's assignment; then
  // SetUnassigned. `terminating`: see PodAssignment.
  void Replace(const PodRef& pod, const api::Assignment* assignment, const AllocatedSet& allocated,
               std::vector<UnassignedRequest> unassigned, const AllocatedSet& presumed = {},
               bool terminating = false);
  // Forgets the pod: its assignment and its unassigned requests. Its name is
  // kept as known for kGoneMemory (a pod force-deleted while its containers
  // still stop is no stranger in kubelet's view).
  void Remove(const std::string& uid);
  static constexpr std::chrono::minutes kGoneMemory{10};
  // Whether the apiserver's pods of the node have been listed (PodSync's
  // informer synced): before, every pod kubelet's view lists is unknown here
  // and none may be taken for a stranger. Null (the default): listed.
  void SetPodsListed(std::function<bool()> listed);
  // An Allocate for the pod failed: kubelet turns it away and never admits
  // it again, so a pod not admitted yet (nothing presumed, not terminating)
  // is forgotten at once, before kubelet's Failed status comes back, and the
  // next pod kubelet admits cannot be matched to its grant. Returns whether
  // it was.
  // The pod is remembered as turned away for kGoneMemory: a re-read of the
  // node's pods, or an update of the pod, before kubelet's Failed status
  // arrives does not make it a candidate again. (The allocator does not call
  // it after a repeat: kubelet also calls again for a running pod.)
  bool RejectAdmission(const std::string& uid);
  // After a list of the node's Pending pods, or of all its pods that have
  // not ended (their uids in `pending`): drops the pods not in it that have
  // no allocated container (deleted, or done, while the watch lagged) and
  // the unassigned requests of pods not in it (only a pod kubelet may still
  // admit can be a caller). Pods with an allocated container stay until the
  // watch says they are gone.
  void RetainPending(const std::set<std::string>& pending);

  // The container kubelet is allocating `slot_ids` (of `resource`) for, by
  // the rules above; `kubelet` (may be null) is kubelet's view of its pods.
  // An allocated container whose slots are the ids, when nobody else can be
  // asking, is a repeat. Errors, whose messages say what to do:
  //   kNotFound  no pending container asks for that resource and count; when
  //              exactly one pod asks for it without an assignment, that pod
  //              is the caller and is stored in `*caller` (when not null).
  //   kAborted   several pods could be the caller; nothing tells them apart.
  // The containers in `answered` (may be null) were answered earlier in the
  // same call: none of them is matched again, neither as pending nor as a
  // repeat, so that one call never hands out one grant twice.
  StatusOr<ContainerMatch> Match(const std::string& resource,
                                 const std::vector<std::string>& slot_ids,
                                 std::optional<PodRef>* caller = nullptr,
                                 const KubeletView* kubelet = nullptr,
                                 const AnsweredContainers* answered = nullptr) const;

  // The slot ids kubelet should pick for the caller's next container of
  // `resource` with `size` devices: the caller's own slots when they are in
  // `available` (or `must_include`) and include `must_include`, else slots no
  // pending container is assigned. The caller is found as in Match (init
  // reuse through `must_include`, the only pod waiting with that shape,
  // kubelet's view); when several pods wait and nothing tells them apart, the
  // oldest one's slots, marked ambiguous. With no pending caller, a pod
  // admitted again ("Admitted again").
  PreferredAnswer Preferred(const std::string& resource, const std::set<std::string>& available,
                            const std::vector<std::string>& must_include, int32_t size,
                            const KubeletView* kubelet = nullptr) const;

  // Marks the entries of `resource` of the pod's `containers` allocated;
  // returns every allocated entry of the pod afterwards (for the allocation
  // annotation).
  std::vector<api::AllocatedResource> MarkAllocated(const std::string& uid,
                                                    const std::string& resource,
                                                    const std::vector<std::string>& containers);

  // The allocated entries of the pod, in assignment order (empty when the
  // pod is unknown).
  std::vector<api::AllocatedResource> AllocatedContainers(const std::string& uid) const;

  // Every assignment (for usage metrics) and the number of pending containers
  // (presumed ones are not pending).
  std::vector<PodAssignment> All() const;
  size_t PendingContainers() const;

 private:
  struct Unassigned {
    PodRef pod;
    std::vector<UnassignedRequest> requests;
  };

  using Pods = std::map<std::string, PodAssignment>;
  // REQUIRES: mu_ held.
  void UpsertLocked(const PodRef& pod, const api::Assignment& assignment,
                    const AllocatedSet& allocated, const AllocatedSet& presumed,
                    bool terminating = false);
  // Match and Preferred over `pods` (pods_, or pods_ with presumed
  // containers counted as allocated). REQUIRES: mu_ held.
  StatusOr<ContainerMatch> MatchIn(const Pods& pods, const std::string& resource,
                                   const std::vector<std::string>& slot_ids,
                                   std::optional<PodRef>* caller, const KubeletView* kubelet) const;
  PreferredAnswer PreferredIn(const Pods& pods, const std::string& resource,
                              const std::set<std::string>& available,
                              const std::vector<std::string>& must_include, int32_t size,
                              const KubeletView* kubelet) const;
  // `pods` with every presumed container counted as allocated; nullopt when
  // no pod has one. REQUIRES: mu_ held.
  static std::optional<Pods> WithPresumedAllocated(const Pods& pods);
  // Preferred when no pending container can be asking: a kubelet that lost
  // its checkpoint admitting a pod again ("Admitted again" above).
  // REQUIRES: mu_ held.
  PreferredAnswer Readmitted(const std::string& resource, const std::set<std::string>& available,
                             const std::vector<std::string>& must_include, int32_t size,
                             const KubeletView* kubelet) const;
  // The pods kubelet's view lists that may be waiting for `n` devices of
  // `resource` without an assignment for them: pods that ask for them
  // without one (`known`), and pods this plugin has not seen (`unknown`): a
  // static pod, whose mirror pod the apiserver gets only after kubelet
  // admitted it, or a pod bound a moment ago. A pod whose listed containers
  // all hold devices of `resource` already is not waiting for them.
  // REQUIRES: mu_ held.
  void ListedWithoutAssignment(const std::string& resource, size_t n, const KubeletView& kubelet,
                               std::vector<PodRef>* known, std::vector<PodRef>* unknown) const;
  // PreferredIn's answer among the pods waiting with the shape (`shape`,
  // oldest first). REQUIRES: mu_ held.
  PreferredAnswer PreferredForPending(const std::vector<const PodAssignment*>& oldest,
                                      const std::vector<const PodAssignment*>& shape,
                                      const std::string& resource,
                                      const std::set<std::string>& available,
                                      const std::vector<std::string>& must_include, size_t n,
                                      const KubeletView* kubelet) const;
  // Whether a presumed container asks for `n` devices of `resource`.
  // REQUIRES: mu_ held.
  bool PresumedAsks(const std::string& resource, size_t n) const;
  void SetUnassignedLocked(const PodRef& pod, std::vector<UnassignedRequest> requests);
  // Whether RejectAdmission forgot the pod less than kGoneMemory ago.
  // REQUIRES: mu_ held.
  bool TurnedAwayLocked(const std::string& uid) const;

  mutable std::mutex mu_;
  std::map<std::string, PodAssignment> pods_;     // by uid; guarded by mu_
  std::map<std::string, Unassigned> unassigned_;  // by uid; guarded by mu_
  // "<ns>/<name>" of every pod the store was told about (with or without an
  // assignment), by uid, until Remove: a pod kubelet's view lists that is
  // not here is one the apiserver has not shown this plugin. Guarded by mu_.
  std::map<std::string, std::string> known_;
  // "<ns>/<name>" of pods removed, and when; pruned past kGoneMemory.
  // Guarded by mu_.
  std::map<std::string, std::chrono::steady_clock::time_point> gone_;
  // Uids of pods RejectAdmission forgot, and when; pruned past kGoneMemory.
  // Guarded by mu_.
  std::map<std::string, std::chrono::steady_clock::time_point> turned_away_;
  std::function<bool()> pods_listed_;  // guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_
