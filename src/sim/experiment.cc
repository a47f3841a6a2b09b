#include "sim/experiment.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <thread>

namespace accelpool::sim {
namespace {

struct Job {
  size_t trace, policy, mode, seed;
};

void MeanSd(const std::vector<double>& v, double* mean, double* sd) {
  *mean = 0;
  *sd = 0;
  if (v.empty()) return;
  for (double x : v) *mean += x;
  *mean /= static_cast<double>(v.size());
  if (v.size() < 2) return;
  double ss = 0;
  for (double x : v) ss += (x - *mean) * (x - *mean);
  *sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

std::string_view ModeName(TieMode m) {
  switch (m) {
    case TieMode::kPaper:
      return "paper";
    case TieMode::kKube:
      return "kube";
    case TieMode::kStock:
      return "stock";
  }
  return "?";
}

std::string_view CpuPodsName(CpuPods c) {
  switch (c) {
    case CpuPods::kPolicy:
      return "policy";
    case CpuPods::kDefaultScheduler:
      return "default-scheduler";
    case CpuPods::kExtender:
      return "extender";
  }
  return "?";
}

Status CheckTraceHasGpuPods(const TraceInput& in) {
  if (in.pods.empty()) {
    return InvalidArgumentError("trace \"" + in.name +
                                "\" has no pods (the pod list has only its header row); give a "
                                "pod list with pods that ask for GPUs");
  }
  for (const TracePod& p : in.pods) {
    if (PodGpuMilli(p) > 0) return Status::Ok();
  }
  return InvalidArgumentError("trace \"" + in.name +
                              "\" has no pod that asks for a GPU (num_gpu is 0 "
                              "on every row); the figures are % of the cluster's GPUs: give a "
                              "pod list with GPU pods");
}

StatusOr<std::vector<Summary>> RunExperiments(const std::vector<TraceInput>& traces,
                                              const ExperimentSpec& spec,
                                              const Progress& progress) {
  for (const TraceInput& in : traces) ACCELPOOL_RETURN_IF_ERROR(CheckTraceHasGpuPods(in));
  std::vector<std::unique_ptr<SimPolicy>> policies;
  for (const std::string& name : spec.policies) {
    StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy(name);
    if (!p.ok()) return p.status();
    policies.push_back(std::move(*p));
  }
  if (spec.seeds.empty()) return InvalidArgumentError("no seeds given; pass --seeds, e.g. 42-51");
  std::vector<Job> jobs;
  for (size_t t = 0; t < traces.size(); ++t)
    for (size_t p = 0; p < policies.size(); ++p)
      for (size_t m = 0; m < spec.modes.size(); ++m)
        for (size_t s = 0; s < spec.seeds.size(); ++s) jobs.push_back({t, p, m, s});

  std::vector<ReplayResult> results(jobs.size());
  std::vector<double> seconds(jobs.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  auto worker = [&] {
    while (true) {
      const size_t k = next.fetch_add(1);
      if (k >= jobs.size()) return;
      const Job& j = jobs[k];
      const TraceInput& in = traces[j.trace];
      const auto start = std::chrono::steady_clock::now();
      const std::vector<int32_t> order =
          ArrivalOrder(in.pods, in.cluster, spec.seeds[j.seed], spec.inflation);
      ReplayOptions opt;
      opt.seed = spec.seeds[j.seed];
      opt.inflation = spec.inflation;
      opt.mode = spec.modes[j.mode];
      opt.penalties = spec.penalties;
      opt.cpu_pods = spec.cpu_pods;
      opt.extender = spec.extender;
      results[k] = Replay(in.cluster, order, *policies[j.policy], opt);
      seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const size_t d = done.fetch_add(1) + 1;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress(d, jobs.size());
      }
    }
  };
  const int32_t n_threads = std::max(1, std::min<int32_t>(spec.jobs, static_cast<int32_t>(jobs.size())));
  std::vector<std::thread> threads;
  for (int32_t i = 1; i < n_threads; ++i) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();

  std::vector<Summary> out;
  const size_t per_group = spec.seeds.size();
  for (size_t g = 0; g * per_group < jobs.size(); ++g) {
    const Job& j0 = jobs[g * per_group];
    Summary s;
    s.trace = traces[j0.trace].name;
    s.policy = spec.policies[j0.policy];
    s.mode = spec.modes[j0.mode];
    s.cpu_pods = EffectiveCpuPods(spec.cpu_pods, s.mode);
    if (s.mode == TieMode::kKube) s.idle_node_penalty = spec.penalties.idle_node;
    std::vector<double> unallocated, fails, frags, failed_pods;
    double secs = 0;
    bool reached_100 = true;
    s.arrived_pct_end = 1e300;
    for (size_t k = g * per_group; k < (g + 1) * per_group; ++k) {
      s.unallocated.push_back(results[k].unallocated_at_100);
      s.arrived_pct_end = std::min(s.arrived_pct_end,
                                   results[k].curve.empty()
                                       ? 0.0
                                       : static_cast<double>(results[k].curve.back().arrived_pct));
      if (results[k].first_failure_arrived_pct >= 0) {
        fails.push_back(results[k].first_failure_arrived_pct);
      }
      if (results[k].unallocated_at_100 && results[k].frag_at_100) {
        unallocated.push_back(*results[k].unallocated_at_100);
        frags.push_back(*results[k].frag_at_100);
      } else {
        reached_100 = false;
      }
      failed_pods.push_back(static_cast<double>(results[k].failed_pods));
      secs += seconds[k];
    }
    double unused = 0;
    if (reached_100) {
      double mean = 0, sd = 0, frag = 0;
      MeanSd(unallocated, &mean, &sd);
      MeanSd(frags, &frag, &unused);
      s.unallocated_mean = mean;
      s.unallocated_sd = sd;
      s.frag_mean = frag;
    }
    s.seeds_failed = static_cast<int32_t>(fails.size());
    if (fails.size() == per_group) {
      double mean = 0;
      MeanSd(fails, &mean, &unused);
      s.first_failure_mean = mean;
    }
    MeanSd(failed_pods, &s.failed_pods_mean, &unused);
    s.seconds_per_replay = secs / static_cast<double>(per_group);
    for (int step = 0; step <= 260; ++step) {
      CurvePoint cp;
      cp.arrived_pct = step * 0.5;
      std::vector<double> un, fr;
      for (size_t k = g * per_group; k < (g + 1) * per_group; ++k) {
        if (results[k].curve.empty() || results[k].curve.back().arrived_pct < cp.arrived_pct) {
          continue;
        }
        un.push_back(100.0 - AllocatedAt(results[k].curve, cp.arrived_pct));
        fr.push_back(FragAt(results[k].curve, cp.arrived_pct));
      }
      if (un.empty()) break;
      MeanSd(un, &cp.unallocated_mean, &cp.unallocated_sd);
      MeanSd(fr, &cp.frag_mean, &unused);
      cp.seeds = static_cast<int32_t>(un.size());
      s.curve.push_back(cp);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace accelpool::sim
