// The FGD trace protocol (docs/benchmarks/quality.md, section 1): pods in a
// seeded shuffle of name order, inflated to 1.3x the cluster's GPUs, placed
// one at a time with no departures; a pod that fits nowhere is recorded as
// failed and the replay continues.
//
// Two ways to turn node scores into a choice:
//   kPaper: the paper's simulator. The highest score wins; ties go to the
//           node with the lowest rank in a per-seed random permutation.
//   kStock: a cluster with a plain extender. The extender's 0..10 score
//           (NodeScore/10, rounded) times the extender weight, plus nothing
//           else (the shipped profile disables CPU/memory scoring plugins);
//           ties are broken uniformly at random, as kube-scheduler does.
//   kKube : a cluster with accelpool's extender: the extender's ranking rule
//           (core/rank.h, the code extender::RankNodes runs): policy score
//           minus the keep-whole penalty for a pod smaller than an idle node,
//           ties going to a stable order (a hash of the node name salted once
//           per deployment; each seed stands for one deployment). The first
//           node gets 10, every other at most 9; times the weight, plus
//           nothing else, so kube-scheduler takes the first node and its
//           random tie-break never sees a tie.
// Random is uniform over the nodes that fit in every mode.
//
// Node scores are memoised per (node version, pod shape): only the node that
// received the last pod changes, so a replay touches few new states. The memo
// holds at most ReplayOptions::max_memo_slots entries (24 bytes each): one per
// (node, shape) pair while there are no more pairs than that, else the pairs
// share the slots by hash, each slot remembering its pair, so a trace of many
// distinct shapes costs time rather than unbounded memory.
//
// Thread-safety: Replay is reentrant; it allocates its own state.
#ifndef ACCELPOOL_SIM_REPLAY_H_
#define ACCELPOOL_SIM_REPLAY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/rank.h"
#include "core/workload.h"
#include "sim/cluster.h"
#include "sim/policies.h"
#include "sim/trace.h"

namespace accelpool::sim {

enum class TieMode { kPaper, kKube, kStock };

// What accelpool-extender and fgd-extender know. The defaults are the shipped
// extender's: the workload it learns from the pods that arrive, and each
// node's free host CPU and memory.
//   kLearned : core::WorkloadLearner fed every arrival (the extender sees a
//              pod when it is created, before it is scheduled); the task list
//              is rebuilt every `refresh` arrivals, the built-in mix before
//              the learner has enough;
//   kBuiltin : the built-in mix (core::DefaultWorkload: no model, no host terms);
//   kTrace   : the trace's own task shapes (what a perfectly learned workload
//              would be).
// `host` off: devices only, as the extender was before it tracked the host.
enum class ExtenderWorkload { kLearned, kBuiltin, kTrace };
struct ExtenderInputs {
  ExtenderWorkload workload = ExtenderWorkload::kLearned;
  bool host = true;
  int32_t refresh = 64;
  core::WorkloadLearnerOptions learner;
};

// Who places a pod that asks for no GPU (kube and stock modes).
enum class CpuPods {
  // The policy, as every pod, with the mode's own tie rule (the trace
  // protocol's assumption, and the published tables').
  kPolicy,
  // The cluster's default scheduler, as the shipped chart does it unless
  // extender.hostPods routes them: kube-scheduler calls the extender only for
  // pods naming a managed resource, and the webhook routes only those to
  // accelpool's scheduler. NodeResourcesFit LeastAllocated plus
  // NodeResourcesBalancedAllocation on CPU and memory, ties at random.
  kDefaultScheduler,
  // The chart's host-pod route (webhook.hostPods): the host-pod profile of
  // accelpool's scheduler. The extender scores the pod as
  // core::Policy::HostScore does (accelpool: no packing step) and ranks it
  // with core::RankRule::tied_best (every node with the best combined score
  // 10, the rest at most 9). The profile keeps kube-scheduler's scores for
  // preferences (topology spread, affinities, taints), which the trace's pods
  // do not have: kube-scheduler picks at random among the nodes ranked 10.
  // Kube mode only (stock mode places such pods as kPolicy does).
  kExtender,
};

// Who places a pod that asks for no GPU in `mode`: paper mode always the
// policy; stock mode the policy for kExtender too (the host-pod profile is
// accelpool's extender's).
CpuPods EffectiveCpuPods(CpuPods requested, TieMode mode);

struct ReplayOptions {
  uint64_t seed = 42;
  double inflation = 1.3;
  TieMode mode = TieMode::kPaper;
  // The extender's weight in kube-scheduler. It changes no choice: in kKube
  // the extender's first node gets 10 and every other at most 9, with no
  // other score added; in kStock it multiplies every node's score alike.
  // Kept so the totals are kube-scheduler's; accelpool-sim has no flag for it.
  int32_t extender_weight = 10;
  core::RankPenalties penalties;  // kKube: the extender's keep-whole penalties
  ExtenderInputs extender;        // accelpool-extender, fgd-extender
  // kKube, kStock: who places a pod that asks for no GPU (CpuPods).
  CpuPods cpu_pods = CpuPods::kPolicy;
  // Most entries of the score memo (24 MiB at the default); 0 memoises nothing.
  size_t max_memo_slots = size_t{1} << 20;
};

struct StepPoint {
  float arrived_pct = 0;    // cumulative GPU request / cluster GPUs, failed pods included
  float allocated_pct = 0;  // GPUs allocated / cluster GPUs
  float frag_pct = 0;       // cluster fragmentation / cluster GPUs
};

struct ReplayResult {
  std::vector<StepPoint> curve;       // one point per pod, in arrival order
  // 100 - allocated % at arrived = 100 %; unset when the arrivals stop short
  // of 100 % of the cluster's GPUs (--inflation below 1, a small trace with
  // none), since nothing was measured there.
  std::optional<double> unallocated_at_100;
  double first_failure_arrived_pct = -1;  // arrived % when 1 % of GPUs were refused; -1 never
  std::optional<double> frag_at_100;      // fragmentation % at arrived = 100 %; unset as above
  int64_t pods = 0;
  int64_t failed_pods = 0;
};

// Pod indices in arrival order: name order, shuffled by `seed`, then clones
// sampled with replacement until the GPU request would pass `inflation` x
// cluster GPUs (or random pods dropped when the trace already asks for more).
std::vector<int32_t> ArrivalOrder(const std::vector<TracePod>& pods, const Cluster& c,
                                  uint64_t seed, double inflation);

ReplayResult Replay(const Cluster& c, const std::vector<int32_t>& order, const SimPolicy& policy,
                    const ReplayOptions& opt);

// Chooses a node for each pod under one policy and tie mode, with the
// per-(node version, shape) memo. Used by Replay and the time-based mode.
class NodePicker {
 public:
  NodePicker(const Cluster& c, const SimPolicy& policy, const ReplayOptions& opt);
  // The node index for a pod of shape `sid`, or nodes.size() when it fits
  // nowhere; *mask gets the GPUs to use.
  size_t Pick(const std::vector<SimNode>& nodes, size_t sid, uint32_t* mask);
  FragCache& frag() { return frag_; }
  // Times the extender variants' learned task list was rebuilt.
  int64_t workload_rebuilds() const { return workload_rebuilds_; }
  // Entries of the score memo: nodes x shapes, at most opt.max_memo_slots
  // (0 for a policy that is not memoisable).
  size_t memo_slots() const { return memo_.size(); }

 private:
  const Cluster& c_;
  const SimPolicy& policy_;
  ReplayOptions opt_;
  std::vector<uint32_t> rank_;      // per-seed permutation (paper mode)
  std::vector<uint64_t> name_rank_;  // stable order (accelpool's extender)
  uint64_t tie_state_;
  std::mt19937_64 rng_;
  FragCache frag_;
  FragCache memory_frag_;
  std::vector<std::pair<size_t, int64_t>> host_candidates_;  // (node, combined): kExtender
  // A pod asking for no GPU, placed by kube-scheduler's default scores
  // (CpuPods::kDefaultScheduler).
  size_t PickByDefaultScheduler(const std::vector<SimNode>& nodes, const PodShape& shape);
  // Learns arrivals (ExtenderWorkload::kLearned) and rebuilds extender_tasks_
  // from it every opt_.extender.refresh arrivals.
  void Learn(const PodShape& shape);
  std::vector<core::FragTask> extender_tasks_;
  core::WorkloadLearner learner_;
  std::map<std::string, uint64_t> model_masks_;  // learned model list -> the trace's model bits
  int32_t since_rebuild_ = 0;
  int64_t workload_rebuilds_ = 0;
  FragCache extender_frag_;
  FragCache extender_fgd_frag_;
  EvalContext ctx_;
  static constexpr uint32_t kStaleVersion = 0;  // SimNode versions start at 1
  static constexpr uint64_t kNoPair = UINT64_MAX;
  struct MemoEntry {
    uint64_t pair = kNoPair;  // node x shapes + shape
    uint32_t version = kStaleVersion;
    int32_t score = -1;
    uint32_t mask = 0;
  };
  std::vector<MemoEntry> memo_;
  bool memo_shared_ = false;  // fewer slots than (node, shape) pairs: hashed
};

// The value of a curve (allocated or fragmentation %) at an arrived %,
// interpolated linearly between pods; the last point beyond the end (callers
// that report a figure check the curve reaches it, as Replay does).
double AllocatedAt(const std::vector<StepPoint>& curve, double arrived_pct);
double FragAt(const std::vector<StepPoint>& curve, double arrived_pct);

// Portable seeded helpers (the same sequence on every standard library).
uint64_t Uniform(uint64_t bound, uint64_t* state);  // 0..bound-1, splitmix64 based

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_REPLAY_H_
