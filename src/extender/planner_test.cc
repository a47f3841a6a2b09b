#include "extender/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/node_order.h"

#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::AddGpuNode;
using testing::Gpu;
using testing::MakePod;

// Reserves GPU 0 of `node` whole for a pod "x": the node is no longer idle.
Status TakeOneGpu(Cache& c, const std::string& node) {
  return c.Reserve(
      PodRef{"x", "ns", "x", ""},
      PodAssignment{
          node,
          "binpack",
          {AssignmentPart{core::Vendor::kNvidia,
                          core::Placement{{core::ContainerPlacement{
                              "m", core::ContainerKind::kRegular, {core::Grant{0, 0, 0, true}}}},
                                          {}},
                          {{0}},
                          {}}}},
      0);
}

core::PolicyPtr Binpack() {
  StatusOr<core::PolicyPtr> p = core::MakePolicy("binpack");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

TEST(PlannerTest, PlanNodeOutcomes) {
  Cache c;
  AddGpuNode(c, "a");
  c.UpsertNode("bad", StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("bad doc")),
               0, {});
  core::PolicyPtr policy = Binpack();
  struct Case {
    const char* name;
    const char* node;
    PodInfo pod;
    core::FitCode want;
    const char* want_text;  // substring of Describe() when it does not fit
  };
  const Case cases[] = {
      {"fits", "a", MakePod("p", {Gpu(2)}), core::FitCode::kFits, ""},
      {"unknown node", "zzz", MakePod("p", {Gpu(1)}), core::FitCode::kUnresolvable,
       "no accelpool inventory"},
      {"unparsable inventory", "bad", MakePod("p", {Gpu(1)}), core::FitCode::kUnschedulable,
       "does not parse"},
      {"too many devices", "a", MakePod("p", {Gpu(9)}), core::FitCode::kUnresolvable, ""},
      {"no pooled request fits anywhere", "a", MakePod("p", {}), core::FitCode::kFits, ""},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    NodeSnapshotPtr snap = c.Node(tc.node);
    NodePlan plan = PlanNode(tc.pod, snap.get(), *policy);
    EXPECT_EQ(plan.code, tc.want) << plan.Describe();
    if (plan.fits()) {
      EXPECT_EQ(plan.parts.size(), tc.pod.vendors.size());
      EXPECT_GE(plan.score, 0);
      EXPECT_LE(plan.score, 100);
    } else {
      EXPECT_TRUE(plan.parts.empty());
      EXPECT_NE(plan.Describe().find(tc.want_text), std::string::npos) << plan.Describe();
    }
  }
}

TEST(PlannerTest, MakePodInfoCountsDevicesHeldAtOnce) {
  PodInfo p = MakePod("p", {Gpu(4, 0, 0, "init", core::ContainerKind::kInit), Gpu(2, 0, 0, "a"),
                            Gpu(1, 0, 0, "b")});
  EXPECT_EQ(p.devices, 4);
  EXPECT_EQ(p.vendors, std::vector<core::Vendor>{core::Vendor::kNvidia});
}

std::vector<HostPriority> Rank(const PodInfo& pod, const std::vector<RankInput>& in,
                               const std::map<std::string, NodeDomains>& job = {}) {
  return RankNodes(pod, in, job);
}

TEST(PlannerTest, RankFoldsStableTieBreak) {
  PodInfo pod = MakePod("p", {Gpu(1)});
  auto out = Rank(pod, {{"c", 40, nullptr}, {"b", 80, nullptr}, {"a", 80, nullptr}});
  EXPECT_EQ(out, (std::vector<HostPriority>{{"a", 10}, {"b", 9}, {"c", 4}}));
  // Exactly one node gets the maximum; among equal scores the salted stable
  // order (core::StableNodeOrder) decides, the order the simulator measures.
  auto ties = Rank(pod, {{"x", 50, nullptr}, {"y", 50, nullptr}, {"z", 50, nullptr}});
  std::vector<std::string> names = {"x", "y", "z"};
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return core::StableNodeOrder(0, a) < core::StableNodeOrder(0, b);
  });
  EXPECT_EQ(ties[0], (HostPriority{names[0], 10}));
  EXPECT_EQ(ties[1], (HostPriority{names[1], 9}));
  EXPECT_EQ(ties[2], (HostPriority{names[2], 9}));
  // Another deployment's salt gives another fixed order for some salt.
  bool changed = false;
  for (uint64_t salt = 1; salt < 64 && !changed; ++salt) {
    RankOptions o;
    o.tie_salt = salt;
    changed = RankNodes(pod, {{"x", 50, nullptr}, {"y", 50, nullptr}, {"z", 50, nullptr}}, {}, o)
                  .front()
                  .host != names[0];
  }
  EXPECT_TRUE(changed);
  EXPECT_EQ(Rank(pod, {}).size(), 0u);
  auto zeros = Rank(pod, {{"b", 0, nullptr}, {"a", 0, nullptr}});
  EXPECT_EQ(zeros, (std::vector<HostPriority>{{"a", 10}, {"b", 0}}));
  // A pod that asks for no device: every node tied for the best gets 10, and
  // kube-scheduler picks one of them at random.
  const PodInfo host_pod = MakePod("h", {});
  ASSERT_FALSE(host_pod.Pooled());
  auto host = Rank(host_pod, {{"c", 40, nullptr}, {"b", 80, nullptr}, {"a", 80, nullptr}});
  EXPECT_EQ(host, (std::vector<HostPriority>{{"a", 10}, {"b", 10}, {"c", 4}}));
}

TEST(PlannerTest, JobSiblingsPullTowardTheirDomain) {
  Cache c;
  AddGpuNode(c, "a", 4, {"sn-1", "", ""});
  AddGpuNode(c, "b", 4, {"sn-2", "", ""});
  AddGpuNode(c, "sib", 4, {"sn-2", "", ""});
  PodInfo pod = MakePod("p", {Gpu(8)}, "ns/job");
  std::vector<RankInput> in = {{"a", 60, c.Node("a")}, {"b", 50, c.Node("b")}};
  // Without siblings the policy decides.
  EXPECT_EQ(Rank(pod, in).front().host, "a");
  // A sibling in b's super-node wins over a 10-point policy lead.
  EXPECT_EQ(Rank(pod, in, {{"sib", NodeDomains{"sn-2", "", ""}}}).front().host, "b");
  // A sibling on the node itself wins over one in the super-node.
  std::vector<RankInput> in2 = {{"b", 50, c.Node("b")}, {"sib", 45, c.Node("sib")}};
  EXPECT_EQ(Rank(pod, in2, {{"sib", NodeDomains{"sn-2", "", ""}}}).front().host, "sib");
}

TEST(PlannerTest, SmallPodsKeepIdleNodesWhole) {
  Cache c;
  AddGpuNode(c, "idle");
  AddGpuNode(c, "busy");
  ASSERT_TRUE(TakeOneGpu(c, "busy").ok());
  std::vector<RankInput> in = {{"idle", 60, c.Node("idle")}, {"busy", 50, c.Node("busy")}};
  RankOptions keep_whole;
  keep_whole.idle_node_penalty = 15;
  EXPECT_EQ(RankNodes(MakePod("small", {Gpu(1)}), in, {}, keep_whole).front().host, "busy");
  // A pod that takes the whole node has nothing to keep whole.
  EXPECT_EQ(RankNodes(MakePod("big", {Gpu(8)}), in, {}, keep_whole).front().host, "idle");
  // By default (core::RankPenalties) the idle-node penalty is off: the
  // fragmentation-aware policy prices breaking a node itself.
  EXPECT_EQ(Rank(MakePod("small", {Gpu(1)}), in).front().host, "idle");
}

TEST(PlannerTest, SmallPodsKeepIdleSuperNodesWhole) {
  Cache c;
  AddGpuNode(c, "idle-sn", 8, {"sn-1", "", ""});
  AddGpuNode(c, "busy-sn", 8, {"sn-2", "", ""});
  AddGpuNode(c, "busy", 8, {"sn-2", "", ""});
  ASSERT_TRUE(TakeOneGpu(c, "busy").ok());
  // Both candidates are idle nodes; only idle-sn's super-node is idle too, so
  // the default super-node penalty (10) sends a small pod to busy-sn.
  std::vector<RankInput> in = {{"idle-sn", 55, c.Node("idle-sn")},
                               {"busy-sn", 50, c.Node("busy-sn")},
                               {"busy", 0, c.Node("busy")}};
  EXPECT_EQ(Rank(MakePod("small", {Gpu(1)}), in).front().host, "busy-sn");
  EXPECT_EQ(Rank(MakePod("big", {Gpu(8)}), in).front().host, "idle-sn");
}

// The busy node a filter drops (full) still makes its super-node busy: with
// the cluster's count (Cache::BusyInSuperNode), a small pod goes beside it
// and not into the idle super-node. Counted among the candidates alone, both
// super-nodes looked idle.
TEST(PlannerTest, ABusyNodeTheFilterDroppedStillMakesItsSuperNodeBusy) {
  Cache c;
  AddGpuNode(c, "idle-sn", 8, {"sn-1", "", ""});
  AddGpuNode(c, "busy-sn", 8, {"sn-2", "", ""});
  AddGpuNode(c, "full", 8, {"sn-2", "", ""});
  ASSERT_TRUE(TakeOneGpu(c, "full").ok());
  EXPECT_EQ(c.BusyInSuperNode("sn-2"), 1);
  EXPECT_EQ(c.BusyInSuperNode("sn-1"), 0);
  std::vector<RankInput> in = {{"idle-sn", 55, c.Node("idle-sn")},
                               {"busy-sn", 50, c.Node("busy-sn")}};
  auto busy = [&c](const std::string& sn) { return c.BusyInSuperNode(sn); };
  EXPECT_EQ(RankNodes(MakePod("small", {Gpu(1)}), in, {}, {}, busy).front().host, "busy-sn");
  EXPECT_EQ(Rank(MakePod("small", {Gpu(1)}), in).front().host, "idle-sn");
  // The count follows the cache: the node going, coming back with its pod,
  // and the pod going.
  c.RemoveNode("full");
  EXPECT_EQ(c.BusyInSuperNode("sn-2"), 0);
  AddGpuNode(c, "full", 8, {"sn-2", "", ""});
  EXPECT_EQ(c.BusyInSuperNode("sn-2"), 1);
  c.Release("x");
  EXPECT_EQ(c.BusyInSuperNode("sn-2"), 0);
}

}  // namespace
}  // namespace accelpool::extender
