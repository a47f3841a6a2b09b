// Extender: the four scheduler-extender verbs over the cache and the core.
//
//   Filter     plans the pod on every candidate node (Fit on the node's
//              snapshot) and answers all nodes where it fits, with a reason
//              for each where it does not. Scores are remembered for the
//              following prioritize of the same pod.
//   Prioritize ranks candidates (planner.h RankNodes): policy score, job
//              locality, keep-whole-nodes; 0..10 with a stable tie-break.
//   Bind       plans on the chosen node, reserves in the cache before any
//              I/O (re-planning on the same node when a concurrent bind took
//              the devices, up to kMaxPlanAttempts), then makes one write:
//              a Binding that carries the assignment annotation (the
//              apiserver sets nodeName and the annotation together). Any
//              failure releases the reservation. No lock is held across it.
//              A pod that asks for no pooled device (an explicit zero) fits
//              every node, inventory or not, and is bound with a plain
//              Binding: no record, no annotation.
//   Preempt    for each node, keeps every victim kube-scheduler chose (its
//              SelectVictimsOnNode already reprieved all that its own filters
//              can do without) and its NumPDBViolations; drops nodes where
//              even all victims leaving would not free the devices the pod
//              needs, nodes where it would need devices held for another
//              preemptor (HeldForPreemptors), and nodes sent with no victims.
//
// The Kubernetes writes go through PodWriter and events through EventSink, so
// the logic is tested without an apiserver.
//
// Thread-safety: every verb may be called concurrently from many threads.
#ifndef ACCELPOOL_EXTENDER_EXTENDER_H_
#define ACCELPOOL_EXTENDER_EXTENDER_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "common/status.h"
#include "core/policy.h"
#include "extender/cache.h"
#include "extender/planner.h"
#include "extender/wire.h"

namespace accelpool::extender {

// The apiserver writes a bind makes.
class PodWriter {
 public:
  virtual ~PodWriter() = default;
  // Binds the pod to `a.node` with one Binding that carries `a` as the
  // annotation accelpool.io/assignment: the apiserver sets the pod's nodeName
  // and the annotation in one write, so a pod is never bound without its
  // assignment nor annotated without being bound. Guarded by the pod's uid.
  // A retried bind whose earlier Binding landed on the same node is Ok. An
  // empty `a` (the pod asks for no pooled device) binds without annotation.
  // kNotFound / kAborted when the pod is gone, replaced or bound elsewhere;
  // kUnknown when the write may have landed and the pod could not be read
  // back to tell.
  virtual Status Bind(const PodInfo& pod, const PodAssignment& a) = 0;
  // The node the apiserver shows the pod bound to, "" while it is not bound
  // (a fresh read, not a cache); kNotFound when the pod is gone or replaced.
  virtual StatusOr<std::string> BoundNode(const PodInfo& pod) = 0;
};

// Where operator-facing decisions are reported as pod Events. Implementations
// must not block the caller on I/O.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void PodEvent(const PodRef& pod, bool warning, const std::string& reason,
                        const std::string& message) = 0;
};

// The policy name a pod's annotation value means (lower case, no blanks); ""
// when it names none. HAMi's hami.io/gpu-scheduler-policy values (binpack,
// spread) are accepted as they are.
std::string CanonicalPolicy(std::string_view annotation);

// Threads a filter call uses for `configured` (ExtenderOptions::filter_threads).
size_t FilterThreads(int configured);

// What ExtenderOptions::recheck_pods did.
enum class RecheckResult {
  kSkipped,    // not read: the node, or all nodes, were read too recently
  kFailed,     // the read failed (logged)
  kUnchanged,  // read; every pod the cache holds there is still there
  kFreed,      // read; pods gone or finished were freed
};
// Reads from the apiserver one filter call makes at most (refresh_node and
// recheck_pods together).
inline constexpr int kMaxFilterReads = 8;

struct ExtenderOptions {
  std::string policy = "accelpool";  // a core::PolicyNames() entry
  // The policy that scores nodes for pods that name none of their own (a
  // core::PolicyNames() entry); "" = `policy`, which then does both.
  std::string node_policy;
  core::PolicyContext policy_context;
  RankOptions rank;
  // Threads that evaluate nodes in one filter call of 512 nodes or more;
  // 1 = the calling thread only, 0 = one per core from 3 cores on, at most 4
  // (1 on one or two cores).
  int filter_threads = 0;
  // Filter results kept for prioritize (per pod uid) this long.
  std::chrono::milliseconds score_ttl{30000};
  size_t max_remembered_pods = 4096;  // their parsed requests, for bind
  // Filter scores (one entry per candidate node) are kept for this many of the
  // latest pods only: kube-scheduler prioritizes right after filtering.
  size_t max_remembered_scores = 8;
  // Filter answers only the node Prioritize would rank first (same rule:
  // RankNodes over the feasible nodes), so kube-scheduler, seeing one
  // feasible node, skips its scoring phase and the prioritize round trip.
  // Equivalent to filter + prioritize when the scheduler profile adds no
  // other score (the shipped profile disables the score plugins); turn it
  // off when a profile mixes other scores with the extender's.
  bool pick_in_filter = false;
  // A preemptor filtered again while victims this extender's preempt answer
  // named are still held in the cache waits up to this long for their
  // deletions to arrive. kube-scheduler can see the victims gone a moment
  // before this extender's watch does; a filter answered from the older view
  // fails the pod in preemption ("expected at least one victim pod"), and it
  // then waits in kube-scheduler's unschedulable queue for minutes.
  std::chrono::milliseconds preemption_wait{1000};
  // A Binding whose outcome is unknown (no answer, and no read settled it)
  // may still be written by the apiserver for a while: its reservation is
  // kept this long before a bind of the pod on another node, finding the pod
  // unbound, gives it back (kube-apiserver's default --request-timeout, past
  // which a request still running is ended). Until then such a bind is
  // refused, and kube-scheduler retries the pod.
  std::chrono::milliseconds unknown_binding_hold{60000};
  // Re-reads one node from the apiserver into the cache, and says whether it
  // did (NodeRefresher limits how often). Called by a filter that finds no
  // node, for the nodes it does not know yet and those that turned the pod
  // away for cordoned or unhealthy devices: kube-scheduler retries a pod on
  // the Node update (a card uncordoned or healthy again, a new node's
  // inventory) a moment before this extender's watch delivers it, and a
  // filter answered from the older view would leave the pod waiting for the
  // next event (minutes). Empty: never.
  std::function<bool(const std::string& node)> refresh_node;
  // Reads the pods bound to one node from the apiserver and frees in the cache
  // those it shows gone or finished (PodRechecker limits how often). Called by
  // a filter that finds no node, for the first nodes that turned
  // the pod away only for devices their pods hold: kube-scheduler retries a
  // pod on another pod's deletion a moment before this extender's watch
  // delivers it, and a filter answered from the older view would leave the pod
  // waiting for the next event (minutes on a quiet cluster). Empty: never.
  std::function<RecheckResult(const std::string& node)> recheck_pods;
  // A filter that finds no node and whose recheck_pods was skipped (the node
  // was read too recently) waits up to this long for the cache to change on
  // those nodes, and plans them again if it does. kube-scheduler retries the
  // pod on a deletion (or on the update that set its deletionTimestamp and
  // then on the deletion, milliseconds apart): the second retry finds the node
  // read a moment before, while this extender's watch is still delivering
  // the deletion. At most `recheck_waits_per_second` filters wait, so a queue
  // of pods that cannot fit costs kube-scheduler at most that many waits a
  // second. 0: never wait.
  std::chrono::milliseconds recheck_wait{100};
  int recheck_waits_per_second = 2;
  // What one filter spends at most on those reads (refresh_node and
  // recheck_pods, at most kMaxFilterReads of them): no read starts after it,
  // so a slow apiserver cannot hold a filter past kube-scheduler's extender
  // timeout (5 s in the chart). Give the reads' client a timeout of this size.
  std::chrono::milliseconds read_budget{1000};
};

// Prometheus families of the extender (registered once per registry).
struct ExtenderMetrics {
  HistogramFamily* latency = nullptr;        // verb
  CounterFamily* requests = nullptr;         // verb, code
  CounterFamily* filter_nodes = nullptr;     // outcome (fits|unschedulable|unresolvable), reason
  CounterFamily* bind_conflicts = nullptr;   // stage
  CounterFamily* bind_failures = nullptr;    // stage
  GaugeFamily* cache_nodes = nullptr;
  GaugeFamily* cache_pods = nullptr;         // state
  GaugeFamily* cache_age = nullptr;
  GaugeFamily* cache_uncounted = nullptr;    // why (absent|conflict)
  GaugeFamily* device_memory = nullptr;      // node, device
  GaugeFamily* device_compute = nullptr;     // node, device
  GaugeFamily* node_memory = nullptr;        // node
  GaugeFamily* node_compute = nullptr;       // node
  GaugeFamily* node_cordoned = nullptr;      // node: devices taken out of service
  GaugeFamily* node_idle = nullptr;          // node: idle devices (fractional)
  GaugeFamily* node_fragmented = nullptr;    // node: of them, expected unusable
  CounterFamily* bad_requests = nullptr;     // verb
  CounterFamily* assignment_edits = nullptr;  // edits of bound pods' assignments, ignored
  CounterFamily* key_reload_errors = nullptr;  // failed re-reads of the assignment key dir
  CounterFamily* preemption_waits = nullptr;   // result (released|timeout)
  CounterFamily* pod_rechecks = nullptr;       // result (freed|unchanged|failed|skipped)
  CounterFamily* recheck_waits = nullptr;      // result (changed|timeout)
  GaugeFamily* node_host_free = nullptr;       // node, resource (cpu|memory)
  GaugeFamily* host_pods = nullptr;
  GaugeFamily* workload_shapes = nullptr;
  CounterFamily* workload_arrivals = nullptr;  // incremented by PodLoad
  CounterFamily* workload_rebuilds = nullptr;
  CounterFamily* workload_store = nullptr;  // {op=load|save, result=ok|missing|failed}; PodLoad
  CounterFamily* admissions = nullptr;      // route (devices|host-pods), result; Webhook
  CounterFamily* node_updates = nullptr;    // result (applied|unchanged); CacheFeeder

  static StatusOr<ExtenderMetrics> Register(MetricsRegistry& registry);
};

struct FilterDecision {
  std::vector<std::string> fits;
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> unresolvable;
};

class Extender {
 public:
  static constexpr int kMaxPlanAttempts = 4;

  // kInvalidArgument for an unknown policy name (the message lists them).
  // `writer`, `events`, `metrics` may be null (no writes / events / metrics).
  static StatusOr<std::unique_ptr<Extender>> Create(Cache& cache, ExtenderOptions options,
                                                    PodWriter* writer, EventSink* events,
                                                    const ExtenderMetrics* metrics, Logger log);

  FilterDecision Filter(const PodInfo& pod, const std::vector<std::string>& nodes);
  std::vector<HostPriority> Prioritize(const PodInfo& pod, const std::vector<std::string>& nodes);
  // The chosen assignment on success.
  StatusOr<PodAssignment> Bind(const PodInfo& pod, const std::string& node);
  // Settles the reservations of Bindings whose outcome was unknown, once
  // unknown_binding_hold has passed: a pod a fresh read shows unbound gets
  // its devices given back (else they would stay reserved for as long as it
  // pends, when no node passes kube-scheduler's own filters for its retry).
  // Called every few seconds by the extender's main; returns how many were
  // given back.
  // At most kMaxUnknownBindingReads pod reads a call, and none once `stop`
  // is requested: the rest wait for the next call.
  size_t ReleaseUnknownBindings(std::stop_token stop = {});
  static constexpr size_t kMaxUnknownBindingReads = 32;
  std::map<std::string, MetaVictims> Preempt(const PodInfo& pod,
                                             const std::map<std::string, MetaVictims>& victims);
  // A bind refused before it reached Bind (the caches not synced, not the
  // leader, the pod unreadable or re-created): counted in bind_failures_total
  // under `stage` and written as the audit line `bind failed`, like the
  // failures Bind itself reports. No event: the pod is retried, or gone.
  void BindRefused(const PodRef& pod, const std::string& node, std::string_view stage,
                   const Status& why);

  // The PodInfo remembered from the pod's last filter, if any (bind arrives
  // with names only).
  std::optional<PodInfo> RememberedPod(const std::string& uid) const;

  // Refreshes the cache and per-device allocation gauges; the series of
  // nodes and devices no longer in the cache are dropped. Calls are
  // serialised.
  void UpdateGauges() const;

  const std::string& policy_name() const { return options_.policy; }

  // Scores with `workload` from now on (empty: the built-in mix): every
  // policy is rebuilt, and plans remembered under the old workload are not
  // reused. False (and nothing changes) when it equals the one in use.
  bool SetWorkload(std::vector<core::TaskShape> workload);
  // The workload scored with now (empty: the built-in mix), and how many
  // times it has been replaced.
  std::vector<core::TaskShape> Workload() const;
  uint64_t workload_generation() const;
  Cache& cache() { return cache_; }

 private:
  struct PolicySet;  // below
  Extender(Cache& cache, ExtenderOptions options, std::shared_ptr<const PolicySet> policies,
           PodWriter* writer, EventSink* events, const ExtenderMetrics* metrics, Logger log);

  // Per feasible node of a filter call, in the order filter answered them:
  // the snapshot it was planned on (never null) and the policy score.
  // Prioritize of the same pod (the same scheduling cycle, milliseconds later)
  // ranks on these without looking the nodes up again. kube-scheduler sends
  // prioritize the feasible nodes in filter's order, so prioritize walks the
  // list with a cursor and hashes names only when the orders differ; bind
  // re-checks against the state of its own moment.
  struct Fitted {
    NodeSnapshotPtr snap;
    int32_t score = 0;
  };
  using FitList = std::vector<Fitted>;
  struct Remembered {
    PodInfo pod;
    // Shared so prioritize reads it without a copy.
    std::shared_ptr<const FitList> fitted;
    std::chrono::steady_clock::time_point at;
  };
  void Remember(const PodInfo& pod, FitList fitted);
  // Victims a preempt answer named, by preemptor uid (see preemption_wait).
  struct Preemption {
    // node -> the victims there that held devices when it was recorded. Every
    // node preempt answered at first; kube-scheduler evicts on one of them
    // only, so the others are dropped once it is known which (Narrow).
    std::map<std::string, std::vector<std::string>> victims;
    // Whether `victims` names only nodes where the preemption took effect:
    // preempt answered one node, the preemptor carries the node
    // kube-scheduler nominated, or a victim there has left. Until then
    // nothing is held for the preemptor and `at` is not refreshed, since
    // victims on the nodes kube-scheduler passed over never leave.
    bool settled = false;
    // `victims` as recorded, before any narrowing: a nominated node is looked
    // up here, as a guess from a victim that left on its own may have been
    // wrong.
    std::map<std::string, std::vector<std::string>> recorded;
    // The nominated node the preemptor carried when preempt was called: the
    // one of an earlier preemption, which says nothing of this one.
    std::string earlier_nomination;
    std::chrono::steady_clock::time_point at;     // recorded, or a victim last seen holding
    std::chrono::steady_clock::time_point first;  // recorded
    PodInfo preemptor;
  };
  // Whether a record is past use: kPreemptionMemory since a victim was last
  // seen holding its devices where the preemption took effect (victims with
  // a long grace period keep it), and never past kPreemptionCap since it was
  // made.
  static bool Expired(const Preemption& p, std::chrono::steady_clock::time_point now);
  void RecordPreemption(const PodInfo& pod, const std::map<std::string, MetaVictims>& kept);
  // Whether `uid` holds devices on `node` in the cache.
  bool Holds(const std::string& uid, const std::string& node) const;
  // Narrows `p` to the nodes where its preemption took effect, as far as is
  // known now: `nominated` (the preemptor's nominated node, when it is news),
  // else the nodes where a victim has left. False when the record holds
  // nothing any more: kube-scheduler nominated a node where no victim held
  // devices.
  bool Narrow(Preemption& p, const std::string& nominated) const;
  // Drops the records past use (expired, or whose preemptor is bound or
  // deleted) and narrows the others (`pod`'s own with its nominated node).
  // Whether any record is left.
  bool TendPreemptions(const PodInfo& pod);
  // Waits (up to preemption_wait) until the cache has let go of the victims
  // of `pod`'s preemption on those of `nodes` where it took effect (while
  // that is not known: until a victim leaves).
  void AwaitVictims(const PodInfo& pod, const std::vector<std::string>& nodes);
  // The domains of the nodes holding the pod's job siblings (empty when the
  // pod belongs to no job).
  std::map<std::string, NodeDomains> JobDomains(const PodInfo& pod) const;
  // Busy nodes per super-node, over the cache (for RankNodes).
  std::function<int(const std::string&)> SuperNodeBusy() const {
    return [this](const std::string& sn) { return cache_.BusyInSuperNode(sn); };
  }
  // Plans `pod` on `node` and reserves the devices. *reused: the answer is a
  // reservation an earlier bind of the pod made (a retried bind).
  StatusOr<PodAssignment> PlanAndReserve(const PodInfo& pod, const std::string& node,
                                         int32_t* score, bool* reused);
  // PlanNode through the plan memo: a node's plan depends only on the request
  // shape, the node's version (inventory + usage) and the policy, so plans are
  // kept per (node, version, shape) and reused until the node changes.
  // Shared with the memo: a plan is never copied on a hit.
  std::shared_ptr<const NodePlan> CachedPlan(const PodInfo& pod, const std::string& shape,
                                             const NodeSnapshot* snap,
                                             const PlanPolicies& policies);
  // What one filter may still spend on reads from the apiserver
  // (kMaxFilterReads reads, ExtenderOptions::read_budget of time).
  struct ReadBudget {
    int reads = 0;
    std::chrono::steady_clock::time_point deadline;
    bool Left() const {
      return reads < kMaxFilterReads && std::chrono::steady_clock::now() < deadline;
    }
  };
  // A filter that found no node reads back from the apiserver, while the
  // budget lasts, the nodes it may have judged from an older view
  // (refresh_node, then recheck_pods), and plans again those that changed.
  void ReadBack(const PodInfo& pod, const std::string& shape, const PlanPolicies& policy,
                const std::vector<std::string>& nodes, std::vector<NodeSnapshotPtr>& snaps,
                std::vector<std::shared_ptr<const NodePlan>>& plans);
  // A pod whose earlier bind ended without knowing whether its Binding
  // landed keeps that reservation (kUnknown). Planned against usage that
  // counts it, the node it holds would turn the pod itself away, and with it
  // the only retry that could finish the bind there: that node is planned
  // again without the pod's own devices.
  // Devices a preemption freed are held for its preemptor until it binds
  // (or kPreemptionMemory passes): kube-scheduler holds a nominated pod's
  // resources in its own filters only, and the pooled memory and compute are
  // not among them, so a lower-priority pod filtered meanwhile would take
  // them and be evicted in turn. On a node where a preemptor of at least
  // `pod`'s priority evicted victims (one of them gone from the cache), the
  // preemptor is planned as if all its victims there were gone, and `pod`
  // beside that plan; the text says why it does not fit then. When it does,
  // nullopt, and `*replan` (when given) is set to that plan where a hold
  // applies: the pod's own plan on the node as it is could take the devices
  // held. A pod that evicted victims on the node itself is held back there
  // only for preemptors of higher priority. `freed`: pods whose devices
  // `snap` already counts as free (preempt's victims), not released again.
  std::optional<std::string> HeldForPreemptors(const PodInfo& pod, const NodeSnapshot& snap,
                                               const PlanPolicies& policy,
                                               std::optional<NodePlan>* replan = nullptr,
                                               const std::set<std::string>* freed = nullptr);
  void PlanOwnReservation(const PodInfo& pod, const PlanPolicies& policy,
                          const std::vector<std::string>& nodes,
                          const std::vector<NodeSnapshotPtr>& snaps,
                          std::vector<std::shared_ptr<const NodePlan>>& plans);
  // Whether a filter may wait now (recheck_wait), counting it when so.
  bool AllowRecheckWait();

  Cache& cache_;
  const ExtenderOptions options_;
  // The policies of one workload: --policy's and every named one (for pods
  // that choose their own, PodInfo::policy). Replaced whole by SetWorkload; a
  // verb takes the current set once and plans with it throughout.
  struct PolicySet {
    uint64_t generation = 0;
    std::vector<core::TaskShape> workload;  // empty: the built-in mix
    core::PolicyPtr main;
    std::map<std::string, core::PolicyPtr> by_name;
  };
  static StatusOr<std::shared_ptr<const PolicySet>> MakePolicySet(
      const std::string& main, const std::vector<core::TaskShape>& workload, uint64_t generation);
  std::shared_ptr<const PolicySet> Policies() const;
  mutable std::mutex policies_mu_;
  std::shared_ptr<const PolicySet> policies_;  // guarded by policies_mu_; never null
  std::mutex set_workload_mu_;                 // serialises SetWorkload

  // The pod's own policy (by its canonical name), or nullptr: none, or one
  // this extender does not know (the extender's --policy applies).
  const std::pair<const std::string, core::PolicyPtr>* PodPolicy(const PodInfo& pod,
                                                                 const PolicySet& set) const;
  // The policy name and objects a pod is planned with: its own when it names
  // a known one, else the extender's --policy; nodes are scored by its node
  // policy when it names a known one, else by the extender's --policy when
  // its policy is for devices only (HAMi's gpu-scheduler-policy), else by
  // the same policy.
  std::string PolicyName(const PodInfo& pod) const;
  std::string NodePolicyName(const PodInfo& pod) const;
  // --node-policy, else --policy.
  const std::string& DefaultNodePolicy() const;
  PlanPolicies PolicyFor(const PodInfo& pod, const PolicySet& set) const;
  // The memo key of a pod: its request shape, the policy set's generation
  // and, when it has its own, the policies it chose.
  std::string PlanKey(const PodInfo& pod, const PolicySet& set) const;
  PodWriter* const writer_;
  EventSink* const events_;
  const ExtenderMetrics* const metrics_;
  const Logger log_;
  const Logger audit_;

  mutable std::mutex gauges_mu_;  // serialises UpdateGauges (it drops series it set)
  mutable std::mutex mu_;
  std::map<std::string, Remembered> remembered_;  // guarded by mu_
  std::deque<std::string> scored_;                 // guarded by mu_; uids, oldest first
  std::map<std::string, Preemption> preemptions_;  // guarded by mu_; by preemptor uid
  // Holds a pod's uid in binding_ while it lives, unless a bind (or the
  // sweep of unknown bindings) of the pod holds it already: held() says.
  class PodClaim {
   public:
    PodClaim(Extender& e, const std::string& uid);
    ~PodClaim();
    PodClaim(const PodClaim&) = delete;
    PodClaim& operator=(const PodClaim&) = delete;
    bool held() const { return held_; }

   private:
    Extender& e_;
    const std::string uid_;
    bool held_ = false;
  };
  // Pods whose bind is running (planning or writing the Binding), by uid: a
  // second bind of the same pod meanwhile is refused, so a reservation is
  // never given back while its Binding may still land.
  std::set<std::string> binding_;                                    // guarded by mu_
  // Each pod whose last Binding had an unknown outcome: when it was sent
  // (see ExtenderOptions::unknown_binding_hold), and the pod. Guarded by mu_.
  struct UnknownBinding {
    std::chrono::steady_clock::time_point sent;
    PodRef pod;
  };
  std::map<std::string, UnknownBinding> unknown_bindings_;
  std::deque<std::chrono::steady_clock::time_point> recheck_waits_;  // guarded by mu_; last second
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_EXTENDER_H_
