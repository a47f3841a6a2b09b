#include "extender/leader.h"

#include <algorithm>
#include <utility>

#include "api/assignment_signature.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

// Whether `lease` is held (a holder, renewed within its duration) at `now`,
// by the wall clock: for kube-scheduler's Lease, written on the same node.
bool HeldAt(const kube::Lease& lease, std::chrono::system_clock::time_point now) {
  if (lease.holder.empty()) return false;
  StatusOr<std::chrono::system_clock::time_point> renewed = kube::ParseMicroTime(lease.renew_time);
  return renewed.ok() && *renewed + std::chrono::seconds(lease.lease_duration_s) >= now;
}

int64_t NanosOf(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

LeaderElector::LeaderElector(kube::KubeClient& client, LeaderOptions options, Logger log)
    : client_(client), options_(std::move(options)), log_(std::move(log)) {}

LeaderElector::~LeaderElector() { Stop(); }

LeaderElector::TimePoint LeaderElector::Now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

bool LeaderElector::IsLeader() const {
  const int64_t until = lead_until_ns_.load();
  return until != 0 && NanosOf(Now()) < until;
}

std::chrono::milliseconds LeaderElector::LeadLeft() const {
  const int64_t until = lead_until_ns_.load();
  const int64_t now = NanosOf(Now());
  if (until == 0 || now >= until) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(until - now));
}

void LeaderElector::Settle(Round round, TimePoint start) {
  const int64_t margin = std::chrono::nanoseconds(options_.lease_duration - options_.retry).count();
  const int64_t start_ns = NanosOf(start);
  std::lock_guard<std::mutex> lock(settle_mu_);
  const int64_t cur = lead_until_ns_.load();
  if (round == Round::kLeads) {
    // A bind's read (IsLeaderNow) that found this replica leading but
    // started before a round that found another holder is out of date.
    if (start_ns < follows_since_ns_) return;
    // The later of two deadlines: IsLeaderNow may have set one from a later read.
    const int64_t until = start_ns + margin;
    if (cur == 0 || cur < until) lead_until_ns_.store(until);
  } else if (round == Round::kFollows) {
    follows_since_ns_ = std::max(follows_since_ns_, start_ns);
    // Another holder: stop at once, unless a read that started after this
    // round's (IsLeaderNow's) found this replica leading.
    if (cur != 0 && cur - margin <= start_ns) lead_until_ns_.store(0);
  }
  // kUnknown (a failed read or write): the deadline stands and runs out by itself.
}

void LeaderElector::Start() {
  started_ = true;
  running_.store(true);
  thread_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      const bool was = IsLeader();
      const TimePoint start = Now();
      Settle(RunRound(), start);
      const bool is = IsLeader();
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
      for (auto waited = std::chrono::milliseconds(0);
           waited < options_.retry && !stop.stop_requested();
           waited += std::chrono::milliseconds(100)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
}

void LeaderElector::Stop() {
  running_.store(false);
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  lead_until_ns_.store(0);
  if (started_ && !Follows()) Release();
  started_ = false;
}

// Empties the holder of our own Lease when this replica still holds it, with
// the resourceVersion read as precondition: another replica that took the
// Lease meanwhile keeps it.
void LeaderElector::Release() {
  StatusOr<kube::Lease> lease = kube::GetLease(client_, options_.ns, options_.name);
  if (!lease.ok() || lease->holder != options_.identity) return;
  const std::string stamp = kube::FormatMicroTime(std::chrono::system_clock::now());
  kube::Lease next = *lease;
  next.holder.clear();
  next.lease_duration_s = 1;
  next.acquire_time = stamp;
  next.renew_time = stamp;
  const StatusOr<kube::Lease> written = kube::UpdateLease(client_, next);
  if (written.ok()) {
    log_.Info("released the lease", {{"identity", options_.identity}});
  } else {
    log_.Warn(
        "releasing the lease failed (it expires)",
        {{"lease", options_.ns + "/" + options_.name}, {"error", written.status().ToString()}});
  }
}

bool LeaderElector::TryAcquireOrRenew() {
  const TimePoint start = Now();
  Settle(RunRound(), start);
  return IsLeader();
}

LeaderElector::Round LeaderElector::RunRound() {
  if (!Follows()) return ElectRound();
  const Round r = FollowRound(/*report=*/true);
  if (r == Round::kLeads) WriteReport();
  return r;
}

bool LeaderElector::IsLeaderNow() {
  if (IsLeader()) return true;
  if (!Follows() || !running_.load()) return false;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t last = last_check_ms_.load();
  if (now_ms - last < 200 || !last_check_ms_.compare_exchange_strong(last, now_ms)) {
    return false;
  }
  const TimePoint start = Now();
  if (FollowRound(/*report=*/false) != Round::kLeads) return false;
  // The thread confirms (and writes the report) at its next round; until then
  // this replica binds, as kube-scheduler beside it already schedules.
  Settle(Round::kLeads, start);
  log_.Info("became leader",
            {{"identity", options_.identity},
             {"scheduler_lease", options_.scheduler_lease_ns + "/" + options_.scheduler_lease_name},
             {"trigger", "bind"}});
  return IsLeader();
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

void LeaderElector::Observe(const kube::Lease& lease) {
  std::string record = lease.resource_version + "\n" + lease.holder + "\n" + lease.renew_time;
  if (record != observed_) {
    observed_ = std::move(record);
    observed_at_ = Now();
  }
}

LeaderElector::Round LeaderElector::ElectRound() {
  const std::string stamp = kube::FormatMicroTime(std::chrono::system_clock::now());
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
    const StatusOr<kube::Lease> created = kube::CreateLease(client_, fresh);
    if (!created.ok()) return Round::kUnknown;
    Observe(*created);
    return Round::kLeads;
  }
  Observe(*lease);
  kube::Lease next = *lease;
  if (lease->holder != options_.identity) {
    // Held until the record has stood unchanged, as this replica saw it, for
    // the holder's promise (its leaseDurationSeconds) or ours, the longer.
    const auto duration = std::max<std::chrono::seconds>(
        options_.lease_duration, std::chrono::seconds(std::max(lease->lease_duration_s, 0)));
    if (!lease->holder.empty() && Now() < observed_at_ + duration) {
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
  const StatusOr<kube::Lease> written = kube::UpdateLease(client_, next);
  if (!written.ok()) return Round::kUnknown;
  Observe(*written);
  return Round::kLeads;
}

}  // namespace accelpool::extender
