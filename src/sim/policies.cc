#include "sim/policies.h"

#include <algorithm>
#include <cmath>

namespace accelpool::sim {
namespace {

constexpr int64_t kMaxSpecCpu = 128000;  // the paper's normalisation constants
constexpr int64_t kMaxSpecGpu = 8000;
constexpr int32_t kMaxScore = 100;

uint32_t Bit(int32_t i) { return uint32_t{1} << i; }

class RandomPolicy : public SimPolicy {
 public:
  std::string_view Name() const override { return "random"; }
  bool Memoizable() const override { return false; }
  bool Uniform() const override { return true; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext& ctx) const override {
    Choice c;
    c.score = 0;
    if (p.Share()) {
      int32_t seen = 0;
      for (int32_t i = 0; i < n.gpus; ++i) {
        if (n.free[i] >= p.milli && (*ctx.rng)() % static_cast<uint64_t>(++seen) == 0) {
          c.mask = Bit(i);
        }
      }
    } else {
      c.mask = ExclusiveMask(n, p.num_gpu);
    }
    return c;
  }
};

// Tetris-style alignment: 1 - (normalised free . normalised request) / 2, the
// smaller the dot product the better, over the candidate GPU groups.
class DotProdPolicy : public SimPolicy {
 public:
  std::string_view Name() const override { return "dotprod"; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext&) const override {
    const double cpu_term = static_cast<double>(n.cpu_free) / kMaxSpecCpu *
                            static_cast<double>(p.cpu) / kMaxSpecCpu;
    const double req = static_cast<double>(p.GpuMilli()) / kMaxSpecGpu;
    Choice best;
    double best_val = -1;
    auto consider = [&](double gpu_free, uint32_t mask) {
      const double val = 1.0 - (cpu_term + gpu_free / kMaxSpecGpu * req) / 2.0;
      if (val > best_val) {
        best_val = val;
        best.mask = mask;
      }
    };
    if (p.num_gpu == 0) {
      consider(static_cast<double>(n.GpuLeft()), 0);
    } else {
      if (p.GpuMilli() < kMilli) {
        for (int32_t i = 0; i < n.gpus; ++i) {
          if (n.free[i] < kMilli && n.free[i] >= p.milli) consider(n.free[i], Bit(i));
        }
      }
      const int32_t idle = n.FullyFree();
      if (p.GpuMilli() <= static_cast<int64_t>(idle) * kMilli) {
        consider(static_cast<double>(idle) * kMilli,
                 ExclusiveMask(n, p.Share() ? 1 : p.num_gpu));
      }
    }
    if (best_val < 0) return Choice{0, DefaultMask(n, p)};
    best.score = static_cast<int32_t>(kMaxScore * best_val);
    return best;
  }
};

// Keeps pods of one kind (share, 1, 2, 4, 8 GPUs) together on nodes.
class ClusteringPolicy : public SimPolicy {
 public:
  std::string_view Name() const override { return "clustering"; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext&) const override {
    Choice c{0, DefaultMask(n, p)};
    if (p.num_gpu == 0) return c;
    int32_t kinds = 0;
    for (size_t t = 1; t < n.tags.size(); ++t) kinds += n.tags[t] > 0;
    const bool same = n.tags[static_cast<size_t>(p.tag)] > 0;
    const int64_t fill = kMaxScore / 4 * (kMaxSpecGpu - n.GpuLeft()) / kMaxSpecGpu;
    int64_t base;
    if (same) {
      base = kinds == 1 ? kMaxScore * 3 / 4 : kMaxScore * 2 / 4;
    } else {
      base = kinds == 0 ? kMaxScore / 4 : 0;
    }
    // Nodes past the paper's 8 GPUs have a negative fill; a negative score
    // would read as "does not fit" (NodePicker::Pick).
    c.score = static_cast<int32_t>(std::clamp<int64_t>(fill + base, 0, kMaxScore));
    return c;
  }
};

// Shared GPUs first, then free GPUs on used nodes, then free nodes.
class PackingPolicy : public SimPolicy {
 public:
  std::string_view Name() const override { return "packing"; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext&) const override {
    Choice c{0, DefaultMask(n, p)};
    if (p.num_gpu == 0) return c;
    const int32_t fully_free = n.FullyFree();
    if (fully_free == n.gpus) {
      c.score = std::max(kMaxScore / 3 - fully_free, fully_free);
      return c;
    }
    // Least-left GPUs that fit, in order (the stable ascending sort).
    std::array<int32_t, kMaxGpusPerNode> idx{};
    for (int32_t i = 0; i < n.gpus; ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.begin() + n.gpus,
                     [&](int32_t a, int32_t b) { return n.free[a] < n.free[b]; });
    int32_t need = p.num_gpu, fresh = 0;
    int64_t ratio = 0;
    for (int32_t k = 0; k < n.gpus && need > 0; ++k) {
      const int32_t i = idx[k];
      if (n.free[i] >= p.milli) {
        --need;
        fresh += n.free[i] == kMilli;
        ratio += n.free[i] * 100 / kMilli;
      }
    }
    if (fresh > 0) {
      c.score = std::max(kMaxScore / 2 - fresh, kMaxScore / 3);
    } else {
      c.score = static_cast<int32_t>(std::max<int64_t>(kMaxScore - ratio / 10, kMaxScore / 2));
    }
    return c;
  }
};

// Least CPU and GPU left after placement, equally weighted.
class BestFitPolicy : public SimPolicy {
 public:
  std::string_view Name() const override { return "bestfit"; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext&) const override {
    const double left = static_cast<double>(n.cpu_free - p.cpu) / kMaxSpecCpu * 0.5 +
                        static_cast<double>(n.GpuLeft() - p.GpuMilli()) / kMaxSpecGpu * 0.5;
    // Past 8 GPUs or 128 cores `left` passes 1; clamped, as a negative score
    // would read as "does not fit" (NodePicker::Pick).
    const double score = std::clamp((1.0 - left) * kMaxScore, 0.0, double{kMaxScore});
    return Choice{static_cast<int32_t>(score), DefaultMask(n, p)};
  }
};

// FGD. `as_extender`: with the information an extender has (the built-in
// workload, devices without host CPU or memory), for a comparison with
// accelpool-extender on equal terms.
class FgdPolicy : public SimPolicy {
 public:
  explicit FgdPolicy(bool as_extender) : as_extender_(as_extender) {}
  std::string_view Name() const override { return as_extender_ ? "fgd-extender" : "fgd"; }
  bool ExtenderView() const override { return as_extender_; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext& ctx) const override {
    FragCache& frag = as_extender_ ? *ctx.extender_fgd_frag : *ctx.frag;
    const double before = frag.Get(n);
    if (p.Share()) {
      Choice best;
      for (int32_t i = 0; i < n.gpus; ++i) {
        if (n.free[i] < p.milli) continue;
        const int32_t s = core::FgdScore(before, frag.After(n, p, Bit(i)));
        if (best.mask == 0 || s > best.score) best = Choice{s, Bit(i)};
      }
      return best;
    }
    const uint32_t mask = ExclusiveMask(n, p.num_gpu);
    return Choice{core::FgdScore(before, frag.After(n, p, mask)), mask};
  }

 private:
  const bool as_extender_;
};

// accelpool's policy. `as_extender`: with only what the extender knows
// (ReplayOptions::extender): the product's figure. Without: with the trace's
// own workload and the nodes' host terms.
class AccelpoolSimPolicy : public SimPolicy {
 public:
  explicit AccelpoolSimPolicy(bool as_extender) : as_extender_(as_extender) {}
  std::string_view Name() const override {
    return as_extender_ ? "accelpool-extender" : "accelpool";
  }
  bool ExtenderView() const override { return as_extender_; }
  Choice Evaluate(const SimNode& n, const PodShape& p, EvalContext& ctx) const override {
    FragCache& frag = as_extender_ ? *ctx.extender_frag : *ctx.memory_frag;
    core::AccelpoolInputs in;
    in.f_before = frag.Get(n);
    // No packing step for a pod that asks for no GPU, as the extender scores it.
    in.node_capacity = p.num_gpu == 0 && ctx.host_only_scores ? 0 : int64_t{n.gpus} * kMilli;
    auto score = [&](uint32_t mask) {
      in.f_after = frag.After(n, p, mask);
      in.node_idle_after = n.GpuLeft() - p.GpuMilli();
      return core::AccelpoolScore(in);
    };
    if (p.Share()) {
      Choice best;
      int32_t best_left = 0;
      for (int32_t i = 0; i < n.gpus; ++i) {
        if (n.free[i] < p.milli) continue;
        const int32_t s = score(Bit(i));
        if (best.mask == 0 || s > best.score || (s == best.score && n.free[i] < best_left)) {
          best = Choice{s, Bit(i)};
          best_left = n.free[i];
        }
      }
      return best;
    }
    const uint32_t mask = ExclusiveMask(n, p.num_gpu);
    return Choice{score(mask), mask};
  }

 private:
  const bool as_extender_;
};

}  // namespace

size_t FragCache::KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  mix(static_cast<uint64_t>(k.cpu));
  mix(static_cast<uint64_t>(k.mem));
  mix(static_cast<uint64_t>(k.model) << 8 | static_cast<uint64_t>(k.gpus));
  for (int32_t i = 0; i < k.gpus; ++i) mix(static_cast<uint64_t>(k.free[i]));
  return static_cast<size_t>(h);
}

double FragCache::Get(const SimNode& n) {
  Key k{host_blind_ ? 0 : n.cpu_free, with_memory_ ? n.mem_free : 0, n.model_id, n.gpus, {}};
  for (int32_t i = 0; i < n.gpus; ++i) k.free[i] = static_cast<int16_t>(n.free[i]);
  std::sort(k.free.begin(), k.free.begin() + n.gpus);
  auto it = map_.find(k);
  if (it != map_.end()) return it->second;
  core::FragNode view = FragView(n, with_memory_);
  if (host_blind_) view.cpu_free_milli = -1;
  const double f = core::NodeFragment(view, *tasks_, rule_);
  map_.emplace(k, f);
  return f;
}

double FragCache::After(const SimNode& n, const PodShape& p, uint32_t mask) {
  SimNode copy = n;
  Place(&copy, p, mask);
  return Get(copy);
}

uint32_t ExclusiveMask(const SimNode& n, int32_t count) {
  uint32_t mask = 0;
  for (int32_t i = 0; i < n.gpus && count > 0; ++i) {
    if (n.free[i] == kMilli) {
      mask |= Bit(i);
      --count;
    }
  }
  return mask;
}

int32_t BestFitGpu(const SimNode& n, int32_t milli) {
  int32_t best = -1;
  for (int32_t i = 0; i < n.gpus; ++i) {
    if (n.free[i] >= milli && (best < 0 || n.free[i] < n.free[best])) best = i;
  }
  return best;
}

uint32_t DefaultMask(const SimNode& n, const PodShape& p) {
  if (p.num_gpu == 0) return 0;
  if (p.Share()) {
    const int32_t g = BestFitGpu(n, p.milli);
    return g < 0 ? 0 : Bit(g);
  }
  return ExclusiveMask(n, p.num_gpu);
}

const std::vector<std::string>& TraceProtocolPolicies() {
  static const std::vector<std::string> kNames = {"random", "dotprod", "clustering", "packing",
                                                  "bestfit", "fgd", "accelpool"};
  return kNames;
}

const std::vector<std::string>& SimPolicyNames() {
  static const std::vector<std::string> kNames = {
      "random", "dotprod",   "clustering",         "packing",     "bestfit",
      "fgd",    "accelpool", "accelpool-extender", "fgd-extender"};
  return kNames;
}

StatusOr<std::unique_ptr<SimPolicy>> MakeSimPolicy(std::string_view name) {
  std::unique_ptr<SimPolicy> p;
  if (name == "random") p = std::make_unique<RandomPolicy>();
  if (name == "dotprod") p = std::make_unique<DotProdPolicy>();
  if (name == "clustering") p = std::make_unique<ClusteringPolicy>();
  if (name == "packing") p = std::make_unique<PackingPolicy>();
  if (name == "bestfit") p = std::make_unique<BestFitPolicy>();
  if (name == "fgd") p = std::make_unique<FgdPolicy>(false);
  if (name == "fgd-extender") p = std::make_unique<FgdPolicy>(true);
  if (name == "accelpool") p = std::make_unique<AccelpoolSimPolicy>(false);
  if (name == "accelpool-extender") p = std::make_unique<AccelpoolSimPolicy>(true);
  if (p == nullptr) {
    std::string valid;
    for (const std::string& n : SimPolicyNames()) valid += (valid.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown policy \"" + std::string(name) + "\"; use one of: " +
                                valid);
  }
  return p;
}

}  // namespace accelpool::sim
