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
//   NodePorts          each host port the pod asks for free on the node (same
//                      protocol and port, and the same address or 0.0.0.0 on
//                      either side, is a conflict)
//   NodeResourcesFit   each resource the pod requests (its effective
//                      request: containers summed, init containers at their
//                      peak, sidecars running beside both, plus overhead;
//                      limits stand for missing requests, as the apiserver
//                      defaults them) within the node's status.allocatable
//                      less what the node's pods request, and the pod count
//                      within allocatable pods. accelpool's memory and
//                      compute names are skipped: kube-scheduler ignores them
//                      (ignoredByScheduler), the extender checks them.
// Not applied (they need other pods' labels and placement, or other
// objects): volumes, pod affinity and anti-affinity, topology spread.
//
// Thread-safety: plain values and pure functions.
#ifndef ACCELPOOL_CTL_NODE_FILTERS_H_
#define ACCELPOOL_CTL_NODE_FILTERS_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace accelpool::ctl {

struct Taint {
  std::string key, value, effect;
};

// Resource amounts by name, in thousandths of the unit ("500m" cpu -> 500,
// "1Gi" memory -> 1073741824000).
using Resources = std::map<std::string, int64_t>;

// A Kubernetes quantity ("2", "500m", "1.5Gi", "4k", "1e3") in thousandths,
// rounded up as kube-scheduler does; nullopt when it is not one or too large.
std::optional<int64_t> ParseMilliQuantity(const std::string& text);

// The pod's effective requests, as kube-scheduler counts them.
Resources PodRequests(const nlohmann::json& pod);

// A container port bound on the node (hostPort > 0); ip "0.0.0.0" for all.
struct HostPort {
  std::string ip, protocol;
  int32_t port = 0;
};

// The host ports of the pod's containers and sidecars (restartable init
// containers, which keep theirs while the pod runs).
std::vector<HostPort> PodHostPorts(const nlohmann::json& pod);

// What a node's pods take: their requests summed, how many there are, and
// the host ports they hold.
struct NodeUse {
  Resources requested;
  int64_t pods = 0;
  std::vector<HostPort> host_ports;
};

// What kube-scheduler's node filters read of a Node.
struct NodeFacts {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;
  // status.allocatable; no resource check when the node reports none.
  Resources allocatable;
};

NodeFacts NodeFactsFromJson(const nlohmann::json& node);

// Why kube-scheduler's node filters turn `pod` away from `node`, in words
// that name the selector, term or taint, the first failing filter in
// kube-scheduler's order (cordon, taints, affinity, ports, resources); "" when they let it
// through. A
// malformed field in the pod (which the apiserver would have refused) reads
// as not matching.
// `use` (may be null: no resource check) is what the node's pods take.
std::string SchedulerRejects(const nlohmann::json& pod, const NodeFacts& node,
                             const NodeUse* use = nullptr);

}  // namespace accelpool::ctl

#endif  // ACCELPOOL_CTL_NODE_FILTERS_H_
