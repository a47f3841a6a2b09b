#include "sim/output.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace accelpool::sim {
namespace {

TraceInput SliceInput() {
  const std::string dir = ACCELPOOL_SIM_TESTDATA;
  StatusOr<std::vector<TraceNode>> nodes = LoadNodeCsv(dir + "/nodes.csv");
  StatusOr<std::vector<TracePod>> pods = LoadPodCsv(dir + "/pods.csv");
  EXPECT_TRUE(nodes.ok() && pods.ok());
  TraceInput in;
  in.name = "slice";
  in.pods = *pods;
  StatusOr<Cluster> c = BuildCluster(*nodes, in.pods);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  in.cluster = *c;
  return in;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Who placed the pods that ask for no GPU, and the idle-node penalty, are in
// every output row: as they applied in the row's mode (paper mode places
// every pod by the policy; the penalty is kube mode's alone).
TEST(OutputTest, RowsSayWhoPlacedCpuPodsAndThePenalty) {
  ExperimentSpec spec;
  spec.policies = {"fgd"};
  spec.modes = {TieMode::kPaper, TieMode::kKube, TieMode::kStock};
  spec.seeds = {42};
  spec.cpu_pods = CpuPods::kExtender;
  spec.penalties.idle_node = 15;
  StatusOr<std::vector<Summary>> out = RunExperiments({SliceInput()}, spec, Progress());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].cpu_pods, CpuPods::kPolicy);
  EXPECT_FALSE((*out)[0].idle_node_penalty.has_value());
  EXPECT_EQ((*out)[1].cpu_pods, CpuPods::kExtender);
  EXPECT_EQ((*out)[1].idle_node_penalty, 15);
  EXPECT_EQ((*out)[2].cpu_pods, CpuPods::kPolicy);  // stock: the host-pod profile is accelpool's
  EXPECT_FALSE((*out)[2].idle_node_penalty.has_value());

  const nlohmann::json j = SummariesJson(*out);
  EXPECT_EQ(j[0]["cpu_pods"], "policy") << j.dump();
  EXPECT_TRUE(j[0]["idle_node_penalty"].is_null()) << j.dump();
  EXPECT_EQ(j[1]["cpu_pods"], "extender") << j.dump();
  EXPECT_EQ(j[1]["idle_node_penalty"], 15) << j.dump();

  const std::string dir = testing::TempDir() + "/output_test_cpu_pods";
  ASSERT_TRUE(WriteOutputs(*out, dir).ok());
  const std::string csv = ReadAll(dir + "/summary.csv");
  std::istringstream lines(csv);
  std::string header, paper, kube;
  std::getline(lines, header);
  std::getline(lines, paper);
  std::getline(lines, kube);
  EXPECT_NE(header.find(",cpu_pods,idle_node_penalty"), std::string::npos) << header;
  EXPECT_EQ(paper.substr(paper.size() - 8), ",policy,") << paper;
  EXPECT_EQ(kube.substr(kube.size() - 12), ",extender,15") << kube;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace accelpool::sim
