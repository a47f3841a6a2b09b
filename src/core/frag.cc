#include "core/frag.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace accelpool::core {
namespace {

// True when `model` matches one of the '|'-separated names in `spec`, as a
// request's model filter would (ModelMatches).
bool SpecMatches(std::string_view spec, std::string_view model) {
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find('|', start);
    if (end == std::string_view::npos) end = spec.size();
    if (ModelMatches(model, spec.substr(start, end - start))) return true;
    start = end + 1;
  }
  return false;
}

// The share of the node's free host a device-less task would take, 0..1;
// 1 when it does not fit or when neither CPU nor memory is tracked and asked.
double HostShare(const FragNode& node, const FragTask& t) {
  bool known = false;
  double share = 0;
  auto take = [&](int64_t want, int64_t free) {
    if (want <= 0 || free < 0) return;
    known = true;
    share = std::max(share, free == 0 ? 1.0 : static_cast<double>(want) / static_cast<double>(free));
  };
  take(t.cpu_milli, node.cpu_free_milli);
  take(t.host_memory_mib, node.host_memory_free_mib);
  return known ? std::min(share, 1.0) : 1.0;
}

}  // namespace

std::vector<FragTask> NormalizeTasks(std::vector<FragTask> tasks) {
  std::erase_if(tasks, [](const FragTask& t) { return !(t.weight > 0); });
  double sum = 0;
  for (const FragTask& t : tasks) sum += t.weight;
  for (FragTask& t : tasks) t.weight /= sum;
  return tasks;
}

int64_t IdleCompute(const FragNode& node) {
  int64_t idle = 0;
  for (int32_t f : node.free_compute) idle += f;
  return idle;
}

double NodeFragment(const FragNode& node, std::span<const FragTask> tasks, HostTaskRule rule) {
  const int64_t idle = IdleCompute(node);
  if (idle == 0) return 0;
  const size_t n = node.free_compute.size();
  const bool track_memory = node.free_memory.size() == n;
  double fragment = 0;
  for (const FragTask& t : tasks) {
    if (t.count == 0 && rule == HostTaskRule::kHostShare) {
      fragment += t.weight * HostShare(node, t) * static_cast<double>(idle);
      continue;
    }
    bool usable = t.count > 0;
    if (usable && t.model_mask != 0) {
      usable = node.model_id >= 0 && node.model_id < 64 &&
               ((t.model_mask >> node.model_id) & 1U) != 0;
    }
    if (usable && t.cpu_milli > 0 && node.cpu_free_milli >= 0) {
      usable = node.cpu_free_milli >= t.cpu_milli;
    }
    if (usable && t.host_memory_mib > 0 && node.host_memory_free_mib >= 0) {
      usable = node.host_memory_free_mib >= t.host_memory_mib;
    }
    if (!usable) {
      fragment += t.weight * static_cast<double>(idle);
      continue;
    }
    int32_t fitting = 0;
    int64_t stranded = 0;
    for (size_t i = 0; i < n; ++i) {
      const int32_t f = node.free_compute[i];
      bool fits = f >= t.compute;
      if (fits && track_memory && t.memory_mib > 0) fits = node.free_memory[i] >= t.memory_mib;
      if (fits) {
        ++fitting;
      } else {
        stranded += f;
      }
    }
    fragment += t.weight * static_cast<double>(fitting >= t.count ? stranded : idle);
  }
  return fragment;
}

int32_t FgdScore(double f_before, double f_after) {
  const double x = (f_before - f_after) / 1000.0;
  return static_cast<int32_t>(100.0 / (1.0 + std::exp(-x)));
}

const std::vector<TaskShape>& DefaultWorkload() {
  // Shares follow the arrivals of the public Alibaba GPU trace (openb):
  // mostly one whole GPU or a share of one, a few multi-GPU tasks.
  static const std::vector<TaskShape> kMix = {
      {.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 0.48},
      {.count = 1, .compute = 810, .memory_mib = 0, .model = "", .weight = 0.13},
      {.count = 1, .compute = 500, .memory_mib = 0, .model = "", .weight = 0.13},
      {.count = 1, .compute = 250, .memory_mib = 0, .model = "", .weight = 0.08},
      {.count = 2, .compute = 1000, .memory_mib = 0, .model = "", .weight = 0.02},
      {.count = 4, .compute = 1000, .memory_mib = 0, .model = "", .weight = 0.02},
      {.count = 8, .compute = 1000, .memory_mib = 0, .model = "", .weight = 0.04},
      {.count = 0, .compute = 0, .memory_mib = 0, .model = "", .weight = 0.10},
  };
  return kMix;
}

std::vector<FragTask> TasksForInventory(const std::vector<TaskShape>& workload,
                                        const NodeInventory& inv) {
  const std::vector<TaskShape>& shapes = workload.empty() ? DefaultWorkload() : workload;
  const std::string_view model = inv.devices.empty() ? std::string_view() : inv.devices[0].model;
  const int64_t device_mib = inv.devices.empty() ? 0 : inv.devices[0].memory_mib;
  std::vector<FragTask> out;
  out.reserve(shapes.size());
  for (const TaskShape& s : shapes) {
    FragTask t;
    t.count = s.count;
    t.compute = s.compute;
    t.memory_mib = s.memory_mib;
    t.cpu_milli = s.cpu_milli;
    t.host_memory_mib = s.host_memory_mib;
    t.weight = s.weight;
    if (t.memory_mib == 0 && s.memory_percent > 0 && device_mib > 0) {
      // Resolved as Fit resolves it (EffectiveMemory): rounded down, >= 1 MiB.
      t.memory_mib = std::max<int64_t>(1, device_mib * s.memory_percent / 100);
    }
    if (!s.model.empty()) t.model_mask = SpecMatches(s.model, model) ? 1U : 2U;
    out.push_back(t);
  }
  return NormalizeTasks(std::move(out));
}

int32_t AccelpoolScore(const AccelpoolInputs& in) {
  // FGD's score on the (memory-aware) measure, stretched to twice the
  // resolution over its working range 25..75, and one packing step on top:
  // at equal fragmentation growth, a node at least half full after the
  // placement wins, so new nodes are opened only when they must be.
  const int32_t fgd = FgdScore(in.f_before, in.f_after);
  double used = 0;
  if (in.node_capacity > 0) {
    used = 1.0 - static_cast<double>(in.node_idle_after) / static_cast<double>(in.node_capacity);
  }
  const int32_t pack = used >= 0.5 ? 1 : 0;
  return std::clamp(2 * (fgd - 25) + pack, 0, 100);
}

namespace {

// Free compute and memory per device after usage plus an optional placement,
// and the node's free host CPU and memory (-1: not tracked).
struct FreeView {
  std::vector<int32_t> compute;
  std::vector<int64_t> memory;
  int64_t cpu_milli = -1;
  int64_t host_memory_mib = -1;
  // Free compute no task can use, so fragment for every task: on devices at
  // their share cap (max_shares containers hold a grant) and on free hardware
  // partitions (MIG instances: Fit gives them only to a request for their
  // profile, and no task shape asks for one, see ShapeOfRequest). Those
  // devices show no free compute or memory above.
  int64_t capped = 0;
  // The part of `capped` on free partitions: idle, not in use, for the
  // packing step of the accelpool policy.
  int64_t partitioned = 0;
};

// Fills *v (reusing its storage: the policies score thousands of candidates
// per filter call, and this runs for each).
void FreeAfter(const NodeInventory& inv, const NodeUsage& usage, const Placement* placement,
               FreeView* v) {
  const size_t n = inv.devices.size();
  v->compute.assign(n, 0);
  v->memory.assign(n, 0);
  v->cpu_milli = -1;
  v->host_memory_mib = -1;
  v->capped = 0;
  v->partitioned = 0;
  if (usage.host_free.has_value()) {
    const HostResources taken = placement != nullptr ? placement->host : HostResources{};
    v->cpu_milli = std::max<int64_t>(0, usage.host_free->cpu_milli - taken.cpu_milli);
    v->host_memory_mib = std::max<int64_t>(0, usage.host_free->memory_mib - taken.memory_mib);
  }
  thread_local std::vector<int32_t> used_compute, run_c, init_c, shares, run_s, init_s;
  thread_local std::vector<int64_t> used_memory, run_m, init_m;
  thread_local std::vector<bool> exclusive;
  used_compute.assign(n, 0);
  used_memory.assign(n, 0);
  shares.assign(n, 0);
  exclusive.assign(n, false);
  for (size_t i = 0; i < n && i < usage.devices.size(); ++i) {
    used_compute[i] = usage.devices[i].compute;
    used_memory[i] = usage.devices[i].memory_mib;
    shares[i] = usage.devices[i].shares;
    exclusive[i] = usage.devices[i].exclusive;
  }
  if (placement != nullptr) {
    // Regular containers and sidecars run together; each init container runs
    // alone, so a device holds the larger of the two.
    run_c.assign(n, 0);
    init_c.assign(n, 0);
    run_m.assign(n, 0);
    init_m.assign(n, 0);
    run_s.assign(n, 0);
    init_s.assign(n, 0);
    for (const ContainerPlacement& c : placement->containers) {
      for (const Grant& g : c.grants) {
        if (g.device < 0 || static_cast<size_t>(g.device) >= n) continue;
        const size_t d = static_cast<size_t>(g.device);
        const int32_t comp = g.exclusive ? kComputeWhole : g.compute;
        const int64_t mem = g.exclusive ? inv.devices[d].memory_mib : g.memory_mib;
        if (g.exclusive) exclusive[d] = true;
        if (c.kind == ContainerKind::kInit) {
          init_c[d] = std::max(init_c[d], comp);
          init_m[d] = std::max(init_m[d], mem);
          init_s[d] = 1;
        } else {
          run_c[d] += comp;
          run_m[d] += mem;
          run_s[d] += 1;
        }
      }
    }
    for (size_t d = 0; d < n; ++d) {
      used_compute[d] += std::max(run_c[d], init_c[d]);
      used_memory[d] += std::max(run_m[d], init_m[d]);
      shares[d] += std::max(run_s[d], init_s[d]);
    }
  }
  for (size_t d = 0; d < n; ++d) {
    const Device& dev = inv.devices[d];
    if (!dev.Schedulable() || exclusive[d]) continue;
    int32_t free_compute = std::max(0, kComputeWhole - used_compute[d]);
    // Memory in use outside every grant: no whole-device task can take the
    // device (one thousandth short of whole says so to every task), shares
    // fit in the memory beside it.
    if (dev.foreign_mib > 0) free_compute = std::min(free_compute, kComputeWhole - 1);
    if (!dev.partition.empty()) {
      v->capped += free_compute;
      v->partitioned += free_compute;
      continue;
    }
    if (shares[d] > 0 && shares[d] >= std::max(1, dev.max_shares)) {
      v->capped += free_compute;
      continue;
    }
    v->compute[d] = free_compute;
    v->memory[d] = std::max<int64_t>(0, dev.memory_mib - dev.foreign_mib - used_memory[d]);
  }
}

double FragmentOf(const FreeView& v, std::span<const FragTask> tasks,
                  HostTaskRule rule = HostTaskRule::kAllIdle);

// FragmentOf, remembered per thread for the last few device states. Fit scores
// every candidate set of a container against one state before and many
// after, and NodeFragment does not depend on the order of the devices: most
// "after" states of one node are the same multiset of free (compute, memory)
// pairs (one whole free GPU taken out of several alike). The key is the state
// itself, sorted, with the task list, so another node or usage never reads a
// value that is not its own.
//
// `tasks_id` names the task list for its whole life (PreparedTasks::id): a
// list's address alone could be reused by the next workload's.
double FragmentCached(const FreeView& v, uint64_t tasks_id, std::span<const FragTask> tasks,
                      HostTaskRule rule) {
  struct Entry {
    std::vector<std::pair<int32_t, int64_t>> devices;  // sorted (free compute, free memory)
    int64_t cpu_milli = -1;
    int64_t host_memory_mib = -1;
    int64_t capped = 0;
    uint64_t tasks_id = 0;
    const FragTask* tasks = nullptr;
    size_t n = 0;
    HostTaskRule rule = HostTaskRule::kAllIdle;
    double value = 0;
    bool valid = false;
  };
  constexpr size_t kEntries = 16;
  thread_local std::array<Entry, kEntries> cache;
  thread_local size_t next = 0;
  thread_local std::vector<std::pair<int32_t, int64_t>> key;
  key.resize(v.compute.size());
  for (size_t i = 0; i < v.compute.size(); ++i) key[i] = {v.compute[i], v.memory[i]};
  std::sort(key.begin(), key.end());
  for (const Entry& e : cache) {
    if (e.valid && e.tasks_id == tasks_id && e.tasks == tasks.data() && e.n == tasks.size() &&
        e.rule == rule && e.cpu_milli == v.cpu_milli && e.host_memory_mib == v.host_memory_mib &&
        e.capped == v.capped && e.devices == key) {
      return e.value;
    }
  }
  Entry& e = cache[next];
  next = (next + 1) % kEntries;
  e.devices = key;
  e.tasks_id = tasks_id;
  e.cpu_milli = v.cpu_milli;
  e.host_memory_mib = v.host_memory_mib;
  e.capped = v.capped;
  e.tasks = tasks.data();
  e.n = tasks.size();
  e.rule = rule;
  e.value = FragmentOf(v, tasks, rule);
  e.valid = true;
  return e.value;
}

double FragmentOf(const FreeView& v, std::span<const FragTask> tasks, HostTaskRule rule) {
  FragNode node;
  node.free_compute = v.compute;
  node.free_memory = v.memory;
  node.cpu_free_milli = v.cpu_milli;
  node.host_memory_free_mib = v.host_memory_mib;
  node.model_id = 0;
  return NodeFragment(node, tasks, rule) + static_cast<double>(v.capped);
}

// A workload's FragTasks, built once: per inventory only the model bits of
// shapes limited to some models differ (TasksForInventory).
class PreparedTasks {
 public:
  explicit PreparedTasks(const std::vector<TaskShape>& workload)
      : id_(next_id_.fetch_add(1) + 1),
        workload_(workload.empty() ? DefaultWorkload() : workload),
        any_model_(TasksForInventory(workload_, NodeInventory{})) {
    for (const TaskShape& t : workload_) {
      if (!t.model.empty() || t.memory_percent > 0) per_inventory_ = true;
    }
  }
  // Unique per object over the process's life (a key for FragmentCached).
  uint64_t id() const { return id_; }
  // The tasks as seen from `inv`, built once per device model and memory
  // (percent shares resolve against it; the span stays valid for the
  // object's life).
  std::span<const FragTask> For(const NodeInventory& inv) const {
    if (!per_inventory_) return any_model_;
    const std::string model = inv.devices.empty() ? std::string()
                                                  : inv.devices[0].model + '\x1f' +
                                                        std::to_string(inv.devices[0].memory_mib);
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      if (auto it = by_model_.find(model); it != by_model_.end()) return it->second;
    }
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto [it, inserted] = by_model_.try_emplace(model);
    if (inserted) it->second = TasksForInventory(workload_, inv);
    return it->second;
  }

 private:
  static inline std::atomic<uint64_t> next_id_{0};
  const uint64_t id_;
  std::vector<TaskShape> workload_;
  std::vector<FragTask> any_model_;
  bool per_inventory_ = false;  // some shape names models or memory in percent
  mutable std::shared_mutex mu_;
  mutable std::map<std::string, std::vector<FragTask>> by_model_;  // guarded by mu_
};

class FragmentationPolicy : public Policy {
 public:
  explicit FragmentationPolicy(const PolicyContext& ctx) : tasks_(ctx.workload) {}
  std::string_view Name() const override { return "fragmentation"; }

  double PlacementValue(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& placement) const override {
    const std::span<const FragTask> tasks = tasks_.For(inv);
    thread_local FreeView before, after;
    FreeAfter(inv, usage, nullptr, &before);
    FreeAfter(inv, usage, &placement, &after);
    return FragmentCached(before, tasks_.id(), tasks, HostTaskRule::kAllIdle) -
           FragmentCached(after, tasks_.id(), tasks, HostTaskRule::kAllIdle);
  }

  int32_t NodeScore(const NodeInventory& inv, const NodeUsage& usage,
                    const Placement& placement) const override {
    const std::span<const FragTask> tasks = tasks_.For(inv);
    thread_local FreeView before, after;
    FreeAfter(inv, usage, nullptr, &before);
    FreeAfter(inv, usage, &placement, &after);
    return FgdScore(FragmentCached(before, tasks_.id(), tasks, HostTaskRule::kAllIdle),
                    FragmentCached(after, tasks_.id(), tasks, HostTaskRule::kAllIdle));
  }

  int32_t HostScore(const NodeInventory& inv, const NodeUsage& usage,
                    const HostResources& host) const override {
    Placement p;
    p.host = host;
    return NodeScore(inv, usage, p);
  }

 private:
  PreparedTasks tasks_;
};

class AccelpoolPolicy : public Policy {
 public:
  explicit AccelpoolPolicy(const PolicyContext& ctx) : tasks_(ctx.workload) {}
  std::string_view Name() const override { return "accelpool"; }

  double PlacementValue(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& placement) const override {
    return Score(inv, usage, placement);
  }

  int32_t NodeScore(const NodeInventory& inv, const NodeUsage& usage,
                    const Placement& placement) const override {
    return Score(inv, usage, placement);
  }

  // The fragmentation change alone: the packing step is about where device
  // pods go, and would send a pod that asks for none to the busiest
  // accelerator nodes before nodes without accelerators.
  int32_t HostScore(const NodeInventory& inv, const NodeUsage& usage,
                    const HostResources& host) const override {
    Placement p;
    p.host = host;
    AccelpoolInputs in = Inputs(inv, usage, p);
    in.node_capacity = 0;  // no packing step
    return AccelpoolScore(in);
  }

 private:
  int32_t Score(const NodeInventory& inv, const NodeUsage& usage,
                const Placement& placement) const {
    return AccelpoolScore(Inputs(inv, usage, placement));
  }

  AccelpoolInputs Inputs(const NodeInventory& inv, const NodeUsage& usage,
                         const Placement& placement) const {
    const std::span<const FragTask> tasks = tasks_.For(inv);
    thread_local FreeView before, after;
    FreeAfter(inv, usage, nullptr, &before);
    FreeAfter(inv, usage, &placement, &after);
    AccelpoolInputs in;
    in.f_before = FragmentCached(before, tasks_.id(), tasks, HostTaskRule::kHostShare);
    in.f_after = FragmentCached(after, tasks_.id(), tasks, HostTaskRule::kHostShare);
    for (size_t d = 0; d < inv.devices.size(); ++d) {
      if (!inv.devices[d].Schedulable()) continue;
      in.node_capacity += kComputeWhole;
      in.node_idle_after += after.compute[d];
    }
    in.node_idle_after += after.partitioned;
    return in;
  }

  PreparedTasks tasks_;
};

}  // namespace

FragmentationNow MeasureFragmentation(const NodeInventory& inv, const NodeUsage& usage,
                                      const std::vector<TaskShape>& workload) {
  FreeView v;
  FreeAfter(inv, usage, nullptr, &v);
  const std::vector<FragTask> tasks = TasksForInventory(workload, inv);
  FragmentationNow out;
  out.fragment = FragmentOf(v, tasks, HostTaskRule::kHostShare);
  out.idle = v.capped;
  for (int32_t f : v.compute) out.idle += f;
  return out;
}

PolicyPtr MakeFragmentationPolicy(const PolicyContext& ctx) {
  return std::make_unique<FragmentationPolicy>(ctx);
}

PolicyPtr MakeAccelpoolPolicy(const PolicyContext& ctx) {
  return std::make_unique<AccelpoolPolicy>(ctx);
}

}  // namespace accelpool::core
