// PodSync: keeps the AssignmentStore equal to the assignments recorded on the
// pods of this node. It runs an informer on pods with the field selector
// spec.nodeName=<node>, so a restarted plugin reads every pending assignment
// back from the apiserver before kubelet's next Allocate, and it never touches
// running containers.
//
// It also records, for each pod kubelet may still admit, the device resources
// its containers ask for without an assignment (a pod of another scheduler, or
// one whose assignment was refused), so that Allocate never hands such a pod
// another pod's assignment (AssignmentStore's fallback rule).
//
// With StateDirs it also removes the enforcement state dirs of pods that are
// gone: soon after the informer reports a pod deleted (on a worker thread of
// its own, from a bounded queue: a dir a container filled with millions of
// files must not hold up the informer's pod events), and through
// SweepStateDirs (called periodically by the owner) for pods that went while
// the plugin was not watching. A dir of a pod that still exists is never
// removed.
//
// Bad input never crashes and never books anything: a pod whose
// accelpool.io/assignment does not parse (container names must be DNS-1123
// labels), names another node or a container the pod does not have, or whose
// uid is not plain, or, while kubelet may still admit the pod, has an entry
// without a resource or with another number of devices than its container
// asks for of that resource, is left out of the store (its requests count as
// asked without an assignment), logged, and reported on the pod
// once per pod version (PodReporter::Failed -> an Event). With a key ring
// (SetAssignmentKeys) so is the assignment of a pod kubelet may still admit
// whose accelpool.io/assignment-signature does not verify: it was forged or
// edited by someone without the extender's key.
//
// Thread-safety: Start/Stop from the owner; Refresh() from any thread.
#ifndef ACCELPOOL_PLUGIN_POD_SYNC_H_
#define ACCELPOOL_PLUGIN_POD_SYNC_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/assignment_signature.h"
#include "api/task_priority.h"
#include "common/log.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "plugin/allocator.h"
#include "plugin/assignment_store.h"
#include "plugin/state_dirs.h"

namespace accelpool::plugin {

// What the store keeps for one pod object.
struct PodEntry {
  PodRef pod;
  api::Assignment assignment;
  AllocatedSet allocated;
  // An admitted pod's containers its allocation record does not list
  // (AssignmentStore: "Presumed allocations").
  AllocatedSet presumed;
  // Being deleted (deletionTimestamp) after kubelet admitted it: its
  // containers still run through their grace period, so their grants still
  // count (usage, foreign memory), but it is never an Allocate caller.
  bool terminating = false;
};

// The entry of a pod object. nullopt when the pod carries no assignment, is
// finished (Succeeded, Failed), or is being deleted before kubelet admitted
// it (nothing of it runs). An admitted pod being deleted keeps its entry,
// marked terminating, until it finishes or its delete event comes. kInvalidArgument when the
// assignment does not parse, names a container that is not in the pod's spec,
// or the uid is not plain, or kubelet may still admit the pod and an entry
// names no resource or not as many devices as its container asks for of it; kFailedPrecondition
// when it names another node; kPermissionDenied when `keys` is given, kubelet may still admit the
// pod and the assignment's signature does not verify.
StatusOr<std::optional<PodEntry>> EntryFromPod(const nlohmann::json& pod, const std::string& node,
                                               api::AssignmentKeyRing* keys = nullptr);

// What the pod's containers ask for (extended resources, from limits and
// requests) that `assignment` (may be null) does not cover, for the store's
// fallback rule. Empty unless kubelet may still admit the pod: phase Pending
// (or unset), not being deleted, no container status yet (kubelet allocates
// every container's devices at admission, before it reports any status).
std::vector<UnassignedRequest> UnassignedRequestsOf(const nlohmann::json& pod,
                                                    const api::Assignment* assignment);

class PodSync {
 public:
  // `dirs` may be null (no state dirs are removed); it must outlive PodSync.
  PodSync(kube::KubeClient* client, std::string node, AssignmentStore* store, PodReporter* reporter,
          Logger log, const StateDirs* dirs = nullptr);
  ~PodSync();

  // Before Start: refuse assignments whose signature does not verify with
  // these keys (must outlive PodSync), and call `on_refused` with a reason
  // (signature, unknown_key, other_node, malformed) for each pod version whose assignment
  // is refused.
  void SetAssignmentKeys(api::AssignmentKeyRing* keys) { keys_ = keys; }
  void OnRefused(std::function<void(const std::string& reason)> on_refused) {
    on_refused_ = std::move(on_refused);
  }
  // Before Start: the namespaces whose pods may have high task priority
  // (api/task_priority.h; default: none). A container of any other pod that
  // asks for it (nvidia.com/priority: 0, which the webhook refuses unless it
  // was bypassed) is stored as if it had not asked (low, never high); the
  // pod is logged once, with the reason, and `on_not_granted` called once.
  void SetHighPriorityNamespaces(api::HighPriorityNamespaces allowed) {
    high_priority_ = std::move(allowed);
  }
  void OnPriorityNotGranted(std::function<void()> on_not_granted) {
    on_priority_not_granted_ = std::move(on_not_granted);
  }
  // Before the first Forget: how a deleted pod's state dirs are removed, on
  // the remover's thread (default: StateDirs::RemovePod). For tests.
  using PodDirRemover = std::function<Status(const std::string& uid, size_t* removed)>;
  void SetPodDirRemover(PodDirRemover remover) { remove_pod_ = std::move(remover); }

  void Start();
  // Stops the informer, then the state-dir remover: a removal under way
  // ends first; pods still queued, and any Forget after this, are left to
  // the next sweep (logged).
  void Stop();
  // Whether the state dirs of every pod forgotten so far were removed (or
  // their removal failed) within `timeout`. For tests.
  bool WaitForRemovals(std::chrono::milliseconds timeout);
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  // Re-reads the node's Pending pods now into the store (used when a lookup
  // misses or falls back), leaving it as Apply of each of them would. It
  // lists their metadata only and reads in full only the pods whose
  // resourceVersion is not the one last applied (usually just the caller the
  // watch has not delivered yet), or relists them in full when more than
  // kMaxFetches are; when the apiserver answers the metadata-only list with
  // full objects, those are applied. Errors are logged and returned; the
  // store is then not pruned (pods read in full before the error are
  // applied).
  Status Refresh();
  // The same for every pod of the node that has not ended, Running ones
  // included (used when the Pending pods did not hold the caller).
  Status RefreshNotEnded();

  // The most pods Refresh reads one by one before it relists in full.
  static constexpr size_t kMaxFetches = 8;

  // Lists the node's pods (metadata only) and removes the state dirs of pods
  // not among them that were last modified over a minute before the list
  // began (a dir made since may belong to a pod bound after it). Errors are
  // logged and returned. While the informer runs, the list is served from
  // the apiserver's watch cache (resourceVersion=<the informer's last
  // version>, resourceVersionMatch=NotOlderThan, unpaged); only when that
  // leaves dirs to remove does a consistent list (no resourceVersion)
  // decide which go. Refresh and RefreshNotEnded always read consistently:
  // they look for pods bound a moment ago.
  Status SweepStateDirs();

  // "<ns>/<name>" of the pod of this node with that uid that has not ended
  // (a static pod's cgroup names its own uid, found through its mirror
  // pod); "" when none is known. For naming the holders of foreign memory.
  std::string PodKeyOfUid(const std::string& uid) const;
  // The same pod (its own uid, the mirror's for a static pod); nullopt when
  // none is known.
  std::optional<PodRef> PodOfUid(const std::string& uid) const;

  // Applies one pod object (add or update); public for tests. A pod whose
  // uid was forgotten, or applied as Succeeded or Failed, within
  // kForgottenFor is not applied: a re-read that began before the delete
  // event or the pod's end (Refresh's Get) must not bring it back.
  void Apply(const nlohmann::json& pod);
  // The informer's update: `old` and `now` share namespace/name. When their
  // uids differ (a relist after the watch expired finds the pod deleted and
  // created again under its name), the old pod is gone: forgotten first.
  void Update(const nlohmann::json& old, const nlohmann::json& now);
  // The pod is gone: forgets it and queues the removal of its state dirs
  // (returns without waiting for it; a full queue drops the pod, logged,
  // for the sweep to remove).
  void Forget(const nlohmann::json& pod);
  // Pods whose refusal is remembered (for tests and debugging).
  size_t RefusalsRemembered() const;

  // The most deleted pods whose state dirs wait for the remover.
  static constexpr size_t kMaxQueuedRemovals = 4096;

  // How long a forgotten uid is refused by Apply. Far longer than a
  // re-read's requests take; a uid is never reused, so this only bounds
  // the memory the tombstones hold.
  static constexpr std::chrono::minutes kForgottenFor{10};

 private:
  // Refresh and RefreshNotEnded: the node's pods whose phase matches
  // `phases` (field selector terms, each led by a comma); `every_live_pod`
  // when that is every pod of the node that has not ended.
  Status ReRead(const std::string& phases, bool every_live_pod);
  // Refresh from full pod objects: applies them all, then prunes.
  void ApplyPending(const std::vector<nlohmann::json>& pods, uint64_t since);
  // Drops what the store (and applied_) holds for pods not in `pending` and
  // not applied after ApplySeq() was `since` (taken before the list).
  void RetainPending(std::set<std::string> pending, uint64_t since);
  uint64_t ApplySeq();
  // Logs (once, and again whenever it changes) which form the apiserver
  // answers metadata-only pod lists in: operators (and the e2e demo) can
  // tell which refresh runs.
  void NoteListForm(bool metadata_only);
  // The uids of the node's pods, for the sweep: a list from the watch cache
  // at least as new as `not_older_than`, or a consistent one when it is "".
  StatusOr<std::set<std::string>> ListLiveUids(const std::string& not_older_than);
  // Logs the pod (once per pod) whose `containers` ask for high priority
  // that its namespace is not granted, and counts it.
  void NotePriorityNotGranted(const PodRef& ref, const std::set<std::string>& containers);
  // Keeps names_ up to date with one pod object (gone: it was deleted).
  void NoteName(const nlohmann::json& pod, const PodRef& ref, bool gone = false);

  kube::KubeClient* const client_;
  const std::string node_;
  AssignmentStore* const store_;
  PodReporter* const reporter_;
  const Logger log_;
  const StateDirs* const dirs_;
  api::AssignmentKeyRing* keys_ = nullptr;
  std::function<void(const std::string&)> on_refused_;
  api::HighPriorityNamespaces high_priority_;
  std::function<void()> on_priority_not_granted_;
  std::unique_ptr<kube::Informer> informer_;

  mutable std::mutex mu_;
  // The refusal last reported per pod uid (reported again only when it
  // changes, not on every status update of a running pod); an entry goes
  // with its pod (Forget), or at a re-read of every pod that has not ended
  // that does not list it, not at a re-read of the Pending ones; guarded by
  // mu_.
  std::map<std::string, std::string> reported_;
  // Pod uids whose high priority was not granted and said so (kept and
  // dropped as reported_ is); guarded by mu_.
  std::set<std::string> priority_not_granted_;
  // uid -> "<ns>/<name>" of the node's pods that have not ended, and a static
  // pod's own uid (its mirror's config.mirror annotation) -> its mirror's
  // name; guarded by mu_.
  std::map<std::string, PodRef> names_;
  std::map<std::string, std::string> mirrors_;  // mirror pod uid -> static pod uid; guarded by mu_

  // uid -> metadata.resourceVersion of the pod object whose Apply the store
  // holds now. Updated together with the store (under apply_mu_), so that a
  // version recorded here is never older or newer than what the store holds
  // for the pod: Refresh skips re-reading such a pod (equal versions are
  // equal objects), and must not skip one whose entry the store lost.
  //
  // Lock order: apply_mu_, then mu_.
  std::mutex apply_mu_;
  std::map<std::string, std::string> applied_;  // guarded by apply_mu_
  // uid -> the count of Apply calls when the pod was last applied (kept as
  // long as the pod is); guarded by apply_mu_.
  uint64_t apply_seq_ = 0;
  std::map<std::string, uint64_t> applied_seq_;
  // Remembers `uid` as deleted or ended for kForgottenFor; apply_mu_ held.
  void RememberGoneLocked(const std::string& uid);
  // uid -> when it was forgotten or ended, for kForgottenFor; guarded by
  // apply_mu_.
  std::map<std::string, std::chrono::steady_clock::time_point> forgotten_;
  std::atomic<int> list_form_{-1};  // -1 not seen yet, 0 whole pods, 1 metadata only

  // The state-dir remover: a thread started at the first Forget, taking pods
  // from removals_. The dirs are named <pod uid>_<container>, and a uid is
  // never reused, so no container's new dir can be the one being removed.
  void QueueRemoval(const PodRef& ref);
  void RemoveLoop();
  void StopRemover();
  PodDirRemover remove_pod_;
  std::mutex remove_mu_;
  std::condition_variable remove_cv_;
  std::deque<PodRef> removals_;  // guarded by remove_mu_
  bool remove_stop_ = false;     // guarded by remove_mu_; never reset
  bool removing_ = false;        // a pod taken from removals_ is being removed; remove_mu_
  std::thread remover_;          // started under remove_mu_; joined by StopRemover
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_POD_SYNC_H_
