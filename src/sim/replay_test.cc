#include "sim/replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "core/node_order.h"
#include "core/rank.h"
#include "sim/cli.h"
#include "sim/experiment.h"
#include "sim/output.h"
#include "sim/timed.h"

namespace accelpool::sim {
namespace {

struct Slice {
  std::vector<TracePod> pods;
  Cluster cluster;
};

const Slice& TestSlice() {
  static const Slice* slice = [] {
    auto* s = new Slice;
    const std::string dir = ACCELPOOL_SIM_TESTDATA;
    StatusOr<std::vector<TraceNode>> nodes = LoadNodeCsv(dir + "/nodes.csv");
    StatusOr<std::vector<TracePod>> pods = LoadPodCsv(dir + "/pods.csv");
    EXPECT_TRUE(nodes.ok() && pods.ok());
    s->pods = *pods;
    StatusOr<Cluster> c = BuildCluster(*nodes, s->pods);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    s->cluster = *c;
    return s;
  }();
  return *slice;
}

TEST(ArrivalOrderTest, SeededShuffleAndInflation) {
  const Slice& s = TestSlice();
  const std::vector<int32_t> a = ArrivalOrder(s.pods, s.cluster, 42, 1.3);
  const std::vector<int32_t> b = ArrivalOrder(s.pods, s.cluster, 42, 1.3);
  const std::vector<int32_t> other = ArrivalOrder(s.pods, s.cluster, 43, 1.3);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  int64_t total = 0;
  for (int32_t i : a) total += s.cluster.pod_gpu[static_cast<size_t>(i)];
  const double target = 1.3 * static_cast<double>(s.cluster.gpu_milli);
  EXPECT_LE(static_cast<double>(total), target);
  EXPECT_GT(static_cast<double>(total), target - 8000);  // stops at the first clone that would pass
  // The originals all come first, each once.
  std::map<int32_t, int> seen;
  for (size_t k = 0; k < s.pods.size(); ++k) ++seen[a[k]];
  EXPECT_EQ(seen.size(), s.pods.size());
  // Without inflation the trace order is a permutation.
  EXPECT_EQ(ArrivalOrder(s.pods, s.cluster, 42, 0).size(), s.pods.size());
  // A target below the trace's request drops pods.
  EXPECT_LT(ArrivalOrder(s.pods, s.cluster, 42, 0.5).size(), s.pods.size());
}

TEST(ArrivalOrderTest, CpuOnlyPodsAreNotInflatedForever) {
  // No pod asks for a GPU: no clone brings the request nearer the target.
  std::vector<TracePod> pods(3);
  for (size_t i = 0; i < pods.size(); ++i) pods[i].name = "cpu-" + std::to_string(i);
  StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 8, "T4"}}, pods);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(ArrivalOrder(pods, *c, 42, 1.3).size(), pods.size());
}

TEST(BuildClusterTest, NodeModelsPastTheMaskAreRefused) {
  // Model ids are bits of a 64-bit mask: a node model id of 64 or more
  // cannot be tested against a pod's mask.
  std::vector<TraceNode> nodes;
  for (int i = 0; i < 70; ++i) {
    nodes.push_back(TraceNode{"n" + std::to_string(i), 64000, 262144, 1, "M" + std::to_string(i)});
  }
  TracePod pod;
  pod.name = "p";
  pod.num_gpu = 1;
  pod.gpu_milli = 1000;
  const StatusOr<Cluster> c = BuildCluster(nodes, {pod});
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  nodes.resize(63);
  EXPECT_TRUE(BuildCluster(nodes, {pod}).ok());
}

TEST(ReplayTest, EveryPolicyAndModeKeepsTheBooks) {
  const Slice& s = TestSlice();
  const std::vector<int32_t> order = ArrivalOrder(s.pods, s.cluster, 42, 1.3);
  for (const std::string& name : SimPolicyNames()) {
    StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy(name);
    ASSERT_TRUE(p.ok());
    for (TieMode mode : {TieMode::kPaper, TieMode::kKube, TieMode::kStock}) {
      ReplayOptions opt;
      opt.mode = mode;
      const ReplayResult r = Replay(s.cluster, order, **p, opt);
      ASSERT_EQ(r.curve.size(), order.size()) << name;
      float last_arrived = 0;
      for (const StepPoint& pt : r.curve) {
        EXPECT_GE(pt.arrived_pct, last_arrived);
        EXPECT_LE(pt.allocated_pct, pt.arrived_pct + 1e-3);
        EXPECT_LE(pt.allocated_pct, 100.0f + 1e-3f);
        last_arrived = pt.arrived_pct;
      }
      EXPECT_NEAR(r.curve.back().arrived_pct, 130.0, 1.5) << name;
      ASSERT_TRUE(r.unallocated_at_100.has_value()) << name;
      EXPECT_GE(*r.unallocated_at_100, 0) << name;
      EXPECT_LT(*r.unallocated_at_100, 60) << name;
      EXPECT_GT(r.failed_pods, 0) << name;  // 130 % cannot all fit
      EXPECT_GE(r.first_failure_arrived_pct, 0) << name;
      // Deterministic for a seed.
      const ReplayResult again = Replay(s.cluster, order, **p, opt);
      EXPECT_EQ(again.unallocated_at_100, r.unallocated_at_100) << name;
    }
  }
}

TEST(ReplayTest, FragmentationAwarePoliciesBeatRandomOnTheSlice) {
  const Slice& s = TestSlice();
  TraceInput in{"slice", s.pods, s.cluster};
  ExperimentSpec spec;
  spec.policies = {"random", "fgd", "accelpool"};
  spec.modes = {TieMode::kPaper};
  spec.seeds = {42, 43, 44};
  spec.jobs = 2;
  size_t calls = 0;
  StatusOr<std::vector<Summary>> out =
      RunExperiments({in}, spec, [&](size_t done, size_t total) {
        ++calls;
        EXPECT_LE(done, total);
      });
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ(calls, 9u);
  const Summary& random = (*out)[0];
  EXPECT_EQ(random.unallocated.size(), 3u);
  EXPECT_FALSE(random.curve.empty());
  ASSERT_TRUE(random.unallocated_mean.has_value());
  ASSERT_TRUE((*out)[1].unallocated_mean.has_value());
  ASSERT_TRUE((*out)[2].unallocated_mean.has_value());
  EXPECT_LT(*(*out)[1].unallocated_mean, *random.unallocated_mean);
  EXPECT_LT(*(*out)[2].unallocated_mean, *random.unallocated_mean);
}

// The KPI is read at 100 % arrived. Arrivals that stop short of it (an
// inflation below the trace's reach) have no value there: it is unset, not
// the last pod's value carried on, and the outputs say so.
TEST(ReplayTest, UnallocatedAt100IsUnsetWhenArrivalsStopShort) {
  const Slice& s = TestSlice();
  StatusOr<std::unique_ptr<SimPolicy>> fgd = MakeSimPolicy("fgd");
  ASSERT_TRUE(fgd.ok());
  const ReplayResult full = Replay(s.cluster, ArrivalOrder(s.pods, s.cluster, 42, 1.3), **fgd, {});
  EXPECT_TRUE(full.unallocated_at_100.has_value());
  EXPECT_TRUE(full.frag_at_100.has_value());
  const ReplayResult part = Replay(s.cluster, ArrivalOrder(s.pods, s.cluster, 42, 0.5), **fgd, {});
  ASSERT_FALSE(part.curve.empty());
  EXPECT_LT(part.curve.back().arrived_pct, 100.0f);
  EXPECT_FALSE(part.unallocated_at_100.has_value());
  EXPECT_FALSE(part.frag_at_100.has_value());

  TraceInput in{"slice", s.pods, s.cluster};
  ExperimentSpec spec;
  spec.policies = {"fgd"};
  spec.modes = {TieMode::kPaper};
  spec.seeds = {42, 43};
  spec.inflation = 0.5;
  StatusOr<std::vector<Summary>> out = RunExperiments({in}, spec, Progress());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 1u);
  const Summary& sum = (*out)[0];
  EXPECT_FALSE(sum.unallocated_mean.has_value());
  EXPECT_FALSE(sum.unallocated_sd.has_value());
  EXPECT_FALSE(sum.frag_mean.has_value());
  ASSERT_EQ(sum.unallocated.size(), 2u);
  EXPECT_FALSE(sum.unallocated[0].has_value());
  EXPECT_LT(sum.arrived_pct_end, 100);
  EXPECT_GT(sum.arrived_pct_end, 0);
  const nlohmann::json j = SummariesJson(*out);
  EXPECT_TRUE(j[0]["unallocated_pct_at_100"]["mean"].is_null()) << j.dump();
  EXPECT_TRUE(j[0]["unallocated_pct_at_100"]["sd"].is_null()) << j.dump();
  EXPECT_TRUE(j[0]["unallocated_pct_at_100"]["per_seed"][0].is_null()) << j.dump();
  EXPECT_TRUE(j[0]["frag_pct_at_100"].is_null()) << j.dump();
  const std::string table = SummaryTable(*out);
  EXPECT_NE(table.find("stopped short of 100 %"), std::string::npos) << table;
  EXPECT_EQ(table.find("nan"), std::string::npos) << table;

  // The protocol's inflation reaches 100 %: every figure is there.
  spec.inflation = 1.3;
  out = RunExperiments({in}, spec, Progress());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE((*out)[0].unallocated_mean.has_value());
  EXPECT_TRUE((*out)[0].frag_mean.has_value());
  EXPECT_GT((*out)[0].arrived_pct_end, 100);
  EXPECT_EQ(SummaryTable(*out).find("stopped short"), std::string::npos);
}

// A pod list with no pod that asks for a GPU (only its header, or only CPU
// pods) has no GPU figure to give: refused, not reported as 100 % unallocated.
TEST(ReplayTest, ATraceWithoutGpuPodsIsRefused) {
  const Slice& s = TestSlice();
  std::vector<TracePod> cpu_only;
  for (const TracePod& p : s.pods) {
    if (p.num_gpu == 0) cpu_only.push_back(p);
  }
  ASSERT_FALSE(cpu_only.empty());
  ExperimentSpec spec;
  spec.policies = {"fgd"};
  spec.modes = {TieMode::kPaper};
  spec.seeds = {42};
  for (const std::vector<TracePod>& pods : {cpu_only, std::vector<TracePod>{}}) {
    StatusOr<Cluster> c = BuildCluster({TraceNode{"n", 64000, 262144, 8, "T4"}}, pods);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const TraceInput in{"cpu", pods, *c};
    const Status st = CheckTraceHasGpuPods(in);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("trace \"cpu\" has no pod"), std::string::npos) << st.message();
    StatusOr<std::vector<Summary>> out = RunExperiments({in}, spec, Progress());
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    StatusOr<TimedResult> timed = RunTimed(in, "fgd", TieMode::kKube, 42, 10);
    ASSERT_FALSE(timed.ok());
    EXPECT_EQ(timed.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(CheckTraceHasGpuPods(TraceInput{"slice", s.pods, s.cluster}).ok());
}

TEST(ReplayTest, TheExtenderVariantsWithFullInformationAreThePoliciesThemselves) {
  // accelpool-extender and fgd-extender differ from accelpool and FGD only in
  // what they know: given the trace's workload and the host, every decision
  // is the same; with the shipped extender's inputs they decide otherwise.
  const Slice& s = TestSlice();
  const std::vector<int32_t> order = ArrivalOrder(s.pods, s.cluster, 42, 1.3);
  for (const auto& [full, ext] :
       {std::pair<std::string, std::string>{"accelpool", "accelpool-extender"},
        {"fgd", "fgd-extender"}}) {
    SCOPED_TRACE(ext);
    StatusOr<std::unique_ptr<SimPolicy>> a = MakeSimPolicy(full);
    StatusOr<std::unique_ptr<SimPolicy>> b = MakeSimPolicy(ext);
    ASSERT_TRUE(a.ok() && b.ok());
    ReplayOptions opt;
    opt.mode = TieMode::kKube;
    const ReplayResult want = Replay(s.cluster, order, **a, opt);
    opt.extender.workload = ExtenderWorkload::kTrace;
    opt.extender.host = true;
    const ReplayResult same = Replay(s.cluster, order, **b, opt);
    ASSERT_EQ(same.curve.size(), want.curve.size());
    for (size_t i = 0; i < want.curve.size(); ++i) {
      ASSERT_EQ(same.curve[i].allocated_pct, want.curve[i].allocated_pct) << "pod " << i;
    }
    opt.extender.workload = ExtenderWorkload::kBuiltin;
    opt.extender.host = false;
    const ReplayResult blind = Replay(s.cluster, order, **b, opt);
    bool differs = false;
    for (size_t i = 0; i < want.curve.size(); ++i) {
      differs = differs || blind.curve[i].allocated_pct != want.curve[i].allocated_pct;
    }
    EXPECT_TRUE(differs) << "the built-in workload without the host changed no decision";
  }
}

TEST(ReplayTest, TheLearnedWorkloadIsRebuiltAsPodsArriveAndDecides) {
  // The shipped extender learns the workload from the pods it sees arrive:
  // the picker rebuilds its task list every `refresh` arrivals once the
  // learner has min_arrivals, and those rebuilds change decisions against
  // the built-in mix.
  const Slice& s = TestSlice();
  const std::vector<int32_t> order = ArrivalOrder(s.pods, s.cluster, 42, 1.3);
  StatusOr<std::unique_ptr<SimPolicy>> ext = MakeSimPolicy("accelpool-extender");
  ASSERT_TRUE(ext.ok());
  ReplayOptions opt;
  opt.mode = TieMode::kKube;
  opt.extender.refresh = 8;
  opt.extender.learner.min_arrivals = 16;
  NodePicker picker(s.cluster, **ext, opt);
  std::vector<SimNode> nodes = s.cluster.nodes;
  for (int32_t pod : order) {
    uint32_t mask = 0;
    const size_t sid = static_cast<size_t>(s.cluster.pod_shape[static_cast<size_t>(pod)]);
    const size_t at = picker.Pick(nodes, sid, &mask);
    if (at < nodes.size()) Place(&nodes[at], s.cluster.shapes[sid], mask);
  }
  // Rebuilds at arrivals 16, 24, 32, ...: one per 8 from the 16th on.
  EXPECT_EQ(picker.workload_rebuilds(), static_cast<int64_t>(order.size() / 8) - 1);
  const ReplayResult learned = Replay(s.cluster, order, **ext, opt);
  opt.extender.workload = ExtenderWorkload::kBuiltin;
  const ReplayResult builtin = Replay(s.cluster, order, **ext, opt);
  bool differs = false;
  for (size_t i = 0; i < learned.curve.size(); ++i) {
    differs = differs || learned.curve[i].allocated_pct != builtin.curve[i].allocated_pct;
  }
  EXPECT_TRUE(differs) << "the learned workload changed no decision";
  // Policies that do not score with the extender's view learn nothing.
  StatusOr<std::unique_ptr<SimPolicy>> fgd = MakeSimPolicy("fgd");
  NodePicker other(s.cluster, **fgd, opt);
  uint32_t mask = 0;
  for (int32_t pod : order) {
    other.Pick(nodes, static_cast<size_t>(s.cluster.pod_shape[static_cast<size_t>(pod)]), &mask);
  }
  EXPECT_EQ(other.workload_rebuilds(), 0);
}

TEST(ReplayTest, KubeModePicksTheNodeTheExtenderRuleRanksFirst) {
  // The kube mode's one-pass pick must be the node core::Rank (the rule
  // extender::RankNodes runs) puts first, penalty included, in every state.
  const Slice& s = TestSlice();
  const Cluster& c = s.cluster;
  const std::vector<int32_t> order = ArrivalOrder(s.pods, c, 42, 1.3);
  struct Case {
    const char* policy;
    core::RankPenalties penalties;
  };
  const Case cases[] = {{"accelpool", {15, 10}}, {"accelpool", {0, 10}}, {"fgd", {15, 10}},
                        {"bestfit", {40, 10}}};
  for (const Case& tc : cases) {
    SCOPED_TRACE(std::string(tc.policy) + " penalty " + std::to_string(tc.penalties.idle_node));
    StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy(tc.policy);
    ASSERT_TRUE(p.ok());
    ReplayOptions opt;
    opt.mode = TieMode::kKube;
    opt.seed = 7;
    opt.penalties = tc.penalties;
    opt.cpu_pods = CpuPods::kPolicy;  // every pod through the extender's rule
    NodePicker picker(c, **p, opt);
    FragCache frag(&c.tasks);
    FragCache memory_frag(&c.memory_tasks, true, core::HostTaskRule::kHostShare);
    std::mt19937_64 rng(1);
    EvalContext ctx{&c, &frag, &memory_frag, nullptr, nullptr, &rng};
    std::vector<SimNode> nodes = c.nodes;
    int checked = 0, penalised = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t sid = static_cast<size_t>(c.pod_shape[static_cast<size_t>(order[k])]);
      const PodShape& shape = c.shapes[sid];
      uint32_t mask = 0;
      const size_t got = picker.Pick(nodes, sid, &mask);
      std::vector<core::RankCandidate> cands;
      std::vector<size_t> index;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!Fits(nodes[i], shape)) continue;
        core::RankCandidate rc;
        rc.node = c.node_names[i];
        rc.policy_score = (*p)->Evaluate(nodes[i], shape, ctx).score;
        rc.pod_devices = shape.num_gpu;
        rc.node_devices = nodes[i].gpus;
        rc.node_idle = nodes[i].FullyFree() == nodes[i].gpus;
        rc.order = core::StableNodeOrder(opt.seed, c.node_names[i]);
        penalised += rc.node_idle && rc.pod_devices > 0 && rc.pod_devices < rc.node_devices;
        cands.push_back(rc);
        index.push_back(i);
      }
      if (cands.empty()) {
        EXPECT_EQ(got, nodes.size());
        continue;
      }
      const std::vector<core::RankedNode> ranked = core::Rank(cands, tc.penalties);
      ASSERT_EQ(got, index[ranked.front().index]) << "pod " << k;
      ++checked;
      Place(&nodes[got], shape, mask);
    }
    EXPECT_GT(checked, 100);
    EXPECT_GT(penalised, 0);  // the penalty was in play
  }
}

// In a cluster a pod that asks for no GPU never reaches the extender: the
// kube and stock modes place it by kube-scheduler's default scores
// (LeastAllocated + BalancedAllocation on CPU and memory), whatever the
// policy; the paper's mode keeps the policy for every pod.
TEST(ReplayTest, PodsAskingForNoGpuArePlacedByTheDefaultScheduler) {
  const Slice& s = TestSlice();
  const Cluster& c = s.cluster;
  const std::vector<int32_t> order = ArrivalOrder(s.pods, c, 42, 1.3);
  auto default_score = [](const SimNode& n, const PodShape& p) {
    const double cpu = static_cast<double>(n.cpu_cap - n.cpu_free + p.cpu) / n.cpu_cap;
    const double mem = static_cast<double>(n.mem_cap - n.mem_free + p.mem) / n.mem_cap;
    const int64_t least =
        ((n.cpu_free - p.cpu) * 100 / n.cpu_cap + (n.mem_free - p.mem) * 100 / n.mem_cap) / 2;
    return least +
           static_cast<int64_t>((1 - std::abs(std::min(1.0, cpu) - std::min(1.0, mem)) / 2) * 100);
  };
  for (const TieMode mode : {TieMode::kKube, TieMode::kStock}) {
    StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy("accelpool");
    ASSERT_TRUE(p.ok());
    ReplayOptions opt;
    opt.mode = mode;
    opt.seed = 7;
    opt.cpu_pods = CpuPods::kDefaultScheduler;
    NodePicker picker(c, **p, opt);
    std::vector<SimNode> nodes = c.nodes;
    int cpu_only = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t sid = static_cast<size_t>(c.pod_shape[static_cast<size_t>(order[k])]);
      const PodShape& shape = c.shapes[sid];
      uint32_t mask = 0;
      const size_t got = picker.Pick(nodes, sid, &mask);
      if (got == nodes.size()) continue;
      if (shape.num_gpu == 0) {
        ++cpu_only;
        EXPECT_EQ(mask, 0u);
        int64_t best = -1;
        for (const SimNode& n : nodes) {
          if (Fits(n, shape)) best = std::max(best, default_score(n, shape));
        }
        EXPECT_EQ(default_score(nodes[got], shape), best) << "pod " << k;
      }
      Place(&nodes[got], shape, mask);
    }
    EXPECT_GT(cpu_only, 10);
  }
}

// With the chart's host-pod route a pod that asks for no GPU goes to the
// host-pod profile: the extender scores it without the packing step, and
// core::Rank with RankRule::tied_best gives every node with the best combined
// score 10; kube-scheduler picks among them (the trace's pods have none of the
// preferences the profile's remaining scores weigh). The kube mode's
// CpuPods::kExtender places each such pod on one of those nodes, and not
// always the first of the stable order.
TEST(ReplayTest, PodsAskingForNoGpuGoWhereTheHostPodProfileRanksThemFirst) {
  const Slice& s = TestSlice();
  const Cluster& c = s.cluster;
  const std::vector<int32_t> order = ArrivalOrder(s.pods, c, 42, 1.3);
  StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy("accelpool");
  ASSERT_TRUE(p.ok());
  ReplayOptions opt;
  opt.mode = TieMode::kKube;
  opt.seed = 7;
  opt.cpu_pods = CpuPods::kExtender;
  NodePicker picker(c, **p, opt);
  FragCache frag(&c.tasks);
  FragCache memory_frag(&c.memory_tasks, true, core::HostTaskRule::kHostShare);
  std::mt19937_64 rng(1);
  EvalContext ctx{&c, &frag, &memory_frag, nullptr, nullptr, &rng};
  ctx.host_only_scores = true;
  EvalContext packing_ctx = ctx;
  packing_ctx.host_only_scores = false;
  std::vector<SimNode> nodes = c.nodes;
  int cpu_only = 0, tied = 0, not_first = 0, pack_differs = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t sid = static_cast<size_t>(c.pod_shape[static_cast<size_t>(order[k])]);
    const PodShape& shape = c.shapes[sid];
    uint32_t mask = 0;
    const size_t got = picker.Pick(nodes, sid, &mask);
    if (got == nodes.size()) continue;
    if (shape.num_gpu == 0) {
      ++cpu_only;
      EXPECT_EQ(mask, 0u);
      std::vector<core::RankCandidate> cands;
      std::vector<size_t> index;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!Fits(nodes[i], shape)) continue;
        core::RankCandidate rc;
        rc.node = c.node_names[i];
        rc.policy_score = (*p)->Evaluate(nodes[i], shape, ctx).score;
        pack_differs += rc.policy_score != (*p)->Evaluate(nodes[i], shape, packing_ctx).score;
        rc.order = core::StableNodeOrder(opt.seed, c.node_names[i]);
        cands.push_back(rc);
        index.push_back(i);
      }
      const std::vector<core::RankedNode> ranked =
          core::Rank(cands, core::RankRule{opt.penalties, /*tied_best=*/true});
      int64_t best_total = -1, got_total = -1;
      size_t tens = 0;
      for (const core::RankedNode& r : ranked) {
        const int64_t total = r.score * 10 * opt.extender_weight;
        best_total = std::max(best_total, total);
        if (index[r.index] == got) got_total = total;
        tens += r.score == core::kMaxRankScore;
      }
      EXPECT_EQ(got_total, best_total) << "pod " << k;
      tied += tens > 1;
      not_first += index[ranked.front().index] != got;
    }
    Place(&nodes[got], shape, mask);
  }
  EXPECT_GT(cpu_only, 10);
  EXPECT_GT(tied, 0);
  EXPECT_GT(not_first, 0);
  EXPECT_GT(pack_differs, 0);  // the packing step would have been in play
}

TEST(TimedTest, ArrivalsAndDeparturesBalance) {
  const Slice& s = TestSlice();
  TraceInput in{"slice", s.pods, s.cluster};
  StatusOr<TimedResult> r = RunTimed(in, "accelpool", TieMode::kKube, 42, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->samples.empty());
  EXPECT_GT(r->peak_allocated_pct, 0);
  EXPECT_LE(r->peak_allocated_pct, 100);
  EXPECT_GE(r->mean_allocated_pct, 0);
  EXPECT_LE(r->mean_allocated_pct, r->peak_allocated_pct);
  for (const TimedPoint& p : r->samples) EXPECT_GE(p.running, 0);
  // Every pod arrives once, refusals only add up, and once the last pod has
  // left nothing runs and nothing is held.
  EXPECT_EQ(r->pods, static_cast<int64_t>(s.pods.size()));
  for (size_t i = 1; i < r->samples.size(); ++i) {
    EXPECT_GE(r->samples[i].failed, r->samples[i - 1].failed) << i;
  }
  EXPECT_EQ(r->samples.back().failed, r->failed_pods);
  EXPECT_EQ(r->samples.back().running, 0);
  EXPECT_DOUBLE_EQ(r->samples.back().allocated_pct, 0);

  TraceInput no_times = in;
  for (TracePod& p : no_times.pods) p.has_times = false;
  StatusOr<TimedResult> bad = RunTimed(no_times, "fgd", TieMode::kPaper, 42, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
}

TEST(CliTest, SeedsAndNames) {
  StatusOr<std::vector<uint64_t>> s = ParseSeeds("42-44,50");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<uint64_t>{42, 43, 44, 50}));
  EXPECT_FALSE(ParseSeeds("9-3").ok());
  EXPECT_FALSE(ParseSeeds("x").ok());
  // A range that ends at the largest seed stops there.
  s = ParseSeeds("9223372036854775806-9223372036854775807");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<uint64_t>{9223372036854775806ULL, 9223372036854775807ULL}));
  EXPECT_EQ(TraceNameOf("a/b/openb_pod_list_gpushare40.csv"), "gpushare40");
  EXPECT_EQ(TraceNameOf("mine.csv"), "mine");
}

TEST(CliTest, ExtenderInputsAreChosenByFlags) {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"accelpool-sim", "--nodes", "n.csv", "--pods", "p.csv", "--policy",
                               "accelpool-extender"});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseCli(static_cast<int>(argv.size()), argv.data());
  };
  StatusOr<CliOptions> o = parse({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->extender.workload, ExtenderWorkload::kLearned);  // as shipped
  EXPECT_TRUE(o->extender.host);
  EXPECT_EQ(o->extender.refresh, 64);
  EXPECT_EQ(o->policies, (std::vector<std::string>{"accelpool-extender"}));
  o = parse({"--extender-workload", "trace", "--extender-host", "off", "--extender-refresh", "8"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->extender.workload, ExtenderWorkload::kTrace);
  EXPECT_FALSE(o->extender.host);
  EXPECT_EQ(o->extender.refresh, 8);
  o = parse({"--extender-workload", "builtin"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->extender.workload, ExtenderWorkload::kBuiltin);
  o = parse({"--extender-host", "maybe"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("off or on"), std::string::npos);
  o = parse({"--extender-workload", "guessed"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("learned, builtin or trace"), std::string::npos);
  EXPECT_FALSE(parse({"--extender-refresh", "0"}).ok());
}

StatusOr<CliOptions> ParseArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "accelpool-sim");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseCli(static_cast<int>(argv.size()), argv.data());
}

// --timed replays one seed in one tie mode and takes the trace's own pods:
// the flags it cannot honour are refused rather than ignored, and those it
// can (weight, penalty, CPU pods, extender inputs) reach its replay.
TEST(CliTest, TimedRefusesTheFlagsItDoesNotHonour) {
  const std::vector<std::string> base = {"--nodes", "n.csv", "--pods", "p.csv", "--timed"};
  auto parse = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return ParseArgs(args);
  };
  struct Case {
    std::vector<std::string> flags;
    std::string want;
  };
  const std::vector<Case> refused = {
      {{"--mode", "both"}, "--timed replays in one tie mode"},
      {{"--mode", "all"}, "--mode both and all do not apply"},
      {{"--seeds", "1-3"}, "--timed replays one seed in time order"},
      {{"--seeds", "42,43"}, "give one, e.g. --seed 42"},
      {{"--inflation", "1.3"}, "--inflation does not apply"},
      {{"--jobs", "2"}, "--jobs does not apply"},
  };
  for (const Case& c : refused) {
    StatusOr<CliOptions> o = parse(c.flags);
    ASSERT_FALSE(o.ok()) << c.flags[0] << " " << c.flags[1];
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(c.want), std::string::npos) << o.status().message();
    // Flags before --timed are refused alike.
    std::vector<std::string> before = c.flags;
    before.insert(before.end(), base.begin(), base.end());
    EXPECT_FALSE(ParseArgs(before).ok()) << c.flags[0];
    // Without --timed they are fine.
    std::vector<std::string> untimed = {"--nodes", "n.csv", "--pods", "p.csv"};
    untimed.insert(untimed.end(), c.flags.begin(), c.flags.end());
    EXPECT_TRUE(ParseArgs(untimed).ok()) << c.flags[0];
  }

  // Without --seeds: seed 42, the first of the default list, alone.
  StatusOr<CliOptions> o = parse({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->seeds, (std::vector<uint64_t>{42}));
  ReplayOptions opt = TimedReplayOptions(*o);
  EXPECT_EQ(opt.seed, 42u);
  EXPECT_EQ(opt.mode, TieMode::kPaper);

  o = parse({"--mode", "kube", "--seed", "7", "--idle-node-penalty", "15", "--cpu-pods",
             "default-scheduler", "--policy", "accelpool-extender", "--extender-workload",
             "builtin", "--extender-host", "off", "--extender-refresh", "8", "--extender-shapes",
             "16"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  opt = TimedReplayOptions(*o);
  EXPECT_EQ(opt.seed, 7u);
  EXPECT_EQ(opt.mode, TieMode::kKube);
  EXPECT_EQ(opt.penalties.idle_node, 15);
  EXPECT_EQ(opt.cpu_pods, CpuPods::kDefaultScheduler);
  EXPECT_EQ(opt.extender.workload, ExtenderWorkload::kBuiltin);
  EXPECT_FALSE(opt.extender.host);
  EXPECT_EQ(opt.extender.refresh, 8);
  EXPECT_EQ(opt.extender.learner.max_shapes, 16u);
}

// Output rows are labelled, and files named, by trace name and policy: two
// pod lists with one name, a policy named twice or none at all are refused.
TEST(CliTest, DuplicateTraceNamesAndPoliciesAreRefused) {
  StatusOr<CliOptions> o = ParseArgs({"--nodes", "n.csv", "--pods", "a/x.csv,b/x.csv"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("a/x.csv and b/x.csv both give the trace name \"x\""),
            std::string::npos)
      << o.status().message();
  EXPECT_NE(o.status().message().find("rename one of the files"), std::string::npos);
  // The openb_pod_list_ prefix is not part of the name.
  EXPECT_FALSE(
      ParseArgs({"--nodes", "n.csv", "--pods", "a/openb_pod_list_x.csv", "--pods", "b/x.csv"})
          .ok());
  EXPECT_FALSE(ParseArgs({"--nodes", "n.csv", "--pods", "a/openb_pod_list_.csv"}).ok());
  EXPECT_TRUE(ParseArgs({"--nodes", "n.csv", "--pods", "a/x.csv,a/y.csv"}).ok());

  o = ParseArgs({"--nodes", "n.csv", "--pods", "p.csv", "--policy", "fgd,accelpool,fgd"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--policy names fgd twice"), std::string::npos)
      << o.status().message();
  for (const char* empty : {"", ","}) {
    o = ParseArgs({"--nodes", "n.csv", "--pods", "p.csv", "--policy", empty});
    ASSERT_FALSE(o.ok()) << empty;
    EXPECT_NE(o.status().message().find("--policy is empty"), std::string::npos)
        << o.status().message();
  }
  o = ParseArgs({"--nodes", "n.csv", "--pods", "p.csv", "--policy", "fgd,accelpool"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->policies, (std::vector<std::string>{"fgd", "accelpool"}));
}

// The score memo is bounded: a trace of many distinct pod shapes (200,000
// here, on 1,213 nodes: 5.8 GB as one slot per pair) gets at most
// max_memo_slots slots, shared by hash, and still places pods.
TEST(NodePickerTest, ScoreMemoStaysBoundedWithManyShapes) {
  Cluster c;
  const size_t n_nodes = 1213, n_shapes = 200000;
  for (size_t i = 0; i < n_nodes; ++i) {
    SimNode n;
    n.cpu_cap = n.cpu_free = 96000;
    n.mem_cap = n.mem_free = 786432;
    n.gpus = 8;
    n.model_id = 0;
    for (int32_t g = 0; g < n.gpus; ++g) n.free[static_cast<size_t>(g)] = kMilli;
    c.nodes.push_back(n);
    c.node_names.push_back("node-" + std::to_string(i));
    c.gpu_milli += 8 * kMilli;
  }
  c.models = {"V100M16"};
  for (size_t k = 0; k < n_shapes; ++k) {
    PodShape p;
    p.cpu = static_cast<int64_t>(k % 96000) + 1;
    p.mem = static_cast<int64_t>(k / 96000) + 1;
    p.num_gpu = 1;
    p.milli = 500;
    p.tag = Tag::kShare;
    c.shapes.push_back(p);
  }
  StatusOr<std::unique_ptr<SimPolicy>> bestfit = MakeSimPolicy("bestfit");
  ASSERT_TRUE(bestfit.ok());
  ReplayOptions opt;
  NodePicker picker(c, **bestfit, opt);
  EXPECT_GT(picker.memo_slots(), 0u);
  EXPECT_LE(picker.memo_slots(), opt.max_memo_slots);
  EXPECT_LE(picker.memo_slots() * 24, size_t{32} << 20);  // bytes, at the default
  std::vector<SimNode> nodes = c.nodes;
  uint32_t mask = 0;
  for (size_t sid : {size_t{0}, n_shapes - 1, n_shapes / 2}) {
    const size_t best = picker.Pick(nodes, sid, &mask);
    ASSERT_LT(best, n_nodes) << sid;
    Place(&nodes[best], c.shapes[sid], mask);
  }
  // A trace small enough keeps one slot per pair.
  c.shapes.resize(100);
  NodePicker small(c, **bestfit, opt);
  EXPECT_EQ(small.memo_slots(), n_nodes * 100);
}

// Slots shared by hash give the same placements as one slot per pair, and
// as no memo at all.
TEST(NodePickerTest, SharedMemoSlotsPlaceAsOneSlotPerPair) {
  const Slice& s = TestSlice();
  for (const char* name : {"fgd", "accelpool", "bestfit"}) {
    StatusOr<std::unique_ptr<SimPolicy>> policy = MakeSimPolicy(name);
    ASSERT_TRUE(policy.ok());
    for (TieMode mode : {TieMode::kPaper, TieMode::kKube}) {
      ReplayOptions opt;
      opt.mode = mode;
      const std::vector<int32_t> order = ArrivalOrder(s.pods, s.cluster, 42, 1.3);
      const ReplayResult full = Replay(s.cluster, order, **policy, opt);
      for (size_t slots : {size_t{0}, size_t{1}, size_t{61}}) {
        opt.max_memo_slots = slots;
        const ReplayResult shared = Replay(s.cluster, order, **policy, opt);
        ASSERT_EQ(shared.curve.size(), full.curve.size());
        EXPECT_EQ(shared.failed_pods, full.failed_pods) << name << " " << slots;
        EXPECT_EQ(shared.curve.back().allocated_pct, full.curve.back().allocated_pct)
            << name << " " << slots;
        EXPECT_EQ(shared.curve.back().frag_pct, full.curve.back().frag_pct) << name << " " << slots;
      }
    }
  }
}

TEST(CliTest, InflationMustBeANumberInRange) {
  auto parse = [](std::string value) {
    std::vector<std::string> args = {"accelpool-sim", "--nodes",     "n.csv", "--pods",
                                     "p.csv",         "--inflation", value};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseCli(static_cast<int>(argv.size()), argv.data());
  };
  StatusOr<CliOptions> o = parse("1.5");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->inflation, 1.5);
  for (const char* bad : {"nan", "NAN", "-nan", "inf", "-1", "11", "1.3x", ""}) {
    o = parse(bad);
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_NE(o.status().message().find("--inflation must be a number in 0..10"), std::string::npos)
        << o.status().message();
  }
}

}  // namespace
}  // namespace accelpool::sim
