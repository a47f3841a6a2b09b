// LeaderElector: one active extender among replicas, through a
// coordination.k8s.io/v1 Lease.
//
// A thread tries every `retry` to acquire the lease (create it, or take it
// when its holder let it expire: renewTime + leaseDurationSeconds in the
// past) and, while holding it, renews it every `retry`. IsLeader() turns false
// as soon as a renewal fails for longer than `lease_duration` minus one retry
// period, so two replicas never both believe they lead for longer than the
// clock skew between them. Only the leader serves bind; followers answer
// filter and prioritize from their own caches and report not ready.
//
// Thread-safety: IsLeader() may be called from any thread.
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
};

class LeaderElector {
 public:
  LeaderElector(kube::KubeClient& client, LeaderOptions options, Logger log);
  ~LeaderElector();  // stops; does not release the lease (it expires)

  void Start();
  void Stop();
  bool IsLeader() const { return leader_.load(); }

  // One acquire-or-renew round (exposed for tests). Returns whether this
  // replica holds the lease afterwards.
  bool TryAcquireOrRenew();

 private:
  kube::KubeClient& client_;
  const LeaderOptions options_;
  const Logger log_;
  std::atomic<bool> leader_{false};
  std::chrono::steady_clock::time_point last_renew_;  // used by the thread only
  std::jthread thread_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_LEADER_H_
