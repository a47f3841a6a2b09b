// Node scoring policies for the trace replay: the FGD paper's baselines
// (Random, DotProd, GpuClustering, GpuPacking, BestFit), FGD itself and
// accelpool's default policy, each as a score 0..100 for one node plus the
// GPUs it would use there. The formulas follow the paper's definitions with
// the simulator's integer scores; FGD and accelpool call src/core/frag.h.
//
// Thread-safety: policies are immutable; EvalContext (cache, random source)
// belongs to one replay and one thread.
#ifndef ACCELPOOL_SIM_POLICIES_H_
#define ACCELPOOL_SIM_POLICIES_H_

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "sim/cluster.h"

namespace accelpool::sim {

struct Choice {
  int32_t score = -1;  // 0..100; -1 = the pod does not fit
  uint32_t mask = 0;   // GPUs used (bit i = GPU i)
};

// Fragmentation of node states, memoised by (model, CPU left, sorted GPU left).
// `with_memory` tracks host memory; `rule` is how CPU-only tasks count;
// `host_blind` tracks neither host CPU nor memory (the extender's view: it
// sees devices only).
class FragCache {
 public:
  explicit FragCache(const std::vector<core::FragTask>* tasks, bool with_memory = false,
                     core::HostTaskRule rule = core::HostTaskRule::kAllIdle,
                     bool host_blind = false)
      : tasks_(tasks),
        with_memory_(with_memory && !host_blind),
        rule_(rule),
        host_blind_(host_blind) {}
  double Get(const SimNode& n);
  // The fragmentation after placing `p` on the GPUs of `mask`.
  double After(const SimNode& n, const PodShape& p, uint32_t mask);
  size_t size() const { return map_.size(); }
  // Forgets every value (after the task list changed).
  void Clear() { map_.clear(); }

 private:
  struct Key {
    int64_t cpu;
    int64_t mem;
    int32_t model;
    int32_t gpus;
    std::array<int16_t, kMaxGpusPerNode> free;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  const std::vector<core::FragTask>* tasks_;
  bool with_memory_;
  core::HostTaskRule rule_;
  bool host_blind_;
  std::unordered_map<Key, double, KeyHash> map_;
};

struct EvalContext {
  const Cluster* cluster = nullptr;
  FragCache* frag = nullptr;         // over Cluster::tasks
  FragCache* memory_frag = nullptr;  // over Cluster::memory_tasks, host memory tracked,
                                     // CPU-only tasks by host share (accelpool's measure)
  FragCache* extender_frag = nullptr;      // accelpool's measure as the extender computes it
                                           // (ReplayOptions::extender)
  FragCache* extender_fgd_frag = nullptr;  // FGD's measure on the same information
  std::mt19937_64* rng = nullptr;
  // CpuPods::kExtender: a pod that asks for no GPU is scored as the extender
  // scores it (core::Policy::HostScore: accelpool without its packing step).
  bool host_only_scores = false;
};

class SimPolicy {
 public:
  virtual ~SimPolicy() = default;
  virtual std::string_view Name() const = 0;
  // REQUIRES: Fits(n, p).
  virtual Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext& ctx) const = 0;
  // False when Evaluate draws random numbers (results must not be reused).
  virtual bool Memoizable() const { return true; }
  // True when the policy picks uniformly among the nodes that fit.
  virtual bool Uniform() const { return false; }
  // True when it scores on EvalContext::extender_frag or extender_fgd_frag
  // (whose task list a learned workload rebuilds).
  virtual bool ExtenderView() const { return false; }
};

// Every policy: the seven of the trace protocol, then "accelpool-extender" and
// "fgd-extender" (accelpool and FGD with only what the extender knows:
// ReplayOptions::extender).
const std::vector<std::string>& SimPolicyNames();
// "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "accelpool".
const std::vector<std::string>& TraceProtocolPolicies();
StatusOr<std::unique_ptr<SimPolicy>> MakeSimPolicy(std::string_view name);

// Device choice helpers shared by the policies.
uint32_t ExclusiveMask(const SimNode& n, int32_t count);  // first fully free GPUs
int32_t BestFitGpu(const SimNode& n, int32_t milli);       // least left that fits; -1 none
uint32_t DefaultMask(const SimNode& n, const PodShape& p);  // best-fit share / first free

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_POLICIES_H_
