// What `kubectl accelpool` shows: the pool as the apiserver holds it, read
// once and rebuilt with the extender's own code.
//
// ClusterView lists every node and every pod that has not finished, and
// feeds them through the extender's CacheFeeder into an extender Cache: node
// inventories (accelpool.io/inventory), cordons, and each bound pod's
// assignment (accelpool.io/assignment). So the usage it reports is what the
// extender would rebuild after a restart, computed by the same code; a
// difference from the running extender's metrics means that extender's
// cache has drifted. The commands over it are pure functions of the view:
//
//   NodesReport   one row per node with an accelpool inventory
//   PodsReport    one row per pod holding devices
//   NodeReport    one node's devices, and which pod holds what on each
//   ExplainReport one pod: its request as the extender parses it, where it
//                 is bound, or for each node why it does not fit: by
//                 kube-scheduler's node filters (node_filters.h: cordon,
//                 taints, affinity, resources), which run first, or by the
//                 extender
//
// Each returns JSON (for -o json) and text (for a person) built from it.
//
// Thread-safety: ClusterView is built once and then only read.
#ifndef ACCELPOOL_CTL_CLUSTER_VIEW_H_
#define ACCELPOOL_CTL_CLUSTER_VIEW_H_

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "ctl/node_filters.h"
#include "ctl/volume_filters.h"
#include "extender/cache.h"
#include "extender/kube_adapters.h"
#include "kube/client.h"

namespace accelpool::ctl {

struct PodEntry {
  extender::PodRef ref;
  std::string node;   // spec.nodeName; "" when not bound yet
  std::string phase;  // status.phase
};

// How the view counts: `host_aware` as the extender's --host-aware (its
// default on): each node's host CPU and memory (allocatable less the requests
// of its unfinished pods) is scored and measured, as the extender does.
struct ViewOptions {
  bool host_aware = true;
};

class ClusterView {
 public:
  // Lists nodes and unfinished pods; `progress` (may be null) hears a line
  // per page-sized step ("listed 1250 nodes").
  static StatusOr<std::unique_ptr<ClusterView>> Load(
      kube::KubeClient& client, const std::function<void(const std::string&)>& progress,
      const ViewOptions& options = {});
  // From objects already at hand (tests, or a saved dump).
  static std::unique_ptr<ClusterView> FromObjects(const std::vector<nlohmann::json>& nodes,
                                                  const std::vector<nlohmann::json>& pods,
                                                  const ViewOptions& options = {});

  extender::Cache& cache() { return cache_; }
  const extender::Cache& cache() const { return cache_; }
  // Nodes with an accelpool inventory annotation, sorted.
  std::vector<std::string> Nodes() const;
  // Unfinished pods by uid.
  const std::map<std::string, PodEntry>& pods() const { return pods_; }
  // Nodes whose inventory annotation does not parse, with why.
  const std::map<std::string, std::string>& bad_nodes() const { return bad_nodes_; }
  // What kube-scheduler's node filters read of each node (labels, taints,
  // cordon); null for a node not listed.
  const NodeFacts* Facts(const std::string& node) const {
    auto it = facts_.find(node);
    return it == facts_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, NodeFacts>& facts() const { return facts_; }
  const std::map<std::string, NodeUse>& uses() const { return use_; }
  // What the node's unfinished pods (every pod, not only accelpool's)
  // request, how many there are, their host ports and labels.
  const NodeUse& Use(const std::string& node) const {
    static const NodeUse kNone;
    auto it = use_.find(node);
    return it == use_.end() ? kNone : it->second;
  }

 private:
  explicit ClusterView(const ViewOptions& options) { cache_.TrackHost(options.host_aware); }
  void AddNode(const nlohmann::json& node);
  void AddPod(const nlohmann::json& pod);
  void CountPod(const nlohmann::json& pod);

  extender::Cache cache_;
  extender::CacheFeeder feeder_{cache_, Logger()};
  std::map<std::string, PodEntry> pods_;
  std::map<std::string, std::string> bad_nodes_;
  std::map<std::string, NodeFacts> facts_;
  std::map<std::string, NodeUse> use_;
};

struct Report {
  nlohmann::json json;
  std::string text;
};

// The report's JSON as -o json prints it, indented. A string that is not
// UTF-8 (a message quoting a node's annotation, cut mid-character) prints
// with U+FFFD in its place instead of failing the dump.
std::string ReportJsonText(const Report& r);

// The workload fragmentation is measured against: the extender's learned mix
// (read from its ConfigMap) or, with no shapes, the built-in one.
struct ReportWorkload {
  std::vector<core::TaskShape> shapes;  // empty: core::DefaultWorkload()
  std::string source;                   // where they came from, for the report
};

// Every node: vendor and model, devices (healthy, cordoned, free whole),
// memory and compute assigned of the total, idle device capacity and the part
// of it fragmented for `workload` (core::MeasureFragmentation: what the
// extender's accelpool_extender_node_*_devices gauges show), pods holding
// devices.
Report NodesReport(const ClusterView& view, const ReportWorkload& workload = {});
// The extender's learned workload from its ConfigMap `where` ("NS/NAME", the
// chart's <release>-workload in the extender's namespace), as its policies
// score with it. A ConfigMap that does not exist yet, or holds fewer arrivals
// than the extender needs before it offers a mix, gives no shapes (the
// built-in mix) and says so in `source`. An unreadable one is an error that
// says why.
StatusOr<ReportWorkload> ReadWorkload(kube::KubeClient& client, const std::string& where);
// Every pod holding devices (in `ns` only, unless empty): its node, phase,
// and per vendor the devices, whole cards, memory and compute it holds.
Report PodsReport(const ClusterView& view, const std::string& ns);
// One node's devices and their holders. kNotFound when the node has no
// accelpool inventory.
StatusOr<Report> NodeReport(const ClusterView& view, const std::string& node);
// One pod (the object as read from the apiserver). `policy` is the
// extender's --policy (a pod's own accelpool.io/policy wins, as in the
// extender).
// What explain reads besides the view. Null members were not read: pod
// affinity terms that select namespaces by label, or the pod's volumes, are
// then not judged, and the report says so.
struct ExplainInputs {
  const NamespaceLabels* ns_labels = nullptr;  // every namespace's labels
  const PodVolumes* volumes = nullptr;         // the pod's claims and volumes
};
StatusOr<Report> ExplainReport(ClusterView& view, const nlohmann::json& pod,
                               const std::string& policy, const ExplainInputs& inputs = {});

// Every namespace's labels (a metadata-only list). kPermissionDenied when
// the user may not list namespaces.
StatusOr<NamespaceLabels> ListNamespaceLabels(kube::KubeClient& client);

}  // namespace accelpool::ctl

#endif  // ACCELPOOL_CTL_CLUSTER_VIEW_H_
