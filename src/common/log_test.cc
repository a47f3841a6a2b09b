#include "common/log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <memory>
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

// Library code (the vendor backends) writes through spdlog's default logger:
// routed to a Logger, its lines take that logger's level and JSON format.
TEST(LogTest, TheDefaultLoggerFollowsTheRoutedLoggersLevelAndFormat) {
  auto lines = std::make_shared<std::vector<std::string>>();
  LogOptions opts;
  opts.level = "warn";
  opts.sink = [lines](std::string_view l) { lines->emplace_back(l); };
  auto root = NewLogger("accelpool-device-plugin", opts);
  ASSERT_TRUE(root.ok());
  RouteDefaultLogTo(root->Child("vendor"));
  spdlog::info("nvidia: GPU {} found", 0);
  spdlog::warn("nvidia: GPU {} is unhealthy: {}", 1, "XID 79");
  spdlog::error("fake backend: \"{}\" does not parse", "inv.json");
  RouteDefaultLogToStderr();  // the sink above goes with this test
  ASSERT_EQ(lines->size(), 2u) << "info is below warn";
  const auto warn = nlohmann::json::parse((*lines)[0]);
  EXPECT_EQ(warn["level"], "warn");
  EXPECT_EQ(warn["component"], "accelpool-device-plugin.vendor");
  EXPECT_EQ(warn["msg"], "nvidia: GPU 1 is unhealthy: XID 79");
  const auto error = nlohmann::json::parse((*lines)[1]);
  EXPECT_EQ(error["level"], "error");
  EXPECT_EQ(error["msg"], "fake backend: \"inv.json\" does not parse");
}

TEST(LogTest, FormatIsStable) {
  EXPECT_EQ(FormatLogLine(1700000000123, LogLevel::kWarn, "plugin", "x", {{"a", "b\tc"}}),
            "{\"ts\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warn\",\"component\":\"plugin\","
            "\"msg\":\"x\",\"a\":\"b\\tc\"}");
}

// Bytes that are not UTF-8 become U+FFFD, so every line stays JSON; UTF-8
// passes as it is.
TEST(LogTest, BytesThatAreNotUtf8AreReplaced) {
  const std::string bad[] = {
      "\xff",              // never in UTF-8
      "ab\xc3",            // cut before its continuation byte
      "\xc0\xaf",          // overlong '/'
      "\xed\xa0\x80",      // a surrogate
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\x80",              // a continuation byte alone
  };
  for (const std::string& b : bad) {
    const std::string line = FormatLogLine(0, LogLevel::kInfo, "c", b, {{"f", b}});
    EXPECT_NE(line.find("\\ufffd"), std::string::npos) << line;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_NO_THROW((void)j.dump()) << line;
  }
  const std::string good = "gpu \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  const std::string line = FormatLogLine(0, LogLevel::kInfo, "c", good, {});
  EXPECT_EQ(nlohmann::json::parse(line)["msg"], good);
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
