#include "vendors/discovery_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace accelpool::vendors {
namespace {

using Level = DiscoveryLog::Level;

// One discovery that finds `lines`; returns what it wrote.
std::vector<std::string> Discover(LoggedLines* last, const std::vector<std::string>& lines) {
  std::vector<std::string> written;
  {
    DiscoveryLog log(last, [&](Level, const std::string& text) { written.push_back(text); });
    for (const std::string& l : lines) {
      log.Add(Level::kInfo, l);
    }
  }
  return written;
}

TEST(DiscoveryLogTest, ALineIsWrittenWhenTheDiscoveryBeforeDidNotWriteIt) {
  LoggedLines last;
  EXPECT_EQ(
      Discover(&last, {"GPU 1 MIG device a: 1g.18gb", "GPU 1 MIG device b: 1g.18gb"}),
      (std::vector<std::string>{"GPU 1 MIG device a: 1g.18gb", "GPU 1 MIG device b: 1g.18gb"}));
  // The same node again: nothing.
  EXPECT_TRUE(
      Discover(&last, {"GPU 1 MIG device a: 1g.18gb", "GPU 1 MIG device b: 1g.18gb"}).empty());
  // A changed layout: only what is new.
  EXPECT_EQ(Discover(&last, {"GPU 1 MIG device a: 1g.18gb", "GPU 1 MIG device c: 2g.35gb"}),
            (std::vector<std::string>{"GPU 1 MIG device c: 2g.35gb"}));
  // Back to the first layout: its line that the last discovery did not write comes again.
  EXPECT_EQ(Discover(&last, {"GPU 1 MIG device a: 1g.18gb", "GPU 1 MIG device b: 1g.18gb"}),
            (std::vector<std::string>{"GPU 1 MIG device b: 1g.18gb"}));
  // A discovery that finds nothing to say forgets, so the next one says it again.
  EXPECT_TRUE(Discover(&last, {}).empty());
  EXPECT_EQ(Discover(&last, {"GPU 1 MIG device a: 1g.18gb"}).size(), 1u);
}

TEST(DiscoveryLogTest, LevelsReachTheWriter) {
  LoggedLines last;
  std::vector<Level> levels;
  {
    DiscoveryLog log(&last, [&](Level l, const std::string&) { levels.push_back(l); });
    log.Add(Level::kWarn, "no instances");
    log.Add(Level::kError, "unreadable");
  }
  EXPECT_EQ(levels, (std::vector<Level>{Level::kWarn, Level::kError}));
}

}  // namespace
}  // namespace accelpool::vendors
