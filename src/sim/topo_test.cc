#include "sim/topo.h"

#include <gtest/gtest.h>

namespace accelpool::sim {
namespace {

TEST(TopologyTest, AwarePlacementKeepsVendorRulesAndGangsTogether) {
  TopoConfig cfg;
  cfg.super_nodes = 2;
  cfg.nodes_per_super = 10;
  cfg.arrivals = 400;
  cfg.seed = 7;
  StatusOr<std::vector<TopoMetrics>> r = RunTopology(cfg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  const TopoMetrics& aware = (*r)[0];
  const TopoMetrics& blind = (*r)[1];
  EXPECT_EQ(aware.policy, "accelpool");
  EXPECT_EQ(blind.policy, "topology-blind");
  EXPECT_GT(aware.pods, 0);
  EXPECT_GT(aware.multi_card, 0);
  EXPECT_EQ(aware.violations, 0);
  EXPECT_GT(blind.violations, 0);  // stripped topology breaks 910C/ring rules
  EXPECT_LE(aware.gangs_spread, blind.gangs_spread);
  EXPECT_GT(aware.utilisation_pct, 0);
  EXPECT_LE(aware.utilisation_pct, 100);
  EXPECT_GE(aware.stranded_pct, 0);
}

TEST(TopologyTest, UnknownProfileIsAnError) {
  TopoConfig cfg;
  cfg.profiles = {"no-such-profile"};
  cfg.nodes_per_super = 2;
  cfg.super_nodes = 1;
  StatusOr<std::vector<TopoMetrics>> r = RunTopology(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no-such-profile"), std::string::npos);
}

}  // namespace
}  // namespace accelpool::sim
