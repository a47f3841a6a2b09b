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

}  // namespace
}  // namespace accelpool
