#include "sim/timed.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace accelpool::sim {
namespace {

TracePod TimedPod(std::string name, int64_t created, int64_t deleted) {
  TracePod p;
  p.name = std::move(name);
  p.cpu_milli = 1000;
  p.memory_mib = 1024;
  p.num_gpu = 1;
  p.gpu_milli = 1000;
  p.has_times = true;
  p.creation_time = created;
  p.deletion_time = deleted;
  return p;
}

TEST(TimedTest, APodDeletedWhenCreatedStaysForNoTime) {
  // One GPU. The first pod is deleted the second it is created: it must not
  // hold the GPU for the rest of the replay and refuse the second pod.
  const std::vector<TracePod> pods = {TimedPod("a", 10, 10), TimedPod("b", 20, 30)};
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 1, "T4"}}, pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TraceInput in{"zero", pods, *c};
  for (const char* policy : {"bestfit", "fgd", "accelpool"}) {
    StatusOr<TimedResult> r = RunTimed(in, policy, TieMode::kKube, 42, 10);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->failed_pods, 0) << policy;
    EXPECT_DOUBLE_EQ(r->peak_allocated_pct, 100) << policy;
    // Nothing held over 10-20 s, the GPU over 20-30 s.
    EXPECT_DOUBLE_EQ(r->mean_allocated_pct, 50) << policy;
    ASSERT_FALSE(r->samples.empty());
    EXPECT_EQ(r->samples.back().running, 0) << policy;
    EXPECT_EQ(r->zero_stay_pods, 1) << policy;
  }
}

TEST(TimedTest, ADepartureComesBeforeAnArrivalInTheSameSecond) {
  // One GPU: "a" leaves at 20 s, when "b" arrives. The departure is replayed
  // first, so "b" finds the GPU free. "b" is listed first, so the order of
  // the pod list would put its arrival before "a"'s departure.
  const std::vector<TracePod> pods = {TimedPod("b", 20, 30), TimedPod("a", 10, 20)};
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 1, "T4"}}, pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const char* policy : {"bestfit", "fgd", "accelpool"}) {
    StatusOr<TimedResult> r = RunTimed(TraceInput{"tie", pods, *c}, policy, TieMode::kKube, 42, 10);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->failed_pods, 0) << policy;
    EXPECT_DOUBLE_EQ(r->mean_allocated_pct, 100) << policy;  // held 10-30 s without a gap
  }
}

TEST(TimedTest, APodWithoutADeletionTimeNeverLeaves) {
  const std::vector<TracePod> pods = {TimedPod("a", 10, 0), TimedPod("b", 20, 30)};
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 1, "T4"}}, pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StatusOr<TimedResult> r = RunTimed(TraceInput{"open", pods, *c}, "fgd", TieMode::kKube, 42, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failed_pods, 1);
  EXPECT_DOUBLE_EQ(r->mean_allocated_pct, 100);
}

// A long replay reports progress: events replayed so far, ending at all.
TEST(TimedTest, ProgressCountsEventsToTheEnd) {
  std::vector<TracePod> pods;
  for (int i = 0; i < 3000; ++i) {
    pods.push_back(TimedPod("p" + std::to_string(i), 10 * i, 10 * i + 5));
  }
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 1, "T4"}}, pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::pair<size_t, size_t>> calls;
  ReplayOptions opt;
  StatusOr<TimedResult> r =
      RunTimed(TraceInput{"long", pods, *c}, "fgd", opt,
               [&](size_t done, size_t total) { calls.emplace_back(done, total); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(calls.empty());
  EXPECT_LE(calls.size(), 1001u);
  EXPECT_EQ(calls.back(), (std::pair<size_t, size_t>{6000, 6000}));
  for (size_t k = 1; k < calls.size(); ++k) EXPECT_LT(calls[k - 1].first, calls[k].first);
}

// A pod list with one of the two time columns: the error names the other.
TEST(TimedTest, AMissingTimeColumnIsNamed) {
  StatusOr<std::vector<TracePod>> pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\np0,1000,1024,1,1000,10\n",
      "c.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 1, "T4"}}, *pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StatusOr<TimedResult> r = RunTimed(TraceInput{"c", *pods, *c}, "fgd", ReplayOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("has creation_time but no deletion_time column"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("add deletion_time"), std::string::npos);

  pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,deletion_time\np0,1000,1024,1,1000,10\n",
      "d.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  r = RunTimed(TraceInput{"d", *pods, *c}, "fgd", ReplayOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has deletion_time but no creation_time column"),
            std::string::npos)
      << r.status().message();
}

// Each JSON line names who placed the pods that ask for no GPU and the
// idle-node penalty, as they applied in its tie mode.
TEST(TimedTest, JsonNamesCpuPodsAndThePenalty) {
  const std::vector<TracePod> pods = {TimedPod("a", 10, 20)};
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 1, "T4"}}, pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ReplayOptions opt;
  opt.mode = TieMode::kKube;
  opt.cpu_pods = CpuPods::kDefaultScheduler;
  opt.penalties.idle_node = 15;
  StatusOr<TimedResult> r = RunTimed(TraceInput{"t", pods, *c}, "fgd", opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cpu_pods, CpuPods::kDefaultScheduler);
  EXPECT_EQ(r->idle_node_penalty, 15);
  testing::internal::CaptureStdout();
  ASSERT_TRUE(WriteTimed("t", "fgd", *r, "", true).ok());
  const std::string line = testing::internal::GetCapturedStdout();
  EXPECT_NE(line.find(R"("cpu_pods":"default-scheduler")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("idle_node_penalty":15)"), std::string::npos) << line;

  opt.mode = TieMode::kPaper;
  r = RunTimed(TraceInput{"t", pods, *c}, "fgd", opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cpu_pods, CpuPods::kPolicy);
  EXPECT_FALSE(r->idle_node_penalty.has_value());
  testing::internal::CaptureStdout();
  ASSERT_TRUE(WriteTimed("t", "fgd", *r, "", true).ok());
  EXPECT_NE(testing::internal::GetCapturedStdout().find(R"("idle_node_penalty":null)"),
            std::string::npos);
}

}  // namespace
}  // namespace accelpool::sim
