#include "extender/pod_load.h"

#include <algorithm>
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
  kMemoryPercent,
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
  s->created = At(pod, "/metadata/creationTimestamp");
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
  s.shape.memory_percent = static_cast<int32_t>(num(kMemoryPercent));
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
    for (const char* key : {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}) {
      if (auto it = m->find(key); it != m->end()) meta[key] = *it;
    }
  }
  const int64_t flags = (s.finished ? kFinished : 0) | (s.fixture ? kFixture : 0) |
                        (s.host_ok ? kHostOk : 0) | (s.shape_ok ? kShapeOk : 0);
  json packed = json::array({s.node, flags, s.host.cpu_milli, s.host.memory_mib, s.shape.count,
                             s.shape.compute, s.shape.memory_mib, s.shape.model, s.error,
                             s.shape.memory_percent});
  pod = json::object();
  pod["metadata"] = std::move(meta);
  pod[kSummaryKey] = std::move(packed);
}

kube::InformerHandlers PodLoad::Handlers() {
  kube::InformerHandlers h;
  h.on_add = [this](const json& pod) { OnPodAdded(pod); };
  h.on_update = [this](const json& old, const json& pod) { OnPodUpdated(old, pod); };
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
      if (CountedBefore(s)) {
        ++already_counted_;
        return;
      }
      learner_.Observe(s.shape);
      AdvanceWatermark(s);
    }
    if (metrics_ != nullptr) metrics_->workload_arrivals->Get().Inc();
  }
}

bool PodLoad::CountedBefore(const Summary& s) const {
  if (restored_watermark_.empty() || !IsRfc3339Seconds(s.created)) return false;
  // The fixed-width UTC form orders as text.
  if (s.created < restored_watermark_) return true;
  return s.created == restored_watermark_ && restored_uids_.contains(s.uid);
}

void PodLoad::AdvanceWatermark(const Summary& s) {
  if (!IsRfc3339Seconds(s.created) || s.created < watermark_) return;
  if (s.created > watermark_) {
    watermark_ = s.created;
    watermark_uids_.clear();
  }
  if (watermark_uids_.size() < kMaxWatermarkUids) watermark_uids_.push_back(s.uid);
}

uint64_t PodLoad::already_counted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return already_counted_;
}

void PodLoad::SetStore(WorkloadStore* store, std::function<bool()> may_write) {
  store_ = store;
  may_write_ = std::move(may_write);
}

void PodLoad::CountStore(const char* op, const char* result) const {
  if (metrics_ != nullptr && metrics_->workload_store != nullptr) {
    metrics_->workload_store->WithLabels({op, result}).Inc();
  }
}

Status PodLoad::Restore(std::chrono::milliseconds patience) {
  if (store_ == nullptr || !options_.learn) return Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + patience;
  std::chrono::milliseconds pause(250);
  StatusOr<std::optional<WorkloadState>> loaded = store_->Load();
  while (!loaded.ok() &&
         (loaded.status().code() == StatusCode::kUnavailable ||
          loaded.status().code() == StatusCode::kDeadlineExceeded) &&
         std::chrono::steady_clock::now() + pause < deadline) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(4));
    loaded = store_->Load();
  }
  if (!loaded.ok()) {
    CountStore("load", "failed");
    const bool denied = loaded.status().code() == StatusCode::kPermissionDenied;
    log_.Warn(std::string("could not read the learned workload back; learning it again from the "
                          "pods running now") +
                  (denied ? " (give the extender get and patch on this ConfigMap: the chart's "
                            "Role does)"
                          : ""),
              {{"configmap", store_->where()}, {"error", loaded.status().ToString()}});
    return loaded.status();
  }
  if (!loaded->has_value()) {
    CountStore("load", "missing");
    log_.Info("no learned workload stored yet; learning from the pods running now",
              {{"configmap", store_->where()}});
    return Status::Ok();
  }
  WorkloadState& state = **loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    learner_.Restore(state.arrivals, state.observed);
    watermark_ = restored_watermark_ = state.watermark;
    watermark_uids_ = state.watermark_uids;
    restored_uids_ = {state.watermark_uids.begin(), state.watermark_uids.end()};
  }
  {
    std::lock_guard<std::mutex> lock(persist_mu_);
    persisted_observed_ = state.observed;
  }
  CountStore("load", "ok");
  log_.Info(
      "read the learned workload back; pods created before its watermark are not counted "
      "again",
      {{"configmap", store_->where()},
       {"arrivals", static_cast<int64_t>(state.arrivals.size())},
       {"observed", static_cast<int64_t>(state.observed)},
       {"watermark", state.watermark}});
  return Status::Ok();
}

WorkloadState PodLoad::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  WorkloadState s;
  s.arrivals = learner_.Arrivals();
  s.observed = learner_.observed();
  s.watermark = watermark_;
  s.watermark_uids = watermark_uids_;
  return s;
}

bool PodLoad::Persist() {
  if (store_ == nullptr || !options_.learn) return false;
  if (may_write_ && !may_write_()) return false;
  std::lock_guard<std::mutex> guard(persist_mu_);
  if (arrivals() == persisted_observed_) return false;
  const WorkloadState state = Snapshot();
  size_t kept = 0;
  const Status st = store_->Save(state, &kept);
  if (!st.ok()) {
    CountStore("save", "failed");
    if (st.message() != last_store_error_) {
      log_.Warn(
          "could not keep the learned workload; a restarted extender will learn it again "
          "(retried after the next refresh)",
          {{"configmap", store_->where()}, {"error", st.ToString()}});
    }
    last_store_error_ = st.message();
    return false;
  }
  CountStore("save", "ok");
  if (!last_store_error_.empty()) {
    log_.Info("keeping the learned workload again", {{"configmap", store_->where()}});
  }
  last_store_error_.clear();
  if (kept < state.arrivals.size()) {
    log_.Debug("stored the newest arrivals only: the whole window is over the ConfigMap's size",
               {{"kept", static_cast<int64_t>(kept)},
                {"window", static_cast<int64_t>(state.arrivals.size())}});
  }
  persisted_observed_ = state.observed;
  return true;
}

void PodLoad::OnPodUpdated(const json& old, const json& pod) {
  // A relist reports a pod recreated under the same name (a StatefulSet's)
  // as an update: the old uid's host requests leave with it, and the new pod
  // is an arrival like any other pod seen for the first time.
  const std::string old_uid = At(old, "/metadata/uid");
  if (!old_uid.empty() && old_uid != At(pod, "/metadata/uid")) {
    cache_.ForgetHostPod(old_uid);
    OnPodAdded(pod);
    return;
  }
  RecordHost(SummaryOf(pod));
}

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
    Persist();
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_for(lock, stop, options_.refresh, [] { return false; });
  }
  Persist();  // what arrived since the last refresh, for whoever starts next
}

}  // namespace accelpool::extender
