#include "plugin/pod_sync.h"

#include <exception>
#include <utility>

namespace accelpool::plugin {
namespace {

using nlohmann::json;

std::string Str(const json& obj, const json::json_pointer& ptr) {
  if (!obj.contains(ptr)) {
    return "";
  }
  const json& v = obj.at(ptr);
  return v.is_string() ? v.get<std::string>() : "";
}

// The names of the pod's containers and init containers (sidecars are init
// containers); ephemeral containers get no devices.
std::set<std::string> ContainerNames(const json& pod) {
  std::set<std::string> names;
  for (const char* list : {"/spec/containers", "/spec/initContainers"}) {
    const json::json_pointer ptr(list);
    if (!pod.contains(ptr) || !pod.at(ptr).is_array()) {
      continue;
    }
    for (const json& c : pod.at(ptr)) {
      if (c.is_object() && c.contains("name") && c.at("name").is_string()) {
        names.insert(c.at("name").get<std::string>());
      }
    }
  }
  return names;
}

PodRef RefOf(const json& pod) {
  PodRef r;
  r.ns = Str(pod, json::json_pointer("/metadata/namespace"));
  r.name = Str(pod, json::json_pointer("/metadata/name"));
  r.uid = Str(pod, json::json_pointer("/metadata/uid"));
  r.created = Str(pod, json::json_pointer("/metadata/creationTimestamp"));
  return r;
}

StatusOr<std::optional<PodEntry>> EntryChecked(const json& pod, const std::string& node) {
  const std::string phase = Str(pod, json::json_pointer("/status/phase"));
  if (phase == "Succeeded" || phase == "Failed" ||
      pod.contains(json::json_pointer("/metadata/deletionTimestamp"))) {
    return std::optional<PodEntry>();
  }
  const std::string text = Str(
      pod, json::json_pointer(std::string("/metadata/annotations/") + "accelpool.io~1assignment"));
  if (text.empty()) {
    return std::optional<PodEntry>();
  }
  PodEntry e;
  e.pod = RefOf(pod);
  StatusOr<api::Assignment> a = api::ParseAssignment(text);
  if (!a.ok()) {
    return InvalidArgumentError("pod " + e.pod.Key() + " has an unreadable " +
                                api::kAssignmentAnnotation + " (" + a.status().message() +
                                "); delete the pod so the scheduler assigns it again");
  }
  if (a->node != node) {
    return FailedPreconditionError("pod " + e.pod.Key() + " runs on " + node +
                                   " but its assignment is for node \"" + a->node +
                                   "\"; delete the pod so the scheduler assigns it again");
  }
  // The uid and the container names end up in host paths (the enforcement
  // state dirs); the codec has checked the names' form, and here they must
  // also be containers of this very pod.
  if (Status st = api::CheckPodUid(e.pod.uid); !st.ok()) {
    return InvalidArgumentError("pod " + e.pod.Key() + ": " + st.message() + "; delete the pod");
  }
  const std::set<std::string> names = ContainerNames(pod);
  for (const api::AssignedContainer& c : a->containers) {
    if (names.count(c.name) == 0) {
      return InvalidArgumentError("pod " + e.pod.Key() + " has an " + api::kAssignmentAnnotation +
                                  " for container \"" + c.name +
                                  "\", which the pod does not have; delete the pod so the "
                                  "scheduler assigns it again");
    }
  }
  e.assignment = std::move(a).value();
  const std::string alloc = Str(
      pod, json::json_pointer(std::string("/metadata/annotations/") + "accelpool.io~1allocation"));
  if (!alloc.empty()) {
    StatusOr<api::Allocation> al = api::ParseAllocation(alloc);
    if (al.ok() && al->phase == api::AllocationPhase::kAllocated) {
      e.allocated.insert(al->containers.begin(), al->containers.end());
    }
  }
  return std::optional<PodEntry>(std::move(e));
}

}  // namespace

StatusOr<std::optional<PodEntry>> EntryFromPod(const nlohmann::json& pod, const std::string& node) {
  if (!pod.is_object()) {
    return InvalidArgumentError("a pod object is not a JSON object");
  }
  try {
    return EntryChecked(pod, node);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("a pod object could not be read: ") + e.what());
  }
}

PodSync::PodSync(kube::KubeClient* client, std::string node, AssignmentStore* store,
                 PodReporter* reporter, Logger log)
    : client_(client),
      node_(std::move(node)),
      store_(store),
      reporter_(reporter),
      log_(std::move(log)) {}

PodSync::~PodSync() { Stop(); }

void PodSync::Apply(const nlohmann::json& pod) {
  StatusOr<std::optional<PodEntry>> e = EntryFromPod(pod, node_);
  PodRef ref = RefOf(pod);
  if (!e.ok()) {
    store_->Remove(ref.uid);
    const std::string key =
        ref.uid + "@" + Str(pod, json::json_pointer("/metadata/resourceVersion"));
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = reported_.insert(key).second;
    }
    if (first) {
      log_.Error("ignoring the pod's assignment",
                 {{"pod", ref.Key()}, {"error", e.status().ToString()}});
      if (reporter_ != nullptr) {
        reporter_->Failed(ref, "", e.status().message());
      }
    }
    return;
  }
  if (!e->has_value()) {
    store_->Remove(ref.uid);
    return;
  }
  store_->Upsert((*e)->pod, (*e)->assignment, (*e)->allocated);
}

void PodSync::Forget(const nlohmann::json& pod) { store_->Remove(RefOf(pod).uid); }

void PodSync::Start() {
  kube::InformerOptions o;
  o.resource = kube::Pods();
  o.field_selector = "spec.nodeName=" + node_;
  kube::InformerHandlers h;
  h.on_add = [this](const json& pod) { Apply(pod); };
  h.on_update = [this](const json&, const json& pod) { Apply(pod); };
  h.on_delete = [this](const json& pod) { Forget(pod); };
  informer_ = std::make_unique<kube::Informer>(*client_, o, h, log_.Child("informer"));
  informer_->Start();
}

void PodSync::Stop() {
  if (informer_ != nullptr) {
    informer_->Stop();
    informer_.reset();
  }
}

bool PodSync::WaitForSync(std::chrono::milliseconds timeout) const {
  return informer_ != nullptr && informer_->WaitForSync(timeout);
}

void PodSync::Refresh() {
  kube::ListOptions o;
  o.field_selector = "spec.nodeName=" + node_;
  StatusOr<kube::ListResult> pods = client_->List(kube::Pods(), "", o);
  if (!pods.ok()) {
    log_.Warn("re-reading the node's pods failed", {{"error", pods.status().ToString()}});
    return;
  }
  std::set<std::string> live;
  for (const json& pod : pods->items) {
    live.insert(RefOf(pod).uid);
    Apply(pod);
  }
  store_->RetainOnly(live);
}

}  // namespace accelpool::plugin
