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
//   PodTopologySpread  DoNotSchedule constraints (TopologySpread below)
//   InterPodAffinity   the pod's required pod affinity and anti-affinity
//                      (InterPodAffinity below)
// Not applied: volume filters, and bound pods' anti-affinity against the
// pending pod.
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

// A pod as inter-pod affinity sees it.
struct PodLabels {
  std::string ns;
  std::map<std::string, std::string> labels;
};

// What a node's pods take: their requests summed, how many there are, the
// host ports they hold, and their labels.
struct NodeUse {
  Resources requested;
  int64_t pods = 0;
  std::vector<HostPort> host_ports;
  std::vector<PodLabels> pod_labels;
};

PodLabels PodLabelsFromJson(const nlohmann::json& pod);

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

// The pending pod's required inter-pod affinity and anti-affinity
// (spec.affinity.podAffinity / podAntiAffinity,
// requiredDuringSchedulingIgnoredDuringExecution), judged over every node's
// pods once: a term's topologyKey groups nodes into domains by that label;
// affinity needs a pod matching the term's labelSelector in the namespaces
// it names (its own by default) somewhere in the node's domain (or, when no
// pod matches anywhere, the pod matching its own term: the first of a
// group); anti-affinity needs none there. A term whose namespaceSelector is
// not empty is skipped (namespaces' labels are not read). The anti-affinity
// of pods already bound, against this one, is not judged.
class InterPodAffinity {
 public:
  InterPodAffinity(const nlohmann::json& pod, const std::map<std::string, NodeFacts>& facts,
                   const std::map<std::string, NodeUse>& use);
  // "" when the node passes, else the term that turns the pod away.
  std::string Rejects(const NodeFacts& node) const;
  // Terms skipped for a namespaceSelector.
  int skipped() const { return skipped_; }

 private:
  struct Term {
    bool anti = false;
    std::string key;                      // topologyKey
    std::string text;                     // the term in words
    std::map<std::string, int64_t> hits;  // topology value -> matching pods
    bool any = false;                     // a matching pod anywhere
    bool self = false;                    // the pending pod matches it
  };
  std::vector<Term> terms_;
  int skipped_ = 0;
};

// The pod's topology spread constraints with whenUnsatisfiable:
// DoNotSchedule, judged as kube-scheduler's PodTopologySpread filter: per
// topologyKey domain, the pods in the pod's namespace matching the
// labelSelector (with matchLabelKeys' values from the pod's own labels) on
// the eligible nodes (those passing the pod's node affinity unless
// nodeAffinityPolicy is Ignore; with nodeTaintsPolicy Honor, also its
// taints); placing the pod in a domain must not leave it more than maxSkew
// above the emptiest domain (taken as 0 while there are fewer domains than
// minDomains). A node without the topologyKey label is refused.
class TopologySpread {
 public:
  TopologySpread(const nlohmann::json& pod, const std::map<std::string, NodeFacts>& facts,
                 const std::map<std::string, NodeUse>& use);
  std::string Rejects(const NodeFacts& node) const;

 private:
  struct Constraint {
    std::string key;
    int64_t max_skew = 1;
    int64_t min_domains = 1;
    std::string text;
    std::map<std::string, int64_t> counts;  // domain -> matching pods
    bool self = false;
  };
  std::vector<Constraint> constraints_;
};

// Why kube-scheduler's node filters turn `pod` away from `node`, in words
// that name the selector, term, taint, port or resource: the first failing
// filter in kube-scheduler's order (cordon, taints, node affinity, ports,
// resources; inter-pod affinity is InterPodAffinity); "" when they let it
// through. A malformed field in the pod (which the apiserver would have
// refused) reads as not matching.
// `use` (may be null: no port or resource check) is what the node's pods
// take.
std::string SchedulerRejects(const nlohmann::json& pod, const NodeFacts& node,
                             const NodeUse* use = nullptr);

// What the pod asks of every node, read once for a walk over many nodes.
struct PodAsks {
  Resources requests;
  std::vector<HostPort> host_ports;
};
PodAsks PodAsksFromJson(const nlohmann::json& pod);
// As above, with the pod's asks read beforehand.
std::string SchedulerRejects(const nlohmann::json& pod, const PodAsks& asks, const NodeFacts& node,
                             const NodeUse* use);

}  // namespace accelpool::ctl

#endif  // ACCELPOOL_CTL_NODE_FILTERS_H_
