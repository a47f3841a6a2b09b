#include "sim/topo.h"

#include <gtest/gtest.h>

namespace accelpool::sim {
namespace {

TEST(TopologyTest, AwarePlacementKeepsVendorRulesAndGangsTogether) {
  TopoConfig cfg;
  cfg.super_nodes = 2;
  cfg.nodes_per_super = 20;
  cfg.arrivals = 1000;
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
  ASSERT_TRUE(aware.stranded_pct.has_value());  // 1000 arrivals: five samples
  EXPECT_GE(*aware.stranded_pct, 0);
}

// One node of one profile, sampling the stranded share after every arrival.
TopoConfig OneNode(const std::string& profile) {
  TopoConfig cfg;
  cfg.profiles = {profile};
  cfg.super_nodes = 1;
  cfg.nodes_per_super = 1;
  cfg.sample_every = 1;
  return cfg;
}

std::vector<TopoJob> MixShapes() {
  std::vector<TopoJob> shapes;
  for (int32_t c : {1, 2, 4, 8}) shapes.push_back(TopoJob{0, 0, 0, c, 0, 0});
  shapes.push_back(TopoJob{0, 0, 0, 1, 250, 0});
  return shapes;
}

TEST(TopologyTest, TheOtherDieOfAHeldModuleIsStranded) {
  // 910C: dies 2k, 2k+1 form a module and even counts take whole modules. One
  // single-die pod leaves its module's other die free, which only another
  // single-die request could use: 1 of the 15 free dies is stranded.
  const TopoConfig cfg = OneNode("ascend-910c-x16");
  StatusOr<std::vector<TopoMetrics>> r =
      RunTopologyJobs(cfg, {TopoJob{1, 100, 0, 1, 0, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const TopoMetrics& m : *r) {
    EXPECT_EQ(m.pods, 1) << m.policy;
    EXPECT_NEAR(m.stranded_pct.value_or(-1), 100.0 / 15, 1e-9) << m.policy;
  }
  // Two single dies in one module strand nothing.
  r = RunTopologyJobs(cfg, {TopoJob{1, 100, 0, 2, 0, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ((*r)[0].stranded_pct.value_or(-1), 0);
}

TEST(TopologyTest, TheLastFreeCardOfARingIsStranded) {
  // 910A: rings {0-3} {4-7}; 2 and 4 cards stay inside one ring, 8 take both.
  // A 2-card and a single-card pod in one ring leave one card there that no
  // multi-card request can join: 1 of 5 free cards.
  const TopoConfig cfg = OneNode("ascend-910a-x8");
  StatusOr<std::vector<TopoMetrics>> r =
      RunTopologyJobs(cfg, {TopoJob{1, 100, 0, 2, 0, 0}, TopoJob{2, 100, 0, 1, 0, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TopoMetrics& aware = (*r)[0];
  EXPECT_EQ(aware.pods, 2);
  // Samples after each arrival: 0 of 6 free, then 1 of 5.
  EXPECT_NEAR(aware.stranded_pct.value_or(-1), (0 + 100.0 / 5) / 2, 1e-9);
}

TEST(TopologyTest, UtilisationCountsPodsUntilTheyLeave) {
  // 8 cards held over 1-2 s, then nothing until the last arrival at 10 s:
  // 8 device-seconds of 80.
  const TopoConfig cfg = OneNode("metax-c500-x8");
  StatusOr<std::vector<TopoMetrics>> r =
      RunTopologyJobs(cfg, {TopoJob{1, 2, 0, 8, 0, 0}, TopoJob{10, 100, 0, 1, 0, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const TopoMetrics& m : *r) EXPECT_NEAR(m.utilisation_pct, 10, 1e-9) << m.policy;
}

TEST(TopologyTest, BlindPolicySplitsA910CModule) {
  // 910C: an even count takes whole two-die modules. With one die of module
  // 0 held, accelpool gives a 2-die pod module 1 (dies 2, 3); the blind
  // policy, which does not know the modules, packs beside the held die and
  // splits a module: a vendor rule violation.
  const TopoConfig cfg = OneNode("ascend-910c-x16");
  StatusOr<std::vector<TopoMetrics>> r =
      RunTopologyJobs(cfg, {TopoJob{1, 100, 0, 1, 0, 0}, TopoJob{2, 100, 0, 2, 0, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].violations, 0);
  EXPECT_EQ((*r)[1].violations, 1);
}

TEST(TopologyTest, BlindPolicyKeepsTheSliceRules) {
  // A P800 card hosts slices of one size, and the blind policy knows it (a
  // vendor's slice rules are no topology): a quarter goes to another card
  // than the half, as accelpool's does.
  const TopoConfig cfg = OneNode("kunlunxin-p800-x8");
  StatusOr<std::vector<TopoMetrics>> r = RunTopologyJobs(
      cfg, {TopoJob{1, 100, 0, 1, 500, 0}, TopoJob{2, 100, 0, 1, 250, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const TopoMetrics& m : *r) {
    EXPECT_EQ(m.pods, 2) << m.policy;
    EXPECT_EQ(m.failed, 0) << m.policy;
    EXPECT_EQ(m.violations, 0) << m.policy;
  }
}

TEST(TopologyTest, BlindFractionalPodsTakeTheVendorTemplate) {
  // A quarter of a 910A is its 8738 MiB vir08 template with 26.7 % of the
  // compute; the blind policy grants the template too, so its fractional pods
  // break no rule.
  const TopoConfig cfg = OneNode("ascend-910a-x8");
  StatusOr<std::vector<TopoMetrics>> r = RunTopologyJobs(
      cfg, {TopoJob{1, 100, 0, 1, 250, 0}, TopoJob{2, 100, 0, 1, 500, 0}}, MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const TopoMetrics& m : *r) {
    EXPECT_EQ(m.pods, 2) << m.policy;
    EXPECT_EQ(m.violations, 0) << m.policy;
  }
}

TEST(TopologyTest, BlindPolicyPacksLikeAccelpoolWhereTopologyDoesNotMatter) {
  // Hygon K100 nodes have no groups, modules, links or count rules, and one
  // super-node leaves gangs no choice to make: the two policies see the same
  // cluster and must place every pod alike (the blind policy scores nodes as
  // accelpool does and keeps the best, rather than taking any that fits).
  TopoConfig cfg;
  cfg.profiles = {"hygon-k100-x8"};
  cfg.super_nodes = 1;
  cfg.nodes_per_super = 12;
  cfg.arrivals = 600;
  cfg.seed = 3;
  StatusOr<std::vector<TopoMetrics>> r = RunTopology(cfg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TopoMetrics& aware = (*r)[0];
  const TopoMetrics& blind = (*r)[1];
  EXPECT_GT(aware.failed, 0);  // the cluster is full at times: node choice matters
  EXPECT_GT(aware.gangs, 0);
  EXPECT_EQ(blind.pods, aware.pods);
  EXPECT_EQ(blind.gangs, aware.gangs);
  EXPECT_EQ(blind.failed, aware.failed);
  EXPECT_EQ(blind.multi_card, aware.multi_card);
  EXPECT_EQ(blind.violations, 0);
  EXPECT_DOUBLE_EQ(blind.utilisation_pct, aware.utilisation_pct);
  EXPECT_DOUBLE_EQ(blind.stranded_pct.value_or(-1), aware.stranded_pct.value_or(-2));
}

TEST(TopologyTest, BlindGangsGoToTheBestNodesOfTheWholeCluster) {
  // Two super-nodes of two K100 nodes: nodes 0 and 1 fill, node 2 takes
  // half, node 0 empties again. A gang of two half nodes: accelpool keeps it
  // inside super-node 1 (nodes 2 and 3); the blind policy, which does not
  // know the super-nodes, packs its first member onto node 2 and its second
  // onto the lowest of the empty nodes, node 0, spreading the gang.
  TopoConfig cfg;
  cfg.profiles = {"hygon-k100-x8"};
  cfg.super_nodes = 2;
  cfg.nodes_per_super = 2;
  cfg.sample_every = 1000;
  StatusOr<std::vector<TopoMetrics>> r =
      RunTopologyJobs(cfg,
                      {TopoJob{1, 3, 0, 8, 0, 0}, TopoJob{1.1, 100, 0, 8, 0, 0},
                       TopoJob{1.2, 100, 0, 4, 0, 0}, TopoJob{4, 100, 0, 4, 0, 2}},
                      MixShapes());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TopoMetrics& aware = (*r)[0];
  const TopoMetrics& blind = (*r)[1];
  EXPECT_EQ(aware.gangs, 1);
  EXPECT_EQ(blind.gangs, 1);
  EXPECT_EQ(aware.gangs_spread, 0);
  EXPECT_EQ(blind.gangs_spread, 1);
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

// Fewer arrivals than one sampling interval measure no stranded share: it
// is unset (null in the JSON), not 0.
TEST(TopologyTest, StrandedShareIsUnsetWhenNeverSampled) {
  TopoConfig cfg;
  cfg.super_nodes = 1;
  cfg.nodes_per_super = 5;
  cfg.arrivals = 150;  // sample_every is 200
  StatusOr<std::vector<TopoMetrics>> r = RunTopology(cfg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const TopoMetrics& m : *r) EXPECT_FALSE(m.stranded_pct.has_value()) << m.policy;
  TopoOptions o;
  o.super_nodes = 1;
  o.arrivals = 150;
  StatusOr<nlohmann::json> j = RunTopologyCli(o);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_TRUE((*j)[0]["stranded_free_devices_pct"].is_null()) << j->dump();
  o.arrivals = 200;
  j = RunTopologyCli(o);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_TRUE((*j)[0]["stranded_free_devices_pct"].is_number()) << j->dump();
}

// Progress counts both policies' arrivals and ends at all of them.
TEST(TopologyTest, ProgressCountsBothPoliciesArrivals) {
  TopoConfig cfg;
  cfg.super_nodes = 1;
  cfg.nodes_per_super = 5;
  cfg.arrivals = 300;
  std::vector<std::pair<size_t, size_t>> calls;
  StatusOr<std::vector<TopoMetrics>> r =
      RunTopology(cfg, [&](size_t done, size_t total) { calls.emplace_back(done, total); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), (std::pair<size_t, size_t>{600, 600}));
  for (size_t k = 1; k < calls.size(); ++k) EXPECT_LT(calls[k - 1].first, calls[k].first);
}

}  // namespace
}  // namespace accelpool::sim
