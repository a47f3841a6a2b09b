#include "common/strings.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace accelpool {
namespace {

TEST(StrJoinTest, PutsTheSeparatorBetweenParts) {
  EXPECT_EQ(StrJoin(std::vector<std::string>{}, ","), "");
  EXPECT_EQ(StrJoin(std::vector<std::string>{"a"}, ","), "a");
  EXPECT_EQ(StrJoin(std::vector<std::string>{"a", "", "c"}, ", "), "a, , c");
  EXPECT_EQ(StrJoin(std::set<std::string>{"b", "a"}, "|"), "a|b");
}

TEST(JsonNestingDepthTest, CountsBracketsOutsideStrings) {
  EXPECT_EQ(JsonNestingDepth(""), 0);
  EXPECT_EQ(JsonNestingDepth("1"), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a":[1,{"b":[]}]})"), 4);
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[[\"{{"})"), 1);  // inside a string, escaped quote
  EXPECT_EQ(JsonNestingDepth(std::string(100000, '[') + std::string(100000, ']')), 100000);
}

}  // namespace
}  // namespace accelpool
