// Pods for the device plugin benchmarks: one container asking for one
// nvidia.com/gpu, bound to a node, with the accelpool assignment the extender
// writes for one 4 GiB / 10 % share of one GPU. Shared by plugin_bench's miss
// path and the stand-alone plugin_fake_apiserver.
#ifndef ACCELPOOL_BENCH_PLUGIN_BENCH_PODS_H_
#define ACCELPOOL_BENCH_PLUGIN_BENCH_PODS_H_

#include <nlohmann/json.hpp>
#include <string>

#include "api/assignment_codec.h"

namespace accelpool::bench {

// `slot` is the slot id on GPU `device` (index `index`); `created` the
// creationTimestamp. With `running` the pod started long ago: phase Running
// and an allocation annotation naming its container, as the plugin writes it.
inline nlohmann::json SharePod(const std::string& name, const std::string& node,
                               const std::string& device, int index, const std::string& slot,
                               const std::string& created, bool running = false) {
  api::Assignment a;
  a.node = node;
  a.policy = "accelpool";
  api::AssignedContainer c;
  c.name = "main";
  c.vendor = core::Vendor::kNvidia;
  c.resource = "nvidia.com/gpu";
  c.devices.push_back({device, index, slot, 4096, 100, false});
  a.containers.push_back(c);
  nlohmann::json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "default"},
        {"uid", "uid-" + name},
        {"creationTimestamp", created},
        {"annotations", {{"accelpool.io/assignment", api::SerializeAssignment(a)}}}}},
      {"spec",
       {{"nodeName", node},
        {"containers",
         nlohmann::json::array({{{"name", "main"},
                                 {"image", "registry.example/train:1"},
                                 {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}},
      {"status", {{"phase", running ? "Running" : "Pending"}}}};
  if (running) {
    api::Allocation done;
    done.allocated = {{"main", "nvidia.com/gpu"}};
    pod["metadata"]["annotations"]["accelpool.io/allocation"] = api::SerializeAllocation(done);
  }
  return pod;
}

}  // namespace accelpool::bench

#endif  // ACCELPOOL_BENCH_PLUGIN_BENCH_PODS_H_
