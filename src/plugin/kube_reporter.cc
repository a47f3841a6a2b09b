#include "plugin/kube_reporter.h"

#include <utility>

#include "api/assignment_codec.h"
#include "kube/objects.h"

namespace accelpool::plugin {

KubeReporter::KubeReporter(kube::KubeClient* client, Logger log)
    : client_(client), log_(std::move(log)) {
  worker_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

KubeReporter::~KubeReporter() {
  Flush();
  worker_.request_stop();
  cv_.notify_all();
}

void KubeReporter::Post(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void KubeReporter::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && busy_ == 0; });
}

void KubeReporter::Run(std::stop_token stop) {
  while (true) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, stop, [this] { return !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stop requested and nothing left
      }
      work = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    work();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_;
    }
    cv_.notify_all();
  }
}

void KubeReporter::Allocated(const PodRef& pod, const std::vector<std::string>& containers) {
  api::Allocation a;
  a.phase = api::AllocationPhase::kAllocated;
  a.containers = containers;
  std::string doc = api::SerializeAllocation(a);
  Post([this, pod, doc] {
    Status st = kube::PatchAnnotations(*client_, kube::Pods(), pod.ns, pod.name,
                                       {{api::kAllocationAnnotation, doc}});
    if (!st.ok()) {
      log_.Warn("writing the allocation state failed",
                {{"pod", pod.Key()}, {"error", st.ToString()}});
    }
  });
}

void KubeReporter::Failed(const std::optional<PodRef>& pod, const std::string& resource,
                          const std::string& message) {
  if (!pod.has_value()) {
    return;  // nothing identifies a pod; the log line and the metric carry it
  }
  api::Allocation a;
  a.phase = api::AllocationPhase::kFailed;
  a.message = message;
  std::string doc = api::SerializeAllocation(a);
  PodRef p = *pod;
  Post([this, p, doc, resource, message] {
    if (!resource.empty()) {
      Status st = kube::PatchAnnotations(*client_, kube::Pods(), p.ns, p.name,
                                         {{api::kAllocationAnnotation, doc}});
      if (!st.ok()) {
        log_.Warn("writing the failed allocation state failed",
                  {{"pod", p.Key()}, {"error", st.ToString()}});
      }
    }
    kube::ObjectRef ref;
    ref.kind = "Pod";
    ref.ns = p.ns;
    ref.name = p.name;
    ref.uid = p.uid;
    Status ev = kube::CreateEvent(*client_, ref, kube::EventKind::kWarning, kAllocateFailedReason,
                                  message, kReporterName, "Allocate");
    if (!ev.ok()) {
      log_.Warn("creating the event failed", {{"pod", p.Key()}, {"error", ev.ToString()}});
    }
  });
}

}  // namespace accelpool::plugin
