// Cache: every node's inventories and usage, and every pod's assignment.
//
// Nodes live in shards keyed by node name. Each node is an immutable
// NodeSnapshot behind a shared_ptr; a change builds a new snapshot and swaps
// the pointer (copy-on-write, a few hundred bytes per node), so a reader
// (filter, prioritize) holds a consistent snapshot without holding any lock
// while it runs Fit. Usage is kept incrementally: a pod's assignment is added
// when it is reserved or observed and removed when the pod is deleted or
// finishes; nothing is recomputed from all pods per request.
//
// A pod's record is in one of two states:
//   reserved : a bind in flight reserved the devices (before any I/O), so a
//              filter that arrives meanwhile already sees them taken;
//   bound    : the apiserver shows the pod on the node with its assignment.
// Watch updates of a pod that is not bound yet (no spec.nodeName) never
// remove a reservation; a failed bind calls Release().
//
// Jobs: pods that carry a job key are counted per node, so prioritize can
// favour nodes near a job's siblings.
//
// Host: with TrackHost on, each node's snapshot also carries its allocatable
// CPU and memory (from UpsertNode) and the sum of the host requests of the
// pods bound to it (ObserveHostPod, fed from a watch of every pod), so the
// fragmentation policies see which nodes have host left for their devices.
//
// Lock order: host_mu_ before pods_mu_ before a node shard's mutex; no lock is
// held across I/O or across Fit.
//
// Thread-safety: every method may be called from any thread.
#ifndef ACCELPOOL_EXTENDER_CACHE_H_
#define ACCELPOOL_EXTENDER_CACHE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/types.h"
#include "extender/node_state.h"

namespace accelpool::extender {

struct PodRef {
  std::string uid;
  std::string ns;
  std::string name;
  std::string job;  // "" when the pod belongs to no job
};

struct CacheStats {
  int64_t nodes = 0;
  int64_t nodes_unparsable = 0;
  int64_t pods_bound = 0;
  int64_t pods_reserved = 0;
  // Of the bound pods, those whose assignment does not parse (ObservePod's
  // `unreadable`): booked by the device ids read from it, or the whole node.
  int64_t pods_unreadable = 0;
  // Observations of a bound pod whose assignment had changed, gone or no
  // longer parsed, since start; each kept the assignment it was bound with.
  int64_t assignment_changes_ignored = 0;
  // Grants of recorded pods not counted as planned now: on devices missing
  // from the node's inventory (not counted), or counted past the capacity of
  // devices other pods' assignments already fill (see ObservePod).
  int64_t grants_absent = 0;
  int64_t grants_conflicting = 0;
  double seconds_since_update = 0;  // since the last change of any kind
};

class Cache {
 public:
  Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // --- nodes -------------------------------------------------------------
  // Sets a node's inventories (or the reason they did not parse, which keeps
  // the node visible with no devices and so no new placements). A pod's
  // recorded assignment is never rewritten here: every pod on the node is
  // re-applied to the new inventories by device id. Grants on a device (or
  // vendor) missing from them are not counted while it is missing, and
  // nothing new can be placed there since the device is not in the
  // inventory; they are counted again when it returns, before any new
  // placement. The node keeps counting its pods (NodeSnapshot::pods)
  // throughout. Returns how many grants became newly uncounted this way.
  // `allocatable`: the Node's status.allocatable CPU and memory (nullopt:
  // unknown; the node's host is then not scored).
  int UpsertNode(const std::string& name, StatusOr<std::vector<core::NodeInventory>> inventories,
                 int64_t generation, const NodeDomains& domains,
                 std::optional<core::HostResources> allocatable = std::nullopt);
  void RemoveNode(const std::string& name);
  // nullptr when unknown.
  NodeSnapshotPtr Node(const std::string& name) const;
  std::vector<std::string> NodeNames() const;
  // Nodes of `super_node` in the cache that hold pods (NodeSnapshot::Idle
  // false), whether or not a filter passed them: ranking keeps a super-node
  // whole only while none of its nodes holds anything, and the nodes that
  // are busy are exactly those a filter drops first.
  int BusyInSuperNode(const std::string& super_node) const;

  // --- pods --------------------------------------------------------------
  // Reserves `a` for `pod` on a.node if the node is still at `version`, or,
  // when it moved on, if `a` still fits the node's current usage and every
  // device it names is still healthy and not cordoned.
  // kAborted when it no longer fits (re-plan), kNotFound when the node is
  // gone, kAlreadyExists when the pod already holds devices (bound elsewhere
  // or another bind in flight).
  Status Reserve(const PodRef& pod, const PodAssignment& a, uint64_t version);
  // Marks a reservation bound (after the Binding was created). A record of
  // the pod with another assignment (the watch already showed it bound
  // elsewhere) stays as it is.
  void MarkBound(const std::string& uid, const PodAssignment& a);
  // Gives back a reservation whose Binding was not written: only a record of
  // the pod that is not bound and holds `a`, so a record the watch replaced
  // (the pod shown bound, perhaps by another replica) stays. True when one
  // was released.
  bool ReleaseReservation(const std::string& uid, const PodAssignment& a);
  // Whether the pod's record is bound; nullopt when there is none.
  std::optional<bool> Bound(const std::string& uid) const;
  // Gives a pod's devices back (failed bind, deleted or finished pod). No-op
  // for an unknown uid. The uid is remembered for kReleasedMemory: a
  // Reserve for it then is refused (kNotFound), since a bind that began
  // before the pod's deletion or end arrived would otherwise book devices
  // that no later event of the pod ever frees.
  void Release(const std::string& uid);
  // Whether `uid` was released (deleted or finished) within kReleasedMemory.
  bool Released(const std::string& uid) const;
  static constexpr std::chrono::minutes kReleasedMemory{2};
  // Uids of the pods recorded bound to `node` (MarkBound, or observed bound).
  std::vector<std::string> BoundPods(const std::string& node) const;
  // Releases a pod that a fresh read of the apiserver shows gone or finished
  // before the pod watch says so, and ignores its observations from then on:
  // the watch may still deliver older events of it, and taking one would book
  // its devices again, perhaps under a pod placed there since. Release() (its
  // deletion arriving) ends that, as do 10 minutes.
  void ReleaseGone(const std::string& uid);
  // What the apiserver shows: a pod bound to a node with this assignment
  // (nullopt: no valid assignment), or not bound yet. Reconciles the record:
  // a different assignment replaces a reservation; an unbound pod keeps its
  // reservation. A pod known bound keeps the assignment it was bound with:
  // the annotation comes with the Binding and never changes afterwards, so a
  // change, removal or unparsable value is an edit by hand, and taking it
  // would free devices the pod still uses or charge ones it never got; that
  // returns kPermissionDenied and counts in Stats(). Returns
  // kFailedPrecondition when the assignment overcommits the node as cached
  // (the caller logs it): it is still recorded and counted, device by device:
  // where a device's grants do not fit (Stats().grants_conflicting) they are
  // counted past its capacity, since the pod runs there, so the device takes
  // nothing new until enough of its holders leave; a slot another grant holds
  // stays with that holder, and nothing is counted twice. kNotFound when the
  // node is unknown (kept pending and applied when the node arrives). An
  // assignment without devices counts as none.
  // `unreadable` (with `a` nullopt): the pod carries an assignment annotation
  // that does not parse, and these are the device ids still read from it
  // (maybe none). A bound pod that the cache holds no readable record of
  // (after a restart, say) then books every such device of the node whole,
  // or, when none is found there, keeps the whole node from new grants
  // (NodeSnapshot::unreadable_pods): the devices it uses are unknown, and
  // counting none would give them to another pod. That lasts until the pod is
  // deleted or finishes, its annotation parses, or is removed.
  Status ObservePod(const PodRef& pod, const std::string& node_name,
                    const std::optional<PodAssignment>& a,
                    const std::optional<std::vector<std::string>>& unreadable = std::nullopt);

  // The pod's assignment as reserved or bound (the annotation's), if it
  // holds devices.
  std::optional<PodAssignment> Assignment(const std::string& uid) const;
  // What of it is counted on its node now, in the indices of the node's
  // current inventories (grants on devices missing from them left out);
  // nullopt when nothing is counted (unknown pod, node not cached, or the
  // assignment does not fit the node as cached).
  std::optional<PodAssignment> AppliedAssignment(const std::string& uid) const;
  // Pods of `job` per node.
  std::map<std::string, int> JobNodes(const std::string& job) const;

  CacheStats Stats() const;

  // --- host ----------------------------------------------------------------
  // Turns host tracking on or off (default off: snapshots carry no
  // usage.host_free). Turn it on only with a watch of every pod feeding
  // ObserveHostPod, synced before the extender answers.
  void TrackHost(bool on);
  bool tracking_host() const { return track_host_.load(); }
  // The host request of pod `uid`, bound to `node` ("" when not bound yet or
  // finished: then it counts nowhere). Replaces what was recorded for it.
  void ObserveHostPod(const std::string& uid, const std::string& node,
                      const core::HostResources& request);
  void ForgetHostPod(const std::string& uid);
  // Pods whose host request is counted on some node.
  int64_t HostPods() const;

 private:
  struct PodRecord {
    PodRef ref;
    PodAssignment assignment;  // as reserved or bound; never rewritten
    bool bound = false;
    bool applied = false;  // `applied_as` is counted on the node
    // Per part of `assignment`: the device id of each device index it names,
    // learned from the node's inventory when the part is first applied, so
    // the grants follow their devices across inventory changes.
    std::vector<std::map<int32_t, std::string>> ids;
    PodAssignment applied_as;  // `assignment` in the node's current indices
    int32_t absent = 0;        // grants left out of `applied_as` (device missing)
    int32_t conflicting = 0;   // grants counted past a device's capacity (overlapping holders)
    // The annotation did not parse (ObservePod's `unreadable`): `assignment`
    // names the node only, and the record books `unreadable_ids` whole.
    bool unreadable = false;
    std::vector<std::string> unreadable_ids = {};
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, NodeSnapshotPtr> nodes;  // guarded by mu
  };
  static constexpr size_t kShards = 32;

  Shard& ShardOf(const std::string& node) const;
  // `rec.assignment` in the indices of `snap`'s inventories, learning device
  // ids on first use; grants on devices `snap` lacks are left out and counted
  // in rec.absent.
  static PodAssignment Resolve(PodRecord& rec, const NodeSnapshot& snap);
  // An unreadable record's devices on `snap`: each of rec.unreadable_ids the
  // node has, granted whole without a slot; empty when it has none of them.
  static PodAssignment ResolveUnreadable(const PodRecord& rec, const NodeSnapshot& snap);
  // Counts `rec` on `s` (sets applied, applied_as, absent, conflicting): all
  // of it when it fits. When it does not, with `partial` each device's grants
  // are counted, those that do not fit past the device's capacity
  // (rec.conflicting, ForcePart), so a pod the apiserver shows bound is never
  // left uncounted and no slot is counted twice; without `partial` (a
  // reservation) nothing is counted and `s` is unchanged, and a device that
  // is unhealthy or cordoned does not fit either.
  // Returns why it did not all fit, else Ok.
  static Status CountRecord(PodRecord& rec, NodeSnapshot* s, bool partial);
  // Applies or releases a record on its node under the shard lock; returns
  // the result of the apply (kNotFound: node not cached, nothing counted).
  // REQUIRES: pods_mu_ held.
  Status ApplyRecordLocked(PodRecord& rec, bool partial);
  void ReleaseRecordLocked(PodRecord& rec);
  void EraseRecordLocked(const std::string& uid);
  void Touch();

  // Re-derives the snapshot of `node` with its current host sums.
  // REQUIRES: host_mu_ held.
  void RefreshHostLocked(const std::string& node);

  // Keeps super_busy_ in step with a node's snapshot being replaced
  // (`before` or `after` null: the node arrives or goes). Under the shard's lock.
  void NoteSnapshot(const NodeSnapshot* before, const NodeSnapshot* after);
  mutable std::mutex super_mu_;
  std::unordered_map<std::string, int> super_busy_;  // guarded by super_mu_

  mutable std::mutex host_mu_;
  std::atomic<bool> track_host_{false};
  struct HostPod {
    std::string node;
    core::HostResources request;
  };
  struct HostSum {
    // In 128 bits: each pod's request is at most 2^62 (api::ParseHostRequest),
    // a node's sum of them is not; read out saturated (Requested()).
    __extension__ __int128 cpu_milli = 0;
    __extension__ __int128 memory_mib = 0;
    int32_t pods = 0;
    core::HostResources Requested() const;
  };
  std::unordered_map<std::string, HostPod> host_pods_;  // by uid; guarded by host_mu_
  std::unordered_map<std::string, HostSum> host_sums_;  // by node; guarded by host_mu_

  mutable std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> next_version_{1};
  std::atomic<int64_t> last_change_ns_{0};
  std::atomic<int64_t> assignment_changes_ignored_{0};

  mutable std::mutex pods_mu_;
  std::map<std::string, PodRecord> pods_;                        // guarded by pods_mu_
  std::map<std::string, std::set<std::string>> pods_by_node_;    // guarded by pods_mu_
  std::map<std::string, std::map<std::string, int>> jobs_;       // guarded by pods_mu_
  // ReleaseGone's pods, by uid: when each was released.
  std::map<std::string, std::chrono::steady_clock::time_point> gone_;  // guarded by pods_mu_
  // Release's pods (deleted or finished), oldest first, and their uids;
  // guarded by pods_mu_.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> released_order_;
  std::set<std::string> released_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_CACHE_H_
