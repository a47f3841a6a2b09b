// WorkloadLearner: the workload's mix of task shapes, learned from the pods
// that arrive, for the fragmentation-aware policies (PolicyContext::workload).
//
// The fragmentation measure (frag.h) weighs a node's idle devices by the
// tasks expected to come; a built-in mix (DefaultWorkload) stands in for a
// cluster's own. The learner keeps the shapes of the last `window` arrivals
// (devices, compute and memory per device, model, host CPU and memory) and
// offers the most frequent of them, by their share of those arrivals. Each
// pod counts once, when it is first seen: pods that ask for no device count
// too, since they take host CPU and memory that device tasks then lack.
//
// Example: 60 arrivals of {1 GPU, 4 cores, 16 GiB} and 40 of {0.5 GPU,
// 2 cores, 8 GiB} give the two shapes with weights 60 and 40.
//
// Thread-safety: none; the caller serialises.
#ifndef ACCELPOOL_CORE_WORKLOAD_H_
#define ACCELPOOL_CORE_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/policy.h"

namespace accelpool::core {

struct WorkloadLearnerOptions {
  size_t window = 2048;     // arrivals remembered
  size_t max_shapes = 64;   // shapes offered, the most frequent first
  size_t min_arrivals = 32; // fewer in the window: Shapes() is empty
};

// The shape a pod's request stands for: its long-running devices (regular
// containers and sidecars; the largest init container when those ask for
// none), the compute and memory per device of its first request, the model
// names it is limited to ('|'-joined; "" = any), and its host requests.
// A pod that asks for no device is a shape of count 0; so is one that asks
// only for hardware partitions (MIG instances), which take nothing from the
// whole and shared devices the fragmentation score is about.
TaskShape ShapeOfRequest(const PodRequest& request);

class WorkloadLearner {
 public:
  explicit WorkloadLearner(WorkloadLearnerOptions options = {});

  // One arrival; `shape.weight` is ignored. The oldest arrival leaves once
  // the window is full.
  void Observe(const TaskShape& shape);

  // The most frequent shapes of the window (at most max_shapes, ties by shape
  // order), weighted by their arrivals; empty while fewer than min_arrivals
  // arrivals are remembered (the policies then use DefaultWorkload()).
  std::vector<TaskShape> Shapes() const;

  // The window's arrivals, oldest first (weight 1 each), and a learner's
  // window restored from them (the newest `window` of them; Shapes() is then
  // what it was where they were taken). `observed` is carried over as given.
  // Used to keep the learned mix across restarts (extender/workload_store.h).
  std::vector<TaskShape> Arrivals() const;
  void Restore(const std::vector<TaskShape>& arrivals, uint64_t observed);

  size_t arrivals() const { return ring_.size(); }  // in the window
  uint64_t observed() const { return observed_; }   // since construction
  size_t distinct() const { return counts_.size(); }

 private:
  struct Key {
    int32_t count;
    int32_t compute;
    int64_t memory_mib;
    int64_t cpu_milli;
    int64_t host_memory_mib;
    int32_t memory_percent;
    std::string model;
    auto operator<=>(const Key&) const = default;
    TaskShape Shape(double weight) const;
  };

  const WorkloadLearnerOptions options_;
  std::map<Key, int64_t> counts_;
  std::deque<std::map<Key, int64_t>::iterator> ring_;
  uint64_t observed_ = 0;
};

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_WORKLOAD_H_
