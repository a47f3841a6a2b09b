#include "sim/cluster.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace accelpool::sim {
namespace {

Tag TagOf(int32_t num_gpu, int32_t milli) {
  switch (num_gpu) {
    case 0:
      return Tag::kNone;
    case 1:
      return milli < kMilli ? Tag::kShare : Tag::kOne;
    case 2:
      return Tag::kTwo;
    case 4:
      return Tag::kFour;
    case 8:
      return Tag::kEight;
    default:
      return Tag::kOther;
  }
}

}  // namespace

StatusOr<Cluster> BuildCluster(const std::vector<TraceNode>& nodes,
                               const std::vector<TracePod>& pods) {
  Cluster c;
  std::map<std::string, int32_t> model_id;
  auto intern_model = [&](const std::string& m) -> int32_t {
    auto it = model_id.find(m);
    if (it != model_id.end()) return it->second;
    const int32_t id = static_cast<int32_t>(c.models.size());
    model_id.emplace(m, id);
    c.models.push_back(m);
    return id;
  };
  for (const TraceNode& t : nodes) {
    if (t.gpus == 0) continue;
    if (t.gpus > kMaxGpusPerNode) {
      return InvalidArgumentError("node " + t.name + " has " + std::to_string(t.gpus) +
                                  " GPUs; the simulator supports up to " +
                                  std::to_string(kMaxGpusPerNode) + " per node");
    }
    SimNode n;
    n.cpu_free = n.cpu_cap = t.cpu_milli;
    n.mem_free = n.mem_cap = t.memory_mib;
    n.gpus = t.gpus;
    n.model_id = intern_model(t.model);
    if (n.model_id >= 63) {
      // Model ids are bits of a pod's 64-bit model mask (Fits shifts by them).
      return InvalidArgumentError(
          "more than 63 GPU models in the trace; the simulator "
          "supports up to 63");
    }
    for (int32_t i = 0; i < t.gpus; ++i) n.free[i] = kMilli;
    c.gpu_milli += static_cast<int64_t>(t.gpus) * kMilli;
    c.nodes.push_back(n);
    c.node_names.push_back(t.name);
  }
  if (c.nodes.empty()) {
    return InvalidArgumentError("the node list has no GPU nodes; give a node list with gpu > 0");
  }
  std::map<std::tuple<int64_t, int64_t, int32_t, int32_t, uint64_t>, int32_t> shape_id;
  c.pod_shape.reserve(pods.size());
  for (const TracePod& p : pods) {
    PodShape s;
    s.cpu = p.cpu_milli;
    s.mem = p.memory_mib;
    s.num_gpu = p.num_gpu;
    s.milli = p.gpu_milli;
    s.tag = TagOf(p.num_gpu, p.gpu_milli);
    for (const std::string& m : p.gpu_models) {
      const int32_t id = intern_model(m);
      if (id >= 63) {
        return InvalidArgumentError("more than 63 GPU models in the trace; the simulator "
                                    "supports up to 63");
      }
      s.model_mask |= uint64_t{1} << id;
    }
    auto key = std::make_tuple(s.cpu, s.mem, s.num_gpu, s.milli, s.model_mask);
    auto [it, inserted] = shape_id.emplace(key, static_cast<int32_t>(c.shapes.size()));
    if (inserted) c.shapes.push_back(s);
    c.pod_shape.push_back(it->second);
    c.pod_gpu.push_back(s.GpuMilli());
  }
  c.tasks = TypicalTasks(c, 0.95);
  c.memory_tasks = TypicalTasks(c, 1.0, true);
  return c;
}

std::vector<core::FragTask> TypicalTasks(const Cluster& c, double popularity, bool with_memory) {
  // Key: what the measure looks at (the paper's leaves memory out).
  using Key = std::tuple<int64_t, int32_t, int32_t, uint64_t, int64_t>;
  std::map<Key, double> count;
  for (int32_t sid : c.pod_shape) {
    const PodShape& s = c.shapes[static_cast<size_t>(sid)];
    count[Key(s.cpu, s.milli, s.num_gpu, s.model_mask, with_memory ? s.mem : 0)] += 1;
  }
  std::vector<std::pair<Key, double>> list(count.begin(), count.end());
  std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;
  });
  const double total = static_cast<double>(c.pod_shape.size());
  std::vector<core::FragTask> tasks;
  double cum = 0;
  for (const auto& [key, n] : list) {
    if (cum >= popularity * total) break;
    cum += n;
    core::FragTask t;
    t.cpu_milli = std::get<0>(key);
    t.compute = std::get<1>(key);
    t.count = std::get<2>(key);
    t.model_mask = std::get<3>(key);
    t.host_memory_mib = std::get<4>(key);
    t.weight = n;
    tasks.push_back(t);
  }
  return core::NormalizeTasks(std::move(tasks));
}

bool Fits(const SimNode& n, const PodShape& p) {
  if (n.cpu_free < p.cpu || n.mem_free < p.mem) return false;
  if (p.num_gpu == 0) return true;
  if (n.gpus < p.num_gpu) return false;
  if (p.model_mask != 0 && ((p.model_mask >> n.model_id) & 1U) == 0) return false;
  int32_t ok = 0;
  for (int32_t i = 0; i < n.gpus; ++i) ok += n.free[i] >= p.milli;
  return ok >= p.num_gpu;
}

core::FragNode FragView(const SimNode& n, bool with_memory) {
  core::FragNode v;
  if (with_memory) v.host_memory_free_mib = n.mem_free;
  v.free_compute = std::span<const int32_t>(n.free.data(), static_cast<size_t>(n.gpus));
  v.cpu_free_milli = n.cpu_free;
  v.model_id = n.model_id;
  return v;
}

core::NodeInventory ToInventory(const SimNode& n, const std::string& name,
                                const std::string& model) {
  core::NodeInventory inv;
  inv.node = name;
  inv.vendor = core::Vendor::kNvidia;
  for (int32_t i = 0; i < n.gpus; ++i) {
    core::Device d;
    d.id = name + "-gpu" + std::to_string(i);
    d.index = i;
    d.vendor = core::Vendor::kNvidia;
    d.model = model;
    d.memory_mib = kMilli;
    d.max_shares = kMilli;
    inv.devices.push_back(std::move(d));
  }
  return inv;
}

core::NodeUsage ToUsage(const SimNode& n) {
  core::NodeUsage u;
  u.devices.resize(static_cast<size_t>(n.gpus));
  for (int32_t i = 0; i < n.gpus; ++i) {
    core::DeviceUsage& d = u.devices[static_cast<size_t>(i)];
    d.compute = kMilli - n.free[i];
    d.memory_mib = d.compute;
    d.shares = d.compute > 0 ? 1 : 0;
  }
  return u;
}

core::PodRequest ToPodRequest(const PodShape& p, const std::vector<std::string>& models) {
  core::PodRequest req;
  if (p.num_gpu == 0) return req;
  core::DeviceRequest r;
  r.container = "main";
  r.vendor = core::Vendor::kNvidia;
  r.count = p.num_gpu;
  if (p.milli < kMilli) r.compute = p.milli;
  for (size_t id = 0; id < models.size() && id < 64; ++id) {
    if ((p.model_mask >> id) & 1U) r.model_include.push_back(models[id]);
  }
  req.containers.push_back(std::move(r));
  return req;
}

void Place(SimNode* n, const PodShape& p, uint32_t mask) {
  n->cpu_free -= p.cpu;
  n->mem_free -= p.mem;
  for (int32_t i = 0; i < n->gpus; ++i) {
    if ((mask >> i) & 1U) n->free[i] -= p.milli;
  }
  ++n->tags[static_cast<size_t>(p.tag)];
  ++n->version;
}

void Remove(SimNode* n, const PodShape& p, uint32_t mask) {
  n->cpu_free += p.cpu;
  n->mem_free += p.mem;
  for (int32_t i = 0; i < n->gpus; ++i) {
    if ((mask >> i) & 1U) n->free[i] += p.milli;
  }
  --n->tags[static_cast<size_t>(p.tag)];
  ++n->version;
}

}  // namespace accelpool::sim
