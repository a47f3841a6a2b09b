#include "extender/leader.h"

#include <utility>

#include "api/assignment_signature.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

// Whether `lease` is held (a holder, renewed within its duration) at `now`.
bool HeldAt(const kube::Lease& lease, std::chrono::system_clock::time_point now) {
  if (lease.holder.empty()) return false;
  StatusOr<std::chrono::system_clock::time_point> renewed = kube::ParseMicroTime(lease.renew_time);
  return renewed.ok() && *renewed + std::chrono::seconds(lease.lease_duration_s) >= now;
}

}  // namespace

LeaderElector::LeaderElector(kube::KubeClient& client, LeaderOptions options, Logger log)
    : client_(client), options_(std::move(options)), log_(std::move(log)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  thread_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      const Round round = RunRound();
      const auto now = std::chrono::steady_clock::now();
      if (round == Round::kLeads) {
        last_renew_ = now;
      }
      const bool was = leader_.load();
      // Own election: any failed round is a renewal that did not happen.
      // Following: only a failed read is "unknown"; another holder is final.
      const bool unknown = round == Round::kUnknown || (!Follows() && round == Round::kFollows);
      const bool is =
          round == Round::kLeads ||
          (was && unknown && now - last_renew_ < options_.lease_duration - options_.retry);
      if (is != was) {
        const char* what = is ? "became leader" : "lost leadership";
        if (Follows()) {
          log_.Info(what, {{"identity", options_.identity},
                           {"scheduler_lease",
                            options_.scheduler_lease_ns + "/" + options_.scheduler_lease_name},
                           {"scheduler_holder", last_holder_}});
        } else {
          log_.Info(what, {{"identity", options_.identity}});
        }
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

bool LeaderElector::TryAcquireOrRenew() { return RunRound() == Round::kLeads; }

LeaderElector::Round LeaderElector::RunRound() {
  if (!Follows()) return ElectRound();
  const Round r = FollowRound(/*report=*/true);
  if (r == Round::kLeads) WriteReport();
  return r;
}

bool LeaderElector::IsLeaderNow() {
  if (leader_.load()) return true;
  if (!Follows() || !thread_.joinable()) return false;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t last = last_check_ms_.load();
  if (now_ms - last < 200 || !last_check_ms_.compare_exchange_strong(last, now_ms)) {
    return false;
  }
  if (FollowRound(/*report=*/false) != Round::kLeads) return false;
  // The thread confirms (and writes the report) at its next round; until then
  // this replica binds, as kube-scheduler beside it already schedules.
  leader_.store(true);
  log_.Info("became leader",
            {{"identity", options_.identity},
             {"scheduler_lease", options_.scheduler_lease_ns + "/" + options_.scheduler_lease_name},
             {"trigger", "bind"}});
  return true;
}

std::string LeaderElector::NotLeaderReason() const {
  if (Follows()) {
    return "the kube-scheduler in this pod (host " + options_.host + ") does not hold Lease " +
           options_.scheduler_lease_ns + "/" + options_.scheduler_lease_name;
  }
  return "another replica holds Lease " + options_.ns + "/" + options_.name;
}

LeaderElector::Round LeaderElector::FollowRound(bool report) {
  StatusOr<kube::Lease> lease =
      kube::GetLease(client_, options_.scheduler_lease_ns, options_.scheduler_lease_name);
  if (!lease.ok()) {
    if (lease.status().code() == StatusCode::kNotFound) {
      // kube-scheduler has not elected yet (or elects under another name).
      if (report) last_holder_.clear();
      return Round::kFollows;
    }
    log_.Warn("reading kube-scheduler's lease failed",
              {{"lease", options_.scheduler_lease_ns + "/" + options_.scheduler_lease_name},
               {"error", lease.status().ToString()}});
    return Round::kUnknown;
  }
  if (report) last_holder_ = lease->holder;
  const bool ours = !options_.host.empty() && lease->holder.size() > options_.host.size() &&
                    lease->holder.compare(0, options_.host.size(), options_.host) == 0 &&
                    lease->holder[options_.host.size()] == '_';
  return ours && HeldAt(*lease, std::chrono::system_clock::now()) ? Round::kLeads : Round::kFollows;
}

// The report Lease of a replica that follows kube-scheduler: taken over
// unconditionally, since kube-scheduler's Lease decided who leads.
void LeaderElector::WriteReport() {
  const std::string stamp = kube::FormatMicroTime(std::chrono::system_clock::now());
  StatusOr<kube::Lease> lease = kube::GetLease(client_, options_.ns, options_.name);
  kube::Lease next;
  if (lease.ok()) {
    next = *lease;
  } else if (lease.status().code() == StatusCode::kNotFound) {
    next.ns = options_.ns;
    next.name = options_.name;
  } else {
    log_.Warn("reading the extender's lease failed", {{"error", lease.status().ToString()}});
    return;
  }
  if (next.holder != options_.identity) {
    next.holder = options_.identity;
    next.acquire_time = stamp;
    if (lease.ok()) ++next.transitions;
  }
  next.renew_time = stamp;
  next.lease_duration_s = static_cast<int32_t>(options_.lease_duration.count());
  if (options_.signing_key) {
    next.annotations[api::kLeaseSigningKeyAnnotation] = options_.signing_key();
  }
  const StatusOr<kube::Lease> written =
      lease.ok() ? kube::UpdateLease(client_, next) : kube::CreateLease(client_, next);
  if (!written.ok()) {
    log_.Warn(
        "writing the extender's lease failed (leadership follows kube-scheduler's)",
        {{"lease", options_.ns + "/" + options_.name}, {"error", written.status().ToString()}});
  }
}

LeaderElector::Round LeaderElector::ElectRound() {
  const auto now = std::chrono::system_clock::now();
  const std::string stamp = kube::FormatMicroTime(now);
  StatusOr<kube::Lease> lease = kube::GetLease(client_, options_.ns, options_.name);
  if (!lease.ok()) {
    if (lease.status().code() != StatusCode::kNotFound) {
      log_.Warn("lease read failed", {{"error", lease.status().ToString()}});
      return Round::kUnknown;
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
    return kube::CreateLease(client_, fresh).ok() ? Round::kLeads : Round::kUnknown;
  }
  kube::Lease next = *lease;
  if (lease->holder != options_.identity) {
    if (HeldAt(*lease, now)) {
      return Round::kFollows;
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
  return kube::UpdateLease(client_, next).ok() ? Round::kLeads : Round::kUnknown;
}

}  // namespace accelpool::extender
