// PluginMetrics: the device plugin's Prometheus series.
//
//   accelpool_plugin_device_healthy{vendor,device}            1 healthy, 0 not
//   accelpool_plugin_allocated_memory_mib{vendor,device}      assigned memory
//   accelpool_plugin_allocated_compute{vendor,device}         assigned compute, 1000 = whole
//   accelpool_plugin_allocate_total{resource,result}          Allocate calls, result ok|failed
//   accelpool_plugin_allocate_failures_total{resource,reason} failed Allocates by reason
//   accelpool_plugin_allocate_seconds{resource}               Allocate latency incl. pod lookup
//   accelpool_plugin_allocate_repeats_total{resource}         containers answered again: kubelet
//       repeated a call, or lost its checkpoint and admits the pod again
//   accelpool_plugin_pod_rereads_total{scope,result}          re-reads of the node's pods a
//       lookup needed (the pod watch had not delivered the caller): scope pending (its
//       Pending pods) or not_ended (all but the ended ones), result ok|failed|timeout
//   accelpool_plugin_registrations_total{resource}            successful Register calls
//   accelpool_plugin_pending_containers                       assigned, not yet allocated
//   accelpool_plugin_assignments_refused_total{reason}        pod versions whose assignment
//       was refused: signature (forged or edited), unknown_key (a key not
//       held yet), other_node, malformed
//   accelpool_plugin_assignment_key_reload_errors_total       failed re-reads of the key dir
//   accelpool_plugin_device_memory_mib{node,vendor,model,device}  device memory (capacity);
//       joins the allocated series on (instance, device) for per-model and per-node pools
//   accelpool_plugin_device_memory_used_mib{vendor,device}    memory processes hold on the
//       device, as its library reports it (NVIDIA and the fake backend), read every
//       --foreign-memory-every
//   accelpool_plugin_device_foreign_memory_mib{vendor,device} of it, what no grant accounts
//       for, as published on the Node (0 below --foreign-memory-min-mib): the scheduler
//       keeps whole-device pods off the device and fits shares beside it
//   accelpool_plugin_foreign_memory_holders_total{kind}    processes named as holding a
//       device's foreign memory when its figure rose, by kind: pod_without_grant (a pod
//       reaching a device it was not granted), pod_beyond_grant, left_over (its pod ended
//       or left), host (in no pod), unknown (not found under --host-proc)
//   accelpool_plugin_ungranted_device_uses                   pods using a device of this node
//       they were not granted (one of their processes holds memory there), by pod and
//       device, as of the last foreign memory check
//   accelpool_plugin_container_memory_used_mib{namespace,pod,container,device}
//       memory a fractional NVIDIA container's processes hold on the device, as
//       libaccelpool-cuda counts it (read from the container's accounting region)
//   accelpool_plugin_container_memory_limit_mib{namespace,pod,container,device}  its cap
//   accelpool_plugin_container_processes{namespace,pod,container}  processes in the region
//   accelpool_plugin_container_usage_read_errors_total{reason}  regions not read: layout
//       (another library version, or overwritten), not_regular, io
//   accelpool_plugin_device_checks_total{result}              device checks (the plugin's
//       discovery again every --rediscover-every, or on SIGHUP), by result: unchanged;
//       pending (a new set seen once, served if the next check agrees); changed (served:
//       a MIG layout changed, a card added or gone); failed (a backend that serves
//       devices failed; they are kept); empty (no device found; the devices are kept)
//   accelpool_plugin_enforcement_files_missing                1 while libaccelpool-cuda.so or
//       the preload file that fractional NVIDIA containers mount is not on the node
//       (such containers cannot start); 0 when both are, or the plugin mounts none
//   accelpool_plugin_priority_not_granted_total               pods asking for high task
//       priority (nvidia.com/priority: 0) in a namespace not in --high-priority-namespaces,
//       once per pod; they run as low priority (PodSync::SetHighPriorityNamespaces)
//   accelpool_plugin_state_dirs_uncapped                      1 when the plugin makes
//       container state dirs without a tmpfs size cap (--state-dir-size-mib=0, or a mount
//       refused: the plugin is not privileged), so a container can fill the node's disk
//       through its state dir; 0 otherwise
//
// The per-device series of a device that leaves the node leave with it
// (RetainDevices).
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_PLUGIN_METRICS_H_
#define ACCELPOOL_PLUGIN_PLUGIN_METRICS_H_

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"

namespace accelpool::plugin {

class PluginMetrics {
 public:
  // kAlreadyExists / kInvalidArgument from the registry (a name clash).
  static StatusOr<std::unique_ptr<PluginMetrics>> New(MetricsRegistry& registry);

  void AllocateDone(const std::string& resource, bool ok, const std::string& reason,
                    double seconds);
  // `n` containers of one successful Allocate were allocated before.
  void AllocateRepeated(const std::string& resource, int64_t n);
  // One re-read of the node's pods a lookup waited for, of `scope`
  // ("pending" or "not_ended"): "ok", "failed" or "timeout" (it went on past
  // the lookup's budget).
  void PodReread(const std::string& scope, const std::string& result);
  void SetHealth(const std::string& vendor, const std::string& device, bool healthy);
  void SetUsage(const std::string& vendor, const std::string& device, double memory_mib,
                double compute);
  // Capacity of one device: its memory, labelled with the node and model.
  void SetCapacity(const std::string& node, const std::string& vendor, const std::string& model,
                   const std::string& device, double memory_mib);
  // Memory in use on one device, and the foreign part of it as published.
  void SetMemoryInUse(const std::string& vendor, const std::string& device, double used_mib,
                      double foreign_mib);
  // One process named as holding foreign memory (`kind`: see the series above).
  void ForeignHolderNamed(const std::string& kind);
  void SetUngrantedUses(double n);
  void SetPriorityHeld(double n);
  void PriorityHoldStarted();
  void PriorityNotGranted();
  void Registered(const std::string& resource);
  void SetPending(double n);
  void AssignmentRefused(const std::string& reason);
  void AssignmentKeyReloadFailed();
  // One container's figures on one device (`who`: namespace, pod, container).
  void SetContainerMemory(const std::vector<std::string>& who, const std::string& device,
                          double used_mib, double limit_mib);
  void SetContainerProcesses(const std::vector<std::string>& who, double n);
  void ContainerUsageReadFailed(const std::string& reason);
  // Drops the per-device series (health, allocated, capacity) of devices not
  // in `live`.
  void RetainDevices(const std::set<std::string>& live);
  // One device check and its result (see the series above).
  void DeviceChecked(const std::string& result);
  void SetEnforcementFilesMissing(bool missing);
  void SetStateDirsUncapped(bool uncapped);
  // 1 once the plugin serves kubelet (its sockets registered), 0 before.
  void SetServing(bool serving);
  // Drops the container series whose {namespace, pod, container} is not in
  // `live`. REQUIRES: called from the one thread that sets them.
  void RetainContainers(const std::set<std::vector<std::string>>& live);

 private:
  PluginMetrics() = default;

  // Serialises the per-device setters with RetainDevices (a health event and
  // a device check come from different threads; a dropped child must not be
  // set through a reference taken before).
  std::mutex device_mu_;
  GaugeFamily* healthy_ = nullptr;
  GaugeFamily* memory_ = nullptr;
  GaugeFamily* compute_ = nullptr;
  CounterFamily* allocates_ = nullptr;
  CounterFamily* failures_ = nullptr;
  CounterFamily* repeats_ = nullptr;
  CounterFamily* rereads_ = nullptr;
  HistogramFamily* latency_ = nullptr;
  CounterFamily* registrations_ = nullptr;
  GaugeFamily* pending_ = nullptr;
  GaugeFamily* capacity_ = nullptr;
  GaugeFamily* in_use_ = nullptr;
  GaugeFamily* foreign_ = nullptr;
  CounterFamily* holders_ = nullptr;
  GaugeFamily* ungranted_ = nullptr;
  GaugeFamily* priority_held_ = nullptr;
  CounterFamily* priority_holds_ = nullptr;
  CounterFamily* priority_not_granted_ = nullptr;
  CounterFamily* refused_ = nullptr;
  CounterFamily* key_reload_errors_ = nullptr;
  GaugeFamily* container_used_ = nullptr;
  GaugeFamily* container_limit_ = nullptr;
  GaugeFamily* container_processes_ = nullptr;
  CounterFamily* container_read_errors_ = nullptr;
  CounterFamily* device_checks_ = nullptr;
  GaugeFamily* enforcement_missing_ = nullptr;
  GaugeFamily* state_dirs_uncapped_ = nullptr;
  GaugeFamily* serving_ = nullptr;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_PLUGIN_METRICS_H_
