#include "extender/pod_load.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/host_request.h"
#include "api/pod_request.h"

namespace accelpool::extender {
namespace {

using json = nlohmann::json;

std::string Str(const json& obj, std::initializer_list<const char*> path) {
  const json* at = &obj;
  for (const char* key : path) {
    if (!at->is_object()) return "";
    auto it = at->find(key);
    if (it == at->end()) return "";
    at = &*it;
  }
  return at->is_string() ? at->get<std::string>() : "";
}

bool Finished(const json& pod) {
  const std::string phase = Str(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

// A fixture of its node rather than an arrival: a DaemonSet's pod or a static
// pod's mirror.
bool NodeFixture(const json& pod) {
  if (!Str(pod, {"metadata", "annotations", "kubernetes.io/config.mirror"}).empty()) return true;
  const json& meta = pod.contains("metadata") ? pod.at("metadata") : json();
  if (!meta.is_object() || !meta.contains("ownerReferences")) return false;
  const json& owners = meta.at("ownerReferences");
  if (!owners.is_array()) return false;
  for (const json& o : owners) {
    if (Str(o, {"kind"}) == "DaemonSet") return true;
  }
  return false;
}

bool KeptAnnotation(std::string_view key) {
  for (std::string_view prefix : {"accelpool.io/", "nvidia.com/", "hami.io/"}) {
    if (key.substr(0, prefix.size()) == prefix) return true;
  }
  return key == "kubernetes.io/config.mirror";
}

json TrimContainer(const json& c) {
  json out = json::object();
  if (!c.is_object()) return out;
  for (const char* key : {"name", "restartPolicy", "resources"}) {
    if (auto it = c.find(key); it != c.end()) out[key] = *it;
  }
  return out;
}

}  // namespace

PodLoad::PodLoad(Cache& cache, PodLoadOptions options, const ExtenderMetrics* metrics, Logger log)
    : cache_(cache),
      options_(options),
      metrics_(metrics),
      log_(std::move(log)),
      learner_(options.learner) {}

PodLoad::~PodLoad() { Stop(); }

void PodLoad::Trim(json& pod) {
  if (!pod.is_object()) return;
  json out = json::object();
  if (auto m = pod.find("metadata"); m != pod.end() && m->is_object()) {
    json meta = json::object();
    for (const char* key : {"name", "namespace", "uid", "resourceVersion"}) {
      if (auto it = m->find(key); it != m->end()) meta[key] = *it;
    }
    if (auto a = m->find("annotations"); a != m->end() && a->is_object()) {
      json kept = json::object();
      for (const auto& [key, value] : a->items()) {
        if (KeptAnnotation(key)) kept[key] = value;
      }
      if (!kept.empty()) meta["annotations"] = std::move(kept);
    }
    if (auto o = m->find("ownerReferences"); o != m->end() && o->is_array()) {
      json owners = json::array();
      for (const json& ref : *o) owners.push_back({{"kind", Str(ref, {"kind"})}});
      meta["ownerReferences"] = std::move(owners);
    }
    out["metadata"] = std::move(meta);
  }
  if (auto s = pod.find("spec"); s != pod.end() && s->is_object()) {
    json spec = json::object();
    for (const char* key : {"nodeName", "overhead", "resources"}) {
      if (auto it = s->find(key); it != s->end()) spec[key] = *it;
    }
    for (const char* list : {"initContainers", "containers"}) {
      auto it = s->find(list);
      if (it == s->end()) continue;
      if (!it->is_array()) {
        spec[list] = *it;  // kept as it is, to be refused with its reason
        continue;
      }
      json cs = json::array();
      for (const json& c : *it) cs.push_back(TrimContainer(c));
      spec[list] = std::move(cs);
    }
    out["spec"] = std::move(spec);
  }
  const std::string phase = Str(pod, {"status", "phase"});
  if (!phase.empty()) out["status"] = {{"phase", phase}};
  pod = std::move(out);
}

kube::InformerHandlers PodLoad::Handlers() {
  kube::InformerHandlers h;
  h.on_add = [this](const json& pod) { OnPodAdded(pod); };
  h.on_update = [this](const json&, const json& pod) { OnPodUpdated(pod); };
  h.on_delete = [this](const json& pod) { OnPodDeleted(pod); };
  return h;
}

void PodLoad::OnPodAdded(const json& pod) {
  const std::string uid = Str(pod, {"metadata", "uid"});
  if (uid.empty()) return;
  StatusOr<api::PodDeviceRequest> req = api::ParsePodRequest(pod);
  if (!req.ok()) {
    unparsable_.fetch_add(1);
    log_.Debug("pod's requests do not parse; not counted",
               {{"pod", Str(pod, {"metadata", "namespace"}) + "/" + Str(pod, {"metadata", "name"})},
                {"error", req.status().message()}});
    OnPodUpdated(pod);  // its host request may still parse
    return;
  }
  if (options_.host) {
    cache_.ObserveHostPod(uid, Finished(pod) ? "" : req->node_name, req->request.host);
  }
  if (options_.learn && !Finished(pod) && !NodeFixture(pod)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      learner_.Observe(core::ShapeOfRequest(req->request));
    }
    if (metrics_ != nullptr) metrics_->workload_arrivals->Get().Inc();
  }
}

void PodLoad::OnPodUpdated(const json& pod) {
  if (!options_.host) return;
  const std::string uid = Str(pod, {"metadata", "uid"});
  if (uid.empty()) return;
  StatusOr<core::HostResources> host = api::ParseHostRequest(pod);
  if (!host.ok()) {
    cache_.ForgetHostPod(uid);
    return;
  }
  cache_.ObserveHostPod(uid, Finished(pod) ? "" : Str(pod, {"spec", "nodeName"}), *host);
}

void PodLoad::OnPodDeleted(const json& pod) {
  const std::string uid = Str(pod, {"metadata", "uid"});
  if (!uid.empty()) cache_.ForgetHostPod(uid);
}

uint64_t PodLoad::arrivals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return learner_.observed();
}

bool PodLoad::Refresh(Extender& extender) {
  if (!options_.learn) return false;
  std::vector<core::TaskShape> shapes;
  size_t window = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shapes = learner_.Shapes();
    window = learner_.arrivals();
  }
  if (!extender.SetWorkload(shapes)) return false;
  // The three most frequent shapes, for the operator.
  double total = 0;
  for (const core::TaskShape& t : shapes) total += t.weight;
  std::string top;
  for (size_t i = 0; i < shapes.size() && i < 3; ++i) {
    const core::TaskShape& t = shapes[i];
    top += (top.empty() ? "" : "; ") + std::to_string(t.count) + " x " +
           std::to_string(t.compute / 10) + "% device, cpu " + std::to_string(t.cpu_milli) +
           "m, memory " + std::to_string(t.host_memory_mib) + "Mi" +
           (t.model.empty() ? "" : ", model " + t.model) + " (" +
           std::to_string(static_cast<int>(100.0 * t.weight / total + 0.5)) + "%)";
  }
  log_.Info(shapes.empty() ? "scoring with the built-in workload (too few pods seen yet)"
                           : "scoring with the learned workload",
            {{"shapes", static_cast<int64_t>(shapes.size())},
             {"arrivals_in_window", static_cast<int64_t>(window)},
             {"top", top}});
  return true;
}

void PodLoad::Start(Extender& extender) {
  if (!options_.learn) return;
  thread_ = std::jthread([this, &extender](std::stop_token stop) { Run(stop, &extender); });
}

void PodLoad::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    stop_cv_.notify_all();
    thread_.join();
  }
}

void PodLoad::Run(std::stop_token stop, Extender* extender) {
  while (!stop.stop_requested()) {
    Refresh(*extender);
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_for(lock, stop, options_.refresh, [] { return false; });
  }
}

}  // namespace accelpool::extender
