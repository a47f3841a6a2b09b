#include "plugin/health_events.h"

#include <gtest/gtest.h>

namespace accelpool::plugin {
namespace {

using std::chrono::seconds;

HealthNotice Notice(const std::string& device, bool healthy, const std::string& reason) {
  return HealthNotice{device, "nvidia", healthy, reason, 0};
}

TEST(HealthEventsTest, AChangeGoesOutAtOnceAndAFlappingDeviceOncePerGap) {
  HealthEvents events(seconds(60));
  const auto t0 = HealthEvents::Clock::now();
  auto first = events.Changed(Notice("GPU-a", false, "XID 48"), t0);
  ASSERT_TRUE(first.has_value());
  EXPECT_STREQ(first->EventReason(), kDeviceUnhealthyReason);
  EXPECT_EQ(first->folded, 0);
  // Another device is not held back by GPU-a's gap.
  EXPECT_TRUE(events.Changed(Notice("GPU-b", false, "XID 79"), t0 + seconds(1)).has_value());
  // GPU-a flaps inside its gap: folded, nothing due before the gap ends.
  EXPECT_FALSE(events.Changed(Notice("GPU-a", true, "recovered"), t0 + seconds(10)));
  EXPECT_FALSE(events.Changed(Notice("GPU-a", false, "XID 48"), t0 + seconds(20)));
  EXPECT_FALSE(events.Changed(Notice("GPU-a", true, "recovered"), t0 + seconds(30)));
  EXPECT_TRUE(events.Due(t0 + seconds(59)).empty());
  std::vector<HealthNotice> due = events.Due(t0 + seconds(60));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].device, "GPU-a");
  EXPECT_TRUE(due[0].healthy);
  EXPECT_STREQ(due[0].EventReason(), kDeviceHealthyReason);
  EXPECT_EQ(due[0].folded, 2);
  EXPECT_NE(due[0].Message().find("2 earlier health changes"), std::string::npos)
      << due[0].Message();
  EXPECT_TRUE(events.Due(t0 + seconds(200)).empty()) << "posted twice";
  // The folded event started a new gap.
  EXPECT_FALSE(events.Changed(Notice("GPU-a", false, "XID 48"), t0 + seconds(100)));
  // A change after the gap, before any Due(): it goes out and counts the
  // folded one.
  auto after = events.Changed(Notice("GPU-a", true, "recovered"), t0 + seconds(121));
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->healthy);
  EXPECT_EQ(after->folded, 1);
  EXPECT_TRUE(events.Due(t0 + seconds(300)).empty());
}

TEST(HealthEventsTest, AFlapThatEndsWhereTheLastEventLeftItPostsNothing) {
  HealthEvents events(seconds(60));
  const auto t0 = HealthEvents::Clock::now();
  ASSERT_TRUE(events.Changed(Notice("NPU-1", false, "alarm level 3"), t0));
  EXPECT_FALSE(events.Changed(Notice("NPU-1", true, "alarm cleared"), t0 + seconds(5)));
  EXPECT_FALSE(events.Changed(Notice("NPU-1", false, "alarm level 3"), t0 + seconds(6)));
  EXPECT_TRUE(events.Due(t0 + seconds(61)).empty());
  // And the next change after the gap goes out at once.
  auto next = events.Changed(Notice("NPU-1", true, "alarm cleared"), t0 + seconds(70));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->folded, 0);
}

TEST(HealthEventsTest, MessagesSayWhatItMeansForPods) {
  HealthNotice bad = Notice("GPU-a", false, "XID 79 (GPU has fallen off the bus)");
  EXPECT_EQ(bad.Message().rfind("device GPU-a (nvidia) is unhealthy: XID 79", 0), 0u)
      << bad.Message();
  EXPECT_NE(bad.Message().find("pods already using it keep running"), std::string::npos);
  EXPECT_EQ(bad.Message().find("folded"), std::string::npos);
  HealthNotice good = Notice("GPU-a", true, "recovered");
  EXPECT_NE(good.Message().find("is healthy again (recovered)"), std::string::npos);
}

}  // namespace
}  // namespace accelpool::plugin
