// ExtenderMetrics registration and the gauges refreshed before /metrics renders.
#include <set>
#include <string>
#include <vector>

#include "core/frag.h"
#include "extender/extender.h"

namespace accelpool::extender {

StatusOr<ExtenderMetrics> ExtenderMetrics::Register(MetricsRegistry& r) {
  ExtenderMetrics m;
  auto latency = r.AddHistogram("accelpool_extender_request_seconds",
                                "Latency of extender requests by verb.", {"verb"});
  auto requests = r.AddCounter("accelpool_extender_requests_total",
                               "Extender requests by verb and HTTP status.", {"verb", "code"});
  auto filter = r.AddCounter("accelpool_extender_filter_nodes_total",
                             "Nodes judged by filter, by outcome and first reason.",
                             {"outcome", "reason"});
  auto conflicts = r.AddCounter("accelpool_extender_bind_conflicts_total",
                                "Binds that found their devices taken and re-planned.", {"stage"});
  auto failures = r.AddCounter("accelpool_extender_bind_failures_total",
                               "Binds that failed, by stage.", {"stage"});
  auto nodes = r.AddGauge("accelpool_extender_cache_nodes", "Nodes in the cache.");
  auto pods = r.AddGauge("accelpool_extender_cache_pods", "Pods holding devices, by state.",
                         {"state"});
  auto uncounted = r.AddGauge(
      "accelpool_extender_cache_grants_uncounted",
      "Grants of pods' assignments not counted as planned now, by why: absent (not counted: "
      "the device is missing from the node's inventory) or conflict (counted past the "
      "device's capacity: assignments overlap, nothing new lands there).",
      {"why"});
  auto age = r.AddGauge("accelpool_extender_cache_age_seconds",
                        "Seconds since the cache last changed.");
  auto dev_mem = r.AddGauge("accelpool_extender_device_memory_allocated_mib",
                            "Memory assigned per device.", {"node", "device"});
  auto dev_cmp = r.AddGauge("accelpool_extender_device_compute_allocated",
                            "Compute assigned per device (thousandths).", {"node", "device"});
  auto node_mem = r.AddGauge("accelpool_extender_node_memory_allocated_mib",
                             "Memory assigned per node.", {"node"});
  auto node_cmp = r.AddGauge("accelpool_extender_node_compute_allocated",
                             "Compute assigned per node (thousandths).", {"node"});
  auto cordoned = r.AddGauge(
      "accelpool_extender_node_cordoned_devices",
      "Devices per node taken out of service by the accelpool.io/cordoned-devices annotation.",
      {"node"});
  auto idle = r.AddGauge("accelpool_extender_node_idle_devices",
                         "Idle device capacity per node, in devices: the free compute of its "
                         "schedulable devices that no pod holds whole.",
                         {"node"});
  auto fragmented = r.AddGauge(
      "accelpool_extender_node_fragmented_devices",
      "Of the node's idle device capacity, the part the workload's next pod is expected not to "
      "be able to use, in devices (the fragmentation the accelpool policy minimises).",
      {"node"});
  auto bad = r.AddCounter("accelpool_extender_bad_requests_total",
                          "Requests refused as malformed, by verb.", {"verb"});
  auto edits = r.AddCounter(
      "accelpool_extender_assignment_edits_ignored_total",
      "Watch events showing a bound pod's assignment changed, removed or unparsable; the cache "
      "kept the assignment the pod was bound with.");
  auto key_errors = r.AddCounter(
      "accelpool_extender_assignment_key_reload_errors_total",
      "Re-reads of the assignment key directory that failed; the keys read before stay in use.");
  auto preemption_waits = r.AddCounter(
      "accelpool_extender_preemption_waits_total",
      "Filters of a preemptor that waited for its victims' deletions to reach the cache, by "
      "result (released: they arrived; timeout: they were still held).",
      {"result"});
  auto rechecks = r.AddCounter(
      "accelpool_extender_pod_rechecks_total",
      "Reads of one node's pods from the apiserver by a filter that found no node, by result "
      "(freed: pods gone or finished were freed before their watch events arrived; unchanged; "
      "failed; skipped: read too recently).",
      {"result"});
  auto recheck_waits = r.AddCounter(
      "accelpool_extender_recheck_waits_total",
      "Filters that found no node and waited for nodes read a moment before to change in the "
      "cache, by result (changed: a node changed and was planned again; timeout).",
      {"result"});
  auto host_free =
      r.AddGauge("accelpool_extender_node_host_free",
                 "Host CPU (cores) and memory (MiB) per node not requested by its pods, as the "
                 "fragmentation policies score it; only while the host is tracked.",
                 {"node", "resource"});
  auto host_pods = r.AddGauge("accelpool_extender_host_pods",
                              "Pods whose CPU and memory requests are counted on a node.");
  auto shapes =
      r.AddGauge("accelpool_extender_workload_shapes",
                 "Task shapes the fragmentation policies score against (0: the built-in mix).");
  auto arrivals = r.AddCounter("accelpool_extender_workload_arrivals_total",
                               "Pods the workload learner has seen arrive.");
  auto rebuilds = r.AddCounter("accelpool_extender_workload_rebuilds_total",
                               "Times the policies were rebuilt for a newly learned workload.");
  auto store = r.AddCounter("accelpool_extender_workload_store_total",
                            "Reads (at start) and writes of the learned workload's ConfigMap, by "
                            "op (load|save) and result (ok|missing|failed).",
                            {"op", "result"});
  auto admissions = r.AddCounter(
      "accelpool_extender_admissions_total",
      "Pod admission reviews answered by the webhook, by route (devices: /mutate, host-pods: "
      "/mutate-host-pods) and result (mutated|unchanged|refused|bad_request|error).",
      {"route", "result"});
  ACCELPOOL_RETURN_IF_ERROR(admissions.status());
  auto node_updates = r.AddCounter(
      "accelpool_extender_node_updates_total",
      "Node objects from the watch or a re-read, by result: applied (the cache's entry was "
      "rebuilt) or unchanged (labels, annotations, taints and allocatable as applied before: a "
      "status heartbeat; nothing is rebuilt and plans stay valid).",
      {"result"});
  ACCELPOOL_RETURN_IF_ERROR(node_updates.status());
  m.node_updates = *node_updates;
  for (const char* result : {"applied", "unchanged"}) m.node_updates->WithLabels({result});
  for (const Status& s :
       {host_free.status(), host_pods.status(), shapes.status(),     arrivals.status(),
        rebuilds.status(),  store.status(),     latency.status(),    requests.status(),
        filter.status(),    conflicts.status(), failures.status(),   nodes.status(),
        pods.status(),      uncounted.status(), age.status(),        dev_mem.status(),
        dev_cmp.status(),   node_mem.status(),  node_cmp.status(),   cordoned.status(),
        bad.status(),       edits.status(),     key_errors.status(), preemption_waits.status(),
        rechecks.status(),  idle.status(),      fragmented.status(), recheck_waits.status()}) {
    ACCELPOOL_RETURN_IF_ERROR(s);
  }
  m.latency = *latency;
  m.requests = *requests;
  m.filter_nodes = *filter;
  m.bind_conflicts = *conflicts;
  m.bind_failures = *failures;
  m.cache_nodes = *nodes;
  m.cache_pods = *pods;
  m.cache_age = *age;
  m.cache_uncounted = *uncounted;
  m.device_memory = *dev_mem;
  m.device_compute = *dev_cmp;
  m.node_memory = *node_mem;
  m.node_compute = *node_cmp;
  m.node_cordoned = *cordoned;
  m.node_idle = *idle;
  m.node_fragmented = *fragmented;
  m.bad_requests = *bad;
  m.assignment_edits = *edits;
  m.key_reload_errors = *key_errors;
  m.preemption_waits = *preemption_waits;
  m.pod_rechecks = *rechecks;
  m.recheck_waits = *recheck_waits;
  // Present from the start, so that rate() sees the first wait.
  for (const char* result : {"changed", "timeout"}) m.recheck_waits->WithLabels({result});
  m.node_host_free = *host_free;
  m.host_pods = *host_pods;
  m.workload_shapes = *shapes;
  m.workload_arrivals = *arrivals;
  m.workload_rebuilds = *rebuilds;
  m.workload_store = *store;
  m.admissions = *admissions;
  // Present from the start, so that increase() sees the first refusal.
  for (const char* route : {"devices", "host-pods"}) {
    for (const char* result : {"mutated", "unchanged", "refused", "bad_request", "error"}) {
      m.admissions->WithLabels({route, result});
    }
  }
  m.key_reload_errors->Get();  // rendered from the start, for increase()
  m.workload_arrivals->Get();
  m.workload_rebuilds->Get();
  return m;
}

void Extender::UpdateGauges() const {
  if (metrics_ == nullptr) {
    return;
  }
  std::lock_guard<std::mutex> lock(gauges_mu_);
  CacheStats s = cache_.Stats();
  metrics_->cache_nodes->Get().Set(static_cast<double>(s.nodes));
  metrics_->cache_pods->WithLabels({"bound"}).Set(static_cast<double>(s.pods_bound));
  metrics_->cache_pods->WithLabels({"reserved"}).Set(static_cast<double>(s.pods_reserved));
  metrics_->cache_pods->WithLabels({"unreadable"}).Set(static_cast<double>(s.pods_unreadable));
  metrics_->cache_age->Get().Set(s.seconds_since_update);
  metrics_->cache_uncounted->WithLabels({"absent"}).Set(static_cast<double>(s.grants_absent));
  metrics_->cache_uncounted->WithLabels({"conflict"})
      .Set(static_cast<double>(s.grants_conflicting));
  // The cache counts; the counter catches up (it only ever grows).
  Counter& edits = metrics_->assignment_edits->Get();
  if (const double behind = static_cast<double>(s.assignment_changes_ignored) - edits.Value();
      behind > 0) {
    edits.Inc(behind);
  }
  metrics_->host_pods->Get().Set(static_cast<double>(cache_.HostPods()));
  metrics_->workload_shapes->Get().Set(static_cast<double>(Policies()->workload.size()));
  const std::shared_ptr<const PolicySet> policies = Policies();
  std::set<std::string> nodes;
  std::set<std::string> host_nodes;            // nodes whose host is scored
  std::set<std::vector<std::string>> devices;  // {node, device id}
  for (const std::string& name : cache_.NodeNames()) {
    NodeSnapshotPtr snap = cache_.Node(name);
    if (snap == nullptr) {
      continue;
    }
    nodes.insert(name);
    double mem = 0;
    double cmp = 0;
    double cordoned = 0;
    core::FragmentationNow frag;
    for (const InventoryState& st : snap->inventories) {
      for (const core::Device& d : st.inventory->devices) {
        cordoned += d.cordoned ? 1 : 0;
      }
      const core::FragmentationNow f =
          core::MeasureFragmentation(*st.inventory, st.usage, policies->workload);
      frag.fragment += f.fragment;
      frag.idle += f.idle;
      for (size_t i = 0; i < st.usage.devices.size(); ++i) {
        const core::DeviceUsage& u = st.usage.devices[i];
        const core::Device& d = st.inventory->devices[i];
        const double m = u.exclusive ? static_cast<double>(d.memory_mib)
                                     : static_cast<double>(u.memory_mib);
        const double c = u.exclusive ? core::kComputeWhole : static_cast<double>(u.compute);
        devices.insert({name, d.id});
        metrics_->device_memory->WithLabels({name, d.id}).Set(m);
        metrics_->device_compute->WithLabels({name, d.id}).Set(c);
        mem += m;
        cmp += c;
      }
    }
    if (!snap->inventories.empty() && snap->inventories[0].usage.host_free.has_value()) {
      const core::HostResources& free = *snap->inventories[0].usage.host_free;
      metrics_->node_host_free->WithLabels({name, "cpu"})
          .Set(static_cast<double>(free.cpu_milli) / 1000.0);
      metrics_->node_host_free->WithLabels({name, "memory"})
          .Set(static_cast<double>(free.memory_mib));
      host_nodes.insert(name);
    }
    metrics_->node_memory->WithLabels({name}).Set(mem);
    metrics_->node_compute->WithLabels({name}).Set(cmp);
    metrics_->node_cordoned->WithLabels({name}).Set(cordoned);
    metrics_->node_idle->WithLabels({name}).Set(static_cast<double>(frag.idle) /
                                                core::kComputeWhole);
    metrics_->node_fragmented->WithLabels({name}).Set(frag.fragment / core::kComputeWhole);
  }
  // A deleted node (autoscaling) or a device gone from an inventory leaves
  // the exposition instead of staying at its last value for the process's
  // life.
  auto node_gone = [&](const std::vector<std::string>& v) { return !nodes.contains(v[0]); };
  auto device_gone = [&](const std::vector<std::string>& v) { return !devices.contains(v); };
  for (GaugeFamily* f : {metrics_->node_memory, metrics_->node_compute, metrics_->node_cordoned,
                         metrics_->node_idle, metrics_->node_fragmented}) {
    f->RemoveIf(node_gone);
  }
  for (GaugeFamily* f : {metrics_->device_memory, metrics_->device_compute}) {
    f->RemoveIf(device_gone);
  }
  metrics_->node_host_free->RemoveIf(
      [&](const std::vector<std::string>& v) { return !host_nodes.contains(v[0]); });
}

}  // namespace accelpool::extender
