#include "extender/pod_load.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/host_request.h"
#include "api/pod_request.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

using json = nlohmann::json;

std::string At(const json& obj, const char* pointer) {
  return kube::StringAt(obj, json::json_pointer(pointer));
}

bool Finished(const json& pod) {
  const std::string phase = At(pod, "/status/phase");
  return phase == "Succeeded" || phase == "Failed";
}

// A fixture of its node rather than an arrival: a DaemonSet's pod or a static
// pod's mirror.
bool NodeFixture(const json& pod) {
  if (!At(pod, "/metadata/annotations/kubernetes.io~1config.mirror").empty()) return true;
  const json& meta = pod.contains("metadata") ? pod.at("metadata") : json();
  if (!meta.is_object() || !meta.contains("ownerReferences")) return false;
  const json& owners = meta.at("ownerReferences");
  if (!owners.is_array()) return false;
  for (const json& o : owners) {
    if (At(o, "/kind") == "DaemonSet") return true;
  }
  return false;
}

// The summary's place in a trimmed pod, and its fields, in order.
constexpr const char* kSummaryKey = "accelpool.io/load";
enum SummaryField {
  kNode,
  kFlags,
  kCpu,
  kMemory,
  kCount,
  kCompute,
  kDeviceMemory,
  kModel,
  kError,
  kFields
};
enum SummaryFlag { kFinished = 1, kFixture = 2, kHostOk = 4, kShapeOk = 8 };

}  // namespace

PodLoad::PodLoad(Cache& cache, PodLoadOptions options, const ExtenderMetrics* metrics, Logger log)
    : cache_(cache),
      options_(options),
      metrics_(metrics),
      log_(std::move(log)),
      learner_(options.learner) {}

PodLoad::~PodLoad() { Stop(); }

void PodLoad::Identify(const json& pod, Summary* s) {
  s->uid = At(pod, "/metadata/uid");
  s->key = At(pod, "/metadata/namespace") + "/" + At(pod, "/metadata/name");
}

PodLoad::Summary PodLoad::Summarize(const json& pod) {
  Summary s;
  Identify(pod, &s);
  s.node = At(pod, "/spec/nodeName");
  s.finished = Finished(pod);
  s.fixture = NodeFixture(pod);
  StatusOr<api::PodDeviceRequest> req = api::ParsePodRequest(pod);
  if (req.ok()) {
    s.host_ok = s.shape_ok = true;
    s.host = req->request.host;
    s.shape = core::ShapeOfRequest(req->request);
    return s;
  }
  s.error = req.status().message();
  StatusOr<core::HostResources> host = api::ParseHostRequest(pod);
  if (host.ok()) {
    s.host_ok = true;
    s.host = *host;
  }
  return s;
}

PodLoad::Summary PodLoad::SummaryOf(const json& pod) {
  const json* packed = nullptr;
  if (pod.is_object()) {
    if (auto it = pod.find(kSummaryKey);
        it != pod.end() && it->is_array() && it->size() == kFields) {
      packed = &*it;
    }
  }
  if (packed == nullptr) return Summarize(pod);
  const json& a = *packed;
  auto num = [&](SummaryField f) { return a[f].is_number_integer() ? a[f].get<int64_t>() : 0; };
  auto str = [&](SummaryField f) { return a[f].is_string() ? a[f].get<std::string>() : ""; };
  Summary s;
  Identify(pod, &s);
  s.node = str(kNode);
  const int64_t flags = num(kFlags);
  s.finished = flags & kFinished;
  s.fixture = flags & kFixture;
  s.host_ok = flags & kHostOk;
  s.shape_ok = flags & kShapeOk;
  s.host = core::HostResources{num(kCpu), num(kMemory)};
  s.shape.count = static_cast<int32_t>(num(kCount));
  s.shape.compute = static_cast<int32_t>(num(kCompute));
  s.shape.memory_mib = num(kDeviceMemory);
  s.shape.model = str(kModel);
  s.shape.cpu_milli = s.host.cpu_milli;
  s.shape.host_memory_mib = s.host.memory_mib;
  s.error = str(kError);
  return s;
}

void PodLoad::Trim(json& pod) {
  if (!pod.is_object()) return;
  const Summary s = Summarize(pod);
  json meta = json::object();
  if (auto m = pod.find("metadata"); m != pod.end() && m->is_object()) {
    for (const char* key : {"name", "namespace", "uid", "resourceVersion"}) {
      if (auto it = m->find(key); it != m->end()) meta[key] = *it;
    }
  }
  const int64_t flags = (s.finished ? kFinished : 0) | (s.fixture ? kFixture : 0) |
                        (s.host_ok ? kHostOk : 0) | (s.shape_ok ? kShapeOk : 0);
  json packed = json::array({s.node, flags, s.host.cpu_milli, s.host.memory_mib, s.shape.count,
                             s.shape.compute, s.shape.memory_mib, s.shape.model, s.error});
  pod = json::object();
  pod["metadata"] = std::move(meta);
  pod[kSummaryKey] = std::move(packed);
}

kube::InformerHandlers PodLoad::Handlers() {
  kube::InformerHandlers h;
  h.on_add = [this](const json& pod) { OnPodAdded(pod); };
  h.on_update = [this](const json&, const json& pod) { OnPodUpdated(pod); };
  h.on_delete = [this](const json& pod) { OnPodDeleted(pod); };
  return h;
}

void PodLoad::RecordHost(const Summary& s) {
  if (!options_.host || s.uid.empty()) return;
  if (!s.host_ok) {
    cache_.ForgetHostPod(s.uid);
    return;
  }
  cache_.ObserveHostPod(s.uid, s.finished ? "" : s.node, s.host);
}

void PodLoad::OnPodAdded(const json& pod) {
  const Summary s = SummaryOf(pod);
  if (s.uid.empty()) return;
  if (!s.shape_ok) {
    unparsable_.fetch_add(1);
    log_.Debug("pod's requests do not parse; not counted", {{"pod", s.key}, {"error", s.error}});
  }
  RecordHost(s);  // a pod whose devices do not parse may still have a host request
  if (options_.learn && s.shape_ok && !s.finished && !s.fixture) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      learner_.Observe(s.shape);
    }
    if (metrics_ != nullptr) metrics_->workload_arrivals->Get().Inc();
  }
}

void PodLoad::OnPodUpdated(const json& pod) { RecordHost(SummaryOf(pod)); }

void PodLoad::OnPodDeleted(const json& pod) {
  const std::string uid = At(pod, "/metadata/uid");
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
