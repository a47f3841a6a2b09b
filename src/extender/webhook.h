// Mutating admission webhook for pods (AdmissionReview admission.k8s.io/v1).
//
// For a pod that names any accelerator resource (api/resources.h):
//   1. fills defaults: a container that gives memory or compute of a vendor
//      without the vendor's count resource gets count 1 in resources.limits
//      (kubelet then allocates one slot for it);
//   2. rejects requests that can never be scheduled, with a message that says
//      what to change: a malformed value ("1.5" GPUs), contradictory
//      settings, or more devices or memory than the largest node of that
//      vendor in the cache has;
//      It also refuses a container that sets, in its own env, a variable
//      through which the device plugin applies the grant (the enforcement
//      contract, or a runtime hook's device list: api::DeviceControlledEnv),
//      since the pod's value would win over the plugin's; unless
//      allow_device_env; and a container that asks for high task priority
//      (nvidia.com/priority: 0) in a namespace not among
//      high_priority_namespaces (api/task_priority.h);
//   3. routes the pod to accelpool's scheduler: spec.schedulerName is set to
//      the configured name when it is empty or "default-scheduler" (a pod that
//      names another scheduler is left alone).
// It also refuses a pod created with spec.nodeName (it skips the scheduler and
// would get no assignment), except a mirror pod.
// Pods that ask for no accelerator, and anything but CREATE of a Pod (another
// operation, a subresource, another kind), are allowed unchanged by Mutate.
//
// MutateHostPod is the host-pod route (chart: webhook.hostPods): a pod that
// asks for no device (names no accelerator resource, or only counts of 0) is
// routed to the host-pod profile of accelpool's scheduler
// (host_pods_scheduler_name), where the extender ranks first the nodes whose
// idle devices need its CPU and memory least (docs/extender.md, "Pods that ask
// for no device"). Left alone: pods that ask for devices (Mutate's), mirror
// pods, pods with spec.nodeName or another scheduler, DaemonSet pods, pods of
// the system-critical priority classes, and pods created with an annotation
// only accelpool writes (the annotation guard's to refuse). The answer
// carries a base64 JSONPatch. A body that is not an admission.k8s.io/v1
// AdmissionReview with a request.uid gets HTTP 400.
//
// Thread-safety: Mutate may be called concurrently.
#ifndef ACCELPOOL_EXTENDER_WEBHOOK_H_
#define ACCELPOOL_EXTENDER_WEBHOOK_H_

#include <string>
#include <string_view>
#include <vector>

#include "api/task_priority.h"
#include "common/log.h"
#include "extender/cache.h"
#include "extender/extender.h"
#include "extender/handlers.h"

namespace accelpool::extender {

struct WebhookOptions {
  std::string scheduler_name = "accelpool-scheduler";
  // Admit pods that set the device plugin's variables themselves (they can
  // then lift their own caps or pick other devices): for trusted clusters.
  bool allow_device_env = false;
  // The scheduler profile MutateHostPod routes pods that ask for no device to:
  // accelpool's scheduler with kube-scheduler's own scores on, so that they
  // spread among the nodes the extender ranks alike.
  std::string host_pods_scheduler_name = "accelpool-scheduler-hosts";
  // Refuse a pod that asks for more devices than the largest node of its
  // vendor in the cache has, or more memory than its largest device. Off
  // (the default): admitted with a warning, since a node that can hold it
  // may come (a cluster autoscaler scales node groups up only for pending
  // pods; a node whose inventory is being republished is briefly missing).
  bool refuse_oversized = false;
  // The resource names kube-scheduler sends to the extender (its extender
  // config's managedResources). A pod that asks for another accelpool
  // resource would be bound by kube-scheduler's own binder, without an
  // assignment, and refused on the node: it is refused at creation with the
  // name to add. Empty: not checked (kube-scheduler calls the extender for
  // every pod).
  std::vector<std::string> managed_resources = {};
  // The namespaces whose pods may ask for high task priority
  // (nvidia.com/priority: 0, api/task_priority.h); a pod of another that
  // asks is refused. Default: none.
  api::HighPriorityNamespaces high_priority_namespaces = {};
};

class Webhook {
 public:
  // `cache` (may be null) supplies the cluster's largest devices for the
  // impossible-request check; `metrics` (may be null) counts the answers
  // (accelpool_extender_admissions_total).
  Webhook(WebhookOptions options, const Cache* cache, Logger log,
          const ExtenderMetrics* metrics = nullptr);
  Reply Mutate(std::string_view body) const;
  Reply MutateHostPod(std::string_view body) const;

 private:
  Reply MutateDevices(std::string_view body) const;
  Reply RouteHostPod(std::string_view body) const;
  // Counts `r` under `route` and returns it.
  Reply Counted(const char* route, Reply r) const;

  const WebhookOptions options_;
  const Cache* const cache_;
  const Logger log_;
  const ExtenderMetrics* const metrics_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_WEBHOOK_H_
