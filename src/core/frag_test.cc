#include "core/frag.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/fit.h"
#include "core/test_util.h"
#include "core/workload.h"

namespace accelpool::core {
namespace {

using testing::Pod;
using testing::Whole;

FragTask Task(int32_t count, int32_t compute, double weight, int64_t cpu = 0, uint64_t mask = 0) {
  FragTask t;
  t.count = count;
  t.compute = compute;
  t.cpu_milli = cpu;
  t.model_mask = mask;
  t.weight = weight;
  return t;
}

struct FragCase {
  std::string name;
  std::vector<int32_t> free;
  int64_t cpu_free;
  int32_t model_id;
  std::vector<FragTask> tasks;
  double want;
};

TEST(NodeFragmentTest, Table) {
  const std::vector<FragCase> cases = {
      {"empty node, whole-GPU task fits everywhere", {1000, 1000}, -1, 0, {Task(1, 1000, 1)}, 0},
      {"slivers below the task size are fragment", {300, 1000}, -1, 0, {Task(1, 500, 1)}, 300},
      {"too few fitting GPUs strands all idle", {1000, 400}, -1, 0, {Task(2, 1000, 1)}, 1400},
      {"host-only task cannot use any GPU", {1000, 1000}, -1, 0, {Task(0, 0, 1)}, 2000},
      {"model outside the mask strands all", {1000}, -1, 1, {Task(1, 100, 1, 0, 0b01)}, 1000},
      {"model inside the mask", {1000}, -1, 0, {Task(1, 100, 1, 0, 0b01)}, 0},
      {"lacking CPU strands all", {1000, 500}, 2000, 0, {Task(1, 100, 1, 4000)}, 1500},
      {"enough CPU", {1000, 500}, 8000, 0, {Task(1, 100, 1, 4000)}, 0},
      {"weights mix", {200, 1000}, -1, 0, {Task(1, 500, 0.5), Task(1, 100, 0.5)}, 100},
      {"full node has no fragment", {0, 0}, -1, 0, {Task(0, 0, 1)}, 0},
  };
  for (const FragCase& c : cases) {
    FragNode n;
    n.free_compute = c.free;
    n.cpu_free_milli = c.cpu_free;
    n.model_id = c.model_id;
    EXPECT_DOUBLE_EQ(NodeFragment(n, c.tasks), c.want) << c.name;
  }
}

TEST(NodeFragmentTest, MemoryDisqualifiesDevices) {
  std::vector<int32_t> free = {1000, 1000};
  std::vector<int64_t> mem = {1024, 8192};
  FragTask t = Task(1, 100, 1);
  t.memory_mib = 4096;
  FragNode n;
  n.free_compute = free;
  n.free_memory = mem;
  std::vector<FragTask> tasks = {t};
  EXPECT_DOUBLE_EQ(NodeFragment(n, tasks), 1000);
}

TEST(NodeFragmentTest, HostShareCountsHostOnlyTasksByTheHostTheyTake) {
  std::vector<int32_t> free = {1000, 500};  // 1500 idle
  FragTask t = Task(0, 0, 1, 4000);
  t.host_memory_mib = 2048;
  const std::vector<FragTask> tasks = {t};
  auto frag = [&](int64_t cpu_free, int64_t mem_free) {
    FragNode n;
    n.free_compute = free;
    n.cpu_free_milli = cpu_free;
    n.host_memory_free_mib = mem_free;
    return NodeFragment(n, tasks, HostTaskRule::kHostShare);
  };
  EXPECT_DOUBLE_EQ(frag(16000, 65536), 375);   // a quarter of the CPU
  EXPECT_DOUBLE_EQ(frag(16000, 4096), 750);    // half of the memory, the larger share
  EXPECT_DOUBLE_EQ(frag(4000, 65536), 1500);   // all of the CPU
  EXPECT_DOUBLE_EQ(frag(2000, 65536), 1500);   // does not fit: all idle
  EXPECT_DOUBLE_EQ(frag(0, 65536), 1500);
  EXPECT_DOUBLE_EQ(frag(-1, -1), 1500);        // host not tracked: FGD's rule
  FragNode n;
  n.free_compute = free;
  n.cpu_free_milli = 16000;
  EXPECT_DOUBLE_EQ(NodeFragment(n, tasks), 1500);  // FGD: all idle whatever the host
  std::vector<int32_t> full = {0, 0};
  n.free_compute = full;
  EXPECT_DOUBLE_EQ(NodeFragment(n, tasks, HostTaskRule::kHostShare), 0);
}

TEST(NormalizeTasksTest, SumsToOneAndDropsEmpty) {
  std::vector<FragTask> t = NormalizeTasks({Task(1, 1000, 3), Task(1, 500, 1), Task(2, 1000, 0)});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0].weight, 0.75);
  EXPECT_DOUBLE_EQ(t[1].weight, 0.25);
}

TEST(FgdScoreTest, Table) {
  struct C {
    double before, after;
    int32_t want;
  };
  // int(100 * sigmoid(x)): sigmoid(0) = 0.5, sigmoid(1) = 0.731, sigmoid(-1) = 0.269.
  const std::vector<C> cases = {{500, 500, 50}, {1500, 500, 73}, {500, 1500, 26}, {0, 20000, 0}};
  for (const C& c : cases) EXPECT_EQ(FgdScore(c.before, c.after), c.want) << c.before << "->" << c.after;
}

TEST(AccelpoolScoreTest, LessFragmentationGrowthScoresHigher) {
  AccelpoolInputs a;
  a.f_before = 1000;
  a.node_capacity = 8000;
  a.node_idle_after = 4000;
  int32_t last = 101;
  for (double growth : {-500.0, 0.0, 200.0, 800.0, 3000.0}) {
    a.f_after = a.f_before + growth;
    const int32_t s = AccelpoolScore(a);
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 100);
    EXPECT_LE(s, last) << "growth " << growth;
    last = s;
  }
}

TEST(AccelpoolScoreTest, FullerNodeWinsAtEqualFragmentation) {
  AccelpoolInputs empty_node, used_node;
  empty_node.node_capacity = used_node.node_capacity = 8000;
  empty_node.node_idle_after = 7000;
  used_node.node_idle_after = 1000;
  EXPECT_GE(AccelpoolScore(used_node), AccelpoolScore(empty_node));
}

NodeInventory Node(int32_t gpus, const std::string& model) {
  NodeInventory inv;
  inv.node = "n1";
  inv.vendor = Vendor::kNvidia;
  for (int32_t i = 0; i < gpus; ++i) {
    Device d;
    d.id = "GPU-" + std::to_string(i);
    d.index = i;
    d.vendor = Vendor::kNvidia;
    d.model = model;
    d.memory_mib = 16384;
    d.max_shares = 10;
    inv.devices.push_back(d);
  }
  return inv;
}

Placement Share(int32_t device, int32_t compute) {
  Placement p;
  ContainerPlacement c;
  c.container = "main";
  c.grants.push_back(Grant{device, 0, compute, false});
  p.containers.push_back(c);
  return p;
}

TEST(FragmentationPolicyTest, PrefersTheGpuThatLeavesNoSliver) {
  PolicyContext ctx;
  ctx.workload = {TaskShape{.count = 1, .compute = 500, .memory_mib = 0, .model = "", .weight = 1}};
  PolicyPtr p = MakeFragmentationPolicy(ctx);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->Name(), "fragmentation");
  NodeInventory inv = Node(2, "T4");
  NodeUsage usage = NodeUsage::Empty(inv);
  usage.devices[0].compute = 500;  // GPU 0 has exactly one more 500 slot
  usage.devices[0].shares = 1;
  // 500 on GPU 0 fills it; on GPU 1 it leaves two half GPUs, both usable.
  // 400 on GPU 0 leaves a 100 sliver; on GPU 1 it leaves 600 (usable).
  EXPECT_GT(p->PlacementValue(inv, usage, Share(1, 400)), p->PlacementValue(inv, usage, Share(0, 400)));
  EXPECT_GE(p->NodeScore(inv, usage, Share(1, 400)), p->NodeScore(inv, usage, Share(0, 400)));
  EXPECT_EQ(p->NodeScore(inv, usage, Share(0, 500)), 50);  // no change in fragmentation
}

TEST(MeasureFragmentationTest, CountsSliversAndCappedDevicesAsFragmentOfTheIdle) {
  NodeInventory inv = Node(5, "H100");
  inv.devices[2].max_shares = 1;
  inv.devices[4].healthy = false;
  NodeUsage usage = NodeUsage::Empty(inv);
  usage.devices[1] = DeviceUsage{.memory_mib = 4096, .compute = 300, .shares = 1};  // 700 free
  usage.devices[2] = DeviceUsage{.memory_mib = 4096, .compute = 250, .shares = 1};  // capped
  usage.devices[3] =
      DeviceUsage{.memory_mib = 16384, .compute = 1000, .shares = 1, .exclusive = true};
  const std::vector<TaskShape> whole = {
      TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1}};
  FragmentationNow f = MeasureFragmentation(inv, usage, whole);
  // Idle: GPU 0 (1000), GPU 1 (700), GPU 2's stranded 750; GPU 3 is held
  // whole and GPU 4 is unhealthy. A whole-GPU pod can use GPU 0 only.
  EXPECT_EQ(f.idle, 2450);
  EXPECT_DOUBLE_EQ(f.fragment, 700 + 750);
  // A half-GPU pod fits GPU 1 too: only the capped device is fragment.
  const std::vector<TaskShape> half = {
      TaskShape{.count = 1, .compute = 500, .memory_mib = 0, .model = "", .weight = 1}};
  EXPECT_DOUBLE_EQ(MeasureFragmentation(inv, usage, half).fragment, 750);
  // An empty node of the built-in mix: only the pods that ask for no device
  // leave its idle GPUs unused.
  const NodeInventory empty = Node(8, "H100");
  f = MeasureFragmentation(empty, NodeUsage::Empty(empty), {});
  EXPECT_EQ(f.idle, 8000);
  double hostless = 0;
  for (const TaskShape& t : DefaultWorkload()) hostless += t.count == 0 ? t.weight : 0;
  double total = 0;
  for (const TaskShape& t : DefaultWorkload()) total += t.weight;
  EXPECT_NEAR(f.fragment, 8000 * hostless / total, 1e-6);
}

TEST(MeasureFragmentationTest, ForeignMemoryMakesAnIdleDeviceFragmentForWholeTasks) {
  NodeInventory inv = Node(2, "H100");
  inv.devices[1].foreign_mib = 4096;
  const std::vector<TaskShape> whole = {
      TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1}};
  FragmentationNow f = MeasureFragmentation(inv, NodeUsage::Empty(inv), whole);
  // GPU 1 has no grant but cannot be handed out whole: a whole-GPU pod can
  // use GPU 0 only.
  EXPECT_EQ(f.idle, 1999);
  EXPECT_DOUBLE_EQ(f.fragment, 999);
  // A half-GPU pod with memory that fits beside the foreign memory uses both.
  const std::vector<TaskShape> half = {
      TaskShape{.count = 1, .compute = 500, .memory_mib = 1024, .model = "", .weight = 1}};
  EXPECT_DOUBLE_EQ(MeasureFragmentation(inv, NodeUsage::Empty(inv), half).fragment, 0);
}

TEST(MeasureFragmentationTest, AFreeMigInstanceIsIdleButFragmentForEveryTask) {
  // GPU 0 is held whole; device 1 is a MIG instance. Fit hands the instance
  // only to a request for its profile, and no task shape asks for one, so a
  // whole-GPU pod finds nothing here: all the idle is fragment.
  NodeInventory inv = Node(2, "H100");
  inv.devices[1].partition = "1g.10gb";
  inv.devices[1].memory_mib = 9984;
  inv.devices[1].max_shares = 1;
  NodeUsage usage = NodeUsage::Empty(inv);
  usage.devices[0] =
      DeviceUsage{.memory_mib = 16384, .compute = 1000, .shares = 1, .exclusive = true};
  const PodRequest pod = Pod({Whole(Vendor::kNvidia, 1)});
  ASSERT_FALSE(Fit(pod, inv, usage, nullptr).fits());
  const std::vector<TaskShape> whole = {
      TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1}};
  FragmentationNow f = MeasureFragmentation(inv, usage, whole);
  EXPECT_EQ(f.idle, 1000);
  EXPECT_DOUBLE_EQ(f.fragment, 1000);
  // Shares and the built-in mix cannot use it either.
  const std::vector<TaskShape> half = {
      TaskShape{.count = 1, .compute = 500, .memory_mib = 0, .model = "", .weight = 1}};
  EXPECT_DOUBLE_EQ(MeasureFragmentation(inv, usage, half).fragment, 1000);
  f = MeasureFragmentation(inv, usage, {});
  EXPECT_EQ(f.idle, 1000);
  EXPECT_DOUBLE_EQ(f.fragment, 1000);
  // Held by a MIG pod, the instance is neither idle nor fragment.
  usage.devices[1] =
      DeviceUsage{.memory_mib = 9984, .compute = 1000, .shares = 1, .exclusive = true};
  f = MeasureFragmentation(inv, usage, whole);
  EXPECT_EQ(f.idle, 0);
  EXPECT_DOUBLE_EQ(f.fragment, 0);
}

TEST(FragmentationPolicyTest, AMigPlacementLeavesTheWholeGpuFragmentationAlone) {
  // A node with one free whole GPU and two free MIG instances. The instances
  // are fragment for whole-GPU tasks; a MIG pod that takes one removes its
  // part of it (either instance alike) and leaves the whole GPU usable.
  PolicyContext ctx;
  ctx.workload = {
      TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1}};
  PolicyPtr frag = MakeFragmentationPolicy(ctx);
  NodeInventory inv = Node(3, "H100");
  for (int d : {1, 2}) inv.devices[d].partition = "1g.10gb";
  const NodeUsage usage = NodeUsage::Empty(inv);
  auto mig = [](int32_t device) {
    Placement p;
    p.containers.push_back(
        ContainerPlacement{"main", ContainerKind::kRegular, {Grant{device, 0, 0, true}}});
    return p;
  };
  // Before: 2000 fragment (the instances); after: 1000.
  EXPECT_DOUBLE_EQ(frag->PlacementValue(inv, usage, mig(1)), 1000);
  EXPECT_EQ(frag->NodeScore(inv, usage, mig(1)), frag->NodeScore(inv, usage, mig(2)));
  // Taking the whole GPU leaves the instances' fragment as it was.
  EXPECT_DOUBLE_EQ(frag->PlacementValue(inv, usage, mig(0)), 0);
}

TEST(FragmentationPolicyTest, ModelFilteredWorkloadSeesOtherModelsAsFragment) {
  PolicyContext ctx;
  ctx.workload = {TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "A100|H100", .weight = 1}};
  NodeInventory t4 = Node(1, "T4");
  NodeInventory h100 = Node(1, "h100");  // model names match case-insensitively
  EXPECT_EQ(TasksForInventory(ctx.workload, t4)[0].model_mask, 2u);
  EXPECT_EQ(TasksForInventory(ctx.workload, h100)[0].model_mask, 1u);
}

TEST(FragmentationPolicyTest, ShapeModelsMatchAsRequestFiltersDo) {
  // A learned shape keeps the model names the pod asked for; they select
  // devices the way Fit's filters do (case-insensitive substrings).
  const std::vector<TaskShape> a100 = {TaskShape{.count = 1,
                                                 .compute = 1000,
                                                 .memory_mib = 0,
                                                 .model = "a100",
                                                 .weight = 1,
                                                 .cpu_milli = 0,
                                                 .host_memory_mib = 0,
                                                 .memory_percent = 0}};
  EXPECT_EQ(TasksForInventory(a100, Node(1, "NVIDIA A100-SXM4-80GB"))[0].model_mask, 1u);
  EXPECT_EQ(TasksForInventory(a100, Node(1, "NVIDIA H100 80GB HBM3"))[0].model_mask, 2u);
  // So a node of that model counts its idle device as usable, not fragment.
  const NodeInventory inv = Node(1, "NVIDIA A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(MeasureFragmentation(inv, NodeUsage::Empty(inv), a100).fragment, 0);
}

TEST(FragmentationPolicyTest, PercentOnlySharesCountMemory) {
  // 50% of a 16384 MiB device is 8192 MiB: a device with 4096 MiB free
  // cannot take it (its idle compute is fragment for that task).
  DeviceRequest half;
  half.container = "main";
  half.vendor = Vendor::kNvidia;
  half.count = 1;
  half.memory_percent = 50;
  const TaskShape shape = ShapeOfRequest(PodRequest{{half}, {}});
  EXPECT_EQ(shape.memory_percent, 50);
  const NodeInventory inv = Node(1, "T4");
  const std::vector<FragTask> tasks = TasksForInventory({shape}, inv);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].memory_mib, 8192);
  NodeUsage usage = NodeUsage::Empty(inv);
  usage.devices[0].shares = 1;
  usage.devices[0].memory_mib = 12288;
  usage.devices[0].compute = 0;
  EXPECT_DOUBLE_EQ(MeasureFragmentation(inv, usage, {shape}).fragment, 1000);
  usage.devices[0].memory_mib = 8192;
  EXPECT_DOUBLE_EQ(MeasureFragmentation(inv, usage, {shape}).fragment, 0);
}

TEST(AccelpoolPolicyTest, ScoresWithinRangeAndPacks) {
  PolicyPtr p = MakeAccelpoolPolicy(PolicyContext{});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->Name(), "accelpool");
  NodeInventory inv = Node(8, "H100");
  NodeUsage empty = NodeUsage::Empty(inv);
  NodeUsage busy = empty;
  for (int i = 0; i < 6; ++i) {
    busy.devices[i].exclusive = true;
    busy.devices[i].compute = 1000;
  }
  Placement whole;
  whole.containers.push_back(ContainerPlacement{"main", ContainerKind::kRegular, {Grant{6, 0, 0, true}}});
  const int32_t on_empty = p->NodeScore(inv, empty, whole);
  const int32_t on_busy = p->NodeScore(inv, busy, whole);
  EXPECT_GE(on_empty, 0);
  EXPECT_LE(on_busy, 100);
  // Taking a GPU from an untouched 8-GPU node breaks it for 8-GPU tasks.
  EXPECT_GT(on_busy, on_empty);
}

}  // namespace
}  // namespace accelpool::core

namespace accelpool::core {
namespace {

TEST(AccelpoolPolicyTest, AHostWithoutCpuLeftStrandsItsDevices) {
  // Tasks need 8 cores with their GPU. Node A has 4 cores left: its two free
  // GPUs are stranded already, so a pod that fits there costs nothing;
  // node B has cores to spare, so taking a GPU of B changes nothing either,
  // but placing on A turns a stranded GPU into a used one.
  PolicyContext ctx;
  ctx.workload = {TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1, .cpu_milli = 8000, .host_memory_mib = 0}};
  PolicyPtr p = MakeAccelpoolPolicy(ctx);
  NodeInventory inv = Node(2, "T4");
  Placement one;
  one.containers.push_back(
      ContainerPlacement{"main", ContainerKind::kRegular, {Grant{0, 0, 0, true}}});
  one.host = HostResources{4000, 1024};
  NodeUsage a = NodeUsage::Empty(inv);
  a.host_free = HostResources{4000, 65536};
  NodeUsage b = NodeUsage::Empty(inv);
  b.host_free = HostResources{64000, 65536};
  EXPECT_GT(p->NodeScore(inv, a, one), p->NodeScore(inv, b, one));
  // Blind to the host, the two nodes are the same.
  a.host_free.reset();
  b.host_free.reset();
  EXPECT_EQ(p->NodeScore(inv, a, one), p->NodeScore(inv, b, one));
}

TEST(AccelpoolPolicyTest, ThePodsOwnHostRequestCountsAfterThePlacement) {
  // One free GPU of two, 10 cores left; tasks need 8. A pod taking 4 cores
  // leaves 6: the other GPU is stranded. Taking 1 core leaves it usable.
  PolicyContext ctx;
  ctx.workload = {TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1, .cpu_milli = 8000, .host_memory_mib = 0}};
  PolicyPtr p = MakeAccelpoolPolicy(ctx);
  NodeInventory inv = Node(2, "T4");
  NodeUsage u = NodeUsage::Empty(inv);
  u.host_free = HostResources{10000, 65536};
  Placement small, big;
  for (Placement* pl : {&small, &big}) {
    pl->containers.push_back(
        ContainerPlacement{"main", ContainerKind::kRegular, {Grant{0, 0, 0, true}}});
  }
  small.host = HostResources{1000, 0};
  big.host = HostResources{4000, 0};
  EXPECT_GT(p->NodeScore(inv, u, small), p->NodeScore(inv, u, big));
}

TEST(FitTest, TheReturnedPlacementCarriesThePodsHostRequest) {
  NodeInventory inv = Node(2, "T4");
  PodRequest pod = Pod({Whole(Vendor::kNvidia, 1)});
  pod.host = HostResources{2500, 4096};
  FitResult r = Fit(pod, inv, NodeUsage::Empty(inv), nullptr);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(r.placement.host, pod.host);
}

}  // namespace
}  // namespace accelpool::core

namespace accelpool::core {
namespace {

// The policies remember fragmentation values per thread; every score must
// still equal the one computed from scratch, across nodes, usages, and
// workloads that replace one another (a new list may reuse an old address).
TEST(AccelpoolPolicyTest, RememberedFragmentationNeverLeaksBetweenStatesOrWorkloads) {
  std::mt19937 rng(7);
  auto workload = [&](int n) {
    std::vector<TaskShape> w;
    for (int i = 0; i < n; ++i) {
      TaskShape t;
      t.count = static_cast<int32_t>(rng() % 3);
      t.compute = t.count == 0 ? 0 : static_cast<int32_t>(100 * (1 + rng() % 10));
      t.memory_mib = static_cast<int64_t>(rng() % 3) * 4096;
      t.cpu_milli = static_cast<int64_t>(rng() % 4) * 4000;
      t.host_memory_mib = static_cast<int64_t>(rng() % 3) * 8192;
      t.weight = 1 + static_cast<double>(rng() % 5);
      w.push_back(t);
    }
    return w;
  };
  NodeInventory inv = Node(8, "T4");
  for (int round = 0; round < 40; ++round) {
    PolicyContext ctx;
    ctx.workload = workload(16);
    PolicyPtr p = MakeAccelpoolPolicy(ctx);  // the previous one is freed first
    const std::vector<FragTask> tasks = TasksForInventory(ctx.workload, inv);
    for (int k = 0; k < 20; ++k) {
      NodeUsage u = NodeUsage::Empty(inv);
      for (DeviceUsage& d : u.devices) {
        d.compute = static_cast<int32_t>(100 * (rng() % 11));
        d.memory_mib = static_cast<int64_t>(rng() % 4) * 2048;
        d.shares = d.compute > 0 ? 1 : 0;
      }
      if (rng() % 2) u.host_free = HostResources{static_cast<int64_t>(rng() % 20) * 1000, 32768};
      const int32_t dev = static_cast<int32_t>(rng() % 8);
      Placement pl;
      pl.containers.push_back(
          ContainerPlacement{"main",
                             ContainerKind::kRegular,
                             {Grant{dev, 1024, static_cast<int32_t>(100 * (rng() % 5)), false}}});
      pl.host = HostResources{static_cast<int64_t>(rng() % 8) * 1000, 4096};
      // From scratch with the public pieces.
      auto view = [&](bool with) {
        std::vector<int32_t> c(8);
        std::vector<int64_t> m(8);
        for (size_t i = 0; i < 8; ++i) {
          int32_t used = u.devices[i].compute;
          int64_t mem = u.devices[i].memory_mib;
          if (with && static_cast<int32_t>(i) == dev) {
            used += pl.containers[0].grants[0].compute;
            mem += pl.containers[0].grants[0].memory_mib;
          }
          c[i] = std::max(0, kComputeWhole - used);
          m[i] = std::max<int64_t>(0, inv.devices[i].memory_mib - mem);
        }
        return std::pair(c, m);
      };
      auto frag = [&](bool with) {
        auto [c, m] = view(with);
        FragNode n;
        n.free_compute = c;
        n.free_memory = m;
        n.model_id = 0;
        if (u.host_free) {
          n.cpu_free_milli =
              std::max<int64_t>(0, u.host_free->cpu_milli - (with ? pl.host.cpu_milli : 0));
          n.host_memory_free_mib =
              std::max<int64_t>(0, u.host_free->memory_mib - (with ? pl.host.memory_mib : 0));
        }
        return NodeFragment(n, tasks, HostTaskRule::kHostShare);
      };
      AccelpoolInputs in;
      in.f_before = frag(false);
      in.f_after = frag(true);
      in.node_capacity = 8 * kComputeWhole;
      auto [after_c, after_m] = view(true);
      for (int32_t f : after_c) in.node_idle_after += f;
      ASSERT_EQ(p->NodeScore(inv, u, pl), AccelpoolScore(in)) << "round " << round << " k " << k;
    }
  }
}

}  // namespace
}  // namespace accelpool::core
