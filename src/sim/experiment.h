// Runs the trace protocol for traces x policies x modes x seeds on a pool of
// threads and aggregates each (trace, policy, mode) over its seeds: the KPI
// (unallocated GPU % at 100 % arrived, mean and sd), the arrived % where
// requests start failing, fragmentation, and the mean curve on a fixed grid.
//
// Thread-safety: RunExperiments owns its threads; the progress callback is
// called from one thread at a time.
#ifndef ACCELPOOL_SIM_EXPERIMENT_H_
#define ACCELPOOL_SIM_EXPERIMENT_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/replay.h"

namespace accelpool::sim {

struct TraceInput {
  std::string name;  // "default", "gpushare40", ...
  std::vector<TracePod> pods;
  Cluster cluster;
};

struct ExperimentSpec {
  std::vector<std::string> policies;
  std::vector<TieMode> modes;
  std::vector<uint64_t> seeds;
  double inflation = 1.3;
  core::RankPenalties penalties;  // kube mode
  CpuPods cpu_pods = CpuPods::kPolicy;  // kube and stock modes (ReplayOptions)
  ExtenderInputs extender;        // accelpool-extender, fgd-extender
  int32_t jobs = 1;
};

// A point of the mean curve. The means are over the seeds whose arrivals
// reached arrived_pct (`seeds` of them): past the lowest end of arrivals the
// tail is the mean of fewer seeds, and the curve stops where none is left.
struct CurvePoint {
  double arrived_pct = 0;
  double unallocated_mean = 0, unallocated_sd = 0;  // 100 - allocated %, over seeds
  double frag_mean = 0;
  int32_t seeds = 0;  // seeds the point is the mean of
};

struct Summary {
  std::string trace, policy;
  TieMode mode = TieMode::kPaper;
  CpuPods cpu_pods = CpuPods::kPolicy;       // as placed in this mode (EffectiveCpuPods)
  std::optional<int32_t> idle_node_penalty;  // kube mode only; unset in the others
  // Per seed; unset for a seed whose arrivals stopped short of 100 %.
  std::vector<std::optional<double>> unallocated;
  // Unset unless every seed's arrivals reached 100 % (ReplayResult).
  std::optional<double> unallocated_mean, unallocated_sd;
  // Arrived % where refused pods reached 1 % of the cluster's GPUs, mean over
  // seeds; unset unless every seed got there (seeds_failed of them did).
  std::optional<double> first_failure_mean;
  int32_t seeds_failed = 0;
  std::optional<double> frag_mean;  // fragmentation % at 100 % arrived; unset as above
  double arrived_pct_end = 0;       // where the arrivals stopped: the lowest over seeds
  double failed_pods_mean = 0;
  double seconds_per_replay = 0;    // mean wall time of one replay
  std::vector<CurvePoint> curve;    // arrived 0..130 % in steps of 0.5
};

std::string_view ModeName(TieMode m);  // "paper", "kube", "stock"
std::string_view CpuPodsName(CpuPods c);  // "policy", "default-scheduler", "extender"

using Progress = std::function<void(size_t done, size_t total)>;

// kInvalidArgument when no pod of the trace asks for a GPU (a pod list with
// only its header, or only CPU pods): the figures are % of the cluster's GPUs.
Status CheckTraceHasGpuPods(const TraceInput& in);

// kInvalidArgument for a trace CheckTraceHasGpuPods refuses.
StatusOr<std::vector<Summary>> RunExperiments(const std::vector<TraceInput>& traces,
                                              const ExperimentSpec& spec,
                                              const Progress& progress);

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_EXPERIMENT_H_
