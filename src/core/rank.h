// The node ranking rule of Prioritize: how per-node policy scores, job
// locality and the keep-whole penalty become kube-scheduler's 0..10 extender
// scores. One rule, used by the extender (extender::RankNodes) and by the
// simulator's kube mode (sim/replay.h), so that what the simulator measures
// is what a cluster does.
//
//   combined = policy score (0..100)
//            + locality (job siblings nearby; computed by the caller)
//            - keep-whole penalty, when the pod asks for devices but fewer
//              than the node has and the node is idle: idle_node, plus
//              idle_super_node when the node's whole super-node is idle too
//   clamped at 0.
// Nodes are ordered by combined score, highest first, ties by
// StableNodeOrder (core/node_order.h), then by name. The first node gets 10;
// the rest get floor(9 * combined / best combined), at most 9 (0 when the
// best is 0). Example: combined {a: 80, b: 80, c: 40} -> a 10, b 9, c 4.
// Because exactly one node gets 10 and the profile we ship adds nothing else,
// kube-scheduler places the pod on the first node of the order.
// A pod that asks for no device is ranked with `tied_best` (RankRule): every
// node with the best combined score gets 10. Its score is the host share it
// takes from nodes whose devices would need it, and nodes where it strands
// nothing (no accelerator, or none idle) all tie: a fixed order would fill
// one of them after another. Such pods go to the chart's host-pod profile,
// where kube-scheduler's preference scores (topology spread, affinities,
// taints) are added and choose among the 10s (they can also outweigh a step
// or two of ours), with a random pick among equal totals.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_CORE_RANK_H_
#define ACCELPOOL_CORE_RANK_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace accelpool::core {

inline constexpr int64_t kMaxRankScore = 10;  // kube-scheduler's MaxExtenderPriority

// The defaults are the product's. idle_node is 0: the fragmentation-aware
// policies (fragmentation, accelpool) already price breaking an idle node for
// every task shape of the workload, and a flat penalty on top moves small
// pods onto worse nodes: on the Alibaba trace a 15-point penalty costs both
// FGD and accelpool allocated GPUs on every trace
// (docs/benchmarks/quality.md). idle_super_node stays: no node-level measure
// sees multi-node gangs, which need whole super-nodes.
struct RankPenalties {
  int32_t idle_node = 0;         // breaking an idle node for a pod smaller than it
  int32_t idle_super_node = 10;  // breaking an idle node of an idle super-node
};

// What the rule needs to know about one candidate node, as plain numbers.
struct RankCandidate {
  std::string_view node;           // name; must outlive the call
  int32_t policy_score = 0;        // 0..100
  int32_t locality = 0;            // job-locality bonus, >= 0
  int32_t pod_devices = 0;         // devices the pod holds at once on the node
  int32_t node_devices = 0;        // devices the node has
  bool node_idle = false;          // no device of the node is in use
  bool super_node_idle = false;    // every node of its super-node is idle (false: none)
  uint64_t order = 0;              // StableNodeOrder(salt, node)
};

// The combined score of one candidate (>= 0).
int64_t CombinedScore(const RankCandidate& c, const RankPenalties& penalties);

// True when a candidate with (combined_a, order_a, name_a) ranks before one
// with (combined_b, order_b, name_b).
inline bool RanksBefore(int64_t combined_a, uint64_t order_a, std::string_view name_a,
                        int64_t combined_b, uint64_t order_b, std::string_view name_b) {
  if (combined_a != combined_b) return combined_a > combined_b;
  if (order_a != order_b) return order_a < order_b;
  return name_a < name_b;
}

// The 0..10 score of the node at `position` (0-based) in the order, given its
// combined score and the first node's.
int64_t ExtenderScore(size_t position, int64_t combined, int64_t best_combined);

struct RankedNode {
  size_t index = 0;   // into the candidates given to Rank
  int64_t combined = 0;
  int64_t score = 0;  // 0..10
};

struct RankRule {
  RankPenalties penalties;
  bool tied_best = false;  // every node with the best combined score gets 10
};

// The whole rule: candidates in rank order with their 0..10 scores.
std::vector<RankedNode> Rank(std::span<const RankCandidate> candidates,
                             const RankPenalties& penalties = {});
std::vector<RankedNode> Rank(std::span<const RankCandidate> candidates, const RankRule& rule);

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_RANK_H_
