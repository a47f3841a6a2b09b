// LeaderElector's own election against an in-memory apiserver, on a clock the
// tests move by hand.
#include "extender/leader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "extender/test_util.h"
#include "kube/fake_api_test.h"
#include "kube/hooked_client.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

using std::chrono::seconds;

// A monotonic clock that moves only when told.
class ManualClock {
 public:
  std::chrono::steady_clock::time_point Now() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns_.load()));
  }
  void Advance(std::chrono::nanoseconds d) { ns_ += d.count(); }
  std::function<std::chrono::steady_clock::time_point()> Fn() {
    return [this] { return Now(); };
  }

 private:
  std::atomic<int64_t> ns_{std::chrono::nanoseconds(std::chrono::hours(1)).count()};
};

using kube::testing::HookedClient;

// Holds the calls that pass it until opened; says when one is held.
class Gate {
 public:
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return held_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, open_ = false;
};

template <typename F>
bool Eventually(F f) {
  for (int i = 0; i < 400; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

class LeaderTest : public kube::testing::FakeApiTest {
 protected:
  LeaderOptions Options(const std::string& identity) {
    LeaderOptions o;
    o.ns = "kube-system";
    o.identity = identity;
    o.lease_duration = seconds(15);
    o.retry = seconds(2);
    o.clock = clock_.Fn();
    return o;
  }
  StatusOr<kube::Lease> Lease() {
    return kube::GetLease(*client_, "kube-system", "accelpool-extender");
  }

  ManualClock clock_;
};

// The holder's renewTime is the holder's wall clock; a contender whose clock
// runs ahead (or the holder's behind) must not read a live Lease as expired.
// As client-go does, expiry counts from when the contender first saw the
// record, on its own clock.
TEST_F(LeaderTest, AContenderTimesExpiryFromWhenItSawTheRecordNotFromRenewTime) {
  kube::Lease held;
  held.ns = "kube-system";
  held.name = "accelpool-extender";
  held.holder = "replica-1";
  held.lease_duration_s = 15;
  // Renewed just now by a holder whose wall clock is a minute behind ours.
  held.renew_time = kube::FormatMicroTime(std::chrono::system_clock::now() - seconds(60));
  held.acquire_time = held.renew_time;
  ASSERT_TRUE(kube::CreateLease(*client_, held).ok());

  LeaderElector two(*client_, Options("replica-2"), Logger());
  EXPECT_FALSE(two.TryAcquireOrRenew());
  clock_.Advance(seconds(10));
  // The holder renews (still a minute behind): the record changed, expiry restarts.
  StatusOr<kube::Lease> now = Lease();
  ASSERT_TRUE(now.ok());
  now->renew_time = kube::FormatMicroTime(std::chrono::system_clock::now() - seconds(50));
  ASSERT_TRUE(kube::UpdateLease(*client_, *now).ok());
  EXPECT_FALSE(two.TryAcquireOrRenew());
  clock_.Advance(seconds(14));
  EXPECT_FALSE(two.TryAcquireOrRenew());
  EXPECT_FALSE(two.IsLeader());
  // Unchanged for a whole lease duration: the holder is gone.
  clock_.Advance(seconds(2));
  EXPECT_TRUE(two.TryAcquireOrRenew());
  EXPECT_TRUE(two.IsLeader());
  // It leads for certain until lease_duration - retry after the round.
  EXPECT_EQ(two.LeadLeft(), seconds(13));
  clock_.Advance(seconds(12));
  EXPECT_EQ(two.LeadLeft(), seconds(1));
  clock_.Advance(seconds(2));
  EXPECT_EQ(two.LeadLeft(), std::chrono::milliseconds(0));
  EXPECT_FALSE(two.IsLeader());
  StatusOr<kube::Lease> taken = Lease();
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->holder, "replica-2");
  EXPECT_EQ(taken->transitions, 1);
}

// A Lease that says it lasts longer than our own setting is honoured for its
// own duration.
TEST_F(LeaderTest, TheHoldersLongerLeaseDurationIsHonoured) {
  kube::Lease held;
  held.ns = "kube-system";
  held.name = "accelpool-extender";
  held.holder = "replica-1";
  held.lease_duration_s = 60;
  held.renew_time = kube::FormatMicroTime(std::chrono::system_clock::now());
  ASSERT_TRUE(kube::CreateLease(*client_, held).ok());
  LeaderElector two(*client_, Options("replica-2"), Logger());
  EXPECT_FALSE(two.TryAcquireOrRenew());
  clock_.Advance(seconds(59));
  EXPECT_FALSE(two.TryAcquireOrRenew());
  clock_.Advance(seconds(1));
  EXPECT_TRUE(two.TryAcquireOrRenew());
}

// A leader whose next renewal hangs on the apiserver must stop leading when
// its deadline passes, not when the request returns: a contender may take
// over a lease duration after it saw the last renewal.
TEST_F(LeaderTest, ALeaderStopsAtItsDeadlineWhileARenewalHangs) {
  HookedClient hooked(*client_);
  LeaderElector one(hooked, Options("replica-1"), Logger());
  Gate gate;
  std::atomic<bool> hold{false};
  hooked.before_get = [&] {
    if (hold.load()) gate.Pass();
  };
  one.Start();
  ASSERT_TRUE(Eventually([&] { return one.IsLeader(); }));
  hold = true;
  gate.WaitHeld();  // the next round's read hangs
  EXPECT_TRUE(one.IsLeader());
  clock_.Advance(seconds(13) - std::chrono::milliseconds(1));
  EXPECT_TRUE(one.IsLeader());
  clock_.Advance(std::chrono::milliseconds(1));  // lease duration minus one retry
  EXPECT_FALSE(one.IsLeader());
  hold = false;
  gate.Open();
  one.Stop();
}

// The deadline counts from the start of a renewal, not from its end: the
// renewal may have committed at any moment in between.
TEST_F(LeaderTest, ASlowRenewalCountsFromItsStart) {
  HookedClient hooked(*client_);
  LeaderElector one(hooked, Options("replica-1"), Logger());
  ASSERT_TRUE(one.TryAcquireOrRenew());  // created
  hooked.before_update = [&] { clock_.Advance(seconds(10)); };
  ASSERT_TRUE(one.TryAcquireOrRenew());  // renewed, 10 s on the way
  clock_.Advance(seconds(2));
  EXPECT_TRUE(one.IsLeader());
  clock_.Advance(seconds(1));  // 13 s after the renewal started
  EXPECT_FALSE(one.IsLeader());
}

// A failed renewal keeps leadership until the deadline; seeing another holder
// ends it at once.
TEST_F(LeaderTest, AFailedRenewalKeepsTheDeadlineAnotherHolderEndsIt) {
  LeaderElector one(*client_, Options("replica-1"), Logger());
  ASSERT_TRUE(one.TryAcquireOrRenew());
  clock_.Advance(seconds(5));
  api_.FailNext(1, 503);
  EXPECT_TRUE(one.TryAcquireOrRenew());
  clock_.Advance(seconds(8));  // 13 s after the last success
  EXPECT_FALSE(one.IsLeader());
  ASSERT_TRUE(one.TryAcquireOrRenew());  // nobody took it: renewed
  StatusOr<kube::Lease> l = Lease();
  ASSERT_TRUE(l.ok());
  l->holder = "replica-2";
  ASSERT_TRUE(kube::UpdateLease(*client_, *l).ok());
  EXPECT_FALSE(one.TryAcquireOrRenew());
  EXPECT_FALSE(one.IsLeader());
}

// Two contenders that both saw the Lease expire: the write carries the
// resourceVersion read, so only the first one takes it.
TEST_F(LeaderTest, OfTwoContendersTakingAnExpiredLeaseOnlyOneWins) {
  LeaderElector zero(*client_, Options("replica-0"), Logger());
  ASSERT_TRUE(zero.TryAcquireOrRenew());
  HookedClient hooked(*client_);
  LeaderElector one(*client_, Options("replica-1"), Logger());
  LeaderElector two(hooked, Options("replica-2"), Logger());
  EXPECT_FALSE(one.TryAcquireOrRenew());
  EXPECT_FALSE(two.TryAcquireOrRenew());
  clock_.Advance(seconds(15));
  // Two has read the expired record; one takes it before two writes.
  bool one_took = false;
  hooked.before_update = [&] {
    hooked.before_update = nullptr;
    one_took = one.TryAcquireOrRenew();
  };
  EXPECT_FALSE(two.TryAcquireOrRenew());
  EXPECT_TRUE(one_took);
  EXPECT_TRUE(one.IsLeader());
  StatusOr<kube::Lease> l = Lease();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->holder, "replica-1");
}

// Stop() releases a held Lease (holder emptied), and a contender takes a
// released Lease at once, as with client-go's ReleaseOnCancel.
TEST_F(LeaderTest, StopReleasesTheLeaseAndAContenderTakesItAtOnce) {
  LeaderElector one(*client_, Options("replica-1"), Logger());
  LeaderElector two(*client_, Options("replica-2"), Logger());
  one.Start();
  ASSERT_TRUE(Eventually([&] { return one.IsLeader(); }));
  EXPECT_FALSE(two.TryAcquireOrRenew());
  one.Stop();
  EXPECT_FALSE(one.IsLeader());
  StatusOr<kube::Lease> l = Lease();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->holder, "");
  EXPECT_TRUE(two.TryAcquireOrRenew());
  // A replica that stops without holding the Lease leaves it alone.
  LeaderElector three(*client_, Options("replica-3"), Logger());
  three.Start();
  three.Stop();
  l = Lease();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->holder, "replica-2");
}

// kube-scheduler's Lease in the extender's namespace, held by `holder` and
// renewed now.
void PutSchedulerLease(kube::KubeClient& client, const std::string& holder) {
  ASSERT_TRUE(testing::PutSchedulerLease(client, "kube-system", "kube-scheduler-x", holder));
}

// A bind's read of kube-scheduler's Lease (IsLeaderNow) that found this pod's
// kube-scheduler holding it, but answered after a newer round of the thread
// found another holder, is out of date: it does not make this replica lead
// (it did, until the thread's next round, beside the new leader).
TEST_F(LeaderTest, ABindsReadOlderThanARoundThatFoundAnotherHolderDoesNotLead) {
  HookedClient hooked(*client_);
  PutSchedulerLease(*client_, "pod-b_1");
  LeaderOptions o = Options("pod-a-1");
  o.scheduler_lease_ns = "kube-system";
  o.scheduler_lease_name = "kube-scheduler-x";
  o.host = "pod-a";
  o.retry = std::chrono::seconds(1);
  std::atomic<int> thread_reads{0};
  std::atomic<std::thread::id> bind_thread{};
  Gate gate;
  hooked.after_get = [&] {
    if (std::this_thread::get_id() == bind_thread.load()) {
      gate.Pass();
    } else {
      ++thread_reads;
    }
  };
  LeaderElector a(hooked, o, Logger());
  a.Start();
  ASSERT_TRUE(Eventually([&] { return thread_reads.load() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past IsLeaderNow's rate limit
  EXPECT_FALSE(a.IsLeader());

  // kube-scheduler in pod-a acquires; a bind reads that, and its answer is
  // held back while kube-scheduler in pod-b takes over and the thread's next
  // round (started later) reads pod-b.
  PutSchedulerLease(*client_, "pod-a_2");
  std::atomic<bool> bind_led{true};
  std::thread bind([&] {
    bind_thread.store(std::this_thread::get_id());
    bind_led.store(a.IsLeaderNow());
  });
  gate.WaitHeld();
  clock_.Advance(std::chrono::milliseconds(500));
  PutSchedulerLease(*client_, "pod-b_3");
  const int before = thread_reads.load();
  // A round that read pod-b has settled once the round after it reads. A
  // following round reads once; one under way when pod-b took over may have
  // read pod-a_2 and led, reading twice (the report Lease too): four reads
  // after `before` take in a settled pod-b round either way.
  ASSERT_TRUE(Eventually([&] { return thread_reads.load() > before + 3; }));
  gate.Open();
  bind.join();
  EXPECT_FALSE(bind_led.load());
  EXPECT_FALSE(a.IsLeader());
  a.Stop();
}
}  // namespace
}  // namespace accelpool::extender
