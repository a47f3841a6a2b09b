#include "plugin/plugin_metrics.h"

#include "plugin/foreign_memory.h"

namespace accelpool::plugin {
namespace {

template <typename T>
Status Take(StatusOr<T> r, T* out) {
  if (!r.ok()) {
    return r.status();
  }
  *out = *r;
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<PluginMetrics>> PluginMetrics::New(MetricsRegistry& reg) {
  std::unique_ptr<PluginMetrics> m(new PluginMetrics());
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_device_healthy",
                        "1 when the device is healthy, 0 when not.", {"vendor", "device"}),
           &m->healthy_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_allocated_memory_mib",
                        "Memory assigned on the device, MiB.", {"vendor", "device"}),
           &m->memory_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_allocated_compute",
                        "Compute assigned on the device, 1000 = whole.", {"vendor", "device"}),
           &m->compute_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_allocate_total", "Allocate calls by result.",
                          {"resource", "result"}),
           &m->allocates_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_allocate_failures_total",
                          "Failed Allocate calls by reason.", {"resource", "reason"}),
           &m->failures_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_allocate_repeats_total",
                          "Containers an Allocate answered again: kubelet repeated the call, or "
                          "lost its device checkpoint and admits the pod again.",
                          {"resource"}),
           &m->repeats_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_pod_rereads_total",
                          "Re-reads of the node's pods that an Allocate or "
                          "GetPreferredAllocation lookup waited for (the pod watch had not "
                          "delivered the caller), by scope (pending: its Pending pods; "
                          "not_ended: all but the ended ones) and result: ok, failed, timeout.",
                          {"scope", "result"}),
           &m->rereads_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddHistogram("accelpool_plugin_allocate_seconds",
                            "Allocate latency including the pod lookup.", {"resource"}),
           &m->latency_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_registrations_total",
                          "Successful registrations with kubelet.", {"resource"}),
           &m->registrations_));
  ACCELPOOL_RETURN_IF_ERROR(Take(reg.AddGauge("accelpool_plugin_pending_containers",
                                              "Containers assigned here and not yet allocated."),
                                 &m->pending_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_device_memory_mib", "Device memory (capacity), MiB.",
                        {"node", "vendor", "model", "device"}),
           &m->capacity_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_device_memory_used_mib",
                        "Memory processes hold on the device, MiB, as its library reports it.",
                        {"vendor", "device"}),
           &m->in_use_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_device_foreign_memory_mib",
                        "Memory in use on the device that no grant accounts for, MiB, as "
                        "published on the Node (0 below --foreign-memory-min-mib).",
                        {"vendor", "device"}),
           &m->foreign_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_foreign_memory_holders_total",
                          "Processes named as holding a device's foreign memory when its figure "
                          "rose, by kind (pod_without_grant, pod_beyond_grant, left_over, host, "
                          "unknown).",
                          {"kind"}),
           &m->holders_));
  for (const char* kind : kHolderKinds) m->holders_->WithLabels({kind});
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_ungranted_device_uses",
                        "Pods using a device of this node they were not granted (one of their "
                        "processes holds memory there), by pod and device, as of the last check."),
           &m->ungranted_));
  m->ungranted_->Get().Set(0);
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_assignments_refused_total",
                          "Pods whose accelpool assignment was refused, by reason "
                          "(signature, unknown_key, other_node, malformed); once per pod "
                          "and reason.",
                          {"reason"}),
           &m->refused_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_assignment_key_reload_errors_total",
                          "Re-reads of the assignment key directory that failed; the keys read "
                          "before stay in use."),
           &m->key_reload_errors_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_container_memory_used_mib",
                        "Memory a fractional NVIDIA container's processes hold on the device, MiB, "
                        "as libaccelpool-cuda counts it.",
                        {"namespace", "pod", "container", "device"}),
           &m->container_used_));
  ACCELPOOL_RETURN_IF_ERROR(Take(reg.AddGauge("accelpool_plugin_container_memory_limit_mib",
                                              "The container's memory cap on the device, MiB.",
                                              {"namespace", "pod", "container", "device"}),
                                 &m->container_limit_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_container_processes",
                        "Live processes of the container registered with libaccelpool-cuda.",
                        {"namespace", "pod", "container"}),
           &m->container_processes_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_container_usage_read_errors_total",
                          "Container accounting regions that could not be read, by reason "
                          "(layout, not_regular, io).",
                          {"reason"}),
           &m->container_read_errors_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_device_checks_total",
                          "Device checks by result: unchanged, pending (a new set seen once), "
                          "changed (served), failed (a backend failed; its devices are kept), "
                          "empty (no device found; the devices are kept).",
                          {"result"}),
           &m->device_checks_));
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_priority_held_containers",
                        "Low-priority fractional NVIDIA containers whose kernel launches are held "
                        "now, while a high-priority container on the same GPU is busy."),
           &m->priority_held_));
  m->priority_held_->Get().Set(0);
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_priority_holds_total",
                          "Holds started on low-priority containers (one per container and GPU)."),
           &m->priority_holds_));
  m->priority_holds_->Get();
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddCounter("accelpool_plugin_priority_not_granted_total",
                          "Pods that ask for high task priority (nvidia.com/priority: 0) in a "
                          "namespace not in --high-priority-namespaces, once per pod; their "
                          "containers run as low priority."),
           &m->priority_not_granted_));
  m->priority_not_granted_->Get();
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_enforcement_files_missing",
                        "1 while libaccelpool-cuda.so or the preload file that fractional NVIDIA "
                        "containers mount is missing on the node (they cannot start)."),
           &m->enforcement_missing_));
  m->enforcement_missing_->Get().Set(0);
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_state_dirs_uncapped",
                        "1 when container state dirs are made without a tmpfs size cap "
                        "(--state-dir-size-mib=0, or the mount was refused): a container can "
                        "fill the node's disk through its state dir."),
           &m->state_dirs_uncapped_));
  m->state_dirs_uncapped_->Get().Set(0);
  ACCELPOOL_RETURN_IF_ERROR(
      Take(reg.AddGauge("accelpool_plugin_serving",
                        "1 once the plugin serves kubelet (its resources registered), 0 while it "
                        "waits for a backend's library or for a device to serve."),
           &m->serving_));
  m->serving_->Get().Set(0);
  for (const char* result : {"unchanged", "pending", "changed", "failed", "empty"}) {
    m->device_checks_->WithLabels({result});
  }
  m->key_reload_errors_->Get();
  // Present from the start, so an alert on increase() sees the first one.
  for (const char* reason : {"signature", "other_node", "malformed"}) {
    m->refused_->WithLabels({reason});
  }
  return m;
}

void PluginMetrics::AllocateRepeated(const std::string& resource, int64_t n) {
  repeats_->WithLabels({resource}).Inc(static_cast<double>(n));
}

void PluginMetrics::PodReread(const std::string& scope, const std::string& result) {
  rereads_->WithLabels({scope, result}).Inc();
}

void PluginMetrics::AllocateDone(const std::string& resource, bool ok, const std::string& reason,
                                 double seconds) {
  allocates_->WithLabels({resource, ok ? "ok" : "failed"}).Inc();
  if (!ok) {
    failures_->WithLabels({resource, reason}).Inc();
  }
  latency_->WithLabels({resource}).Observe(seconds);
}

void PluginMetrics::AssignmentRefused(const std::string& reason) {
  refused_->WithLabels({reason}).Inc();
}

void PluginMetrics::AssignmentKeyReloadFailed() { key_reload_errors_->Get().Inc(); }

void PluginMetrics::SetHealth(const std::string& vendor, const std::string& device, bool healthy) {
  std::lock_guard<std::mutex> lock(device_mu_);
  healthy_->WithLabels({vendor, device}).Set(healthy ? 1 : 0);
}

void PluginMetrics::SetUsage(const std::string& vendor, const std::string& device,
                             double memory_mib, double compute) {
  std::lock_guard<std::mutex> lock(device_mu_);
  memory_->WithLabels({vendor, device}).Set(memory_mib);
  compute_->WithLabels({vendor, device}).Set(compute);
}

void PluginMetrics::SetCapacity(const std::string& node, const std::string& vendor,
                                const std::string& model, const std::string& device,
                                double memory_mib) {
  std::lock_guard<std::mutex> lock(device_mu_);
  capacity_->WithLabels({node, vendor, model, device}).Set(memory_mib);
}

void PluginMetrics::SetMemoryInUse(const std::string& vendor, const std::string& device,
                                   double used_mib, double foreign_mib) {
  std::lock_guard<std::mutex> lock(device_mu_);
  in_use_->WithLabels({vendor, device}).Set(used_mib);
  foreign_->WithLabels({vendor, device}).Set(foreign_mib);
}

void PluginMetrics::ForeignHolderNamed(const std::string& kind) {
  holders_->WithLabels({kind}).Inc();
}

void PluginMetrics::SetUngrantedUses(double n) { ungranted_->Get().Set(n); }

void PluginMetrics::SetPriorityHeld(double n) { priority_held_->Get().Set(n); }

void PluginMetrics::PriorityHoldStarted() { priority_holds_->Get().Inc(); }

void PluginMetrics::PriorityNotGranted() { priority_not_granted_->Get().Inc(); }

void PluginMetrics::RetainDevices(const std::set<std::string>& live) {
  std::lock_guard<std::mutex> lock(device_mu_);
  // {vendor, device}, and {node, vendor, model, device} for the capacity.
  auto gone = [&](const std::vector<std::string>& v) { return !live.contains(v.back()); };
  healthy_->RemoveIf(gone);
  memory_->RemoveIf(gone);
  compute_->RemoveIf(gone);
  capacity_->RemoveIf(gone);
  in_use_->RemoveIf(gone);
  foreign_->RemoveIf(gone);
}

void PluginMetrics::DeviceChecked(const std::string& result) {
  device_checks_->WithLabels({result}).Inc();
}

void PluginMetrics::SetEnforcementFilesMissing(bool missing) {
  enforcement_missing_->Get().Set(missing ? 1 : 0);
}

void PluginMetrics::SetStateDirsUncapped(bool uncapped) {
  state_dirs_uncapped_->Get().Set(uncapped ? 1 : 0);
}

void PluginMetrics::SetServing(bool serving) { serving_->Get().Set(serving ? 1 : 0); }

void PluginMetrics::Registered(const std::string& resource) {
  registrations_->WithLabels({resource}).Inc();
}

void PluginMetrics::SetPending(double n) { pending_->Get().Set(n); }

void PluginMetrics::SetContainerMemory(const std::vector<std::string>& who,
                                       const std::string& device, double used_mib,
                                       double limit_mib) {
  std::vector<std::string> labels = who;
  labels.resize(3);
  labels.push_back(device);
  container_used_->WithLabels(labels).Set(used_mib);
  container_limit_->WithLabels(labels).Set(limit_mib);
}

void PluginMetrics::SetContainerProcesses(const std::vector<std::string>& who, double n) {
  container_processes_->WithLabels(who).Set(n);
}

void PluginMetrics::ContainerUsageReadFailed(const std::string& reason) {
  container_read_errors_->WithLabels({reason}).Inc();
}

void PluginMetrics::RetainContainers(const std::set<std::vector<std::string>>& live) {
  auto gone = [&](const std::vector<std::string>& v) {
    return !live.contains(std::vector<std::string>(v.begin(), v.begin() + 3));
  };
  container_used_->RemoveIf(gone);
  container_limit_->RemoveIf(gone);
  container_processes_->RemoveIf(gone);
}

}  // namespace accelpool::plugin
