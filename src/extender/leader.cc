#include "extender/leader.h"

#include <utility>

#include "api/assignment_signature.h"
#include "kube/objects.h"

namespace accelpool::extender {

LeaderElector::LeaderElector(kube::KubeClient& client, LeaderOptions options, Logger log)
    : client_(client), options_(std::move(options)), log_(std::move(log)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  thread_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      const bool held = TryAcquireOrRenew();
      const auto now = std::chrono::steady_clock::now();
      if (held) {
        last_renew_ = now;
      }
      const bool was = leader_.load();
      const bool is = held || (was && now - last_renew_ < options_.lease_duration - options_.retry);
      if (is != was) {
        log_.Info(is ? "became leader" : "lost leadership", {{"identity", options_.identity}});
      }
      leader_.store(is);
      for (auto waited = std::chrono::milliseconds(0);
           waited < options_.retry && !stop.stop_requested();
           waited += std::chrono::milliseconds(100)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
}

void LeaderElector::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  leader_.store(false);
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto now = std::chrono::system_clock::now();
  const std::string stamp = kube::FormatMicroTime(now);
  StatusOr<kube::Lease> lease = kube::GetLease(client_, options_.ns, options_.name);
  if (!lease.ok()) {
    if (lease.status().code() != StatusCode::kNotFound) {
      log_.Warn("lease read failed", {{"error", lease.status().ToString()}});
      return false;
    }
    kube::Lease fresh;
    fresh.ns = options_.ns;
    fresh.name = options_.name;
    fresh.holder = options_.identity;
    fresh.lease_duration_s = static_cast<int32_t>(options_.lease_duration.count());
    fresh.acquire_time = stamp;
    fresh.renew_time = stamp;
    if (options_.signing_key) {
      fresh.annotations[api::kLeaseSigningKeyAnnotation] = options_.signing_key();
    }
    return kube::CreateLease(client_, fresh).ok();
  }
  kube::Lease next = *lease;
  if (lease->holder != options_.identity) {
    StatusOr<std::chrono::system_clock::time_point> renewed = kube::ParseMicroTime(lease->renew_time);
    const bool expired =
        lease->holder.empty() || !renewed.ok() ||
        *renewed + std::chrono::seconds(lease->lease_duration_s) < now;
    if (!expired) {
      return false;
    }
    next.holder = options_.identity;
    next.acquire_time = stamp;
    ++next.transitions;
  }
  next.renew_time = stamp;
  next.lease_duration_s = static_cast<int32_t>(options_.lease_duration.count());
  if (options_.signing_key) {
    next.annotations[api::kLeaseSigningKeyAnnotation] = options_.signing_key();
  }
  return kube::UpdateLease(client_, next).ok();
}

}  // namespace accelpool::extender
