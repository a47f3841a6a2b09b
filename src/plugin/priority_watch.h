// PriorityWatch: task priority between the fractional NVIDIA containers that
// share a GPU (HAMi's nvidia.com/priority: 0 high, 1 low, the default).
//
// Every poll it takes the node's allocated fractional NVIDIA containers from
// the assignment store and groups them by granted GPU. On a GPU that carries
// both priorities, it reads the launch counters the high-priority
// containers' shims keep in their priority files (cuda/priority_format.h).
// A counter that moved since the previous poll marks the GPU busy for
// `busy_for`; while it is busy, every low-priority container on it gets a
// hold deadline of now + `hold_ahead` (CLOCK_MONOTONIC) at its ordinal of
// that GPU, renewed each poll, and its shim holds its kernel launches until
// the deadline passes. Once the GPU is idle for `busy_for`, the deadlines are
// set back to 0. If the plugin stops, the last deadline lapses within
// `hold_ahead`: a low-priority container is never held for good.
//
// A held container's work already queued on the GPU runs on: a launch is
// held, not preempted. A low-priority container runs in the gaps of the
// high-priority ones; the policy suits batch or best-effort work beside
// latency-bound inference.
//
// Thread-safety: all methods may be called from any thread (one lock).
#ifndef ACCELPOOL_PLUGIN_PRIORITY_WATCH_H_
#define ACCELPOOL_PLUGIN_PRIORITY_WATCH_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <tuple>

#include "common/log.h"
#include "plugin/assignment_store.h"
#include "plugin/state_dirs.h"

namespace accelpool::plugin {

class PluginMetrics;

struct PriorityWatchOptions {
  std::chrono::milliseconds every{1000};  // poll period
  // How long after its last launch seen a high-priority container keeps its
  // GPU busy.
  std::chrono::milliseconds busy_for{5000};
  // How far ahead each written deadline lies; renewed every poll, so at
  // least a few polls.
  std::chrono::milliseconds hold_ahead{3000};
};

class PriorityWatch {
 public:
  // `dirs` must make the state dirs (the priority files live in them);
  // `metrics` may be null.
  PriorityWatch(PriorityWatchOptions options, const AssignmentStore* store, const StateDirs* dirs,
                PluginMetrics* metrics, Logger log);

  // One poll. `now` drives the busy windows; `mono_ns` is CLOCK_MONOTONIC
  // now, what the deadlines are written in.
  void Poll(std::chrono::steady_clock::time_point now, uint64_t mono_ns);

  // Polls every options.every until `stop`; on the way out, releases every
  // hold it wrote.
  void Run(std::stop_token stop);

  // Low-priority containers held now, as "<ns>/<pod>/<container>".
  std::set<std::string> Held() const;
  // How many priority files are remembered as reported unreadable (for
  // tests: only those of live containers are kept).
  size_t WarnedFiles() const;

 private:
  // One container's ordinal of one GPU.
  struct Seat {
    std::string who;        // <ns>/<pod>/<container>
    std::string state_dir;  // where its priority file is
    int ordinal = 0;
    friend bool operator<(const Seat& a, const Seat& b) {
      return std::tie(a.state_dir, a.ordinal) < std::tie(b.state_dir, b.ordinal);
    }
  };
  void Release(const Seat& seat);

  const PriorityWatchOptions options_;
  const AssignmentStore* const store_;
  const StateDirs* const dirs_;
  PluginMetrics* const metrics_;
  const Logger log_;
  mutable std::mutex mu_;            // guards the members below
  std::map<Seat, uint64_t> counts_;  // high seats: the counter at the previous poll
  std::map<std::string, std::chrono::steady_clock::time_point> busy_until_;  // by device id
  std::set<Seat> held_;           // low seats holding a deadline this watch wrote
  // Files reported unreadable, by path; only those of the containers of the
  // last poll, so that pod churn does not grow it.
  std::set<std::string> warned_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_PRIORITY_WATCH_H_
