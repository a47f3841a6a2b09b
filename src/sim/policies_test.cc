#include "sim/policies.h"

#include <gtest/gtest.h>

#include <bit>
#include <random>

#include "core/fit.h"
#include "sim/cluster.h"

namespace accelpool::sim {
namespace {

SimNode Node(std::vector<int32_t> free, int64_t cpu = 64000, int64_t mem = 262144, int32_t model = 0) {
  SimNode n;
  n.gpus = static_cast<int32_t>(free.size());
  for (size_t i = 0; i < free.size(); ++i) n.free[i] = free[i];
  n.cpu_free = n.cpu_cap = cpu;
  n.mem_free = n.mem_cap = mem;
  n.model_id = model;
  return n;
}

PodShape Pod(int32_t num, int32_t milli, int64_t cpu = 1000, int64_t mem = 1024, uint64_t mask = 0) {
  PodShape p;
  p.num_gpu = num;
  p.milli = num == 0 ? 0 : milli;
  p.cpu = cpu;
  p.mem = mem;
  p.model_mask = mask;
  return p;
}

TEST(FitsTest, Table) {
  struct C {
    std::string name;
    SimNode node;
    PodShape pod;
    bool want;
  };
  const std::vector<C> cases = {
      {"share on a partly used GPU", Node({300, 0}), Pod(1, 300), true},
      {"share too big for every GPU", Node({299, 0}), Pod(1, 300), false},
      {"whole GPUs need fully free ones", Node({1000, 900, 1000}), Pod(2, 1000), true},
      {"not enough fully free", Node({1000, 900}), Pod(2, 1000), false},
      {"more GPUs than the node has", Node({1000, 1000}), Pod(4, 1000), false},
      {"CPU short", Node({1000}, 500), Pod(1, 1000, 1000), false},
      {"memory short", Node({1000}, 64000, 100), Pod(1, 1000, 1000, 1024), false},
      {"model in the mask", Node({1000}, 64000, 262144, 2), Pod(1, 500, 1, 1, 0b100), true},
      {"model outside the mask", Node({1000}, 64000, 262144, 1), Pod(1, 500, 1, 1, 0b100), false},
      {"CPU-only pod on a full node", Node({0, 0}), Pod(0, 0), true},
  };
  for (const C& c : cases) EXPECT_EQ(Fits(c.node, c.pod), c.want) << c.name;
}

TEST(PolicyTest, EveryPolicyReturnsALegalChoice) {
  std::mt19937_64 rng(7);
  Cluster c;
  c.tasks = core::NormalizeTasks({core::FragTask{1, 1000, 0, 0, 0, 0, 0.6},
                                  core::FragTask{1, 500, 0, 0, 0, 0, 0.4}});
  c.memory_tasks = c.tasks;
  FragCache frag(&c.tasks), mem_frag(&c.memory_tasks, true, core::HostTaskRule::kHostShare);
  FragCache ext_frag(&c.tasks, false, core::HostTaskRule::kHostShare, /*host_blind=*/true);
  FragCache ext_fgd(&c.tasks, false, core::HostTaskRule::kAllIdle, /*host_blind=*/true);
  EvalContext ctx{&c, &frag, &mem_frag, &ext_frag, &ext_fgd, &rng};
  std::vector<SimNode> nodes = {Node({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}),
                                Node({190, 0, 1000, 500, 1000, 1000, 30, 1000}), Node({600, 1000}),
                                // Past the paper's 8 GPUs / 128 cores: still 0-100.
                                Node(std::vector<int32_t>(16, 1000), 256000),
                                Node(std::vector<int32_t>(12, 1000), 64000)};
  // A 16-GPU node that hosts pods of another kind (clustering's lowest base).
  nodes.push_back(Node(std::vector<int32_t>(16, 1000), 64000));
  nodes.back().free[0] = 500;
  nodes.back().tags[static_cast<size_t>(Tag::kEight)] = 1;
  const std::vector<PodShape> pods = {Pod(1, 810), Pod(1, 470), Pod(1, 1000), Pod(2, 1000),
                                      Pod(0, 0)};
  for (const std::string& name : SimPolicyNames()) {
    StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->Name(), name);
    for (const SimNode& n : nodes) {
      for (const PodShape& pod : pods) {
        if (!Fits(n, pod)) continue;
        const Choice ch = (*p)->Evaluate(n, pod, ctx);
        EXPECT_GE(ch.score, 0) << name;
        EXPECT_LE(ch.score, 100) << name;
        EXPECT_EQ(std::popcount(ch.mask), pod.num_gpu) << name;
        for (int32_t i = 0; i < n.gpus; ++i) {
          if ((ch.mask >> i) & 1U) {
            EXPECT_GE(n.free[i], pod.milli) << name << " gpu " << i;
          }
        }
      }
    }
  }
  EXPECT_FALSE(MakeSimPolicy("tetris").ok());
}

TEST(PolicyTest, BestFitPrefersTheFullerNode) {
  std::mt19937_64 rng(1);
  Cluster c;
  FragCache frag(&c.tasks), mem_frag(&c.memory_tasks, true, core::HostTaskRule::kHostShare);
  EvalContext ctx{&c, &frag, &mem_frag, nullptr, nullptr, &rng};
  StatusOr<std::unique_ptr<SimPolicy>> p = MakeSimPolicy("bestfit");
  ASSERT_TRUE(p.ok());
  const Choice full = (*p)->Evaluate(Node({1000, 0, 0, 0}), Pod(1, 1000), ctx);
  const Choice empty = (*p)->Evaluate(Node({1000, 1000, 1000, 1000}), Pod(1, 1000), ctx);
  EXPECT_GT(full.score, empty.score);
}

TEST(FragCacheTest, MatchesDirectMeasure) {
  Cluster c;
  c.tasks = core::NormalizeTasks({core::FragTask{1, 600, 0, 2000, 0, 0, 1}});
  FragCache cache(&c.tasks);
  const SimNode a = Node({500, 1000, 700}, 4000);
  const SimNode b = Node({1000, 700, 500}, 4000);  // same multiset, other order
  EXPECT_DOUBLE_EQ(cache.Get(a), core::NodeFragment(FragView(a), c.tasks));
  EXPECT_DOUBLE_EQ(cache.Get(b), cache.Get(a));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_DOUBLE_EQ(cache.After(a, Pod(1, 600, 3000), 0b010), core::NodeFragment(FragView(Node({500, 400, 700}, 1000)), c.tasks));
}

// The fast path (Fits + DefaultMask) must place as the allocation core does.
TEST(CoreFitTest, FastPathMatchesCoreFit) {
  std::mt19937_64 rng(42);
  const std::vector<std::string> models = {"T4", "V100M16", "G2"};
  const std::vector<int32_t> sizes = {1000, 810, 470, 320, 230, 110, 50};
  int checked = 0;
  for (int round = 0; round < 400; ++round) {
    const int32_t gpus = std::vector<int32_t>{1, 2, 4, 8}[rng() % 4];
    std::vector<int32_t> free(static_cast<size_t>(gpus));
    for (int32_t& f : free) f = rng() % 3 == 0 ? 1000 : static_cast<int32_t>(rng() % 1001);
    const SimNode n = Node(free, 1 << 30, 1 << 30, static_cast<int32_t>(rng() % 3));
    const int32_t milli = sizes[rng() % sizes.size()];
    const int32_t num = milli < 1000 ? 1 : std::vector<int32_t>{1, 2, 4, 8}[rng() % 4];
    const uint64_t mask = rng() % 4 == 0 ? (uint64_t{1} << (rng() % 3)) : 0;
    const PodShape pod = Pod(num, milli, 1, 1, mask);
    const core::NodeInventory inv = ToInventory(n, "node", models[static_cast<size_t>(n.model_id)]);
    const core::PodRequest req = ToPodRequest(pod, models);
    ASSERT_TRUE(core::ValidateInventory(inv).ok());
    ASSERT_TRUE(core::ValidatePodRequest(req).ok());
    const core::FitResult fit = core::Fit(req, inv, ToUsage(n));
    ASSERT_EQ(fit.fits(), Fits(n, pod)) << "round " << round;
    if (!fit.fits()) continue;
    uint32_t core_mask = 0;
    for (const core::Grant& g : fit.placement.containers.at(0).grants) core_mask |= 1U << g.device;
    EXPECT_EQ(core_mask, DefaultMask(n, pod)) << "round " << round;
    EXPECT_TRUE(core::CheckPlacement(req, inv, ToUsage(n), fit.placement).ok());
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace accelpool::sim
