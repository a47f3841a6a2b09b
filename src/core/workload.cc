#include "core/workload.h"

#include <algorithm>
#include <utility>

namespace accelpool::core {

WorkloadLearner::WorkloadLearner(WorkloadLearnerOptions options) : options_(options) {}

void WorkloadLearner::Observe(const TaskShape& s) {
  if (options_.window == 0) return;
  if (ring_.size() == options_.window) {
    auto oldest = ring_.front();
    ring_.pop_front();
    if (--oldest->second == 0) counts_.erase(oldest);
  }
  const Key key{s.count, s.compute, s.memory_mib, s.cpu_milli, s.host_memory_mib, s.model};
  auto [it, inserted] = counts_.try_emplace(key, 0);
  ++it->second;
  ring_.push_back(it);
  ++observed_;
}

std::vector<TaskShape> WorkloadLearner::Shapes() const {
  if (ring_.size() < std::max<size_t>(options_.min_arrivals, 1)) return {};
  std::vector<std::pair<const Key*, int64_t>> list;
  list.reserve(counts_.size());
  for (const auto& [key, n] : counts_) list.emplace_back(&key, n);
  // Most frequent first; equal counts keep the map's (shape) order.
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (list.size() > options_.max_shapes) list.resize(options_.max_shapes);
  std::vector<TaskShape> out;
  out.reserve(list.size());
  for (const auto& [key, n] : list) {
    TaskShape t;
    t.count = key->count;
    t.compute = key->compute;
    t.memory_mib = key->memory_mib;
    t.model = key->model;
    t.cpu_milli = key->cpu_milli;
    t.host_memory_mib = key->host_memory_mib;
    t.weight = static_cast<double>(n);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace accelpool::core
