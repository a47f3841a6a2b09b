// Fit + Score of one pod against a whole cluster snapshot, reported per node.
//
//   build/bench/core/core_bench --benchmark_format=json
//
// Clusters: N nodes of 8 GPUs (HGX) or 16-die Ascend 910C, half of each
// node's devices in use (whole devices and shares mixed). Requests: one
// fractional device, one whole device, an 8-device topology request.
// The "ns_per_node" counter is the figure to compare with the targets.
//
// The baseline, measured in the same process on the same snapshot: after
// each Fit+Score pass (not timed), a walk over every node that reads what
// Fit reads first of each device (health, capacity, foreign memory, the
// usage beside it) and keeps the largest free memory, with no request and no
// placement. walk_ns_per_node is its CPU time per node, and
// ns_per_node_vs_walk Fit+Score's CPU time over the walk's (both read with
// the thread's CPU clock between the passes; the Fit+Score side also holds
// the timer's own resume and pause, microseconds against a pass of a
// millisecond or more). The ratio moves less than ns_per_node with the
// machine's speed and load; the walk is bound by memory, so it also grows
// with the cluster as the snapshot outgrows the caches.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
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

// The baseline pass: the largest free memory among the healthy, not cordoned
// devices of each node, summed over the nodes.
int64_t WalkFreeMemory(const Cluster& c) {
  int64_t sum = 0;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const std::vector<Device>& devices = c.nodes[i].devices;
    const std::vector<DeviceUsage>& used = c.usage[i].devices;
    int64_t best = 0;
    for (size_t k = 0; k < devices.size(); ++k) {
      if (devices[k].healthy && !devices[k].cordoned && !used[k].exclusive) {
        best = std::max(best, devices[k].memory_mib - devices[k].foreign_mib - used[k].memory_mib);
      }
    }
    sum += best;
  }
  return sum;
}

int64_t ThreadCpuNanos() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
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
  // CPU time of the Fit+Score passes and of the baseline walks; the clock is
  // read only while the benchmark's timer is paused.
  int64_t fit_ns = 0;
  int64_t walk_ns = 0;
  int64_t pass_start = ThreadCpuNanos();
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
    state.PauseTiming();
    const int64_t walk_start = ThreadCpuNanos();
    fit_ns += walk_start - pass_start;
    benchmark::DoNotOptimize(WalkFreeMemory(c));
    pass_start = ThreadCpuNanos();
    walk_ns += pass_start - walk_start;
    state.ResumeTiming();
  }
  state.counters["nodes"] = nodes;
  state.counters["fit_rate"] =
      static_cast<double>(fits) / (static_cast<double>(state.iterations()) * nodes);
  state.counters["ns_per_node"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * nodes,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  const double visits = static_cast<double>(state.iterations()) * nodes;
  if (walk_ns > 0) {
    state.counters["walk_ns_per_node"] = static_cast<double>(walk_ns) / visits;
    state.counters["ns_per_node_vs_walk"] =
        static_cast<double>(fit_ns) / static_cast<double>(walk_ns);
  }
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
