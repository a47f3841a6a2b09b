#include "sim/replay.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/node_order.h"
#include "core/rank.h"

namespace accelpool::sim {
namespace {

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double At(const std::vector<StepPoint>& curve, double x, float StepPoint::*field) {
  if (curve.empty()) return 0;
  for (size_t i = 0; i < curve.size(); ++i) {
    if (curve[i].arrived_pct >= x) {
      if (i == 0) return curve[0].*field;
      const StepPoint& a = curve[i - 1];
      const StepPoint& b = curve[i];
      const double span = b.arrived_pct - a.arrived_pct;
      if (span <= 0) return b.*field;
      const double t = (x - a.arrived_pct) / span;
      return a.*field + t * (b.*field - a.*field);
    }
  }
  return curve.back().*field;
}

}  // namespace

uint64_t Uniform(uint64_t bound, uint64_t* state) {
  // Rejection sampling keeps it unbiased.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do {
    r = SplitMix(state);
  } while (r >= limit);
  return r % bound;
}

std::vector<int32_t> ArrivalOrder(const std::vector<TracePod>& pods, const Cluster& c,
                                  uint64_t seed, double inflation) {
  std::vector<int32_t> order(pods.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return pods[a].name < pods[b].name; });
  uint64_t state = seed;
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[Uniform(i, &state)]);
  }
  if (inflation <= 0 || order.empty()) return order;
  const int64_t target = static_cast<int64_t>(inflation * static_cast<double>(c.gpu_milli));
  int64_t total = 0;
  for (int32_t i : order) total += c.pod_gpu[static_cast<size_t>(i)];
  if (total > target) {
    while (total > target && !order.empty()) {
      const size_t k = Uniform(order.size(), &state);
      total -= c.pod_gpu[static_cast<size_t>(order[k])];
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(k));
    }
    return order;
  }
  // Pods that ask for no GPU bring no clone nearer the target.
  if (total <= 0) return order;
  const size_t originals = order.size();
  while (true) {
    const int32_t clone = order[Uniform(originals, &state)];
    const int64_t g = c.pod_gpu[static_cast<size_t>(clone)];
    if (total + g > target) break;
    total += g;
    order.push_back(clone);
  }
  return order;
}

NodePicker::NodePicker(const Cluster& c, const SimPolicy& policy, const ReplayOptions& opt)
    : c_(c),
      policy_(policy),
      opt_(opt),
      tie_state_(opt.seed ^ 0x71E5ULL),
      rng_(opt.seed),
      frag_(&c.tasks),
      memory_frag_(&c.memory_tasks, true, core::HostTaskRule::kHostShare),
      // The extender's workload: its built-in mix (no model, no host terms)
      // until the learner (kLearned) has enough arrivals.
      extender_tasks_(core::TasksForInventory({}, core::NodeInventory{})),
      learner_(opt.extender.learner),
      extender_frag_(opt.extender.workload == ExtenderWorkload::kTrace ? &c.memory_tasks
                                                                      : &extender_tasks_,
                     opt.extender.host, core::HostTaskRule::kHostShare, !opt.extender.host),
      extender_fgd_frag_(opt.extender.workload == ExtenderWorkload::kTrace ? &c.tasks
                                                                          : &extender_tasks_,
                         false, core::HostTaskRule::kAllIdle, !opt.extender.host),
      ctx_{&c, &frag_, &memory_frag_, &extender_frag_, &extender_fgd_frag_, &rng_} {
  ctx_.host_only_scores = opt.cpu_pods == CpuPods::kExtender && opt.mode == TieMode::kKube;
  const size_t n_nodes = c.nodes.size();
  if (policy.Memoizable() && n_nodes > 0 && !c.shapes.empty()) {
    // Counted without overflow: nodes x shapes may pass size_t's range.
    const size_t limit = opt.max_memo_slots;
    memo_shared_ = c.shapes.size() > limit / n_nodes;
    memo_.resize(memo_shared_ ? limit : n_nodes * c.shapes.size());
  }
  uint64_t rank_state = opt.seed ^ 0x5EEDULL;
  rank_.resize(n_nodes);
  std::iota(rank_.begin(), rank_.end(), 0U);
  for (size_t i = n_nodes; i > 1; --i) std::swap(rank_[i - 1], rank_[Uniform(i, &rank_state)]);
  // The extender's stable order: a hash (FNV-1a) of the node name salted
  // with a value fixed per deployment; each seed stands for one deployment.
  name_rank_.resize(n_nodes);
  for (size_t i = 0; i < n_nodes; ++i) {
    name_rank_[i] = core::StableNodeOrder(opt.seed, c.node_names[i]);
  }
}

void NodePicker::Learn(const PodShape& shape) {
  core::TaskShape t;
  t.count = shape.num_gpu;
  t.compute = shape.num_gpu == 0 ? 0 : shape.milli;
  t.cpu_milli = shape.cpu;
  t.host_memory_mib = shape.mem;
  for (size_t m = 0; m < c_.models.size() && m < 64; ++m) {
    if ((shape.model_mask >> m) & 1U) t.model += (t.model.empty() ? "" : "|") + c_.models[m];
  }
  model_masks_.emplace(t.model, shape.model_mask);  // to give the learned shape its bits back
  learner_.Observe(t);
  if (++since_rebuild_ < std::max(opt_.extender.refresh, 1)) return;
  since_rebuild_ = 0;
  std::vector<core::TaskShape> shapes = learner_.Shapes();
  if (shapes.empty()) return;  // the built-in mix until the learner has enough
  // The trace's models are global bits (SimNode::model_id), where the
  // extender's are "this node's model or not": each learned model list gets
  // the bits it was made from back.
  std::vector<core::FragTask> tasks;
  tasks.reserve(shapes.size());
  for (const core::TaskShape& s : shapes) {
    core::FragTask f;
    f.count = s.count;
    f.compute = s.compute;
    f.cpu_milli = s.cpu_milli;
    f.host_memory_mib = s.host_memory_mib;
    f.weight = s.weight;
    if (!s.model.empty()) f.model_mask = model_masks_.at(s.model);
    tasks.push_back(f);
  }
  extender_tasks_ = core::NormalizeTasks(std::move(tasks));
  extender_frag_.Clear();
  extender_fgd_frag_.Clear();
  // Scores remembered under the old task list are stale.
  for (MemoEntry& e : memo_) e.version = kStaleVersion;
  ++workload_rebuilds_;
}

namespace {

// kube-scheduler's default scores of a pod on a node, 0-100 each, integers as
// it computes them: the free share of each resource after the pod, averaged
// (LeastAllocated), and 100 x (1 - the spread of the two requested fractions)
// (BalancedAllocation), both at weight 1.
int64_t DefaultSchedulerScores(const SimNode& n, const PodShape& shape) {
  constexpr int64_t kMax = 100;
  int64_t least = 0;
  double fraction[2] = {0, 0};
  const int64_t cap[2] = {n.cpu_cap, n.mem_cap};
  const int64_t requested[2] = {n.cpu_cap - n.cpu_free + shape.cpu,
                                n.mem_cap - n.mem_free + shape.mem};
  for (int r = 0; r < 2; ++r) {
    if (cap[r] <= 0) continue;
    least += std::max<int64_t>(0, cap[r] - requested[r]) * kMax / cap[r];
    fraction[r] = std::min(1.0, static_cast<double>(requested[r]) / static_cast<double>(cap[r]));
  }
  least /= 2;
  const double spread = std::abs(fraction[0] - fraction[1]) / 2;
  const auto balanced = static_cast<int64_t>((1 - spread) * kMax);
  return least + balanced;
}

}  // namespace

size_t NodePicker::PickByDefaultScheduler(const std::vector<SimNode>& nodes,
                                          const PodShape& shape) {
  int64_t best_key = -1;
  size_t best = nodes.size();
  uint64_t ties = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const SimNode& n = nodes[i];
    if (!Fits(n, shape)) continue;
    const int64_t key = DefaultSchedulerScores(n, shape);
    if (key > best_key) {
      best_key = key;
      best = i;
      ties = 1;
    } else if (key == best_key && Uniform(++ties, &tie_state_) == 0) {
      best = i;
    }
  }
  return best;
}

size_t NodePicker::Pick(const std::vector<SimNode>& nodes, size_t sid, uint32_t* mask) {
  const size_t n_nodes = nodes.size();
  const size_t n_shapes = c_.shapes.size();
  const PodShape& shape = c_.shapes[sid];
  if (opt_.extender.workload == ExtenderWorkload::kLearned && policy_.ExtenderView()) Learn(shape);
  if (shape.num_gpu == 0 && opt_.mode != TieMode::kPaper &&
      opt_.cpu_pods == CpuPods::kDefaultScheduler) {
    *mask = 0;
    return PickByDefaultScheduler(nodes, shape);
  }
  int64_t best_key = -1;
  size_t best = n_nodes;
  uint32_t best_mask = 0;
  uint64_t ties = 0;
  // The extender's rule for a pod that asks for no device, in the host-pod
  // profile (CpuPods::kExtender): core::Rank with RankRule::tied_best gives
  // every node with the best combined score 10 and the rest at most 9, times
  // 10 x weight. The profile's remaining scores (PodTopologySpread,
  // InterPodAffinity, NodeAffinity, TaintToleration) weigh preferences the
  // trace's pods do not have, so kube-scheduler picks at random among the
  // nodes ranked 10.
  const bool host_pod_profile =
      shape.num_gpu == 0 && opt_.mode == TieMode::kKube && opt_.cpu_pods == CpuPods::kExtender;
  host_candidates_.clear();
  for (size_t i = 0; i < n_nodes; ++i) {
    const SimNode& n = nodes[i];
    Choice ch;
    if (!memo_.empty()) {
      const uint64_t pair = static_cast<uint64_t>(i) * n_shapes + sid;
      uint64_t slot = pair;
      if (memo_shared_) {
        uint64_t h = pair;
        slot = SplitMix(&h) % memo_.size();
      }
      MemoEntry& e = memo_[slot];
      if (e.pair != pair || e.version != n.version) {
        e.pair = pair;
        e.version = n.version;
        if (Fits(n, shape)) {
          const Choice fresh = policy_.Evaluate(n, shape, ctx_);
          e.score = fresh.score;
          e.mask = fresh.mask;
        } else {
          e.score = -1;
        }
      }
      ch = Choice{e.score, e.mask};
    } else if (Fits(n, shape)) {
      ch = policy_.Evaluate(n, shape, ctx_);
    }
    if (ch.score < 0) continue;
    if (policy_.Uniform()) {
      if (Uniform(++ties, &tie_state_) == 0) {
        best = i;
        best_mask = ch.mask;
      }
    } else if (opt_.mode == TieMode::kPaper) {
      const int64_t key = ch.score;
      if (key > best_key || (key == best_key && rank_[i] < rank_[best])) {
        best_key = key;
        best = i;
        best_mask = ch.mask;
      }
    } else if (opt_.mode == TieMode::kKube) {
      // The extender's rule (core/rank.h); the pod goes to the node it ranks
      // first, the one node that gets 10. The trace has no jobs and no
      // super-nodes: locality 0, only the idle-node penalty applies.
      core::RankCandidate rc;
      rc.node = c_.node_names[i];
      rc.policy_score = ch.score;
      rc.pod_devices = shape.num_gpu;
      rc.node_devices = n.gpus;
      rc.node_idle = n.FullyFree() == n.gpus;
      rc.order = name_rank_[i];
      const int64_t key = core::CombinedScore(rc, opt_.penalties);
      if (host_pod_profile) {
        host_candidates_.emplace_back(i, key);
        best_key = std::max(best_key, key);
      } else if (best == n_nodes || core::RanksBefore(key, rc.order, rc.node, best_key,
                                                      name_rank_[best], c_.node_names[best])) {
        best_key = key;
        best = i;
        best_mask = ch.mask;
      }
    } else {
      const int64_t key = static_cast<int64_t>(opt_.extender_weight) * ((ch.score + 5) / 10);
      if (key > best_key) {
        best_key = key;
        best = i;
        best_mask = ch.mask;
        ties = 1;
      } else if (key == best_key && Uniform(++ties, &tie_state_) == 0) {
        best = i;
        best_mask = ch.mask;
      }
    }
  }
  if (host_pod_profile) {
    int64_t best_total = -1;
    for (const auto& [i, key] : host_candidates_) {
      const int64_t extender =
          key == best_key ? core::kMaxRankScore : core::ExtenderScore(1, key, best_key);
      const int64_t total = extender * core::kMaxRankScore * opt_.extender_weight;
      if (total > best_total) {
        best_total = total;
        best = i;
        ties = 1;
      } else if (total == best_total && Uniform(++ties, &tie_state_) == 0) {
        best = i;
      }
    }
    best_mask = 0;
  }
  *mask = best_mask;
  return best;
}

CpuPods EffectiveCpuPods(CpuPods requested, TieMode mode) {
  if (mode == TieMode::kPaper) return CpuPods::kPolicy;
  if (mode == TieMode::kStock && requested == CpuPods::kExtender) return CpuPods::kPolicy;
  return requested;
}

ReplayResult Replay(const Cluster& c, const std::vector<int32_t>& order, const SimPolicy& policy,
                    const ReplayOptions& opt) {
  ReplayResult r;
  std::vector<SimNode> nodes = c.nodes;
  const size_t n_nodes = nodes.size();
  NodePicker picker(c, policy, opt);
  std::vector<double> node_frag(n_nodes);
  double frag_sum = 0;
  for (size_t i = 0; i < n_nodes; ++i) {
    node_frag[i] = picker.frag().Get(nodes[i]);
    frag_sum += node_frag[i];
  }
  const double cap = static_cast<double>(c.gpu_milli);
  int64_t arrived = 0, allocated = 0, failed = 0;
  r.curve.reserve(order.size());
  for (int32_t pod : order) {
    const size_t sid = static_cast<size_t>(c.pod_shape[static_cast<size_t>(pod)]);
    const PodShape& shape = c.shapes[sid];
    arrived += shape.GpuMilli();
    uint32_t mask = 0;
    const size_t best = picker.Pick(nodes, sid, &mask);
    if (best == n_nodes) {
      failed += shape.GpuMilli();
      ++r.failed_pods;
    } else {
      Place(&nodes[best], shape, mask);
      allocated += shape.GpuMilli();
      const double f = picker.frag().Get(nodes[best]);
      frag_sum += f - node_frag[best];
      node_frag[best] = f;
    }
    StepPoint p;
    p.arrived_pct = static_cast<float>(100.0 * static_cast<double>(arrived) / cap);
    p.allocated_pct = static_cast<float>(100.0 * static_cast<double>(allocated) / cap);
    p.frag_pct = static_cast<float>(100.0 * frag_sum / cap);
    r.curve.push_back(p);
    if (r.first_failure_arrived_pct < 0 && static_cast<double>(failed) >= 0.01 * cap) {
      r.first_failure_arrived_pct = p.arrived_pct;
    }
  }
  r.pods = static_cast<int64_t>(order.size());
  if (!r.curve.empty() && r.curve.back().arrived_pct >= 100.0f) {
    r.unallocated_at_100 = 100.0 - AllocatedAt(r.curve, 100.0);
    r.frag_at_100 = FragAt(r.curve, 100.0);
  }
  return r;
}

double AllocatedAt(const std::vector<StepPoint>& curve, double arrived_pct) {
  return At(curve, arrived_pct, &StepPoint::allocated_pct);
}

double FragAt(const std::vector<StepPoint>& curve, double arrived_pct) {
  return At(curve, arrived_pct, &StepPoint::frag_pct);
}

}  // namespace accelpool::sim
