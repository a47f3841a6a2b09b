// Time-based replay: pods arrive at their creation time and leave at their
// deletion time (trace seconds), placed by a policy under one tie mode. A pod
// that fits nowhere when it arrives is counted as failed and not retried. A
// pod deleted the second it was created must still fit, then leaves at once
// (a zero-length stay); one without a deletion time (0) never leaves.
// Reports pool utilisation over time.
//
// Thread-safety: RunTimed is reentrant.
#ifndef ACCELPOOL_SIM_TIMED_H_
#define ACCELPOOL_SIM_TIMED_H_

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/experiment.h"

namespace accelpool::sim {

struct TimedPoint {
  int64_t time = 0;          // seconds
  double allocated_pct = 0;  // GPUs held by running pods / cluster GPUs
  double frag_pct = 0;
  int64_t running = 0;
  int64_t failed = 0;  // cumulative failed pods
};

struct TimedResult {
  TieMode mode = TieMode::kPaper;  // the tie mode and seed it ran under
  uint64_t seed = 0;
  CpuPods cpu_pods = CpuPods::kPolicy;       // as placed in that mode (EffectiveCpuPods)
  std::optional<int32_t> idle_node_penalty;  // kube mode only
  std::vector<TimedPoint> samples;  // at most ~1000 points, evenly over the events
  double mean_allocated_pct = 0;    // time-weighted
  double peak_allocated_pct = 0;
  int64_t pods = 0;
  int64_t failed_pods = 0;
  int64_t failed_gpu_milli = 0;
  int64_t zero_stay_pods = 0;  // placed, deleted the second they were created
};

// kFailedPrecondition when the pod list has no creation/deletion times,
// kInvalidArgument when no pod asks for a GPU (CheckTraceHasGpuPods).
// opt.inflation is not used: the trace's own pods arrive, once each.
// `progress`, when set, is called with events (arrivals and departures)
// replayed so far, at most about 1000 times and once at the end.
StatusOr<TimedResult> RunTimed(const TraceInput& in, const std::string& policy,
                               const ReplayOptions& opt, const Progress& progress = Progress());
// The same with ReplayOptions' defaults but for the mode, seed and weight.
StatusOr<TimedResult> RunTimed(const TraceInput& in, const std::string& policy, TieMode mode,
                               uint64_t seed, int32_t extender_weight);

// Writes <dir>/timed-<trace>-<policy>.csv (when dir is set) and prints a
// summary line or JSON to stdout ("mode": "timed", "tie_mode", "seed",
// "cpu_pods" and "idle_node_penalty" (null outside kube mode) the ones it ran
// under).
Status WriteTimed(const std::string& trace, const std::string& policy, const TimedResult& r,
                  const std::string& dir, bool json);

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_TIMED_H_
