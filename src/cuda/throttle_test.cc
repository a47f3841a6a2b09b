#include "cuda/throttle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <random>
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

// The bucket lives in the container's state dir, which outlives a node
// reboot when kubelet restarts the same pod; CLOCK_MONOTONIC starts again
// near zero. Launches must not wait for the new uptime to pass the old one.
TEST(ThrottleTest, ABucketFromBeforeARebootStartsOverInsteadOfWaitingForTheClock) {
  TokenBucketParams p = TokenBucketParams::ForPercent(25);
  TokenBucketState s;
  constexpr int64_t kDays = 5LL * 24 * 3600 * 1000 * kMs;
  Refill(s, p, kDays);
  s.tokens_ns = -kMs;  // in debt when the node went down
  int64_t charged = 0;
  // After the reboot: a moment of uptime.
  EXPECT_EQ(AdmitCost(s, p, 30'000 * kMs, 0, kMs, &charged), 0);
  EXPECT_EQ(charged, kMs);
  EXPECT_EQ(s.last_refill_ns, 30'000 * kMs);
  // And the bucket refills with the new clock from then on.
  s.tokens_ns = -kMs;
  EXPECT_GT(AdmitCost(s, p, 30'000 * kMs + kMs, 0, kMs, &charged), 0);
  EXPECT_EQ(AdmitCost(s, p, 30'000 * kMs + 10 * kMs, 0, kMs, &charged), 0);
  // Another process's refill that read the clock a little earlier (a
  // moment, not a reboot) neither adds nor restarts.
  s.tokens_ns = 0;
  Refill(s, p, 30'000 * kMs + 9 * kMs);
  EXPECT_EQ(s.tokens_ns, 0);
  EXPECT_EQ(s.last_refill_ns, 30'000 * kMs + 10 * kMs);
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

// ---- CostTable.

constexpr int64_t kUs = 1'000;

TEST(CostTableTest, NewKeyIsPricedByThePriorAndMeasuredUntilWarm) {
  CostTable t;
  LaunchKey k{0x1000, 132, 128, 0};
  for (int i = 0; i < 20; ++i) {
    CostDecision d = t.Lookup(k, false);
    EXPECT_TRUE(d.sample) << "nothing measured yet: every launch is measured, " << i;
    EXPECT_LT(d.charge_ns, 0) << "and priced by the bucket's prior";
  }
  CostDecision d = t.Lookup(k, false);
  EXPECT_EQ(t.Record(d.slot, d.tag, 100 * kUs), 100 * kUs) << "first measurement stands";
  EXPECT_EQ(t.EstimateOf(k), 100 * kUs);
  for (int i = 1; i < kWarmupMeasurements; ++i) {
    d = t.Lookup(k, false);
    EXPECT_TRUE(d.sample) << "warming up, " << i;
    EXPECT_EQ(d.charge_ns, 100 * kUs);
    t.Record(d.slot, d.tag, 100 * kUs);
  }
  EXPECT_EQ(t.IntervalOf(k), 2u) << "the interval grows from the warm window on";
  EXPECT_EQ(t.EstimateOf(LaunchKey{0x1000, 132, 64, 0}), -1) << "block size is part of the key";
  EXPECT_EQ(t.EstimateOf(LaunchKey{0x1000, 66, 128, 0}), -1) << "grid size is part of the key";
  EXPECT_EQ(t.EstimateOf(LaunchKey{0x1000, 132, 128, 1}), -1) << "kind is part of the key";
}

// A destroyed graph's handle comes back for another graph (PyTorch captures
// again on a new shape): the key starts over, priced by the prior and
// measured, and a measurement of the old graph still in flight is not taken.
TEST(CostTableTest, AForgottenKeyStartsOverAndItsPendingMeasurementsAreDropped) {
  CostTable t;
  LaunchKey graph{0x2000, 0, 0, 1};
  LaunchKey after{0x2000 + 64 * 1024, 0, 0, 1};  // Whatever the hash, a neighbour or not.
  for (int i = 0; i < kCostWindow; ++i) {
    CostDecision d = t.Lookup(graph, false);
    t.Record(d.slot, d.tag, 2 * kMs);
    CostDecision n = t.Lookup(after, false);
    t.Record(n.slot, n.tag, 3 * kMs);
  }
  CostDecision pending = t.Lookup(graph, true);
  ASSERT_EQ(t.EstimateOf(graph), 2 * kMs);
  t.Forget(graph);
  EXPECT_EQ(t.EstimateOf(graph), -1);
  EXPECT_EQ(t.EstimateOf(after), 3 * kMs) << "other keys keep their estimates";
  EXPECT_EQ(t.Record(pending.slot, pending.tag, 5 * kMs), 5 * kMs) << "settled as measured";
  EXPECT_EQ(t.EstimateOf(graph), -1) << "the old graph's launch taught the new one nothing";
  CostDecision d = t.Lookup(graph, false);
  EXPECT_TRUE(d.sample);
  EXPECT_LT(d.charge_ns, 0) << "priced by the bucket's prior, as a new key";
  t.Record(d.slot, d.tag, 20 * kMs);
  EXPECT_EQ(t.EstimateOf(graph), 20 * kMs);
  t.Forget(LaunchKey{0x9999, 0, 0, 1});  // Absent: nothing happens.
  EXPECT_EQ(t.EstimateOf(after), 3 * kMs);
}

TEST(CostTableTest, SettlesWithTheClampAndEstimatesFromTheShortestQuarter) {
  EXPECT_EQ(InflationClamp(100 * kUs), 150 * kUs);
  EXPECT_EQ(InflationClamp(1 * kUs), 3 * kUs) << "absolute slack for tiny kernels";
  CostTable t;
  LaunchKey k{0x2000, 1, 1, 0};
  CostDecision d = t.Lookup(k, false);
  EXPECT_EQ(t.Record(d.slot, d.tag, 100 * kUs), 100 * kUs);
  EXPECT_EQ(t.Record(d.slot, d.tag, 300 * kUs), 150 * kUs) << "3x inflated: settled at 1.5x";
  EXPECT_EQ(t.Record(d.slot, d.tag, 120 * kUs), 120 * kUs) << "within the clamp: as measured";
  EXPECT_EQ(t.Record(d.slot, d.tag, 110 * kUs), 110 * kUs);
  EXPECT_EQ(t.Record(d.slot, d.tag, 130 * kUs), 130 * kUs);
  // Window {100, 300, 120, 110, 130}: shortest quarter (2 values) {100, 110}.
  EXPECT_EQ(t.EstimateOf(k), 105 * kUs);
  EXPECT_EQ(t.Record(d.slot, d.tag, 80 * kUs), 80 * kUs) << "a shorter one lowers the minimum";
  // Clamp now 120: shortest quarter {80, 100}.
  EXPECT_EQ(t.EstimateOf(k), 90 * kUs);
  EXPECT_EQ(t.Record(d.slot, d.tag, -1), -1) << "unmeasured: nothing changes";
  EXPECT_EQ(t.EstimateOf(k), 90 * kUs);
}

TEST(CostTableTest, InflatedMeasurementsLeaveTheEstimate) {
  for (double fraction : {0.5, 0.7}) {
    CostTable t;
    LaunchKey k{0x3000, 132, 256, 0};
    std::mt19937_64 rng(7);
    std::bernoulli_distribution inflated(fraction);
    int64_t sum = 0;
    int n = 0;
    for (int i = 0; i < 4000; ++i) {
      CostDecision d = t.Lookup(k, true);
      t.Record(d.slot, d.tag, inflated(rng) ? 3 * kMs : 1 * kMs);
      if (i >= kCostWindow) {
        sum += t.EstimateOf(k);
        ++n;
      }
    }
    double mean = static_cast<double>(sum) / n / kMs;
    std::printf("%.0f%% of measurements 3x: mean estimate %.4f x\n", fraction * 100, mean);
    EXPECT_LE(mean, fraction <= 0.5 ? 1.01 : 1.08) << fraction;
  }
}

TEST(CostTableTest, AKernelThatGetsLongerIsPricedInFullWithinOneWindow) {
  CostTable t;
  LaunchKey k{0x4000, 264, 128, 0};
  int launches = 0;
  auto launch_and_measure = [&](int64_t ns) {
    ++launches;
    CostDecision d = t.Lookup(k, false);
    if (d.sample) {
      t.Record(d.slot, d.tag, ns);
    }
    return d.sample;
  };
  for (int i = 0; i < 1000; ++i) {
    launch_and_measure(250 * kUs);
  }
  EXPECT_EQ(t.EstimateOf(k), 250 * kUs);
  EXPECT_EQ(t.IntervalOf(k), kMaxSampleInterval[0]) << "stable: sampled 1 in 32";
  launches = 0;
  int measured = 0;
  while (t.EstimateOf(k) < 1'000 * kUs && launches < 100'000) {
    measured += launch_and_measure(1'000 * kUs) ? 1 : 0;
  }
  EXPECT_EQ(t.EstimateOf(k), 1'000 * kUs);
  EXPECT_LE(measured, kCostWindow) << "one window turnover";
  // Clamped measurements in a row shrink the interval: far fewer launches
  // than kCostWindow x 32.
  EXPECT_LE(launches, 2 * 32 + 16 + 8 + 4 + 2 + kCostWindow);
  std::printf("4x longer: priced in full after %d measurements, %d launches\n", measured,
              launches);
  // And it returns to sparse sampling.
  for (int i = 0; i < 1000; ++i) {
    launch_and_measure(1'000 * kUs);
  }
  EXPECT_EQ(t.IntervalOf(k), kMaxSampleInterval[0]);
}

TEST(CostTableTest, SamplingIsSparseOnceStableAndGraphsAreSampledMoreOften) {
  CostTable t;
  LaunchKey kernel{0x5000, 8, 32, 0};
  LaunchKey graph{0x6000, 0, 0, 1};
  int sampled[2] = {0, 0};
  const int n = 32'000;
  for (int i = 0; i < n; ++i) {
    for (const LaunchKey& k : {kernel, graph}) {
      CostDecision d = t.Lookup(k, false);
      if (d.sample) {
        ++sampled[k.kind];
        t.Record(d.slot, d.tag, 20 * kUs);
      }
    }
  }
  EXPECT_LE(sampled[0], n / 32 + 32) << "kernels: 1 in 32 after warm-up";
  EXPECT_GE(sampled[0], n / 32);
  EXPECT_LE(sampled[1], n / 4 + 32) << "graphs: 1 in 4";
  EXPECT_GE(sampled[1], n / 4);
  CostDecision forced = t.Lookup(kernel, true);
  EXPECT_TRUE(forced.sample);
}

TEST(CostTableTest, FixedSizeWithLeastRecentlyUsedEviction) {
  CostTable t;
  LaunchKey hot{0x7000, 1, 1, 0};
  CostDecision d = t.Lookup(hot, false);
  t.Record(d.slot, d.tag, 42 * kUs);
  CostDecision stale{};
  const uint64_t n = 20 * kCostTableSize;
  for (uint64_t i = 0; i < n; ++i) {
    LaunchKey cold{0x100000 + i * 64, 1, 1, 0};
    CostDecision c = t.Lookup(cold, false);
    if (i == 0) {
      stale = c;
    }
    t.Lookup(hot, false);  // Used all along: never the least recently used.
  }
  EXPECT_EQ(t.EstimateOf(hot), 42 * kUs);
  EXPECT_EQ(t.IntervalOf(LaunchKey{0x100000, 1, 1, 0}), 0u) << "long evicted";
  // A measurement that comes back for an evicted key is taken as it is and
  // does not land on the slot's new tenant.
  int64_t before[kCostTableSize];
  for (uint64_t i = n - kCostTableSize; i < n; ++i) {
    before[i % kCostTableSize] = t.EstimateOf(LaunchKey{0x100000 + i * 64, 1, 1, 0});
  }
  EXPECT_EQ(t.Record(stale.slot, stale.tag, 7 * kMs), 7 * kMs);
  for (uint64_t i = n - kCostTableSize; i < n; ++i) {
    EXPECT_EQ(t.EstimateOf(LaunchKey{0x100000 + i * 64, 1, 1, 0}), before[i % kCostTableSize]);
  }
  t.Clear();
  EXPECT_EQ(t.EstimateOf(hot), -1);
}

// The controller as the launch hooks run it: per-key decision, bucket
// admission at the key's price, measured launches settled when their end
// event completes, at most 64 measured launches outstanding. A fraction of
// launches is preceded on the device by another context's time slice of
// (factor - 1) x the kernel, which an event pair around it also measures.
struct KeyedSimResult {
  double share;
  double sampled_fraction;
};

KeyedSimResult SimulateKeyed(int percent, int64_t kernel_ns, int64_t kernel_ns_after_half,
                             int64_t wall_ns, double inflated_fraction, double factor) {
  TokenBucketParams p = TokenBucketParams::ForPercent(percent);
  TokenBucketState bucket;
  CostTable table;
  const LaunchKey key{0xabc, 132, 128, 0};
  constexpr size_t kInFlight = 64;
  std::mt19937_64 rng(1);
  std::bernoulli_distribution inflated(inflated_fraction);
  struct Pending {
    int64_t done_at;
    int64_t measured;
    int64_t charged;
    int slot;
    uint32_t tag;
  };
  std::deque<Pending> pending;
  int64_t now = 0;
  int64_t tail = 0;
  int64_t busy = 0;
  int64_t launches = 0;
  int64_t sampled = 0;
  auto harvest = [&] {
    while (!pending.empty() && pending.front().done_at <= now) {
      const Pending& x = pending.front();
      Settle(bucket, p, 0, x.charged, table.Record(x.slot, x.tag, x.measured));
      pending.pop_front();
    }
  };
  while (now < wall_ns) {
    harvest();
    if (pending.size() >= kInFlight) {
      now = pending.front().done_at;
      continue;
    }
    CostDecision d = table.Lookup(key, false);
    int64_t charged = 0;
    for (;;) {
      int64_t wait = AdmitCost(bucket, p, now, 0, d.charge_ns, &charged);
      if (wait == 0) {
        break;
      }
      now += std::min<int64_t>(wait, 2 * kMs);
      harvest();
    }
    int64_t kernel =
        now >= wall_ns / 2 && kernel_ns_after_half > 0 ? kernel_ns_after_half : kernel_ns;
    int64_t start_event = std::max(now, tail);
    int64_t foreign = inflated(rng) ? static_cast<int64_t>((factor - 1) * kernel) : 0;
    int64_t start = start_event + foreign;
    tail = start + kernel;
    busy += std::max<int64_t>(0, std::min(tail, wall_ns) - start);
    if (d.sample) {
      ++sampled;
      pending.push_back({tail, tail - start_event, charged, d.slot, d.tag});
    }
    ++launches;
    now += 5 * kUs;  // Host cost of one launch.
  }
  return {static_cast<double>(busy) / static_cast<double>(wall_ns),
          static_cast<double>(sampled) / static_cast<double>(launches)};
}

TEST(CostTableTest, SimulatedShareHoldsWhenHalfTheMeasurementsAreInflatedThreefold) {
  const int64_t wall = 30'000 * kMs;
  for (int percent : {10, 25, 50}) {
    for (int64_t kernel : {50 * kUs, 1 * kMs}) {
      SCOPED_TRACE(testing::Message() << percent << "% kernel " << kernel << " ns");
      KeyedSimResult r = SimulateKeyed(percent, kernel, 0, wall, 0.5, 3.0);
      std::printf("%d%% %lld ns, 50%% inflated 3x: share %.4f sampled %.4f\n", percent,
                  static_cast<long long>(kernel), r.share, r.sampled_fraction);  // NOLINT
      EXPECT_NEAR(r.share, percent / 100.0, 0.02);
      EXPECT_LE(r.sampled_fraction, 0.08);
    }
  }
}

TEST(CostTableTest, SimulatedShareHoldsWithSparseSampling) {
  const int64_t wall = 10'000 * kMs;
  KeyedSimResult r = SimulateKeyed(25, 20 * kUs, 0, wall, 0, 1);
  std::printf("25%% 20 us: share %.4f sampled %.4f\n", r.share, r.sampled_fraction);
  EXPECT_NEAR(r.share, 0.25, 0.02);
  EXPECT_LE(r.sampled_fraction, 1.0 / 32 + 0.005);
}

TEST(CostTableTest, SimulatedShareHoldsWhenTheKernelGetsFourTimesLonger) {
  const int64_t wall = 20'000 * kMs;
  KeyedSimResult r = SimulateKeyed(25, 250 * kUs, 1 * kMs, wall, 0, 1);
  std::printf("25%% 250 us -> 1 ms: share %.4f sampled %.4f\n", r.share, r.sampled_fraction);
  EXPECT_NEAR(r.share, 0.25, 0.02);
}

}  // namespace
}  // namespace accelpool::cuda
