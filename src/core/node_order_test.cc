#include "core/node_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace accelpool::core {
namespace {

TEST(StableNodeOrder, FixedPerSaltAndDifferentAcrossSalts) {
  EXPECT_EQ(StableNodeOrder(42, "node-a"), StableNodeOrder(42, "node-a"));
  EXPECT_NE(StableNodeOrder(42, "node-a"), StableNodeOrder(43, "node-a"));
  EXPECT_NE(StableNodeOrder(42, "node-a"), StableNodeOrder(42, "node-b"));
}

TEST(StableNodeOrder, IsNotAlphabeticalForSimilarNames) {
  // Similar names must not keep their alphabetical order (which would favour
  // the same nodes in every cluster).
  std::vector<std::string> names;
  for (int i = 0; i < 64; ++i) names.push_back("openb-node-" + std::to_string(1000 + i));
  std::vector<std::string> by_order = names;
  std::sort(by_order.begin(), by_order.end(), [](const std::string& a, const std::string& b) {
    return StableNodeOrder(7, a) < StableNodeOrder(7, b);
  });
  EXPECT_NE(by_order, names);
  int first_half = 0;
  for (int i = 0; i < 32; ++i) first_half += by_order[static_cast<size_t>(i)] < names[32] ? 1 : 0;
  EXPECT_GT(first_half, 8);
  EXPECT_LT(first_half, 24);
}

}  // namespace
}  // namespace accelpool::core
