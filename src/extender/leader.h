// LeaderElector: one active extender among replicas, through a
// coordination.k8s.io/v1 Lease. Two ways to decide who leads:
//
// Own election (--leader-elect; a standalone extender that kube-scheduler
// reaches through a Service): a thread tries every `retry` to acquire Lease
// ns/name and, while holding it, renews it every `retry`, as client-go's
// leaderelection does. Expiry is measured on this replica's monotonic clock,
// never by comparing the holder's renewTime with this replica's wall clock:
// a replica takes the Lease from another holder only once it has seen the
// same record (resourceVersion, holder, renewTime) unchanged for the longer
// of `lease_duration` and the Lease's leaseDurationSeconds, counted from when
// it first read that record; a Lease without a holder (released) is free at
// once. Every write carries the resourceVersion it read, so of two replicas
// taking an expired Lease only one succeeds. A leader leads until `lease_duration`
// minus one `retry` after the start of its last successful acquire or renewal
// (the write committed after that start, so every other replica first saw it
// later and waits a whole `lease_duration` from then): IsLeader() turns false
// at that deadline even while a request to the apiserver hangs.
//
// Following kube-scheduler (--scheduler-lease; the chart's sidecar layout):
// kube-scheduler calls only the extender in its own pod, so the active
// extender must be the one beside the leading kube-scheduler. Two independent
// elections could pick different pods, and every bind would then be refused.
// So this replica leads exactly while kube-scheduler's own Lease names a
// holder of this pod: kube-scheduler's identity is "<host name>_<uuid>", and
// the containers of a pod share the host name (and the node's clock, so its
// renewTime is compared with this replica's wall clock). The Lease is read
// every `retry`; another holder (or an expired Lease) ends leadership at once,
// a failed read only at the deadline above. While leading it still writes
// Lease ns/name (holder, renewal and, with signing, the key it signs with), so
// a key rotation can see which key the active extender signs with, with one
// replica as with several.
//
// Only the leader serves bind.
//
// Thread-safety: IsLeader() and IsLeaderNow() may be called from any thread.
#ifndef ACCELPOOL_EXTENDER_LEADER_H_
#define ACCELPOOL_EXTENDER_LEADER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.h"
#include "kube/client.h"
#include "kube/objects.h"

namespace accelpool::extender {

struct LeaderOptions {
  std::string ns = "kube-system";
  std::string name = "accelpool-extender";
  std::string identity;  // unique per replica (pod name + random suffix)
  // REQUIRES: lease_duration > retry.
  std::chrono::seconds lease_duration{15};
  std::chrono::seconds retry{2};
  // When set, the leader writes its result on the Lease at each acquire and
  // renewal (annotation accelpool.io/assignment-signing-key: the key id it
  // signs with), for a key rotation to see when the leader has switched.
  std::function<std::string()> signing_key;
  // Follow kube-scheduler's Lease scheduler_lease_ns/scheduler_lease_name
  // instead of electing (see above) when scheduler_lease_name is set. `host`
  // is this pod's host name (gethostname()).
  std::string scheduler_lease_ns;
  std::string scheduler_lease_name;
  std::string host;
  // The monotonic clock leadership and expiry are measured on (tests); null:
  // std::chrono::steady_clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

class LeaderElector {
 public:
  LeaderElector(kube::KubeClient& client, LeaderOptions options, Logger log);
  ~LeaderElector();  // Stop()

  void Start();
  // Stops the thread and leading. After Start() with its own election, a
  // Lease this replica still holds is then released (holder emptied, as
  // client-go's ReleaseOnCancel does), so another replica takes over at its
  // next round instead of after `lease_duration`. The caller stops whatever
  // IsLeader() guards first.
  void Stop();
  // Whether this replica leads now: before the deadline of its last
  // successful round (see above).
  bool IsLeader() const;
  // How long this replica still leads for certain (0 when it does not):
  // until the deadline of its last successful round.
  std::chrono::milliseconds LeadLeft() const;
  // IsLeader(), and when following kube-scheduler and not leading, one fresh
  // read of its Lease (at most every 200 ms): kube-scheduler starts
  // scheduling the moment it acquires, which may be just before this
  // replica's next periodic read, and its first binds should not fail.
  bool IsLeaderNow();
  bool Follows() const { return !options_.scheduler_lease_name.empty(); }
  // Why this replica does not lead, for the bind refusal and /readyz.
  std::string NotLeaderReason() const;

  // One round, as the thread runs it (exposed for tests; not while the
  // thread runs): acquire or renew our own Lease, or, when following, read
  // kube-scheduler's and write the report. Returns whether this replica
  // leads afterwards.
  bool TryAcquireOrRenew();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  enum class Round { kLeads, kFollows, kUnknown };
  TimePoint Now() const;
  Round RunRound();
  Round ElectRound();
  Round FollowRound(bool report);
  void WriteReport();
  // Leadership after a round that started at `start`.
  void Settle(Round round, TimePoint start);
  // Notes `lease` as read now; a record not seen before restarts its expiry.
  void Observe(const kube::Lease& lease);
  void Release();

  kube::KubeClient& client_;
  const LeaderOptions options_;
  const Logger log_;
  // Leads while Now() is before this (nanoseconds of the clock; 0: never).
  std::atomic<int64_t> lead_until_ns_{0};
  // Start of the latest round that found another holder (nanoseconds; 0:
  // none): a read that started before it, finishing later, does not lead.
  int64_t follows_since_ns_ = 0;           // guarded by settle_mu_
  std::mutex settle_mu_;                   // Settle runs on the thread and on binds
  std::atomic<int64_t> last_check_ms_{0};  // IsLeaderNow's rate limit
  std::string last_holder_;                // used by the thread only
  std::string observed_;                   // the last Lease record read; thread only
  TimePoint observed_at_;                  // when it was first read; thread only
  bool started_ = false;
  std::atomic<bool> running_{false};  // the election thread runs (read by IsLeaderNow)
  std::jthread thread_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_LEADER_H_
