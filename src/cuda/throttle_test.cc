#include "cuda/throttle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace accelpool::cuda {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(ThrottleTest, ParamsScaleWithPercent) {
  for (int percent : {1, 10, 25, 50, 100}) {
    TokenBucketParams p = TokenBucketParams::ForPercent(percent);
    EXPECT_DOUBLE_EQ(p.share, percent / 100.0);
    EXPECT_EQ(p.capacity_ns, static_cast<int64_t>(percent / 100.0 * kBurstWindowNs));
  }
  EXPECT_DOUBLE_EQ(TokenBucketParams::ForPercent(0).share, 0.01) << "clamped";
  EXPECT_DOUBLE_EQ(TokenBucketParams::ForPercent(400).share, 1.0) << "clamped";
}

TEST(ThrottleTest, FirstRefillStartsFullAndRefillIsCapped) {
  TokenBucketParams p = TokenBucketParams::ForPercent(50);
  TokenBucketState s;
  Refill(s, p, 1000);
  EXPECT_EQ(s.tokens_ns, p.capacity_ns);
  s.tokens_ns = 0;
  Refill(s, p, 1000 + 10 * kMs);
  EXPECT_EQ(s.tokens_ns, 5 * kMs);
  Refill(s, p, 1000 + 10'000 * kMs);
  EXPECT_EQ(s.tokens_ns, p.capacity_ns);
  int64_t before = s.tokens_ns;
  Refill(s, p, 0);  // Clock going backwards adds nothing.
  EXPECT_EQ(s.tokens_ns, before);
}

TEST(ThrottleTest, AdmitDebitsEstimateThenAsksToWait) {
  TokenBucketParams p = TokenBucketParams::ForPercent(25);
  TokenBucketState s;
  Refill(s, p, 0);
  EXPECT_EQ(s.estimate_ns[0], p.capacity_ns) << "unmeasured launches cost a whole burst";
  s.estimate_ns[0] = 20 * kMs;
  int64_t charged = 0;
  EXPECT_EQ(Admit(s, p, 0, 0, &charged), 0);  // Full bucket (12.5 ms): admitted into debt.
  EXPECT_EQ(charged, 20 * kMs);
  EXPECT_EQ(s.tokens_ns, p.capacity_ns - 20 * kMs);
  int64_t wait = Admit(s, p, 0, 0, &charged);
  EXPECT_EQ(charged, 0);
  // Debt of 7.5 ms at 25% takes 30 ms of wall time to repay.
  EXPECT_NEAR(static_cast<double>(wait), 30.0 * kMs, 2.0);
  EXPECT_EQ(Admit(s, p, wait, 0, &charged), 0);
}

TEST(ThrottleTest, SettleCorrectsEstimateAndLearns) {
  TokenBucketParams p = TokenBucketParams::ForPercent(50);
  TokenBucketState s;
  Refill(s, p, 0);
  s.tokens_ns = 0;
  const int64_t initial = s.estimate_ns[0];  // 25 ms at 50%.
  Settle(s, p, 0, initial, 900'000);
  EXPECT_EQ(s.tokens_ns, initial - 900'000);
  EXPECT_EQ(s.estimate_ns[0], initial + (900'000 - initial) / 4) << "down by a quarter";
  EXPECT_EQ(s.estimate_ns[1], initial) << "kinds learn separately";
  s.tokens_ns = 0;
  Settle(s, p, 1, 1'000'000, 40 * kMs);
  EXPECT_EQ(s.estimate_ns[1], 40 * kMs) << "up at once";
  EXPECT_EQ(s.tokens_ns, 1'000'000 - 40 * kMs);
  int64_t tokens = s.tokens_ns;
  Settle(s, p, 0, 5, -1);  // Unmeasured: nothing changes.
  EXPECT_EQ(s.tokens_ns, tokens);
  Refund(s, p, 3 * kMs);
  EXPECT_EQ(s.tokens_ns, tokens + 3 * kMs);
}

// Simulates a saturating launcher against a device timeline and checks the
// contract in the header: busy <= share * W + capacity + one kernel.
struct SimResult {
  int64_t busy_ns;
  int64_t wall_ns;
};

SimResult Simulate(int percent, int64_t kernel_ns, int64_t wall_ns, bool sync_each) {
  TokenBucketParams p = TokenBucketParams::ForPercent(percent);
  TokenBucketState s;
  int64_t now = 0;
  int64_t device_tail = 0;
  int64_t busy = 0;
  struct Pending {
    int64_t done_at;
    int64_t charged;
  };
  std::vector<Pending> pending;
  while (now < wall_ns) {
    // Harvest completed launches.
    auto done = std::remove_if(pending.begin(), pending.end(), [&](const Pending& x) {
      if (x.done_at > now) {
        return false;
      }
      Settle(s, p, 0, x.charged, kernel_ns);
      return true;
    });
    pending.erase(done, pending.end());
    int64_t charged = 0;
    int64_t wait = Admit(s, p, now, 0, &charged);
    if (wait > 0) {
      now += std::min<int64_t>(wait, 2 * kMs);
      continue;
    }
    int64_t start = std::max(now, device_tail);
    device_tail = start + kernel_ns;
    if (device_tail <= wall_ns) {
      busy += kernel_ns;
    } else if (start < wall_ns) {
      busy += wall_ns - start;
    }
    pending.push_back({device_tail, charged});
    now += 5'000;  // Host cost of one launch.
    if (sync_each) {
      now = std::max(now, device_tail);
    }
  }
  return {busy, wall_ns};
}

TEST(ThrottleTest, SimulatedShareIsACeilingAcrossKernelSizes) {
  const int64_t wall = 2'000 * kMs;
  for (int percent : {10, 25, 50}) {
    for (int64_t kernel : {int64_t{10000}, 1 * kMs, 50 * kMs}) {
      SCOPED_TRACE(testing::Message() << percent << "% kernel " << kernel << " ns");
      SimResult r = Simulate(percent, kernel, wall, false);
      TokenBucketParams p = TokenBucketParams::ForPercent(percent);
      double share = static_cast<double>(r.busy_ns) / static_cast<double>(r.wall_ns);
      double ceiling =
          (p.share * static_cast<double>(wall) + static_cast<double>(p.capacity_ns + kernel)) /
          static_cast<double>(wall);
      EXPECT_LE(share, ceiling);
      // A saturating launcher gets close to its share (within 5 points).
      EXPECT_GE(share, p.share - 0.05);
    }
  }
}

TEST(ThrottleTest, SyncAfterEachLaunchBelowShareIsNotThrottled) {
  // 1 ms kernels with a 1 ms host gap use 50% on their own; a 75% cap must
  // not slow them.
  const int64_t wall = 1'000 * kMs;
  TokenBucketParams p = TokenBucketParams::ForPercent(75);
  TokenBucketState s;
  int64_t now = 0;
  int waited = 0;
  while (now < wall) {
    int64_t charged = 0;
    if (Admit(s, p, now, 0, &charged) > 0) {
      ++waited;
    }
    now += 1 * kMs;  // Kernel, synchronised.
    Settle(s, p, 0, charged, 1 * kMs);
    now += 1 * kMs;  // Host work.
  }
  EXPECT_EQ(waited, 0);
}

}  // namespace
}  // namespace accelpool::cuda
