// Fit + Score of one pod against a whole cluster snapshot, reported per node.
//
//   build/bench/core/core_bench --benchmark_format=json
//
// Clusters: N nodes of 8 GPUs (HGX) or 16-die Ascend 910C, half of each
// node's devices in use (whole devices and shares mixed). Requests: one
// fractional device, one whole device, an 8-device topology request.
// The "ns_per_node" counter is the figure to compare with the targets.
#include <benchmark/benchmark.h>

#include <random>

#include "core/fit.h"
#include "core/policy.h"
#include "core/profiles.h"
#include "core/usage.h"

namespace accelpool::core {
namespace {

struct Cluster {
  std::vector<NodeInventory> nodes;
  std::vector<NodeUsage> usage;
};

Cluster MakeCluster(const std::string& profile, int nodes) {
  Cluster c;
  std::mt19937_64 rng(7);
  for (int i = 0; i < nodes; ++i) {
    NodeInventory inv = *MakeProfileNode(profile, "node-" + std::to_string(i));
    NodeUsage u = NodeUsage::Empty(inv);
    // Half the devices in use: alternate whole devices and shares.
    const size_t n = inv.devices.size();
    // A contiguous half starting at an even device keeps modules and rings
    // intact, so topology requests still fit on the other half.
    const size_t start = (static_cast<size_t>(rng() % n)) & ~static_cast<size_t>(1);
    for (size_t d = 0; d < n / 2; ++d) {
      const size_t k = (start + d) % n;
      auto& du = u.devices[k];
      if (d % 2 == 0) {
        du = {inv.devices[k].memory_mib, kComputeWhole, 1, true, 0, 0};
      } else {
        du = {inv.devices[k].memory_mib / 4, 300, 2, false, 0, 2};
      }
    }
    c.nodes.push_back(std::move(inv));
    c.usage.push_back(std::move(u));
  }
  return c;
}

PodRequest OnePod(Vendor v, int count, bool share) {
  DeviceRequest r;
  r.container = "main";
  r.vendor = v;
  r.count = count;
  if (share) {
    r.memory_mib = 4096;
    r.compute = 250;
  }
  return PodRequest{{r}, {}};
}

void RunFitScore(benchmark::State& state, const std::string& profile, int count, bool share,
                 const std::string& policy_name) {
  const int nodes = static_cast<int>(state.range(0));
  const Cluster c = MakeCluster(profile, nodes);
  const PodRequest pod = OnePod(c.nodes[0].vendor, count, share);
  auto policy = MakePolicy(policy_name);
  int64_t fits = 0;
  for (auto _ : state) {
    int64_t best = -1;
    for (size_t i = 0; i < c.nodes.size(); ++i) {
      FitResult r = Fit(pod, c.nodes[i], c.usage[i], policy->get());
      if (r.fits()) {
        best = std::max<int64_t>(best, (*policy)->NodeScore(c.nodes[i], c.usage[i], r.placement));
        ++fits;
      }
    }
    benchmark::DoNotOptimize(best);
  }
  state.counters["nodes"] = nodes;
  state.counters["fit_rate"] =
      static_cast<double>(fits) / (static_cast<double>(state.iterations()) * nodes);
  state.counters["ns_per_node"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * nodes,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_OneShareHgx(benchmark::State& s) { RunFitScore(s, "nvidia-hgx-8", 1, true, "binpack"); }
void BM_OneWholeHgx(benchmark::State& s) { RunFitScore(s, "nvidia-hgx-8", 1, false, "binpack"); }
void BM_OneShareHgxAccelpool(benchmark::State& s) {
  RunFitScore(s, "nvidia-hgx-8", 1, true, "accelpool");
}
void BM_FourWholeHgx(benchmark::State& s) { RunFitScore(s, "nvidia-hgx-8", 4, false, "topology"); }
void BM_EightDie910C(benchmark::State& s) {
  RunFitScore(s, "ascend-910c-x16", 8, false, "topology");
}
void BM_OneDie910C(benchmark::State& s) { RunFitScore(s, "ascend-910c-x16", 1, false, "binpack"); }

BENCHMARK(BM_OneShareHgx)->Arg(1250)->Arg(5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneWholeHgx)->Arg(1250)->Arg(5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneShareHgxAccelpool)->Arg(1250)->Arg(5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FourWholeHgx)->Arg(1250)->Arg(5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EightDie910C)->Arg(1250)->Arg(5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneDie910C)->Arg(1250)->Arg(5000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace accelpool::core

BENCHMARK_MAIN();
