// LeaderElector: one active extender among replicas, through a
// coordination.k8s.io/v1 Lease. Two ways to decide who leads:
//
// Own election (--leader-elect; a standalone extender that kube-scheduler
// reaches through a Service): a thread tries every `retry` to acquire Lease
// ns/name (create it, or take it when its holder let it expire: renewTime +
// leaseDurationSeconds in the past) and, while holding it, renews it every
// `retry`. IsLeader() turns false as soon as a renewal fails for longer than
// `lease_duration` minus one retry period, so two replicas never both believe
// they lead for longer than the clock skew between them.
//
// Following kube-scheduler (--scheduler-lease; the chart's sidecar layout):
// kube-scheduler calls only the extender in its own pod, so the active
// extender must be the one beside the leading kube-scheduler. Two independent
// elections could pick different pods, and every bind would then be refused.
// So this replica leads exactly while kube-scheduler's own Lease names a
// holder of this pod: kube-scheduler's identity is "<host name>_<uuid>", and
// the containers of a pod share the host name. The Lease is read every
// `retry`; another holder (or an expired Lease) ends leadership at once, a
// failed read only after `lease_duration` minus one retry period, as above.
// While leading it still writes Lease ns/name (holder, renewal and, with
// signing, the key it signs with), so a key rotation can see which key the
// active extender signs with, with one replica as with several.
//
// Only the leader serves bind.
//
// Thread-safety: IsLeader() and IsLeaderNow() may be called from any thread.
#ifndef ACCELPOOL_EXTENDER_LEADER_H_
#define ACCELPOOL_EXTENDER_LEADER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/log.h"
#include "kube/client.h"

namespace accelpool::extender {

struct LeaderOptions {
  std::string ns = "kube-system";
  std::string name = "accelpool-extender";
  std::string identity;  // unique per replica (pod name + random suffix)
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
};

class LeaderElector {
 public:
  LeaderElector(kube::KubeClient& client, LeaderOptions options, Logger log);
  ~LeaderElector();  // stops; does not release the lease (it expires)

  void Start();
  void Stop();
  bool IsLeader() const { return leader_.load(); }
  // IsLeader(), and when following kube-scheduler and not leading, one fresh
  // read of its Lease (at most every 200 ms): kube-scheduler starts
  // scheduling the moment it acquires, which may be just before this
  // replica's next periodic read, and its first binds should not fail.
  bool IsLeaderNow();
  bool Follows() const { return !options_.scheduler_lease_name.empty(); }
  // Why this replica does not lead, for the bind refusal and /readyz.
  std::string NotLeaderReason() const;

  // One round (exposed for tests): acquire or renew our own Lease, or, when
  // following, read kube-scheduler's and write the report. Returns whether
  // this replica leads afterwards.
  bool TryAcquireOrRenew();

 private:
  enum class Round { kLeads, kFollows, kUnknown };
  Round RunRound();
  Round ElectRound();
  Round FollowRound(bool report);
  void WriteReport();

  kube::KubeClient& client_;
  const LeaderOptions options_;
  const Logger log_;
  std::atomic<bool> leader_{false};
  std::atomic<int64_t> last_check_ms_{0};             // IsLeaderNow's rate limit
  std::chrono::steady_clock::time_point last_renew_;  // used by the thread only
  std::string last_holder_;                           // used by the thread only
  std::jthread thread_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_LEADER_H_
