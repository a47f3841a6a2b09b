// Runs the kubectl accelpool fuzz entry point over its seeds (and their
// prefixes), so the normal test suite walks the paths
// the fuzzer starts from.
#include "common/corpus_replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "ctl/cluster_view.h"
#include "ctl/fuzz/fuzz_entry.h"

namespace accelpool::ctl::fuzz {
namespace {

TEST(CtlSeedsTest, EverySeedIsReportedAndExplained) {
  const accelpool::testing::ReplayedSeeds s = accelpool::testing::ReplayCorpus(
      std::filesystem::path(ACCELPOOL_CTL_CORPUS_DIR) / "explain", &FuzzClusterReports, 97);
  EXPECT_EQ(s.files, 3);
  EXPECT_EQ(s.accepted, 3) << "cluster, ascend and odd_shapes each hold a pod that explain answers";
}

// What the main seed is: a cluster where explain reaches the planner on one
// node and each other node is turned away for a different reason.
TEST(CtlSeedsTest, TheClusterSeedIsExplainedNodeByNode) {
  std::ifstream in(std::filesystem::path(ACCELPOOL_CTL_CORPUS_DIR) / "explain" / "cluster.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  const std::vector<nlohmann::json> nodes(doc["nodes"].begin(), doc["nodes"].end());
  const std::vector<nlohmann::json> pods(doc["pods"].begin(), doc["pods"].end());
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects(nodes, pods);
  const NamespaceLabels ns = {{"ml", {{"team", "a"}}}};
  ExplainInputs inputs;
  inputs.ns_labels = &ns;
  StatusOr<Report> r = ExplainReport(*view, doc["pod"], doc["policy"], inputs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->json["fits"].size(), 1u) << r->text;
  EXPECT_NE(r->json["fits"].dump().find("gpu-0"), std::string::npos) << r->text;
  const nlohmann::json& why = r->json["rejected"];
  EXPECT_NE(why["gpu-1"]["reason"].get<std::string>().find("anti-affinity"), std::string::npos);
  EXPECT_NE(why["gpu-2"]["reason"].get<std::string>().find("cordoned"), std::string::npos);
  EXPECT_NE(why["npu-0"]["reason"].get<std::string>().find("nodeSelector"), std::string::npos);
  EXPECT_NE(why["bad-0"]["reason"].get<std::string>().find("advertises none"), std::string::npos);
  // gpu-1's 20 GiB held outside accelpool keep one of its GPUs from whole pods.
  EXPECT_NE(NodesReport(*view).text.find("gpu-1"), std::string::npos);
  StatusOr<Report> gpu1 = NodeReport(*view, "gpu-1");
  ASSERT_TRUE(gpu1.ok());
  EXPECT_NE(gpu1->text.find("foreign"), std::string::npos) << gpu1->text;
}

}  // namespace
}  // namespace accelpool::ctl::fuzz
