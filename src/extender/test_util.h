// Builders shared by the extender's tests.
#ifndef ACCELPOOL_EXTENDER_TEST_UTIL_H_
#define ACCELPOOL_EXTENDER_TEST_UTIL_H_

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "core/profiles.h"
#include "core/types.h"
#include "extender/cache.h"
#include "extender/extender.h"
#include "extender/planner.h"
#include "kube/client.h"
#include "kube/objects.h"

namespace accelpool::extender::testing {

// Writes Lease NS/NAME as kube-scheduler keeps it: held by `holder`, renewed
// `age` ago by the wall clock, for 15 s; created when it does not exist.
// False (with the reason on stderr) when the write failed.
inline bool PutSchedulerLease(kube::KubeClient& client, const std::string& ns,
                              const std::string& name, const std::string& holder,
                              std::chrono::seconds age = std::chrono::seconds(0)) {
  const std::string stamp = kube::FormatMicroTime(std::chrono::system_clock::now() - age);
  StatusOr<kube::Lease> l = kube::GetLease(client, ns, name);
  kube::Lease next;
  if (l.ok()) {
    next = *l;
  } else {
    next.ns = ns;
    next.name = name;
  }
  next.holder = holder;
  next.lease_duration_s = 15;
  next.acquire_time = stamp;
  next.renew_time = stamp;
  StatusOr<kube::Lease> w =
      l.ok() ? kube::UpdateLease(client, next) : kube::CreateLease(client, next);
  if (!w.ok()) std::fprintf(stderr, "PutSchedulerLease: %s\n", w.status().ToString().c_str());
  return w.ok();
}

// An 8-GPU NVIDIA node (profile nvidia-hgx-8) whose devices take up to
// `shares` containers each.
inline core::NodeInventory GpuNode(const std::string& name, int32_t shares = 4) {
  StatusOr<core::NodeInventory> inv = core::MakeProfileNode("nvidia-hgx-8", name);
  if (!inv.ok()) {
    std::fprintf(stderr, "GpuNode: %s\n", inv.status().ToString().c_str());
    std::abort();
  }
  for (core::Device& d : inv->devices) {
    d.max_shares = shares;
  }
  return *inv;
}

inline void AddGpuNode(Cache& cache, const std::string& name, int32_t shares = 4,
                       NodeDomains domains = {}) {
  cache.UpsertNode(name, std::vector<core::NodeInventory>{GpuNode(name, shares)}, 1, domains);
}

inline core::DeviceRequest Gpu(int32_t count, int64_t memory_mib = 0, int32_t compute = 0,
                               std::string container = "main",
                               core::ContainerKind kind = core::ContainerKind::kRegular) {
  core::DeviceRequest r;
  r.container = std::move(container);
  r.kind = kind;
  r.vendor = core::Vendor::kNvidia;
  r.count = count;
  r.memory_mib = memory_mib;
  r.compute = compute;
  return r;
}

inline PodInfo MakePod(const std::string& uid, std::vector<core::DeviceRequest> containers,
                       const std::string& job = "") {
  return MakePodInfo(PodRef{uid, "ns", "pod-" + uid, job},
                     core::PodRequest{std::move(containers), {}});
}

// Records the writes a bind makes; fails a stage when told to.
class FakeWriter : public PodWriter {
 public:
  Status Bind(const PodInfo& pod, const PodAssignment& a) override {
    std::function<void(const PodInfo&, const PodAssignment&)> before;
    Status answer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back("bind " + pod.ref.uid + " " + a.node);
      before = before_answer_;
      answer = fail_binding_;
    }
    if (before) before(pod, a);
    return answer;
  }
  StatusOr<std::string> BoundNode(const PodInfo& pod) override {
    std::function<void(const PodInfo&)> on_read;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back("read " + pod.ref.uid);
      on_read = on_read_;
    }
    if (on_read) on_read(pod);
    std::lock_guard<std::mutex> lock(mu_);
    if (!bound_node_status_.ok()) return bound_node_status_;
    return bound_node_;
  }
  // Called inside BoundNode before it answers (e.g. another bind meanwhile).
  void OnRead(std::function<void(const PodInfo&)> f) {
    std::lock_guard<std::mutex> lock(mu_);
    on_read_ = std::move(f);
  }
  // What BoundNode answers: a node ("" = not bound) or an error.
  void SetBoundNode(std::string node, Status st = Status::Ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    bound_node_ = std::move(node);
    bound_node_status_ = std::move(st);
  }
  // Called inside Bind before it answers (e.g. the watch delivering the pod).
  void BeforeAnswer(std::function<void(const PodInfo&, const PodAssignment&)> f) {
    std::lock_guard<std::mutex> lock(mu_);
    before_answer_ = std::move(f);
  }
  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  void FailBinding(Status s) { fail_binding_ = std::move(s); }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> calls_;
  Status fail_binding_;
  std::string bound_node_;
  Status bound_node_status_ = UnimplementedError("no BoundNode answer set");
  std::function<void(const PodInfo&, const PodAssignment&)> before_answer_;
  std::function<void(const PodInfo&)> on_read_;
};

// A Logger whose lines (debug and up) are kept for the test to read.
class LogCapture {
 public:
  LogCapture() {
    LogOptions o;
    o.level = "debug";
    o.sink = [this](std::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    };
    StatusOr<Logger> l = NewLogger("test", o);
    if (!l.ok()) {
      std::fprintf(stderr, "LogCapture: %s\n", l.status().ToString().c_str());
      std::abort();
    }
    log_ = *l;
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  const Logger& logger() const { return log_; }
  // The lines that contain `text`.
  std::vector<std::string> Lines(std::string_view text) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const std::string& l : lines_) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
  Logger log_;
};

class FakeEvents : public EventSink {
 public:
  void PodEvent(const PodRef& pod, bool warning, const std::string& reason,
                const std::string& message) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(pod.uid + " " + (warning ? "Warning " : "Normal ") + reason + ": " + message);
  }
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

}  // namespace accelpool::extender::testing

#endif  // ACCELPOOL_EXTENDER_TEST_UTIL_H_
