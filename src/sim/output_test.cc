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
  EXPECT_NE(paper.find(",policy,,"), std::string::npos) << paper;
  EXPECT_NE(kube.find(",extender,15,"), std::string::npos) << kube;
  std::filesystem::remove_all(dir);
}

// The first-failure point is a mean over every seed or nothing: a mean over
// the seeds that failed would leave out those that never did. seeds_failed
// says how many did; each curve point says how many seeds it is the mean of.
TEST(OutputTest, FirstFailureIsUnsetUnlessEverySeedFailed) {
  ExperimentSpec spec;
  spec.policies = {"fgd"};
  spec.modes = {TieMode::kPaper};
  spec.seeds = {42, 43, 44};
  spec.inflation = 0.95;  // two of these three seeds reach 1 % refused, one does not
  const TraceInput in = SliceInput();
  StatusOr<std::vector<Summary>> out = RunExperiments({in}, spec, Progress());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const Summary& some = (*out)[0];
  EXPECT_EQ(some.seeds_failed, 2);
  EXPECT_FALSE(some.first_failure_mean.has_value());
  nlohmann::json j = SummariesJson(*out);
  EXPECT_TRUE(j[0]["first_failure_arrived_pct"].is_null()) << j.dump();
  EXPECT_EQ(j[0]["seeds_failed"], 2) << j.dump();
  EXPECT_NE(SummaryTable(*out).find("2/3 seeds"), std::string::npos) << SummaryTable(*out);

  spec.inflation = 1.3;  // every seed fails
  out = RunExperiments({in}, spec, Progress());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const Summary& all = (*out)[0];
  EXPECT_EQ(all.seeds_failed, 3);
  ASSERT_TRUE(all.first_failure_mean.has_value());
  EXPECT_GT(*all.first_failure_mean, 50);
  j = SummariesJson(*out);
  EXPECT_TRUE(j[0]["first_failure_arrived_pct"].is_number()) << j.dump();
  ASSERT_FALSE(all.curve.empty());
  for (const CurvePoint& cp : all.curve) {
    if (cp.arrived_pct <= all.arrived_pct_end) {
      EXPECT_EQ(cp.seeds, 3) << cp.arrived_pct;
    } else {
      EXPECT_GE(cp.seeds, 1) << cp.arrived_pct;
      EXPECT_LT(cp.seeds, 3) << cp.arrived_pct;
    }
  }
  const std::string dir = testing::TempDir() + "/output_test_first_failure";
  ASSERT_TRUE(WriteOutputs(*out, dir).ok());
  std::istringstream summary(ReadAll(dir + "/summary.csv"));
  std::string header, row;
  std::getline(summary, header);
  std::getline(summary, row);
  EXPECT_EQ(header.substr(header.size() - 13), ",seeds_failed") << header;
  EXPECT_EQ(row.substr(row.size() - 2), ",3") << row;
  std::istringstream curve(ReadAll(dir + "/curve-slice-paper.csv"));
  std::getline(curve, header);
  EXPECT_EQ(header, "arrived_pct,fgd_unalloc,fgd_unalloc_sd,fgd_frag,fgd_seeds");
  std::getline(curve, row);
  EXPECT_EQ(row.substr(row.size() - 2), ",3") << row;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace accelpool::sim
