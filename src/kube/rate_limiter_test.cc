#include "kube/rate_limiter.h"

#include <gtest/gtest.h>

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

TEST(BackoffTest, DoublesUpToTheCap) {
  Backoff b(100ms, 500ms);
  EXPECT_EQ(b.Next(), 100ms);
  EXPECT_EQ(b.Next(), 200ms);
  EXPECT_EQ(b.Next(), 400ms);
  EXPECT_EQ(b.Next(), 500ms);
  EXPECT_EQ(b.Next(), 500ms);
  b.Reset();
  EXPECT_EQ(b.Next(), 100ms);
}

// With jitter, each wait is the plain one stretched by [1, 1 + jitter), and
// two backoffs do not wait alike (thousands of plugins retrying in step).
TEST(BackoffTest, JitterStretchesEachWaitWithinItsFactor) {
  Backoff b(1000ms, 4000ms, 1.0);
  const std::chrono::milliseconds plain[] = {1000ms, 2000ms, 4000ms, 4000ms};
  for (auto want : plain) {
    const auto got = b.Next();
    EXPECT_GE(got, want);
    EXPECT_LT(got, 2 * want);
  }
  std::set<int64_t> firsts;
  for (int i = 0; i < 20; ++i) firsts.insert(Backoff(1000ms, 4000ms, 1.0).Next().count());
  EXPECT_GT(firsts.size(), 1u);
  EXPECT_EQ(Jittered(0ms, 1.0), 0ms);
  EXPECT_EQ(Jittered(300000ms, 0), 300000ms);
  for (int i = 0; i < 50; ++i) {
    const auto t = Jittered(300000ms, 1.0);
    EXPECT_GE(t, 300000ms);
    EXPECT_LT(t, 600000ms);
  }
}

}  // namespace
}  // namespace accelpool::kube
