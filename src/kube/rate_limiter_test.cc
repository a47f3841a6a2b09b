#include "kube/rate_limiter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

namespace accelpool::kube {
namespace {

using namespace std::chrono_literals;

TEST(TokenBucketTest, BurstThenRefillAtQps) {
  auto now = std::chrono::steady_clock::time_point{} + 1h;
  TokenBucket b(10, 3, [&] { return now; });
  EXPECT_TRUE(b.TryAcquire());
  EXPECT_TRUE(b.TryAcquire());
  EXPECT_TRUE(b.TryAcquire());
  EXPECT_FALSE(b.TryAcquire());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(b.Delay()).count(), 100);
  now += 50ms;
  EXPECT_FALSE(b.TryAcquire());
  now += 50ms;
  EXPECT_TRUE(b.TryAcquire());
  now += 10s;  // refills up to the burst only
  int taken = 0;
  while (b.TryAcquire()) ++taken;
  EXPECT_EQ(taken, 3);
}

TEST(TokenBucketTest, DisabledAndStoppable) {
  TokenBucket unlimited(0, 1);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(unlimited.TryAcquire());
  TokenBucket slow(0.001, 1);
  EXPECT_TRUE(slow.Acquire());
  std::stop_source stop;
  stop.request_stop();
  EXPECT_FALSE(slow.Acquire(stop.get_token()));
}

TEST(TokenBucketTest, ARateNearZeroWaitsAtMostAnHourAndANonNumberDisablesLimiting) {
  auto now = std::chrono::steady_clock::time_point{} + 1h;
  // 1e-15 tokens a second: the next token is ~3e7 years away, which overflowed
  // the nanosecond count.
  TokenBucket tiny(1e-15, 1, [&] { return now; });
  EXPECT_TRUE(tiny.TryAcquire());
  EXPECT_EQ(tiny.Delay(), std::chrono::nanoseconds(1h));
  for (double qps : {std::nan(""), std::numeric_limits<double>::infinity(), -5.0}) {
    TokenBucket off(qps, 1, [&] { return now; });
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(off.TryAcquire()) << qps;
    EXPECT_EQ(off.Delay(), std::chrono::nanoseconds(0)) << qps;
  }
}

TEST(BackoffTest, DoublesUpToTheCap) {
  Backoff b(100ms, 500ms, /*jitter=*/0);
  EXPECT_EQ(b.Next(), 100ms);
  EXPECT_EQ(b.Next(), 200ms);
  EXPECT_EQ(b.Next(), 400ms);
  EXPECT_EQ(b.Next(), 500ms);
  EXPECT_EQ(b.Next(), 500ms);
  b.Reset();
  EXPECT_EQ(b.Next(), 100ms);
}

// With jitter each wait is stretched by a random part of up to half itself:
// never shorter, never past max * 1.5, and not the same in every loop.
TEST(BackoffTest, JitterStretchesEachWaitByUpToHalf) {
  std::set<int64_t> firsts;
  for (int i = 0; i < 50; ++i) {
    Backoff b(100ms, 400ms);
    const auto first = b.Next();
    EXPECT_GE(first, 100ms);
    EXPECT_LT(first, 150ms);
    firsts.insert(first.count());
    EXPECT_GE(b.Next(), 200ms);
    EXPECT_GE(b.Next(), 400ms);
    const auto capped = b.Next();
    EXPECT_GE(capped, 400ms);
    EXPECT_LT(capped, 600ms);
  }
  EXPECT_GT(firsts.size(), 5u);
}

}  // namespace
}  // namespace accelpool::kube
