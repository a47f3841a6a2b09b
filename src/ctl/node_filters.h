// kube-scheduler's own node filters, for `kubectl accelpool explain`: the
// extender only ever sees the nodes these let through, so an explanation
// that skipped them would offer nodes the pod can never reach.
//
// Applied, with kube-scheduler's rules and in its order:
//   NodeUnschedulable  spec.unschedulable, unless the pod tolerates
//                      node.kubernetes.io/unschedulable:NoSchedule
//   TaintToleration    every NoSchedule and NoExecute taint tolerated (an
//                      empty key with Exists tolerates all; an empty effect
//                      any effect; Equal, the default, needs the value)
//   NodeAffinity       spec.nodeSelector (every label equal) and the required
//                      node affinity (any nodeSelectorTerm; in a term every
//                      matchExpression (In, NotIn, Exists, DoesNotExist, Gt,
//                      Lt) and matchField (metadata.name In / NotIn); a term
//                      with neither matches nothing)
// Not applied (they need every pod's requests, or other pods' placement):
// CPU and memory fit, host ports, volumes, pod affinity and anti-affinity,
// topology spread.
//
// Thread-safety: plain values and pure functions.
#ifndef ACCELPOOL_CTL_NODE_FILTERS_H_
#define ACCELPOOL_CTL_NODE_FILTERS_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace accelpool::ctl {

struct Taint {
  std::string key, value, effect;
};

// What kube-scheduler's node filters read of a Node.
struct NodeFacts {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;
};

NodeFacts NodeFactsFromJson(const nlohmann::json& node);

// Why kube-scheduler's node filters turn `pod` away from `node`, in words
// that name the selector, term or taint, the first failing filter in
// kube-scheduler's order (cordon, taints, affinity); "" when they let it
// through. A
// malformed field in the pod (which the apiserver would have refused) reads
// as not matching.
std::string SchedulerRejects(const nlohmann::json& pod, const NodeFacts& node);

}  // namespace accelpool::ctl

#endif  // ACCELPOOL_CTL_NODE_FILTERS_H_
