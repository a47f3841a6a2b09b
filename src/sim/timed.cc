#include "sim/timed.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

namespace accelpool::sim {
namespace {

struct Event {
  int64_t time;
  bool arrival;  // departures sort first at equal times
  int32_t pod;
};

// Deleted the second it was created (deletion_time 0 means not deleted).
bool StaysNoTime(const TracePod& p) {
  return p.deletion_time > 0 && p.deletion_time == p.creation_time;
}

}  // namespace

StatusOr<TimedResult> RunTimed(const TraceInput& in, const std::string& policy, TieMode mode,
                               uint64_t seed, int32_t extender_weight) {
  ReplayOptions opt;
  opt.seed = seed;
  opt.mode = mode;
  opt.extender_weight = extender_weight;
  return RunTimed(in, policy, opt);
}

StatusOr<TimedResult> RunTimed(const TraceInput& in, const std::string& policy,
                               const ReplayOptions& opt, const Progress& progress) {
  StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy(policy);
  if (!p.ok()) return p.status();
  const Cluster& c = in.cluster;
  std::vector<Event> events;
  for (size_t i = 0; i < in.pods.size(); ++i) {
    const TracePod& pod = in.pods[i];
    if (!pod.has_times) {
      if (pod.has_creation_column != pod.has_deletion_column) {
        const std::string missing = pod.has_creation_column ? "deletion_time" : "creation_time";
        return FailedPreconditionError(
            "trace " + in.name + " has " +
            (pod.has_creation_column ? "creation_time" : "deletion_time") + " but no " + missing +
            " column; the time-based mode needs both: add " + missing +
            (missing == "deletion_time" ? " (empty for a pod that never leaves)" : ""));
      }
      return FailedPreconditionError("trace " + in.name +
                                     " has no creation_time/deletion_time columns; the time-based "
                                     "mode needs them (the multigpu lists have none)");
    }
    events.push_back({pod.creation_time, true, static_cast<int32_t>(i)});
    // A pod deleted the second it was created leaves with its arrival (below).
    if (pod.deletion_time > pod.creation_time) {
      events.push_back({pod.deletion_time, false, static_cast<int32_t>(i)});
    }
  }
  ACCELPOOL_RETURN_IF_ERROR(CheckTraceHasGpuPods(in));
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    return !a.arrival && b.arrival;
  });
  NodePicker picker(c, **p, opt);
  std::vector<SimNode> nodes = c.nodes;
  std::vector<double> node_frag(nodes.size());
  double frag_sum = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    node_frag[i] = picker.frag().Get(nodes[i]);
    frag_sum += node_frag[i];
  }
  struct Held {
    size_t node = SIZE_MAX;
    uint32_t mask = 0;
  };
  std::vector<Held> held(in.pods.size());
  TimedResult r;
  r.mode = opt.mode;
  r.seed = opt.seed;
  r.cpu_pods = EffectiveCpuPods(opt.cpu_pods, opt.mode);
  if (opt.mode == TieMode::kKube) r.idle_node_penalty = opt.penalties.idle_node;
  r.pods = static_cast<int64_t>(in.pods.size());
  const double cap = static_cast<double>(c.gpu_milli);
  int64_t allocated = 0, running = 0;
  const size_t stride = std::max<size_t>(1, events.size() / 1000);
  double weighted = 0;
  int64_t t0 = events.empty() ? 0 : events.front().time, last_t = t0;
  for (size_t k = 0; k < events.size(); ++k) {
    const Event& e = events[k];
    weighted += static_cast<double>(allocated) * static_cast<double>(e.time - last_t);
    last_t = e.time;
    const size_t sid = static_cast<size_t>(c.pod_shape[static_cast<size_t>(e.pod)]);
    const PodShape& shape = c.shapes[sid];
    Held& h = held[static_cast<size_t>(e.pod)];
    size_t touched = SIZE_MAX;
    if (e.arrival) {
      uint32_t mask = 0;
      const size_t best = picker.Pick(nodes, sid, &mask);
      if (best == nodes.size()) {
        ++r.failed_pods;
        r.failed_gpu_milli += shape.GpuMilli();
      } else if (StaysNoTime(in.pods[static_cast<size_t>(e.pod)])) {
        ++r.zero_stay_pods;  // placed and gone at once: holds nothing over time
      } else {
        Place(&nodes[best], shape, mask);
        h = Held{best, mask};
        allocated += shape.GpuMilli();
        ++running;
        touched = best;
      }
    } else if (h.node != SIZE_MAX) {
      Remove(&nodes[h.node], shape, h.mask);
      allocated -= shape.GpuMilli();
      --running;
      touched = h.node;
      h = Held{};
    }
    if (touched != SIZE_MAX) {
      const double f = picker.frag().Get(nodes[touched]);
      frag_sum += f - node_frag[touched];
      node_frag[touched] = f;
    }
    const double pct = 100.0 * static_cast<double>(allocated) / cap;
    r.peak_allocated_pct = std::max(r.peak_allocated_pct, pct);
    if (k % stride == 0 || k + 1 == events.size()) {
      r.samples.push_back({e.time, pct, 100.0 * frag_sum / cap, running, r.failed_pods});
    }
    if (progress && ((k + 1) % stride == 0 || k + 1 == events.size())) {
      progress(k + 1, events.size());
    }
  }
  if (last_t > t0) r.mean_allocated_pct = 100.0 * weighted / cap / static_cast<double>(last_t - t0);
  return r;
}

Status WriteTimed(const std::string& trace, const std::string& policy, const TimedResult& r,
                  const std::string& dir, bool json) {
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
    const std::string path = dir + "/timed-" + trace + "-" + policy + ".csv";
    std::ofstream f(path);
    if (!f) return InternalError("cannot write " + path + "; check permissions");
    f << "time_s,allocated_pct,frag_pct,running_pods,failed_pods\n";
    for (const TimedPoint& p : r.samples) {
      f << p.time << "," << p.allocated_pct << "," << p.frag_pct << "," << p.running << ","
        << p.failed << "\n";
    }
  }
  if (json) {
    nlohmann::json j = {
        {"trace", trace},
        {"policy", policy},
        {"mode", "timed"},
        {"tie_mode", std::string(ModeName(r.mode))},
        {"seed", r.seed},
        {"cpu_pods", std::string(CpuPodsName(r.cpu_pods))},
        {"idle_node_penalty",
         r.idle_node_penalty ? nlohmann::json(*r.idle_node_penalty) : nlohmann::json(nullptr)},
        {"pods", r.pods},
        {"failed_pods", r.failed_pods},
        {"failed_gpus", static_cast<double>(r.failed_gpu_milli) / 1000.0},
        {"zero_stay_pods", r.zero_stay_pods},
        {"mean_allocated_pct", r.mean_allocated_pct},
        {"peak_allocated_pct", r.peak_allocated_pct}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf(
        "%-12s %-11s timed  %s seed=%llu mean_alloc=%.2f%% peak_alloc=%.2f%% "
        "failed_pods=%lld failed_gpus=%.1f\n",
        trace.c_str(), policy.c_str(), std::string(ModeName(r.mode)).c_str(),
        static_cast<unsigned long long>(r.seed), r.mean_allocated_pct, r.peak_allocated_pct,
        static_cast<long long>(r.failed_pods), static_cast<double>(r.failed_gpu_milli) / 1000.0);
  }
  return Status::Ok();
}

}  // namespace accelpool::sim
