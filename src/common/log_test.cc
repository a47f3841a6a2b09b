#include "common/log.h"

#include <gtest/gtest.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

namespace accelpool {
namespace {

TEST(LogTest, ParseLevel) {
  struct Case {
    std::string in;
    bool ok;
    LogLevel want;
  };
  const std::vector<Case> cases = {
      {"trace", true, LogLevel::kTrace}, {"DEBUG", true, LogLevel::kDebug},
      {"info", true, LogLevel::kInfo},   {"warning", true, LogLevel::kWarn},
      {"error", true, LogLevel::kError}, {"off", true, LogLevel::kOff},
      {"loud", false, LogLevel::kInfo},  {"", false, LogLevel::kInfo},
  };
  for (const auto& c : cases) {
    auto r = ParseLogLevel(c.in);
    EXPECT_EQ(r.ok(), c.ok) << c.in;
    if (c.ok && r.ok()) {
      EXPECT_EQ(*r, c.want) << c.in;
    }
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("use one of"), std::string::npos);
    }
  }
}

TEST(LogTest, LinesAreJsonWithFields) {
  std::mutex mu;
  std::vector<std::string> lines;
  LogOptions opts;
  opts.level = "info";
  opts.sink = [&](std::string_view l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(l);
  };
  auto root = NewLogger("extender", opts);
  ASSERT_TRUE(root.ok());
  Logger log = root->Child("cache");
  log.Debug("dropped", {{"k", 1}});
  log.Info("node \"added\"\n", {{"node", "n-1"},
                                {"devices", 8},
                                {"ok", true},
                                {"ratio", 0.5},
                                {"msg", "ignored reserved key"}});
  ASSERT_EQ(lines.size(), 1u);
  auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["component"], "extender.cache");
  EXPECT_EQ(j["msg"], "node \"added\"\n");
  EXPECT_EQ(j["node"], "n-1");
  EXPECT_EQ(j["devices"], 8);
  EXPECT_EQ(j["ok"], true);
  EXPECT_DOUBLE_EQ(j["ratio"].get<double>(), 0.5);
  EXPECT_EQ(j["ts"].get<std::string>().size(), 24u);
}

TEST(LogTest, FormatIsStable) {
  EXPECT_EQ(FormatLogLine(1700000000123, LogLevel::kWarn, "plugin", "x", {{"a", "b\tc"}}),
            "{\"ts\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warn\",\"component\":\"plugin\","
            "\"msg\":\"x\",\"a\":\"b\\tc\"}");
}

TEST(LogTest, BadLevelIsAnError) {
  LogOptions opts;
  opts.level = "verbose";
  EXPECT_EQ(NewLogger("x", opts).status().code(), StatusCode::kInvalidArgument);
  Logger silent;
  silent.Error("goes nowhere");
  EXPECT_FALSE(silent.Enabled(LogLevel::kError));
}

}  // namespace
}  // namespace accelpool
