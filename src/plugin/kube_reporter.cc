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

void KubeReporter::Allocated(const PodRef& pod, const std::vector<std::string>& containers) {
  api::Allocation a;
  a.phase = api::AllocationPhase::kAllocated;
  a.containers = containers;
  std::string doc = api::SerializeAllocation(a);
  Post("allocation/" + pod.uid, "allocation state", pod, [this, pod, doc] {
    return kube::PatchAnnotations(*client_, kube::Pods(), pod.ns, pod.name,
                                  {{api::kAllocationAnnotation, doc}});
  });
}

void KubeReporter::Failed(const std::optional<PodRef>& pod, const std::string& resource,
                          const std::string& message, const std::vector<std::string>& allocated) {
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
    a.containers = allocated;
    a.message = message;
    std::string doc = api::SerializeAllocation(a);
    Post("allocation/" + p.uid, "failed allocation state", p, [this, p, doc] {
      return kube::PatchAnnotations(*client_, kube::Pods(), p.ns, p.name,
                                    {{api::kAllocationAnnotation, doc}});
    });
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
