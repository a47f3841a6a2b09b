#include "plugin/kube_reporter.h"

#include <algorithm>
#include <utility>

#include "api/assignment_codec.h"
#include "kube/objects.h"

namespace accelpool::plugin {
namespace {

// Whether trying the same write again later can succeed: the apiserver was
// unreachable, throttled, timed out or saw a conflict. A missing pod, a
// refused write or missing rights will not change by waiting.
bool Transient(StatusCode code) {
  switch (code) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kResourceExhausted:
    case StatusCode::kInternal:
    case StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

// Writes `ours` into the pod's accelpool.io/allocation, merged with what is
// there (api::MergeAllocation): on a node with two vendors each vendor's
// plugin writes the state of its own containers of the pod. Read, merge,
// write on the condition that the pod has not changed since, up to five
// times; the pod must still be the one meant (its uid), not another created
// under its name since.
Status WriteAllocation(kube::KubeClient& client, const PodRef& pod, const api::Allocation& ours) {
  constexpr int kTries = 5;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    StatusOr<nlohmann::json> obj = client.Get(kube::Pods(), pod.ns, pod.name);
    if (!obj.ok()) return obj.status();
    using Ptr = nlohmann::json::json_pointer;
    if (kube::StringAt(*obj, Ptr("/metadata/uid")) != pod.uid) {
      return NotFoundError("pod " + pod.Key() + " is gone; another pod has its name now");
    }
    const std::string rv = kube::StringAt(*obj, Ptr("/metadata/resourceVersion"));
    const std::string text = kube::StringAt(
        *obj, Ptr(std::string("/metadata/annotations/") + "accelpool.io~1allocation"));
    api::Allocation merged = ours;
    if (!text.empty()) {
      // One that does not parse is overwritten: nothing there can be kept.
      if (StatusOr<api::Allocation> on_pod = api::ParseAllocation(text); on_pod.ok()) {
        merged = api::MergeAllocation(*on_pod, ours);
      }
    }
    const std::string doc = api::SerializeAllocation(merged);
    if (doc == text) return Status::Ok();
    const Status st = kube::PatchAnnotations(client, kube::Pods(), pod.ns, pod.name,
                                             {{api::kAllocationAnnotation, doc}}, rv);
    if (st.code() != StatusCode::kAborted) return st;
  }
  return AbortedError("pod " + pod.Key() + " changed under each of " + std::to_string(kTries) +
                      " writes of its allocation state");
}

}  // namespace

KubeReporter::KubeReporter(kube::KubeClient* client, Logger log, KubeReporterOptions options)
    : client_(client), log_(std::move(log)), options_(options) {
  worker_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

KubeReporter::~KubeReporter() {
  worker_.request_stop();
  cv_.notify_all();
  worker_.join();
}

void KubeReporter::Post(std::string key, std::string what, const PodRef& pod,
                        std::function<Status()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Write w;
    w.key = std::move(key);
    if (!w.key.empty()) {
      w.generation = ++latest_[w.key];
    }
    w.what = std::move(what);
    w.pod = pod;
    w.fn = std::move(fn);
    w.due = std::chrono::steady_clock::now();
    queue_.push_back(std::move(w));
    ++posts_;
  }
  cv_.notify_all();
}

void KubeReporter::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && busy_ == 0; });
}

std::chrono::milliseconds KubeReporter::Backoff(int failed_attempts) const {
  std::chrono::milliseconds wait = options_.backoff_initial;
  for (int i = 1; i < failed_attempts && wait < options_.backoff_max; ++i) {
    wait *= 2;
  }
  return std::min(wait, options_.backoff_max);
}

bool KubeReporter::Latest(const Write& w) const {
  if (w.key.empty()) {
    return true;
  }
  auto it = latest_.find(w.key);
  return it != latest_.end() && it->second == w.generation;
}

void KubeReporter::Done(const Write& w) {
  auto it = latest_.find(w.key);
  if (!w.key.empty() && it != latest_.end() && it->second == w.generation) {
    latest_.erase(it);
  }
}

void KubeReporter::Run(std::stop_token stop) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (queue_.empty()) {
      if (stop.stop_requested()) {
        return;  // drained
      }
      cv_.wait(lock, stop, [this] { return !queue_.empty(); });
      continue;
    }
    // The write due first; when stopping, every write is due now.
    auto next = std::min_element(queue_.begin(), queue_.end(),
                                 [](const Write& a, const Write& b) { return a.due < b.due; });
    if (!stop.stop_requested() && next->due > std::chrono::steady_clock::now()) {
      const uint64_t seen = posts_;
      cv_.wait_until(lock, stop, next->due, [this, seen] { return posts_ != seen; });
      continue;
    }
    Write w = std::move(*next);
    queue_.erase(next);
    const bool superseded = !Latest(w);
    if (superseded) {
      cv_.notify_all();
      continue;
    }
    ++busy_;
    lock.unlock();
    const Status st = w.fn();
    lock.lock();
    --busy_;
    const bool retry = !st.ok() && Transient(st.code()) && w.attempt < options_.max_attempts &&
                       Latest(w) && !stop.stop_requested();
    if (!st.ok()) {
      lock.unlock();
      log_.Warn(retry ? "writing to the apiserver failed; retrying"
                      : "writing to the apiserver failed; giving up",
                {{"write", w.what},
                 {"pod", w.pod.Key()},
                 {"attempt", static_cast<int64_t>(w.attempt)},
                 {"error", st.ToString()}});
      lock.lock();
    }
    if (retry) {
      w.due = std::chrono::steady_clock::now() + Backoff(w.attempt);
      ++w.attempt;
      queue_.push_back(std::move(w));
    } else {
      Done(w);
    }
    cv_.notify_all();
  }
}

void KubeReporter::Allocated(const PodRef& pod,
                             const std::vector<api::AllocatedResource>& allocated) {
  api::Allocation a;
  a.phase = api::AllocationPhase::kAllocated;
  a.allocated = allocated;
  Post("allocation/" + pod.uid, "allocation state", pod,
       [this, pod, a] { return WriteAllocation(*client_, pod, a); });
}

void KubeReporter::Failed(const std::optional<PodRef>& pod, const std::string& resource,
                          const std::string& message,
                          const std::vector<api::AllocatedResource>& allocated) {
  if (!pod.has_value()) {
    return;  // nothing identifies a pod; the log line and the metric carry it
  }
  const PodRef& p = *pod;
  if (!resource.empty()) {
    // The containers allocated so far stay listed: after a restart the
    // plugin reads them back and must not take running containers for
    // pending ones.
    api::Allocation a;
    a.phase = api::AllocationPhase::kFailed;
    a.allocated = allocated;
    a.message = message;
    Post("allocation/" + p.uid, "failed allocation state", p,
         [this, p, a] { return WriteAllocation(*client_, p, a); });
  }
  Post("", "event", p, [this, p, message] {
    kube::ObjectRef ref;
    ref.kind = "Pod";
    ref.ns = p.ns;
    ref.name = p.name;
    ref.uid = p.uid;
    return kube::CreateEvent(*client_, ref, kube::EventKind::kWarning, kAllocateFailedReason,
                             message, kReporterName, "Allocate");
  });
}

void KubeReporter::PodEvent(const PodRef& pod, kube::EventKind kind, const std::string& reason,
                            const std::string& message, const std::string& action) {
  Post("", "pod event", pod, [this, pod, kind, reason, message, action] {
    kube::ObjectRef ref;
    ref.kind = "Pod";
    ref.ns = pod.ns;
    ref.name = pod.name;
    ref.uid = pod.uid;
    return kube::CreateEvent(*client_, ref, kind, reason, message, kReporterName, action);
  });
}

void KubeReporter::NodeEvent(const std::string& node, kube::EventKind kind,
                             const std::string& reason, const std::string& message,
                             const std::string& action) {
  PodRef about{"", node, "", ""};  // for the log lines of a failed write
  Post("", "node event", about, [this, node, kind, reason, message, action] {
    kube::ObjectRef ref;
    ref.kind = "Node";
    ref.name = node;
    ref.uid = node;
    return kube::CreateEvent(*client_, ref, kind, reason, message, kReporterName, action);
  });
}

}  // namespace accelpool::plugin
