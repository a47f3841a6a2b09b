// Planning one pod on one node, and ranking nodes for prioritize.
//
// PlanNode runs core::Fit once per vendor the pod asks for, on the node's
// snapshot (usage includes reservations of binds in flight), and folds the
// results: the worst code wins (unresolvable over unschedulable over fits),
// reasons are concatenated, the node score is the mean of the per-vendor
// policy scores (0..100).
//
// RankNodes turns per-node policy scores into kube-scheduler's 0..10 with
// the rule of core/rank.h (shared with the simulator's kube mode):
//   combined = policy score
//            + job locality (siblings of the pod's job on the same node,
//              else the same super-node, rack or block)
//            - keep-whole penalty (a pod smaller than a node that would break
//              an idle node, more when it would break an idle super-node)
// Nodes are ordered by combined score, ties by core::StableNodeOrder (a stable
// salted order, so the policy's choice is never left to kube-scheduler's
// random tie-break). The first node gets 10; the rest get
// floor(9 * combined / best), at most 9.
// Example: combined {a: 80, b: 80, c: 40} -> a 10, b 9, c 4.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_EXTENDER_PLANNER_H_
#define ACCELPOOL_EXTENDER_PLANNER_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/fit.h"
#include "core/policy.h"
#include "core/rank.h"
#include "core/types.h"
#include "extender/cache.h"
#include "extender/node_state.h"
#include "extender/wire.h"

namespace accelpool::extender {

// A pod's request parsed once per call.
struct PodInfo {
  PodRef ref;
  core::PodRequest request;
  // Per entry of request.containers: the count resource it asked through
  // (recorded in the assignment); may be empty (the vendor default is used).
  std::vector<std::string> resources;
  std::vector<core::Vendor> vendors;  // distinct vendors asked for, in first-use order
  int32_t devices = 0;                // most devices the pod holds at once (per vendor, summed)
  int32_t priority = 0;               // spec.priority (0 when unset)
  // The pod's own policy (annotation accelpool.io/policy, or HAMi's
  // hami.io/gpu-scheduler-policy); "" = the extender's --policy.
  std::string policy;
  // The pod's own node policy (accelpool.io/node-policy, or HAMi's
  // hami.io/node-scheduler-policy), which scores nodes while `policy` picks
  // the devices; "" = nodes are scored by `policy`, or by the extender's
  // --policy when policy_devices_only.
  std::string node_policy;
  // `policy` came from hami.io/gpu-scheduler-policy, which in HAMi chooses
  // the devices inside a node and not the node.
  bool policy_devices_only = false;
  // The pod states preferences kube-scheduler scores (preferred node affinity,
  // preferred pod affinity or anti-affinity): filter must not pick one node.
  bool soft_preferences = false;
  // status.nominatedNodeName: the node where kube-scheduler's last
  // preemption for the pod took effect ("" = none, or not sent).
  std::string nominated_node;

  bool Pooled() const { return !request.containers.empty(); }
};
PodInfo MakePodInfo(PodRef ref, core::PodRequest request);
// A string that is equal for two pods exactly when their device requests are
// (container names, kinds, vendors, amounts, filters).
std::string RequestShape(const core::PodRequest& request);

struct NodePlan {
  core::FitCode code = core::FitCode::kUnresolvable;
  std::vector<core::FitReason> reasons;
  std::string message;  // set for nodes turned away without `reasons`
  // For those: why, as a reason name (filter_nodes_total's `reason` label and
  // the filter's summary): "NoInventory", "InventoryInvalid",
  // "HeldForPreemptor".
  std::string_view message_reason;
  std::vector<AssignmentPart> parts;  // when fits; slots not chosen yet
  int32_t score = 0;                  // policy score 0..100, when fits

  bool fits() const { return code == core::FitCode::kFits; }
  // Operator text for a node that does not fit.
  std::string Describe() const;
};

// REQUIRES: pod.request validated. `snap` may be null (unknown node).
// The policies a pod is planned with: one picks the devices on a node, the
// other scores the node (the same one unless the pod names a node policy).
struct PlanPolicies {
  const core::Policy& devices;
  const core::Policy& nodes;
};
NodePlan PlanNode(const PodInfo& pod, const NodeSnapshot* snap, const PlanPolicies& policies);
inline NodePlan PlanNode(const PodInfo& pod, const NodeSnapshot* snap, const core::Policy& policy) {
  return PlanNode(pod, snap, PlanPolicies{policy, policy});
}

struct RankOptions {
  int locality_node = 30;
  int locality_super_node = 20;
  int locality_rack = 12;
  int locality_block = 6;
  // Keep-whole penalties; the defaults are core::RankPenalties'.
  int idle_node_penalty = core::RankPenalties{}.idle_node;
  // Added when the node's whole super-node is idle.
  int idle_super_node_penalty = core::RankPenalties{}.idle_super_node;
  // Salt of the stable tie-break order (core/node_order.h), chosen once per
  // deployment and kept (flag --tie-break-salt). Default 0.
  uint64_t tie_salt = 0;
};

struct RankInput {
  std::string_view node;  // must outlive the RankNodes call
  int32_t policy_score = 0;
  NodeSnapshotPtr snap;  // may be null
};

// `job_domains`: the domains of the nodes holding the pod's job siblings, with
// their pod counts (empty when the pod has no job or no sibling is placed).
// `busy_in_super_node` answers how many nodes of a super-node hold pods,
// over the whole cluster (Cache::BusyInSuperNode): the candidates alone miss
// the busy nodes a filter dropped. Empty: counted among the candidates.
std::vector<HostPriority> RankNodes(
    const PodInfo& pod, const std::vector<RankInput>& nodes,
    const std::map<std::string, NodeDomains>& job_domains, const RankOptions& options = {},
    const std::function<int(const std::string& super_node)>& busy_in_super_node = {});

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_PLANNER_H_
