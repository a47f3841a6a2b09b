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
//   InterPodAffinity   the pod's required pod affinity and anti-affinity,
//                      and bound pods' required anti-affinity against it
//                      (InterPodAffinity below)
// Volume filters are in volume_filters.h.
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

// A required pod affinity or anti-affinity term, as written.
struct AffinityTerm {
  std::string topology_key;
  nlohmann::json selector;  // labelSelector; null matches no pod
  std::vector<std::string> namespaces;
  nlohmann::json namespace_selector;  // null when the term has none
};

// Namespaces' labels, by namespace name.
using NamespaceLabels = std::map<std::string, std::map<std::string, std::string>>;

// A pod as inter-pod affinity sees it.
struct PodLabels {
  std::string ns;
  std::map<std::string, std::string> labels;
  // Its required anti-affinity terms (most pods have none): a bound pod keeps
  // the pods they match out of its topology domain.
  std::vector<AffinityTerm> anti_affinity = {};
};

// A disk a pod mounts inline (not through a claim), which kube-scheduler's
// VolumeRestrictions keeps from being mounted twice on a node.
struct InlineDisk {
  std::string kind;                   // gcePersistentDisk, awsElasticBlockStore, iscsi, rbd
  std::string id;                     // pdName, volumeID, iqn, or pool/image
  std::vector<std::string> monitors;  // rbd: the Ceph monitors
  bool read_only = false;
};

// What a node's pods take: their requests summed, how many there are, the
// host ports they hold, their labels, the claims they mount and their inline
// disks.
struct NodeUse {
  Resources requested;
  int64_t pods = 0;
  std::vector<HostPort> host_ports;
  std::vector<PodLabels> pod_labels;
  // "ns/claim" -> "ns/pod" of a pod mounting it (spec.volumes[].persistentVolumeClaim).
  std::map<std::string, std::string> claims = {};
  // "ns/claim" of every claim its pods mount, generic ephemeral ones too.
  std::vector<std::string> volume_claims = {};
  std::vector<InlineDisk> disks = {};
};

// The strings of a JSON array (other elements skipped; not an array: none).
std::vector<std::string> JsonStrings(const nlohmann::json& arr);

// A labelSelector over labels: null (or not an object) matches nothing, {}
// everything; an unknown operator matches nothing.
bool LabelSelectorMatches(const nlohmann::json& selector,
                          const std::map<std::string, std::string>& labels);

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

// A v1 NodeSelector ({"nodeSelectorTerms": [...]}, as in required node
// affinity and a PersistentVolume's spec.nodeAffinity.required): any term
// matches, a term needs all its requirements, a term with none matches no
// node.
bool NodeSelectorMatches(const nlohmann::json& selector, const NodeFacts& node);

// kube-scheduler's InterPodAffinity filter, judged over every node's pods
// once. A term's topologyKey groups nodes into domains by that label; a term
// looks at the namespaces it lists, those whose labels its namespaceSelector
// matches ({} is all), and its pod's own when it has neither. A node is
// refused, in this order, when:
//   - affinity (the pending pod's podAffinity, required terms): the node
//     lacks a term's topologyKey label, or the node's domain of some term
//     holds no pod matching all the terms; unless no pod anywhere matches
//     them all and the pending pod does (the first of a group);
//   - anti-affinity (its podAntiAffinity): a pod matching a term is in the
//     node's domain of that term;
//   - bound pods' anti-affinity: a bound pod whose required anti-affinity
//     term matches the pending pod is in the node's domain of that term.
// Without namespaces' labels (`ns_labels` null: they could not be read), a
// term whose namespaceSelector has labels is not judged; skipped() counts
// those.
class InterPodAffinity {
 public:
  InterPodAffinity(const nlohmann::json& pod, const std::map<std::string, NodeFacts>& facts,
                   const std::map<std::string, NodeUse>& use,
                   const NamespaceLabels* ns_labels = nullptr);
  // "" when the node passes, else the term that turns the pod away.
  std::string Rejects(const NodeFacts& node) const;
  // Terms not judged for want of namespaces' labels.
  int skipped() const { return skipped_; }

 private:
  struct Term {
    std::string key;                      // topologyKey
    std::string text;                     // the term in words
    std::map<std::string, int64_t> hits;  // topology value -> matching pods
  };
  std::vector<Term> affinity_;
  std::vector<Term> anti_;
  bool affinity_matched_ = false;  // some pod matches all affinity terms
  bool self_matches_ = false;      // the pending pod matches all of them
  // Bound pods' anti-affinity against the pending pod: topologyKey -> value
  // -> how many pods, and the first such term in words.
  std::map<std::string, std::map<std::string, std::pair<int64_t, std::string>>> existing_;
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
