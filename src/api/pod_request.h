// pod_request: a v1.Pod (as JSON) -> the devices it asks for (core::PodRequest).
//
// Reads initContainers (restartPolicy "Always" -> kSidecar, else kInit) and
// containers in pod order. For each container and each vendor it gathers the
// vendor's resources from resources.limits, falling back to
// resources.requests for names missing from limits (limits win). Extended
// resources must be non-negative integers (ParseWholeQuantity: "4096", and
// the apiserver's canonical "4k" for 4000): "1.5", "-1", "100Mi" (where a
// count is needed) are rejected with a message naming the container and the
// resource. Units come from the resource table (resources.h): memory in MiB
// after the name's unit, compute in thousandths (25 % -> 250).
//
// Worked example: a container with limits {"mthreads.com/vgpu": "1",
// "mthreads.com/sgpu-memory": "8", "mthreads.com/sgpu-core": "4"} asks for one
// Moore Threads device, 8 x 512 = 4096 MiB and 4/16 = 250 thousandths.
// A memory or compute name without its count implies a count of 1.
//
// Annotations apply to every container of the pod:
//   model include/exclude : nvidia.com/use-gputype, nvidia.com/nouse-gputype,
//                           accelpool.io/model-include, accelpool.io/model-exclude
//   UUID include/exclude  : nvidia.com/use-gpuuuid, nvidia.com/nouse-gpuuuid,
//                           accelpool.io/uuid-include, accelpool.io/uuid-exclude
//   NUMA binding          : nvidia.com/numa-bind, accelpool.io/numa-bind ("true")
//   policy                : accelpool.io/policy, hami.io/gpu-scheduler-policy (HAMi's
//                           picks the devices only: policy_devices_only; its values
//                           binpack, spread, topology-aware (-> topology), numa (no
//                           change) and mutex (-> exclusive), or a comma-separated
//                           list of them, as HAMi 2.10 takes it)
//   node policy           : accelpool.io/node-policy, hami.io/node-scheduler-policy
//   exclusive             : accelpool.io/exclusive ("true")
// Lists are comma-separated. accelpool.io/* keys apply to every vendor; the
// nvidia.com/* spellings apply to NVIDIA requests only, and only when the
// matching accelpool.io/* key is absent.
// Job identity for gang locality, first found: annotation accelpool.io/pod-group,
// label/annotation scheduling.k8s.io/group-name, pod-group.scheduling.sigs.k8s.io,
// annotation kueue.x-k8s.io/workload, label jobset.sigs.k8s.io/jobset-name.
//
// The result passes core::ValidatePodRequest, whose message is returned otherwise.
// request.host is the pod's CPU and memory request (host_request.h), also for
// a pod that asks for no accelerator.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_API_POD_REQUEST_H_
#define ACCELPOOL_API_POD_REQUEST_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::api {

// Per entry of PodRequest::containers, what the request came through.
struct RequestOrigin {
  std::string resource;      // the count resource (or the first vendor name seen)
  std::string model_family;  // from model-specific names (huawei.com/Ascend910B), or ""
};

struct PodDeviceRequest {
  std::string ns, name, uid, node_name;
  core::PodRequest request;            // empty when the pod asks for no accelerator
  std::vector<RequestOrigin> origins;  // parallel to request.containers
  std::string policy;                  // "" when not set
  std::string node_policy;             // "" when not set
  // `policy` came from hami.io/gpu-scheduler-policy: in HAMi it picks the
  // devices inside a node, not the node.
  bool policy_devices_only = false;
  std::string group;                   // job identity "<ns>/<name>", "" when none
  std::string group_source;            // which key gave it, e.g. "kueue.x-k8s.io/workload"
};

// kInvalidArgument naming the field ("container \"main\": nvidia.com/gpu: want a
// whole number, got \"1.5\"") for malformed pods and bad values.
StatusOr<PodDeviceRequest> ParsePodRequest(const nlohmann::json& pod);

// True when any container of the pod names an accelerator resource.
bool RequestsAccelerators(const nlohmann::json& pod);

// HAMi's task priority of a container: nvidia.com/priority 0 (high) or 1
// (low, as when it is not set). A fractional NVIDIA container of low priority
// has its kernel launches held while a high-priority one on the same GPU is
// busy (docs/device-plugin.md, "Task priority"). ParsePodRequest refuses any
// other value.
inline constexpr char kTaskPriorityResource[] = "nvidia.com/priority";
// True when `container` (a pod spec container object) asks for high priority
// (nvidia.com/priority 0 in resources.limits, else resources.requests).
// False for low, none, or a malformed value (admission refuses those).
bool HighTaskPriority(const nlohmann::json& container);

// Parses a Kubernetes quantity that must be a whole non-negative number:
// digits with an optional leading '+', then optionally a decimal suffix
// (k, M, G, T, P, E) or a non-negative decimal exponent ("3e3"), giving the
// multiplied value: kube-apiserver sends quantities in canonical form, so a
// plain 4000 arrives as "4k". With `allow_suffix` also a binary suffix
// (Ki .. Ei). kInvalidArgument (with a hint) for fractions ("1.5", "500m",
// "1e-3"), signs, other units or overflow.
StatusOr<int64_t> ParseWholeQuantity(const std::string& s, bool allow_suffix);

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_POD_REQUEST_H_
