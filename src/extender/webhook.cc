#include "extender/webhook.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "api/assignment_codec.h"
#include "api/assignment_signature.h"
#include "api/pod_request.h"
#include "api/resources.h"
#include "api/task_priority.h"
#include "core/policy.h"
#include "extender/convert.h"
#include "extender/extender.h"
#include "extender/wire.h"
#include "kube/config.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

std::string PointerEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// Whether the container's resources give `name` as 0 (limits win over
// requests, as for the parser).
bool IsZeroAmount(const Json& res, const std::string& name) {
  for (const char* part : {"limits", "requests"}) {
    if (!res.contains(part) || !res[part].is_object() || !res[part].contains(name)) continue;
    const Json& v = res[part][name];
    const std::string text = v.is_string() ? v.get<std::string>()
                             : v.is_number_unsigned() || v.is_number_integer() ? v.dump()
                                                                               : std::string();
    StatusOr<int64_t> q = api::ParseWholeQuantity(text, false);
    return q.ok() && *q == 0;
  }
  return false;
}

// The count resource that goes with a memory/compute resource name.
std::string CountNameFor(const api::ResourceInfo& info) {
  for (const api::ResourceInfo& r : api::KnownResources()) {
    if (r.role == api::ResourceRole::kCount && r.vendor == info.vendor &&
        (r.memory_name == info.name || r.memory_percent_name == info.name ||
         r.compute_name == info.name)) {
      return r.name;
    }
  }
  // A chip matched as a pattern (huawei.com/Ascend950-memory,
  // iluvatar.ai/BI-V200.vMem): the count name of that chip, which is what
  // the device plugin advertises for it.
  if (!info.model_family.empty()) {
    for (const std::string& candidate :
         {"huawei.com/" + info.model_family, "iluvatar.ai/" + info.model_family + "-vgpu"}) {
      std::optional<api::ResourceInfo> r = api::LookupResource(candidate);
      if (r.has_value() && r->role == api::ResourceRole::kCount && r->vendor == info.vendor &&
          (r->memory_name == info.name || r->compute_name == info.name)) {
        return r->name;
      }
    }
  }
  return std::string(api::DefaultCountResource(info.vendor));
}

struct Limits {
  int32_t devices = 0;
  int64_t memory_mib = 0;
};

// The largest node (device count) and device (memory) per vendor in the cache.
std::map<core::Vendor, Limits> ClusterLimits(const Cache& cache) {
  std::map<core::Vendor, Limits> out;
  for (const std::string& name : cache.NodeNames()) {
    NodeSnapshotPtr snap = cache.Node(name);
    if (snap == nullptr) continue;
    for (const InventoryState& st : snap->inventories) {
      Limits& l = out[st.inventory->vendor];
      l.devices = std::max(l.devices, static_cast<int32_t>(st.inventory->devices.size()));
      for (const core::Device& d : st.inventory->devices) {
        l.memory_mib = std::max(l.memory_mib, d.memory_mib);
      }
    }
  }
  return out;
}

Status CheckAgainstCluster(const PodInfo& pod, const std::map<core::Vendor, Limits>& limits) {
  // Whole devices of the containers that run together (regular and sidecar:
  // each holds its own) add up on one node; init containers run one at a
  // time and are checked alone below.
  std::map<core::Vendor, int64_t> together;
  for (const core::DeviceRequest& r : pod.request.containers) {
    if (r.kind != core::ContainerKind::kInit && !r.Fractional() && r.partition.empty()) {
      together[r.vendor] += r.count;
    }
  }
  for (const auto& [v, n] : together) {
    auto it = limits.find(v);
    if (it != limits.end() && n > it->second.devices) {
      const std::string vendor(core::VendorName(v));
      return InvalidArgumentError("the pod's containers together ask for " + std::to_string(n) +
                                  " whole " + vendor + " devices but the largest node has " +
                                  std::to_string(it->second.devices) + "; ask for at most " +
                                  std::to_string(it->second.devices) +
                                  " per pod and run more pods for a larger job");
    }
  }
  for (const core::DeviceRequest& r : pod.request.containers) {
    auto it = limits.find(r.vendor);
    if (it == limits.end()) {
      continue;  // no node of this vendor known yet: let the scheduler wait for one
    }
    const std::string vendor(core::VendorName(r.vendor));
    if (r.count > it->second.devices) {
      return InvalidArgumentError(
          "container " + r.container + " asks for " + std::to_string(r.count) + " " + vendor +
          " devices but the largest node has " + std::to_string(it->second.devices) +
          "; ask for at most " + std::to_string(it->second.devices) +
          " per pod and run more pods for a larger job");
    }
    if (r.memory_mib > it->second.memory_mib) {
      return InvalidArgumentError("container " + r.container + " asks for " +
                                  std::to_string(r.memory_mib) + " MiB per " + vendor +
                                  " device but the largest has " +
                                  std::to_string(it->second.memory_mib) +
                                  " MiB; lower the memory request or ask for more devices");
    }
  }
  return Status::Ok();
}

// Every accelpool resource a container asks for (a non-zero amount) is one
// kube-scheduler sends to the extender.
Status CheckManaged(const Json& pod, const std::vector<std::string>& managed) {
  const std::set<std::string> known(managed.begin(), managed.end());
  const Json* spec = pod.contains("spec") && pod["spec"].is_object() ? &pod["spec"] : nullptr;
  for (const char* list : {"initContainers", "containers"}) {
    if (spec == nullptr || !spec->contains(list) || !(*spec)[list].is_array()) continue;
    for (const Json& c : (*spec)[list]) {
      if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object()) continue;
      const Json& res = c["resources"];
      for (const char* part : {"limits", "requests"}) {
        if (!res.contains(part) || !res[part].is_object()) continue;
        for (const auto& item : res[part].items()) {
          const std::string& n = item.key();
          std::optional<api::ResourceInfo> info = api::LookupResource(n);
          if (!info.has_value() || info->role == api::ResourceRole::kIgnored ||
              IsZeroAmount(res, n) || known.count(n) != 0) {
            continue;
          }
          const std::string name =
              c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "";
          return InvalidArgumentError(
              "container " + name + " asks for " + n +
              ", which kube-scheduler does not send to the accelpool extender (it is not in the "
              "scheduler's managedResources: the chart's scheduler.countResources, "
              "scheduler.managedResources and scheduler.migProfiles), so the pod would be bound "
              "without an accelpool assignment and refused on its node. Add " +
              n + " to those lists and upgrade the release");
        }
      }
    }
  }
  return Status::Ok();
}

// The annotations accelpool writes itself never come with a new pod: the
// assignment arrives with the Binding, the allocation from the device plugin.
// One that does is forged or copied from a running pod; with spec.nodeName it
// would get devices and limits nobody granted. The chart's annotation guard
// policy refuses the same (and edits); this also holds where it is missing.
Status CheckWrittenAnnotations(const Json& pod) {
  const Json* meta =
      pod.contains("metadata") && pod["metadata"].is_object() ? &pod["metadata"] : nullptr;
  if (meta == nullptr || !meta->contains("annotations") || !(*meta)["annotations"].is_object()) {
    return Status::Ok();
  }
  const Json& annotations = (*meta)["annotations"];
  for (const char* name : {api::kAssignmentAnnotation, api::kAssignmentSignatureAnnotation}) {
    if (annotations.contains(name)) {
      return InvalidArgumentError(std::string("annotation ") + name +
                                  " is written only by the accelpool scheduler, in the pod's "
                                  "Binding: create the pod without it (a copied pod manifest "
                                  "carries it; delete the line)");
    }
  }
  if (annotations.contains(api::kAllocationAnnotation)) {
    return InvalidArgumentError(std::string("annotation ") + api::kAllocationAnnotation +
                                " is written only by the accelpool device plugin: create the pod "
                                "without it (a copied pod manifest carries it; delete the line)");
  }
  return Status::Ok();
}

// A container that sets, in its own env, a variable through which the device
// plugin applies the grant would override it: runtimes let the pod's value
// win. Names only: the value's source (literal, secret, field) is irrelevant.
Status CheckControlledEnv(const Json& pod) {
  if (!pod.contains("spec") || !pod["spec"].is_object()) {
    return Status::Ok();
  }
  for (const char* list : {"initContainers", "containers"}) {
    const Json& spec = pod["spec"];
    if (!spec.contains(list) || !spec[list].is_array()) {
      continue;
    }
    for (const Json& c : spec[list]) {
      if (!c.is_object() || !c.contains("env") || !c["env"].is_array()) {
        continue;
      }
      const std::string container =
          c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "?";
      for (const Json& e : c["env"]) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) {
          continue;
        }
        const std::string name = e["name"].get<std::string>();
        std::optional<std::string_view> what = api::DeviceControlledEnv(name);
        if (what.has_value()) {
          return InvalidArgumentError(
              "container " + container + " sets " + name + " in its env; accelpool's device " +
              "plugin sets that variable (" + std::string(*what) + ") for the devices it " +
              "grants, and a value from the pod would override it. Remove it from the pod " +
              "spec and ask for what you need through its resources (for NVIDIA: " +
              "nvidia.com/gpumem, nvidia.com/gpucores); see docs/user-guide.md");
        }
      }
    }
  }
  return Status::Ok();
}

// High task priority (nvidia.com/priority: 0) holds the kernel launches of
// every other tenant's low-priority container on the GPU: a grant of the
// platform (api::HighPriorityNamespaces), refused to a pod of a namespace
// not granted it, with what to do.
Status CheckHighPriority(const Json& pod, const std::string& ns,
                         const api::HighPriorityNamespaces& allowed) {
  const std::set<std::string> high = api::HighPriorityContainers(pod);
  if (high.empty() || allowed.Allows(ns)) {
    return Status::Ok();
  }
  return PermissionDeniedError(
      "container " + *high.begin() + " asks for high task priority (" + api::kTaskPriorityResource +
      ": 0), which holds the kernel launches of other tenants' containers on its GPU, and "
      "namespace \"" +
      ns +
      "\" is not granted it. Ask the platform team to add the namespace to "
      "devicePlugin.priority.highPriorityNamespaces (--high-priority-namespaces), or remove " +
      api::kTaskPriorityResource + " from the pod (or set it to 1, low priority)");
}

// spec.nodeName at creation skips the scheduler: the pod gets no assignment,
// the extender does not count its devices and may give them to another pod.
// A mirror pod (kubelet's record of a static pod) already runs: it is let be.
Status CheckNodeName(const Json& pod) {
  const Json* spec = pod.contains("spec") && pod["spec"].is_object() ? &pod["spec"] : nullptr;
  if (spec == nullptr || !spec->contains("nodeName") || !(*spec)["nodeName"].is_string() ||
      (*spec)["nodeName"].get<std::string>().empty()) {
    return Status::Ok();
  }
  const std::string node = (*spec)["nodeName"].get<std::string>();
  return InvalidArgumentError(
      "spec.nodeName is set (\"" + node +
      "\"): such a pod skips the scheduler, and accelpool "
      "assigns devices only when it schedules the pod. Remove spec.nodeName and pin the node "
      "with spec.nodeSelector {kubernetes.io/hostname: " +
      node + "} instead");
}

bool IsMirrorPod(const Json& pod) {
  return pod.contains("metadata") && pod["metadata"].is_object() &&
         pod["metadata"].contains("annotations") && pod["metadata"]["annotations"].is_object() &&
         pod["metadata"]["annotations"].contains("kubernetes.io/config.mirror");
}

// A mirror pod as kubelet creates it: the apiserver's record of a static pod,
// written by a node (NodeRestriction lets a node create mirror pods only, and
// only for itself). Anyone who may create pods can set the annotation; from
// another user it exempts nothing.
bool IsMirrorPodFromKubelet(const Json& req) {
  if (!IsMirrorPod(req["object"])) return false;
  const Json* user =
      req.contains("userInfo") && req["userInfo"].is_object() ? &req["userInfo"] : nullptr;
  const std::string name =
      user != nullptr && user->contains("username") && (*user)["username"].is_string()
          ? (*user)["username"].get<std::string>()
          : "";
  return name.rfind("system:node:", 0) == 0;
}

// What the webhook acts on: CREATE of a pod itself (the chart registers
// only that). Anything else is allowed as it is: an UPDATE could not change
// spec.schedulerName, and a subresource carries no pod to route.
bool IsPodCreate(const Json& req) {
  auto field = [&](const Json& obj, const char* key) {
    return obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : "";
  };
  if (req.contains("operation") && field(req, "operation") != "CREATE") return false;
  if (!field(req, "subResource").empty()) return false;
  if (req.contains("kind") && req["kind"].is_object()) {
    const Json& k = req["kind"];
    if (field(k, "kind") != "Pod" || !field(k, "group").empty()) return false;
  }
  return true;
}

// Why a pod that asks for no device is left to its own scheduler by the
// host-pod route ("" = it is routed). Fixtures of nodes and of the cluster
// must not wait on accelpool's scheduler: DaemonSet pods (the DaemonSet
// controller pins each to its node) and pods of the two system-critical
// priority classes.
std::string HostPodExemption(const Json& pod) {
  auto str = [](const Json& obj, const char* key) {
    return obj.is_object() && obj.contains(key) && obj[key].is_string()
               ? obj[key].get<std::string>()
               : std::string();
  };
  const Json& spec = pod.contains("spec") ? pod["spec"] : Json();
  if (!spec.is_object()) return "no spec";
  if (!str(spec, "nodeName").empty()) return "spec.nodeName is set";
  const std::string scheduler = str(spec, "schedulerName");
  if (!scheduler.empty() && scheduler != "default-scheduler") return "names another scheduler";
  const std::string priority = str(spec, "priorityClassName");
  if (priority == "system-node-critical" || priority == "system-cluster-critical") {
    return "system-critical";
  }
  if (pod.contains("metadata") && pod["metadata"].is_object() &&
      pod["metadata"].contains("ownerReferences") &&
      pod["metadata"]["ownerReferences"].is_array()) {
    for (const Json& o : pod["metadata"]["ownerReferences"]) {
      if (str(o, "kind") == "DaemonSet") return "DaemonSet pod";
    }
  }
  return "";
}

// Admission warnings (kubectl prints them) for HAMi annotations accelpool
// does not honour, so that a pod moved over unchanged does not silently get
// something else than it asked for.
std::vector<std::string> HamiWarnings(const Json& pod) {
  std::vector<std::string> out;
  if (!pod.contains("metadata") || !pod["metadata"].is_object() ||
      !pod["metadata"].contains("annotations") || !pod["metadata"]["annotations"].is_object()) {
    return out;
  }
  const Json& ann = pod["metadata"]["annotations"];
  // The value as the warning quotes it: at most 32 characters, printable
  // ASCII only (the apiserver drops a warning with control characters).
  auto value = [&](const char* key) -> std::string {
    std::string v = ann.contains(key) && ann[key].is_string() ? ann[key].get<std::string>() : "";
    if (v.size() > 32) v.resize(32);
    for (char& c : v) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    return v;
  };
  const std::string vgpu = value("nvidia.com/vgpu-mode");
  if (!vgpu.empty() && vgpu != "hami-core") {
    out.push_back("nvidia.com/vgpu-mode=" + vgpu +
                  " is not read: NVIDIA shares are capped by libaccelpool-cuda; for a MIG instance "
                  "ask for nvidia.com/mig-<profile>");
  }
  const std::string vnpu = value("huawei.com/vnpu-mode");
  if (!vnpu.empty()) {
    out.push_back("huawei.com/vnpu-mode=" + vnpu +
                  " is not read: Ascend shares are vNPUs made from the chip's templates");
  }
  return out;
}

// Admission warnings for count names no accelpool device plugin advertises
// (huawei.com/Ascend910, mthreads.com/vgpu ...): kube-scheduler finds no node
// with them, and the pod would wait with only "Insufficient <name>" to go by.
std::vector<std::string> UnadvertisedWarnings(const Json& pod) {
  std::set<std::string> names;
  if (pod.contains("spec") && pod["spec"].is_object()) {
    for (const char* list : {"initContainers", "containers"}) {
      if (!pod["spec"].contains(list) || !pod["spec"][list].is_array()) continue;
      for (const Json& c : pod["spec"][list]) {
        if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object()) continue;
        for (const char* part : {"limits", "requests"}) {
          const Json& res = c["resources"];
          if (!res.contains(part) || !res[part].is_object()) continue;
          for (const auto& item : res[part].items()) names.insert(item.key());
        }
      }
    }
  }
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (std::optional<std::string> hint = api::UnadvertisedCountHint(n); hint.has_value()) {
      out.push_back(n +
                    " is not advertised by accelpool's device plugin, so no node offers it "
                    "and the pod stays Pending; ask for " +
                    *hint);
    }
  }
  return out;
}

Json Review(const std::string& uid, Json response) {
  response["uid"] = uid;
  return Json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"response", std::move(response)}};
}

// The AdmissionReview in `body`, or the HTTP 400 reply that refuses it.
StatusOr<Json> ParseReview(std::string_view body, const Logger& log, Reply* refusal) {
  StatusOr<Json> doc = ParseJson(body);
  std::string why;
  if (!doc.ok()) {
    why = doc.status().message();
  } else if (!doc->is_object() || !doc->contains("request") || !(*doc)["request"].is_object()) {
    why = "no request object";
  } else if (doc->value("apiVersion", Json()) != "admission.k8s.io/v1" ||
             doc->value("kind", Json()) != "AdmissionReview") {
    why =
        "apiVersion and kind must be admission.k8s.io/v1 AdmissionReview, the only version "
        "the webhook configuration names";
  } else if (!(*doc)["request"].contains("uid") || !(*doc)["request"]["uid"].is_string() ||
             (*doc)["request"]["uid"].get<std::string>().empty()) {
    why = "request.uid must be a non-empty string";
  }
  if (!why.empty()) {
    log.Warn("bad admission review", {{"error", why}});
    *refusal =
        Reply{400, EncodeErrorBody("not an admission.k8s.io/v1 AdmissionReview (" + why + ")")};
    return InvalidArgumentError(why);
  }
  return doc;
}

}  // namespace

Webhook::Webhook(WebhookOptions options, const Cache* cache, Logger log,
                 const ExtenderMetrics* metrics)
    : options_(std::move(options)), cache_(cache), log_(std::move(log)), metrics_(metrics) {}

Reply Webhook::Counted(const char* route, Reply r) const {
  if (metrics_ == nullptr || metrics_->admissions == nullptr) return r;
  const char* result = "error";
  if (r.status == 400) {
    result = "bad_request";
  } else if (r.status == 200) {
    // The answer is ours: the JSON of Review(). Decided from its fields, not
    // by the path that built it, so every return counts alike.
    StatusOr<Json> doc = ParseJson(r.body);
    const Json* resp =
        doc.ok() && doc->is_object() && doc->contains("response") ? &(*doc)["response"] : nullptr;
    if (resp != nullptr && resp->is_object()) {
      if (!resp->value("allowed", false)) {
        result = "refused";
      } else {
        result = resp->contains("patch") ? "mutated" : "unchanged";
      }
    }
  }
  metrics_->admissions->WithLabels({route, result}).Inc();
  return r;
}

Reply Webhook::Mutate(std::string_view body) const {
  return Counted("devices", MutateDevices(body));
}

Reply Webhook::MutateHostPod(std::string_view body) const {
  return Counted("host-pods", RouteHostPod(body));
}

Reply Webhook::RouteHostPod(std::string_view body) const {
  try {
    Reply refusal;
    StatusOr<Json> doc = ParseReview(body, log_, &refusal);
    if (!doc.ok()) return refusal;
    const Json& req = (*doc)["request"];
    const std::string uid = req["uid"].get<std::string>();
    Json allowed = Json{{"allowed", true}};
    auto reply = [&] {
      return Reply{200, Review(uid, allowed).dump(-1, ' ', false, Json::error_handler_t::replace)};
    };
    if (!IsPodCreate(req) || !req.contains("object") || !req["object"].is_object() ||
        IsMirrorPod(req["object"])) {
      return reply();
    }
    const Json& pod = req["object"];
    // A pod that asks for devices is the main route's (Mutate). One whose
    // requests or annotations do not parse is not routed either: the extender
    // would refuse it on every filter, where the default scheduler places it.
    if (StatusOr<PodInfo> info = PodInfoFromJson(pod); !info.ok() || info->Pooled()) {
      log_.Debug(
          "host pod not routed",
          {{"uid", uid}, {"reason", info.ok() ? "asks for devices" : info.status().message()}});
      return reply();
    }
    std::string why = HostPodExemption(pod);
    if (why.empty() && !CheckWrittenAnnotations(pod).ok()) {
      why = "carries an annotation only accelpool writes";
    }
    if (!why.empty()) {
      log_.Debug("host pod not routed", {{"uid", uid}, {"reason", why}});
      return reply();
    }
    const Json patch = Json::array({Json{{"op", "add"},
                                         {"path", "/spec/schedulerName"},
                                         {"value", options_.host_pods_scheduler_name}}});
    allowed["patchType"] = "JSONPatch";
    allowed["patch"] =
        kube::Base64Encode(patch.dump(-1, ' ', false, Json::error_handler_t::replace));
    return reply();
  } catch (const std::exception& e) {
    log_.Error("webhook failed", {{"error", e.what()}});
    return Reply{500, EncodeErrorBody(std::string("internal error: ") + e.what())};
  }
}

Reply Webhook::MutateDevices(std::string_view body) const {
  try {
    Reply refusal;
    StatusOr<Json> doc = ParseReview(body, log_, &refusal);
    if (!doc.ok()) return refusal;
    const Json& req = (*doc)["request"];
    const std::string uid = req["uid"].get<std::string>();
    Json allowed = Json{{"allowed", true}};
    if (!IsPodCreate(req) || !req.contains("object") || !req["object"].is_object() ||
        IsMirrorPodFromKubelet(req) || !api::RequestsAccelerators(req["object"])) {
      return Reply{200, Review(uid, allowed).dump(-1, ' ', false, Json::error_handler_t::replace)};
    }
    Json pod = req["object"];
    Json patch = Json::array();
    // 1. Defaults: a count of 1 where only memory or compute is given.
    for (const char* list : {"initContainers", "containers"}) {
      if (!pod.contains("spec") || !pod["spec"].is_object() || !pod["spec"].contains(list) ||
          !pod["spec"][list].is_array()) {
        continue;
      }
      Json& containers = pod["spec"][list];
      for (size_t i = 0; i < containers.size(); ++i) {
        Json& c = containers[i];
        if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object()) continue;
        Json& res = c["resources"];
        std::set<std::string> names;
        for (const char* part : {"limits", "requests"}) {
          if (res.contains(part) && res[part].is_object()) {
            for (const auto& item : res[part].items()) names.insert(item.key());
          }
        }
        std::map<core::Vendor, std::string> need_count;
        std::set<core::Vendor> has_count;
        for (const std::string& n : names) {
          std::optional<api::ResourceInfo> info = api::LookupResource(n);
          if (!info.has_value()) continue;
          if (info->role != api::ResourceRole::kCount && IsZeroAmount(res, n)) {
            continue;  // an amount of 0 is not given (api::ParsePodRequest)
          }
          if (info->role == api::ResourceRole::kCount) {
            has_count.insert(info->vendor);
          } else if (info->role != api::ResourceRole::kIgnored) {
            need_count.emplace(info->vendor, CountNameFor(*info));
          }
        }
        for (const auto& [vendor, count_name] : need_count) {
          if (has_count.count(vendor) || count_name.empty()) continue;
          const std::string base =
              "/spec/" + std::string(list) + "/" + std::to_string(i) + "/resources/limits";
          if (!res.contains("limits") || !res["limits"].is_object()) {
            res["limits"] = Json::object();
            patch.push_back(Json{{"op", "add"}, {"path", base}, {"value", Json::object()}});
          }
          res["limits"][count_name] = "1";
          patch.push_back(
              Json{{"op", "add"}, {"path", base + "/" + PointerEscape(count_name)}, {"value", "1"}});
        }
      }
    }
    // 2. Impossible requests are refused with what to change.
    StatusOr<PodInfo> info = PodInfoFromJson(pod);
    // Named, but none asked for (a count of 0, as charts render for their
    // CPU-only variant): no grant exists for the pod's own settings to
    // override, and no scheduler of ours is needed. Let it through as it is.
    if (info.ok() && !info->Pooled() && patch.empty() && CheckWrittenAnnotations(pod).ok()) {
      return Reply{200, Review(uid, allowed).dump(-1, ' ', false, Json::error_handler_t::replace)};
    }
    Status verdict = CheckNodeName(pod);
    if (verdict.ok() && !info.ok()) {
      verdict = info.status();
    }
    // The pod's policies must name ones the extender has.
    auto check_policy = [&](const std::string& value, const char* keys) {
      if (!verdict.ok() || value.empty()) return;
      const std::string name = CanonicalPolicy(value);
      const auto& names = core::PolicyNames();
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        std::string valid;
        for (const std::string& n : names) valid += (valid.empty() ? "" : ", ") + n;
        verdict = InvalidArgumentError("policy annotation \"" + value +
                                       "\" names no policy; use one of " + valid + " (" + keys +
                                       "), or remove it to use the cluster's default");
      }
    };
    if (verdict.ok()) {
      check_policy(info->policy,
                   "accelpool.io/policy; hami.io/gpu-scheduler-policy takes binpack, spread, "
                   "topology-aware, numa, mutex or a comma-separated list of them");
      check_policy(info->node_policy, "accelpool.io/node-policy or hami.io/node-scheduler-policy");
    }
    if (verdict.ok()) {
      verdict = CheckWrittenAnnotations(pod);
    }
    if (verdict.ok() && !options_.allow_device_env) {
      verdict = CheckControlledEnv(pod);
    }
    if (verdict.ok()) {
      const std::string ns = req.contains("namespace") && req["namespace"].is_string()
                                 ? req["namespace"].get<std::string>()
                                 : kube::StringAt(pod, Json::json_pointer("/metadata/namespace"));
      verdict = CheckHighPriority(pod, ns, options_.high_priority_namespaces);
    }
    if (verdict.ok() && !options_.managed_resources.empty()) {
      verdict = CheckManaged(pod, options_.managed_resources);
    }
    std::string oversized;  // the warning for a pod no node holds now
    if (verdict.ok() && cache_ != nullptr) {
      Status st = CheckAgainstCluster(*info, ClusterLimits(*cache_));
      if (!st.ok() && options_.refuse_oversized) {
        verdict = std::move(st);
      } else if (!st.ok()) {
        oversized = "accelpool: no node in the cluster can hold this pod now: " + st.message() +
                    ". It waits, pending, for such a node (one a cluster autoscaler adds, or one "
                    "whose inventory is published again)";
        log_.Info("admitted a pod no node holds now", {{"uid", uid}, {"reason", st.message()}});
      }
    }
    if (!verdict.ok()) {
      log_.Info("admission refused", {{"uid", uid}, {"error", verdict.message()}});
      return Reply{200, Review(uid, Json{{"allowed", false},
                                         {"status", {{"code", 400}, {"message", verdict.message()}}}})
                            .dump(-1, ' ', false, Json::error_handler_t::replace)};
    }
    // 3. Route to accelpool's scheduler.
    const Json* spec = pod.contains("spec") && pod["spec"].is_object() ? &pod["spec"] : nullptr;
    const std::string current = spec != nullptr && spec->contains("schedulerName") &&
                                        (*spec)["schedulerName"].is_string()
                                    ? (*spec)["schedulerName"].get<std::string>()
                                    : "";
    if (spec != nullptr && (current.empty() || current == "default-scheduler")) {
      patch.push_back(
          Json{{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", options_.scheduler_name}});
    }
    std::vector<std::string> warnings = HamiWarnings(pod);
    if (!oversized.empty()) warnings.push_back(std::move(oversized));
    for (std::string& w : UnadvertisedWarnings(pod)) warnings.push_back(std::move(w));
    if (!warnings.empty()) {
      allowed["warnings"] = warnings;
    }
    if (!patch.empty()) {
      allowed["patchType"] = "JSONPatch";
      allowed["patch"] =
          kube::Base64Encode(patch.dump(-1, ' ', false, Json::error_handler_t::replace));
    }
    return Reply{200, Review(uid, allowed).dump(-1, ' ', false, Json::error_handler_t::replace)};
  } catch (const std::exception& e) {
    log_.Error("webhook failed", {{"error", e.what()}});
    return Reply{500, EncodeErrorBody(std::string("internal error: ") + e.what())};
  }
}

}  // namespace accelpool::extender
