// Replay speed on the test slice and on a trace given by ACCELPOOL_SIM_NODES /
// ACCELPOOL_SIM_PODS (for example the full default trace); prints measured
// times, asserts none.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "sim/replay.h"

namespace accelpool::sim {
namespace {

struct Input {
  std::vector<TracePod> pods;
  Cluster cluster;
  bool ok = false;
};

Input Load(const std::string& nodes, const std::string& pods) {
  Input in;
  StatusOr<std::vector<TraceNode>> n = LoadNodeCsv(nodes);
  StatusOr<std::vector<TracePod>> p = LoadPodCsv(pods);
  if (!n.ok() || !p.ok()) return in;
  StatusOr<Cluster> c = BuildCluster(*n, *p);
  if (!c.ok()) return in;
  in.pods = std::move(*p);
  in.cluster = std::move(*c);
  in.ok = true;
  return in;
}

const Input& Trace() {
  static const Input in = [] {
    const char* nodes = std::getenv("ACCELPOOL_SIM_NODES");
    const char* pods = std::getenv("ACCELPOOL_SIM_PODS");
    if (nodes != nullptr && pods != nullptr) return Load(nodes, pods);
    const std::string dir = ACCELPOOL_SIM_TESTDATA;
    return Load(dir + "/nodes.csv", dir + "/pods.csv");
  }();
  return in;
}

void BM_Replay(benchmark::State& state, const char* policy, TieMode mode) {
  const Input& in = Trace();
  StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy(policy);
  if (!in.ok || !p.ok()) {
    state.SkipWithError("cannot load the trace or policy");
    return;
  }
  uint64_t seed = 42;
  int64_t failed = 0;
  for (auto _ : state) {
    const std::vector<int32_t> order = ArrivalOrder(in.pods, in.cluster, seed, 1.3);
    ReplayOptions opt;
    opt.seed = seed++;
    opt.mode = mode;
    const ReplayResult r = Replay(in.cluster, order, **p, opt);
    failed = r.failed_pods;
    benchmark::DoNotOptimize(failed);
  }
  state.counters["pods"] = static_cast<double>(in.pods.size());
  state.counters["failed_pods_last"] = static_cast<double>(failed);
}

BENCHMARK_CAPTURE(BM_Replay, bestfit_paper, "bestfit", TieMode::kPaper)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, fgd_paper, "fgd", TieMode::kPaper)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, accelpool_paper, "accelpool", TieMode::kPaper)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, accelpool_kube, "accelpool", TieMode::kKube)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, fgd_stock, "fgd", TieMode::kStock)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace accelpool::sim

BENCHMARK_MAIN();
