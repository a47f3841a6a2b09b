#include "common/flags.h"

#include <gtest/gtest.h>

#include <utility>

namespace accelpool {
namespace {

struct Parsed {
  std::string listen = "default", policy;
  bool quiet = false;
};

Status Parse(std::vector<const char*> args, Parsed* p) {
  args.insert(args.begin(), "prog");
  return ParseFlagTable(static_cast<int>(args.size()), args.data(),
                        {{"listen", &p->listen}, {"policy", &p->policy}}, {{"quiet", &p->quiet}});
}

TEST(FlagsTest, BothValueFormsAndBooleans) {
  Parsed p;
  ASSERT_TRUE(Parse({"--listen=:9", "--policy", "binpack", "--quiet"}, &p).ok());
  EXPECT_EQ(p.listen, ":9");
  EXPECT_EQ(p.policy, "binpack");
  EXPECT_TRUE(p.quiet);
  ASSERT_TRUE(Parse({"--quiet=false"}, &p).ok());
  EXPECT_FALSE(p.quiet);
}

TEST(FlagsTest, BadInputIsRejectedWithAReason) {
  Parsed p;
  EXPECT_EQ(Parse({"--help"}, &p).code(), StatusCode::kCancelled);
  EXPECT_NE(Parse({"stray"}, &p).message().find("unexpected argument"), std::string::npos);
  EXPECT_NE(Parse({"--nope=1"}, &p).message().find("unknown flag --nope"), std::string::npos);
  EXPECT_NE(Parse({"--policy"}, &p).message().find("needs a value"), std::string::npos);
  EXPECT_NE(Parse({"--quiet=maybe"}, &p).message().find("true or false"), std::string::npos);
}

// A value forgotten before the next flag: `--listen --quiet` would set the
// address to "--quiet" and leave quiet off.
TEST(FlagsTest, ASpaceSeparatedValueThatIsTheNextFlagIsRefused) {
  Parsed p;
  const Status st = Parse({"--listen", "--quiet"}, &p);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("flag --listen needs a value, not the next flag --quiet"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("--listen=VALUE"), std::string::npos);
  // Given with '=', a value may start with dashes; "-x" alone is a value.
  ASSERT_TRUE(Parse({"--policy=--odd", "--listen", "-1"}, &p).ok());
  EXPECT_EQ(p.policy, "--odd");
  EXPECT_EQ(p.listen, "-1");
}

TEST(FlagsTest, Durations) {
  using std::chrono::seconds;
  const std::pair<const char*, int64_t> good[] = {{"90s", 90},  {"15m", 900},     {"1h30m", 5400},
                                                  {"2h", 7200}, {"1h2m3s", 3723}, {"0s", 0}};
  for (const auto& [text, want] : good) {
    StatusOr<seconds> d = ParseDurationFlag("poll", text);
    ASSERT_TRUE(d.ok()) << text << ": " << d.status().ToString();
    EXPECT_EQ(d->count(), want) << text;
  }
  for (const char* text : {"", "10", "m", "1x", "5m1h", "1h1h", "-5s", "1.5h", "99999999999999x"}) {
    StatusOr<seconds> d = ParseDurationFlag("poll", text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_NE(d.status().message().find("--poll="), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find("like 90s"), std::string::npos);
  }
  // A duration past the one-year limit says so, not that it is no duration.
  for (const char* text : {"9000h", "10000h", "99999999999999h", "8784h1s", "527041m"}) {
    StatusOr<seconds> d = ParseDurationFlag("drain-timeout", text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_NE(d.status().message().find(std::string("--drain-timeout=") + text +
                                        " is longer than the limit of a year"),
              std::string::npos)
        << d.status().message();
    EXPECT_EQ(d.status().message().find("not a duration"), std::string::npos) << text;
  }
  StatusOr<seconds> year = ParseDurationFlag("drain-timeout", "8784h");
  ASSERT_TRUE(year.ok()) << year.status().ToString();
  EXPECT_EQ(year->count(), 8784 * 3600);
}

TEST(FlagsTest, FlagsExitPrintsUsageForHelpAndTheReasonOtherwise) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(FlagsExit(Status(StatusCode::kCancelled, ""), "prog", "usage: prog\n"), 0);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "usage: prog\n");

  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(FlagsExit(InvalidArgumentError("unknown flag --x"), "prog", "usage: prog\n"), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "prog: unknown flag --x\nusage: prog\n");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

}  // namespace
}  // namespace accelpool
