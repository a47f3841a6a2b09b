// The simulator's cluster: trace nodes as flat, fast-to-copy state (host CPU
// and memory, free milli-GPU per GPU), pod requests as interned shapes, and
// the trace's workload as FGD task shapes.
//
// The trace has no GPU memory, so requests carry compute only; a GPU is
// shared by any number of pods while its compute lasts (the trace's protocol).
// Whole-GPU requests (gpu_milli 1000) need GPUs with nothing on them.
//
// Thread-safety: values; a const Cluster may be read from many threads.
#ifndef ACCELPOOL_SIM_CLUSTER_H_
#define ACCELPOOL_SIM_CLUSTER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/frag.h"
#include "core/types.h"
#include "sim/trace.h"

namespace accelpool::sim {

inline constexpr int32_t kMaxGpusPerNode = 16;
inline constexpr int32_t kMilli = 1000;

// Kinds of GPU request, used by the clustering baseline.
enum class Tag : uint8_t { kNone, kShare, kOne, kTwo, kFour, kEight, kOther, kCount };

struct SimNode {
  int64_t cpu_free = 0;
  int64_t mem_free = 0;
  int64_t cpu_cap = 0;
  int64_t mem_cap = 0;
  int32_t gpus = 0;
  int32_t model_id = -1;  // -1: no GPUs
  std::array<int32_t, kMaxGpusPerNode> free{};  // milli-GPU left per GPU
  std::array<int32_t, static_cast<int>(Tag::kCount)> tags{};  // pods per tag
  uint32_t version = 1;  // bumped on every change

  int64_t GpuLeft() const {
    int64_t s = 0;
    for (int32_t i = 0; i < gpus; ++i) s += free[i];
    return s;
  }
  int32_t FullyFree() const {
    int32_t c = 0;
    for (int32_t i = 0; i < gpus; ++i) c += free[i] == kMilli;
    return c;
  }
};

struct PodShape {
  int64_t cpu = 0;
  int64_t mem = 0;
  int32_t num_gpu = 0;
  int32_t milli = 0;        // per GPU
  uint64_t model_mask = 0;  // 0 = any model
  Tag tag = Tag::kNone;
  int64_t GpuMilli() const { return static_cast<int64_t>(num_gpu) * milli; }
  bool Share() const { return num_gpu == 1 && milli < kMilli; }
  friend bool operator==(const PodShape&, const PodShape&) = default;
};

struct Cluster {
  std::vector<std::string> node_names;
  std::vector<SimNode> nodes;            // initial (empty) state
  std::vector<std::string> models;       // model id -> name
  int64_t gpu_milli = 0;                 // cluster capacity
  std::vector<PodShape> shapes;          // interned pod shapes
  std::vector<int32_t> pod_shape;        // pod index -> shape id
  std::vector<int64_t> pod_gpu;          // pod index -> total milli-GPU
  std::vector<core::FragTask> tasks;     // workload distribution for FGD (by pod count)
  std::vector<core::FragTask> memory_tasks;  // every shape, with host memory, for accelpool
};

// Builds the cluster from GPU nodes (CPU-only nodes are skipped, as in the
// FGD protocol) and interns the pods' shapes. Pods that name a model no node
// has keep a model bit that matches nothing.
// kInvalidArgument when a node has more than kMaxGpusPerNode GPUs or more
// than 63 models appear.
StatusOr<Cluster> BuildCluster(const std::vector<TraceNode>& nodes,
                               const std::vector<TracePod>& pods);

// The FGD paper's typical task shapes: distinct (cpu, per-GPU milli, GPU
// count, model set) by count, most popular first, until they cover
// `popularity` (0..1) of the pods, weights renormalised. With `with_memory`
// host memory is part of the shape too (accelpool's measure).
std::vector<core::FragTask> TypicalTasks(const Cluster& c, double popularity,
                                         bool with_memory = false);

// True when the node can host the shape (CPU, memory, model, GPUs).
bool Fits(const SimNode& n, const PodShape& p);

// The free state of a node as the fragmentation measure sees it.
core::FragNode FragView(const SimNode& n, bool with_memory = false);

// The same node and pod in the allocation core's types: NVIDIA devices of the
// node's model with max_shares 1000 and 1000 MiB each, so that a share's
// derived memory equals its compute (the trace has no GPU memory); whole-GPU
// pods are count-only (exclusive) requests, shares compute-only requests.
// Used to check that the simulator's fast path places as core::Fit does.
core::NodeInventory ToInventory(const SimNode& n, const std::string& name,
                                const std::string& model);
core::NodeUsage ToUsage(const SimNode& n);
core::PodRequest ToPodRequest(const PodShape& p, const std::vector<std::string>& models);

// Applies or removes a pod on the GPUs of `mask`.
void Place(SimNode* n, const PodShape& p, uint32_t mask);
void Remove(SimNode* n, const PodShape& p, uint32_t mask);

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_CLUSTER_H_
