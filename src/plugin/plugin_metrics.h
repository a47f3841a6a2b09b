// PluginMetrics: the device plugin's Prometheus series.
//
//   accelpool_plugin_device_healthy{vendor,device}            1 healthy, 0 not
//   accelpool_plugin_allocated_memory_mib{vendor,device}      assigned memory
//   accelpool_plugin_allocated_compute{vendor,device}         assigned compute, 1000 = whole
//   accelpool_plugin_allocate_total{resource,result}          Allocate calls, result ok|failed
//   accelpool_plugin_allocate_failures_total{resource,reason} failed Allocates by reason
//   accelpool_plugin_allocate_seconds{resource}               Allocate latency incl. pod lookup
//   accelpool_plugin_registrations_total{resource}            successful Register calls
//   accelpool_plugin_pending_containers                       assigned, not yet allocated
//   accelpool_plugin_assignments_refused_total{reason}        pod versions whose assignment
//       was refused: signature (forged or edited), unknown_key (a key not
//       held yet), other_node, malformed
//   accelpool_plugin_assignment_key_reload_errors_total       failed re-reads of the key dir
//   accelpool_plugin_device_memory_mib{node,vendor,model,device}  device memory (capacity);
//       joins the allocated series on (instance, device) for per-model and per-node pools
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_PLUGIN_METRICS_H_
#define ACCELPOOL_PLUGIN_PLUGIN_METRICS_H_

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace accelpool::plugin {

class PluginMetrics {
 public:
  // kAlreadyExists / kInvalidArgument from the registry (a name clash).
  static StatusOr<std::unique_ptr<PluginMetrics>> New(MetricsRegistry& registry);

  void AllocateDone(const std::string& resource, bool ok, const std::string& reason,
                    double seconds);
  void SetHealth(const std::string& vendor, const std::string& device, bool healthy);
  void SetUsage(const std::string& vendor, const std::string& device, double memory_mib,
                double compute);
  // Capacity of one device: its memory, labelled with the node and model.
  void SetCapacity(const std::string& node, const std::string& vendor, const std::string& model,
                   const std::string& device, double memory_mib);
  void Registered(const std::string& resource);
  void SetPending(double n);
  void AssignmentRefused(const std::string& reason);
  void AssignmentKeyReloadFailed();

 private:
  PluginMetrics() = default;

  GaugeFamily* healthy_ = nullptr;
  GaugeFamily* memory_ = nullptr;
  GaugeFamily* compute_ = nullptr;
  CounterFamily* allocates_ = nullptr;
  CounterFamily* failures_ = nullptr;
  HistogramFamily* latency_ = nullptr;
  CounterFamily* registrations_ = nullptr;
  GaugeFamily* pending_ = nullptr;
  GaugeFamily* capacity_ = nullptr;
  CounterFamily* refused_ = nullptr;
  CounterFamily* key_reload_errors_ = nullptr;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_PLUGIN_METRICS_H_
