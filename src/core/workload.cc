#include "core/workload.h"

#include <algorithm>
#include <utility>

namespace accelpool::core {

TaskShape ShapeOfRequest(const PodRequest& request) {
  TaskShape t;
  t.count = 0;
  t.compute = 0;
  t.cpu_milli = request.host.cpu_milli;
  t.host_memory_mib = request.host.memory_mib;
  const DeviceRequest* first = nullptr;
  int32_t running = 0, init = 0;
  for (const DeviceRequest& r : request.containers) {
    // A MIG instance comes from its own pool, never from whole or shared GPUs.
    if (r.count <= 0 || !r.partition.empty()) continue;
    if (r.kind == ContainerKind::kInit) {
      init = std::max(init, r.count);
    } else {
      running += r.count;
      if (first == nullptr) first = &r;
    }
  }
  if (first == nullptr) {
    for (const DeviceRequest& r : request.containers) {
      if (r.count > 0 && r.partition.empty() && r.count == init) first = &r;
    }
  }
  if (first == nullptr) return t;
  t.count = running > 0 ? running : init;
  if (first->Fractional()) {
    t.compute = first->compute;
    t.memory_mib = first->memory_mib;
    t.memory_percent = first->memory_percent;
  } else {
    t.compute = kComputeWhole;
  }
  for (const std::string& m : first->model_include) t.model += (t.model.empty() ? "" : "|") + m;
  return t;
}

TaskShape WorkloadLearner::Key::Shape(double weight) const {
  TaskShape t;
  t.count = count;
  t.compute = compute;
  t.memory_mib = memory_mib;
  t.model = model;
  t.cpu_milli = cpu_milli;
  t.host_memory_mib = host_memory_mib;
  t.memory_percent = memory_percent;
  t.weight = weight;
  return t;
}

WorkloadLearner::WorkloadLearner(WorkloadLearnerOptions options) : options_(options) {}

void WorkloadLearner::Observe(const TaskShape& s) {
  if (options_.window == 0) return;
  if (ring_.size() == options_.window) {
    auto oldest = ring_.front();
    ring_.pop_front();
    if (--oldest->second == 0) counts_.erase(oldest);
  }
  const Key key{s.count,           s.compute,        s.memory_mib, s.cpu_milli,
                s.host_memory_mib, s.memory_percent, s.model};
  auto [it, inserted] = counts_.try_emplace(key, 0);
  ++it->second;
  ring_.push_back(it);
  ++observed_;
}

std::vector<TaskShape> WorkloadLearner::Arrivals() const {
  std::vector<TaskShape> out;
  out.reserve(ring_.size());
  for (const auto& it : ring_) out.push_back(it->first.Shape(1.0));
  return out;
}

void WorkloadLearner::Restore(const std::vector<TaskShape>& arrivals, uint64_t observed) {
  counts_.clear();
  ring_.clear();
  const size_t skip = arrivals.size() > options_.window ? arrivals.size() - options_.window : 0;
  for (size_t i = skip; i < arrivals.size(); ++i) Observe(arrivals[i]);
  observed_ = std::max<uint64_t>(observed, ring_.size());
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
  for (const auto& [key, n] : list) out.push_back(key->Shape(static_cast<double>(n)));
  return out;
}

}  // namespace accelpool::core
