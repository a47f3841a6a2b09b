#include "common/flags.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace accelpool
