#include "extender/extender.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "api/inventory_codec.h"
#include "extender/convert.h"
#include "extender/kube_adapters.h"
#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::AddGpuNode;
using testing::FakeEvents;
using testing::FakeWriter;
using testing::Gpu;
using testing::MakePod;

class ExtenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto reg = ExtenderMetrics::Register(registry_);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    metrics_ = *reg;
    ExtenderOptions o;
    o.policy = "binpack";
    auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ext_ = std::move(e).value();
  }
  int64_t Used(const std::string& node) {
    int64_t n = 0;
    for (const auto& u : cache_.Node(node)->inventories[0].usage.devices) {
      n += u.exclusive ? 1 : 0;
    }
    return n;
  }

  Cache cache_;
  MetricsRegistry registry_;
  ExtenderMetrics metrics_;
  FakeWriter writer_;
  FakeEvents events_;
  std::unique_ptr<Extender> ext_;
};

TEST_F(ExtenderTest, UnknownPolicyIsRejectedWithTheList) {
  ExtenderOptions o;
  o.policy = "nope";
  auto e = Extender::Create(cache_, o, nullptr, nullptr, nullptr, Logger());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("binpack"), std::string::npos) << e.status().message();
}

TEST_F(ExtenderTest, FilterAnswersEveryNodeWithReasons) {
  AddGpuNode(cache_, "free");
  AddGpuNode(cache_, "full");
  cache_.UpsertNode("bad", StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("x")), 0,
                    {});
  ASSERT_TRUE(ext_->Bind(MakePod("filler", {Gpu(8)}), "full").ok());
  FilterDecision d = ext_->Filter(MakePod("p", {Gpu(2)}), {"free", "full", "bad", "unknown"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"free"});
  ASSERT_EQ(d.failed.size(), 2u);
  EXPECT_TRUE(d.failed.count("full"));
  EXPECT_NE(d.failed["bad"].find("does not parse"), std::string::npos);
  ASSERT_EQ(d.unresolvable.size(), 1u);
  EXPECT_TRUE(d.unresolvable.count("unknown"));
  EXPECT_FALSE(d.failed["full"].empty());
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find("accelpool_extender_filter_nodes_total{outcome=\"fits\""), std::string::npos);
  // Rendered from the start, so an alert on increase() sees the first one.
  EXPECT_NE(page.find("accelpool_extender_assignment_key_reload_errors_total 0"),
            std::string::npos);
}

TEST_F(ExtenderTest, NoFitRaisesAnEvent) {
  AddGpuNode(cache_, "a");
  FilterDecision d = ext_->Filter(MakePod("big", {Gpu(16)}), {"a"});
  EXPECT_TRUE(d.fits.empty());
  auto ev = events_.events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].find("Warning AccelpoolNoFit"), std::string::npos) << ev[0];
}

// Nodes turned away with a message and no core reason (no inventory, an
// inventory that does not parse, devices held for a preemptor) are counted
// and named in the event and the audit line like the others, and a held node
// has its own metric reason.
TEST_F(ExtenderTest, EveryRejectedNodeIsExplainedAndCountedByWhy) {
  AddGpuNode(cache_, "held");
  cache_.UpsertNode("bad", StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("x")), 0,
                    {});
  ASSERT_TRUE(ext_->Bind(MakePod("v", {Gpu(8)}), "held").ok());
  PodInfo preemptor = MakePod("p", {Gpu(8)});
  preemptor.priority = 100;
  ASSERT_EQ(ext_->Preempt(preemptor, {{"held", MetaVictims{{"v"}, 0}}}).size(), 1u);
  cache_.Release("v");
  PodInfo low = MakePod("low", {Gpu(2)});
  FilterDecision d = ext_->Filter(low, {"held", "bad", "none-1", "none-2"});
  EXPECT_TRUE(d.fits.empty());
  auto ev = events_.events();
  ASSERT_EQ(ev.size(), 2u);  // v's AccelpoolAssigned, then low's AccelpoolNoFit
  ev.erase(ev.begin());
  EXPECT_NE(ev[0].find("AccelpoolNoFit"), std::string::npos) << ev[0];
  EXPECT_NE(ev[0].find("2 nodes: no accelpool inventory published"), std::string::npos) << ev[0];
  EXPECT_NE(ev[0].find("1 node: node inventory does not parse"), std::string::npos) << ev[0];
  EXPECT_NE(ev[0].find("1 node: the devices preemption freed here are held for ns/pod-p"),
            std::string::npos)
      << ev[0];
  const std::string page = registry_.Serialize();
  EXPECT_NE(
      page.find(
          R"(accelpool_extender_filter_nodes_total{outcome="unschedulable",reason="HeldForPreemptor"} 1)"),
      std::string::npos)
      << page;
  EXPECT_NE(
      page.find(
          R"(accelpool_extender_filter_nodes_total{outcome="unschedulable",reason="InventoryInvalid"} 1)"),
      std::string::npos)
      << page;
  EXPECT_NE(
      page.find(
          R"(accelpool_extender_filter_nodes_total{outcome="unresolvable",reason="NoInventory"} 2)"),
      std::string::npos)
      << page;
}

TEST_F(ExtenderTest, PrioritizeRanksEveryCandidateWithOneWinner) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  AddGpuNode(cache_, "c");
  ASSERT_TRUE(ext_->Bind(MakePod("x", {Gpu(4)}), "b").ok());
  PodInfo pod = MakePod("p", {Gpu(2)});
  ext_->Filter(pod, {"a", "b", "c"});
  std::vector<HostPriority> got = ext_->Prioritize(pod, {"a", "b", "c"});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].host, "b");  // binpack and keep-whole both prefer the used node
  EXPECT_EQ(got[0].score, kMaxExtenderPriority);
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_LT(got[i].score, kMaxExtenderPriority);
    EXPECT_GE(got[i].score, 0);
  }
  // Without a preceding filter the scores are computed afresh, identically.
  EXPECT_EQ(ext_->Prioritize(MakePod("other", {Gpu(2)}), {"a", "b", "c"}), got);
}

TEST_F(ExtenderTest, PrioritizeAcceptsNodesInAnotherOrderThanFilters) {
  // Filter's scores are walked in filter's order; a reordered list, a node
  // filter never saw and one it answered but prioritize does not get all
  // score as a fresh prioritize does.
  for (const char* n : {"a", "b", "c", "d", "e"}) AddGpuNode(cache_, n);
  ASSERT_TRUE(ext_->Bind(MakePod("x", {Gpu(4)}), "b").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("y", {Gpu(6)}), "d").ok());
  PodInfo pod = MakePod("p", {Gpu(2)});
  ASSERT_EQ(ext_->Filter(pod, {"a", "b", "c", "d"}).fits.size(), 4u);
  const std::vector<std::string> order = {"d", "e", "b", "a"};
  std::vector<HostPriority> got = ext_->Prioritize(pod, order);
  ASSERT_EQ(got.size(), order.size());
  EXPECT_EQ(got, ext_->Prioritize(MakePod("fresh", {Gpu(2)}), order));
  EXPECT_EQ(got[0].host, "d");  // the fullest node that still fits 2 GPUs
}

TEST_F(ExtenderTest, PickInFilterAnswersTheNodePrioritizeRanksFirst) {
  // With --pick-in-filter, filter's one node is prioritize's 10, for every
  // policy and with job siblings pulling toward their super-node.
  for (int i = 0; i < 12; ++i) {
    AddGpuNode(cache_, "n" + std::to_string(i), 8, {"sn-" + std::to_string(i / 4), "", ""});
  }
  ASSERT_TRUE(ext_->Bind(MakePod("x", {Gpu(3)}), "n1").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("y", {Gpu(5)}), "n6").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("sib", {Gpu(1)}, "ns/job"), "n9").ok());
  std::vector<std::string> all;
  for (int i = 0; i < 12; ++i) all.push_back("n" + std::to_string(i));
  for (const char* policy : {"binpack", "spread", "accelpool"}) {
    ExtenderOptions o;
    o.policy = policy;
    auto plain = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
    o.pick_in_filter = true;
    auto picking = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
    ASSERT_TRUE(plain.ok() && picking.ok());
    for (const PodInfo& pod : {MakePod("p", {Gpu(2)}), MakePod("q", {Gpu(1)}, "ns/job")}) {
      FilterDecision full = (*plain)->Filter(pod, all);
      ASSERT_GT(full.fits.size(), 1u) << policy;
      const std::vector<HostPriority> ranked = (*plain)->Prioritize(pod, full.fits);
      FilterDecision one = (*picking)->Filter(pod, all);
      ASSERT_EQ(one.fits.size(), 1u) << policy;
      EXPECT_EQ(one.fits[0], ranked.front().host) << policy << " " << pod.ref.name;
      EXPECT_EQ(one.failed, full.failed) << policy;  // the nodes that do not fit, only
    }
  }
}

TEST_F(ExtenderTest, PickInFilterLeavesTheChoiceToKubeSchedulerWhenItsScoresMatter) {
  ExtenderOptions o;
  o.policy = "binpack";
  o.pick_in_filter = true;
  auto picking = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(picking.ok());
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  EXPECT_EQ((*picking)->Filter(MakePod("p", {Gpu(1)}), {"a", "b"}).fits.size(), 1u);
  // The pod prefers something kube-scheduler scores: every feasible node.
  PodInfo soft = MakePod("s", {Gpu(1)});
  soft.soft_preferences = true;
  EXPECT_EQ((*picking)->Filter(soft, {"a", "b"}).fits.size(), 2u);
  // A candidate with a PreferNoSchedule taint: every feasible node.
  AddGpuNode(cache_, "c", 4, NodeDomains{"", "", "", true});
  EXPECT_EQ((*picking)->Filter(MakePod("q", {Gpu(1)}), {"a", "b", "c"}).fits.size(), 3u);
}

TEST_F(ExtenderTest, APodsOwnPolicyDecidesItsDevices) {
  // binpack (the extender's --policy here) puts a share on the used device;
  // a pod annotated spread (HAMi's name) takes an empty one, and records it.
  AddGpuNode(cache_, "a");
  core::DeviceRequest share = Gpu(1);
  share.memory_mib = 1024;
  share.compute = 100;
  ASSERT_TRUE(ext_->Bind(MakePod("first", {share}), "a").ok());
  auto device_of = [](const PodAssignment& a) {
    return a.parts.at(0).placement.containers.at(0).grants.at(0).device;
  };
  const int32_t used = device_of(*cache_.Assignment("first"));
  StatusOr<PodAssignment> packed = ext_->Bind(MakePod("packed", {share}), "a");
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(device_of(*packed), used);
  EXPECT_EQ(packed->policy, "binpack");
  PodInfo spread = MakePod("spread", {share});
  spread.policy = "Spread";
  ext_->Filter(spread, {"a"});  // memo keys differ by policy: no binpack plan reused
  StatusOr<PodAssignment> apart = ext_->Bind(spread, "a");
  ASSERT_TRUE(apart.ok());
  EXPECT_NE(device_of(*apart), used);
  EXPECT_EQ(apart->policy, "spread");
  // A name that is no policy falls back to --policy (the webhook refuses it).
  PodInfo odd = MakePod("odd", {share});
  odd.policy = "fastest";
  StatusOr<PodAssignment> fallback = ext_->Bind(odd, "a");
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->policy, "binpack");
  EXPECT_EQ(device_of(*fallback), used);
}

// HAMi's two annotations: gpu-scheduler-policy picks the devices inside a
// node and leaves the node to the cluster's policy (binpack here);
// node-scheduler-policy (or accelpool.io/node-policy) scores the nodes.
// accelpool.io/policy alone does both.
TEST_F(ExtenderTest, ANodePolicyScoresTheNodesAndAGpuPolicyOnlyTheDevices) {
  AddGpuNode(cache_, "busy");
  AddGpuNode(cache_, "idle");
  core::DeviceRequest share = Gpu(1);
  share.memory_mib = 1024;
  share.compute = 100;
  ASSERT_TRUE(ext_->Bind(MakePod("first", {share}), "busy").ok());
  auto first_choice = [&](const PodInfo& pod) {
    std::vector<HostPriority> ranked = ext_->Prioritize(pod, {"busy", "idle"});
    return ranked.empty() ? std::string() : ranked.front().host;
  };
  PodInfo plain = MakePod("plain", {share});
  EXPECT_EQ(first_choice(plain), "busy");  // --policy binpack
  PodInfo both = MakePod("both", {share});
  both.policy = "spread";  // accelpool.io/policy: devices and nodes
  EXPECT_EQ(first_choice(both), "idle");
  PodInfo gpu_only = MakePod("gpu-only", {share});
  gpu_only.policy = "spread";  // hami.io/gpu-scheduler-policy
  gpu_only.policy_devices_only = true;
  EXPECT_EQ(first_choice(gpu_only), "busy");
  StatusOr<PodAssignment> spread_inside = ext_->Bind(gpu_only, "busy");
  ASSERT_TRUE(spread_inside.ok());
  EXPECT_NE(spread_inside->parts.at(0).placement.containers.at(0).grants.at(0).device,
            cache_.Assignment("first")->parts.at(0).placement.containers.at(0).grants.at(0).device);
  PodInfo node_spread = MakePod("node-spread", {share});
  node_spread.policy = "spread";
  node_spread.policy_devices_only = true;
  node_spread.node_policy = "Spread";  // hami.io/node-scheduler-policy
  EXPECT_EQ(first_choice(node_spread), "idle");
  PodInfo node_only = MakePod("node-only", {share});
  node_only.node_policy = "spread";  // accelpool.io/node-policy, devices by --policy
  EXPECT_EQ(first_choice(node_only), "idle");
  node_only.node_policy = "fastest";  // no policy: --policy (the webhook refuses it)
  EXPECT_EQ(first_choice(node_only), "busy");
}

// --node-policy: nodes scored by it for pods that name no policy of their
// own, devices still picked by --policy; a pod's accelpool.io/policy does both.
TEST_F(ExtenderTest, TheClusterNodePolicyScoresNodesForPodsWithoutTheirOwn) {
  ExtenderOptions o;
  o.policy = "binpack";
  o.node_policy = "spread";
  auto split = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  AddGpuNode(cache_, "busy");
  AddGpuNode(cache_, "idle");
  core::DeviceRequest share = Gpu(1);
  share.memory_mib = 1024;
  share.compute = 100;
  ASSERT_TRUE((*split)->Bind(MakePod("first", {share}), "busy").ok());
  auto first_choice = [&](const PodInfo& pod) {
    std::vector<HostPriority> ranked = (*split)->Prioritize(pod, {"busy", "idle"});
    return ranked.empty() ? std::string() : ranked.front().host;
  };
  EXPECT_EQ(first_choice(MakePod("plain", {share})), "idle");
  PodInfo own = MakePod("own", {share});
  own.policy = "binpack";
  EXPECT_EQ(first_choice(own), "busy");
  // On the busy node, the plain pod's share still packs onto the used GPU.
  StatusOr<PodAssignment> packed = (*split)->Bind(MakePod("packed", {share}), "busy");
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->parts.at(0).placement.containers.at(0).grants.at(0).device,
            cache_.Assignment("first")->parts.at(0).placement.containers.at(0).grants.at(0).device);
  o.node_policy = "fastest";
  EXPECT_FALSE(Extender::Create(cache_, o, nullptr, nullptr, nullptr, Logger()).ok());
}

TEST_F(ExtenderTest, BindIsOneBindingCarryingTheAssignment) {
  AddGpuNode(cache_, "a");
  StatusOr<PodAssignment> a = ext_->Bind(MakePod("p1", {Gpu(2)}), "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->node, "a");
  EXPECT_EQ(writer_.calls(), (std::vector<std::string>{"bind p1 a"}));
  EXPECT_EQ(Used("a"), 2);
  EXPECT_EQ(cache_.Stats().pods_bound, 1);
}

TEST_F(ExtenderTest, FailedBindGivesDevicesBack) {
  const Status failures[] = {AbortedError("uid precondition failed"),
                             UnavailableError("apiserver down"), NotFoundError("pod gone")};
  for (const Status& failure : failures) {
    SCOPED_TRACE(failure.ToString());
    Cache cache;
    FakeWriter writer;
    writer.FailBinding(failure);
    FakeEvents events;
    auto e = Extender::Create(cache, ExtenderOptions{}, &writer, &events, nullptr, Logger());
    ASSERT_TRUE(e.ok());
    AddGpuNode(cache, "a");
    StatusOr<PodAssignment> a = (*e)->Bind(MakePod("p1", {Gpu(8)}), "a");
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), failure.code());
    EXPECT_EQ(writer.calls(), (std::vector<std::string>{"bind p1 a"}));
    EXPECT_TRUE(cache.Node("a")->Idle());
    EXPECT_FALSE(cache.Assignment("p1").has_value());
    ASSERT_EQ(events.events().size(), 1u);
    EXPECT_NE(events.events()[0].find("AccelpoolBindFailed"), std::string::npos);
  }
}

TEST_F(ExtenderTest, ABindWhoseOutcomeIsUnknownKeepsItsDevicesUntilAReadShowsThePodUnbound) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  StatusOr<PodAssignment> a = ext_->Bind(MakePod("p1", {Gpu(8)}), "a");
  ASSERT_FALSE(a.ok());
  // The Binding may have landed: node a's devices are not given away.
  EXPECT_FALSE(cache_.Node("a")->Idle());
  EXPECT_TRUE(ext_->Filter(MakePod("other", {Gpu(8)}), {"a"}).fits.empty());
  // kube-scheduler retries on node b. A fresh read shows the pod bound to a:
  // it holds a's devices, b is refused.
  writer_.FailBinding(Status::Ok());
  writer_.SetBoundNode("a");
  a = ext_->Bind(MakePod("p1", {Gpu(8)}), "b");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kAlreadyExists);
  EXPECT_FALSE(cache_.Node("a")->Idle());
  EXPECT_TRUE(cache_.Node("b")->Idle());
  // The read shows it unbound, but the Binding may still be written (the
  // apiserver can still be running it): a keeps the devices, b is refused
  // for now with why.
  writer_.SetBoundNode("");
  a = ext_->Bind(MakePod("p1", {Gpu(8)}), "b");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("may still be written"), std::string::npos)
      << a.status().ToString();
  EXPECT_FALSE(cache_.Node("a")->Idle());
  EXPECT_TRUE(cache_.Node("b")->Idle());
}

// Past ExtenderOptions::unknown_binding_hold a Binding with an unknown outcome
// can no longer be written: a read that shows the pod unbound gives its
// reservation back, and the bind on the other node goes ahead.
TEST_F(ExtenderTest, AnUnknownBindingsReservationGoesOnceItCanNoLongerLand) {
  ExtenderOptions o;
  o.policy = "binpack";
  o.unknown_binding_hold = std::chrono::milliseconds(1000);
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(e.ok());
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE((*e)->Bind(MakePod("p1", {Gpu(8)}), "a").ok());
  writer_.FailBinding(Status::Ok());
  writer_.SetBoundNode("");
  EXPECT_EQ((*e)->Bind(MakePod("p1", {Gpu(8)}), "b").status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(cache_.Node("a")->Idle());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  StatusOr<PodAssignment> a = (*e)->Bind(MakePod("p1", {Gpu(8)}), "b");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(cache_.Node("a")->Idle());
  EXPECT_EQ(Used("b"), 8);
  EXPECT_EQ(cache_.Bound("p1"), std::optional<bool>(true));
}

// A pod whose Binding had an unknown outcome may never reach bind again (no
// node passes kube-scheduler's own filters for it now): past the hold the
// periodic sweep reads it, and gives its devices back once it shows the pod
// unbound; bound, or unreadable, the devices stay.
TEST_F(ExtenderTest, TheSweepGivesBackAnUnknownBindingThatDidNotLand) {
  ExtenderOptions o;
  o.policy = "binpack";
  o.unknown_binding_hold = std::chrono::milliseconds(1500);
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(e.ok());
  AddGpuNode(cache_, "a");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE((*e)->Bind(MakePod("p1", {Gpu(8)}), "a").ok());
  writer_.SetBoundNode("");
  EXPECT_EQ((*e)->ReleaseUnknownBindings(), 0u);  // within the hold: it may still land
  EXPECT_EQ(Used("a"), 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  writer_.SetBoundNode("", UnavailableError("connection refused"));
  EXPECT_EQ((*e)->ReleaseUnknownBindings(), 0u);
  writer_.SetBoundNode("a");
  EXPECT_EQ((*e)->ReleaseUnknownBindings(), 0u);
  EXPECT_EQ(Used("a"), 8);
  writer_.SetBoundNode("");
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_EQ((*e)->ReleaseUnknownBindings(stopped.get_token()), 0u);  // shutting down: no read
  EXPECT_EQ((*e)->ReleaseUnknownBindings(), 1u);
  EXPECT_TRUE(cache_.Node("a")->Idle());
  EXPECT_FALSE(cache_.Assignment("p1").has_value());
  EXPECT_EQ((*e)->ReleaseUnknownBindings(), 0u);  // settled
  writer_.FailBinding(Status::Ok());
  EXPECT_TRUE((*e)->Bind(MakePod("p2", {Gpu(8)}), "a").ok());
}

// A pod due when the sweep listed it may send another Binding with an unknown
// outcome before the sweep reaches it (its retry ran while the sweep read
// another pod): that Binding's hold starts again, and its devices stay.
TEST_F(ExtenderTest, TheSweepSkipsAPodWhoseBindingWasSentAgainMeanwhile) {
  ExtenderOptions o;
  o.policy = "binpack";
  o.unknown_binding_hold = std::chrono::milliseconds(1000);
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(e.ok());
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE((*e)->Bind(MakePod("p0", {Gpu(8)}), "a").ok());
  ASSERT_FALSE((*e)->Bind(MakePod("p1", {Gpu(8)}), "b").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  writer_.SetBoundNode("");
  bool retried = false;
  writer_.OnRead([&](const PodInfo& pod) {
    if (pod.ref.uid == "p0" && !retried) {
      retried = true;  // p1's retry on b, unknown again
      EXPECT_FALSE((*e)->Bind(MakePod("p1", {Gpu(8)}), "b").ok());
    }
  });
  EXPECT_EQ((*e)->ReleaseUnknownBindings(), 1u);
  writer_.OnRead(nullptr);
  EXPECT_TRUE(retried);
  EXPECT_TRUE(cache_.Node("a")->Idle());
  EXPECT_EQ(Used("b"), 8);  // p1's second Binding may still land
  EXPECT_TRUE(cache_.Assignment("p1").has_value());
}

// The reservation an unknown outcome keeps must not turn its own pod away:
// kube-scheduler's retry filters first, and the node it holds (perhaps the
// only one with room) is planned without the pod's own devices.
TEST_F(ExtenderTest, APodWhoseBindOutcomeWasUnknownStillFitsTheNodeItHolds) {
  AddGpuNode(cache_, "a");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE(ext_->Bind(MakePod("p1", {Gpu(6)}), "a").ok());
  EXPECT_EQ(Used("a"), 6);
  EXPECT_TRUE(ext_->Filter(MakePod("p2", {Gpu(6)}), {"a"}).fits.empty());
  EXPECT_EQ(ext_->Filter(MakePod("p2", {Gpu(2)}), {"a"}).fits, std::vector<std::string>{"a"});
  FilterDecision d = ext_->Filter(MakePod("p1", {Gpu(6)}), {"a"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"a"}) << d.failed["a"];
  // Only its own devices count as free: with two more taken, six do not fit
  // beside them, and the pod is told so.
  writer_.FailBinding(Status::Ok());
  ASSERT_TRUE(ext_->Bind(MakePod("p3", {Gpu(2)}), "a").ok());
  EXPECT_EQ(Used("a"), 8);
  EXPECT_EQ(ext_->Filter(MakePod("p1", {Gpu(6)}), {"a"}).fits, std::vector<std::string>{"a"});
  EXPECT_TRUE(ext_->Filter(MakePod("p1", {Gpu(7)}), {"a"}).fits.empty());
  // The retry binds with the reservation it holds.
  StatusOr<PodAssignment> a = ext_->Bind(MakePod("p1", {Gpu(6)}), "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Used("a"), 8);
  EXPECT_EQ(cache_.Bound("p1"), std::optional<bool>(true));
  // Bound, the pod's devices are its own no more to plan with.
  EXPECT_TRUE(ext_->Filter(MakePod("p1", {Gpu(6)}), {"a"}).fits.empty());
}

// Preempt plans the node a pod's unknown Binding holds without the pod's own
// devices, as filter does: kube-scheduler's retry may need victims there
// for CPU or memory, and counting its reservation against it would refuse
// the node until the reservation is given back. Other pods still count it.
TEST_F(ExtenderTest, APodWhoseBindOutcomeWasUnknownMayPreemptOnTheNodeItHolds) {
  AddGpuNode(cache_, "a");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE(ext_->Bind(MakePod("p1", {Gpu(6)}), "a").ok());
  writer_.FailBinding(Status::Ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v", {Gpu(2)}), "a").ok());
  EXPECT_EQ(Used("a"), 8);
  const std::map<std::string, MetaVictims> proposed = {{"a", MetaVictims{{"v"}, 0}}};
  EXPECT_EQ(ext_->Preempt(MakePod("p1", {Gpu(6)}), proposed), proposed);
  EXPECT_TRUE(ext_->Preempt(MakePod("p2", {Gpu(6)}), proposed).empty());
  EXPECT_EQ(Used("a"), 8);  // preempt only looks
}

// A retry on the node an unknown Binding holds reuses that reservation. The
// retry's own Binding failing plainly (throttled, the replica stopped
// leading) says nothing of the earlier one, which may still land: the
// devices stay reserved, no other pod gets them. Past the hold, the same
// failure gives them back.
TEST_F(ExtenderTest, AFailedRetryKeepsTheDevicesAnEarlierUnknownBindingMayStillTake) {
  ExtenderOptions o;
  o.policy = "binpack";
  o.unknown_binding_hold = std::chrono::milliseconds(1000);
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(e.ok());
  AddGpuNode(cache_, "a");
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE((*e)->Bind(MakePod("p1", {Gpu(8)}), "a").ok());
  writer_.FailBinding(UnavailableError("HTTP 429: the apiserver is throttling"));
  StatusOr<PodAssignment> retry = (*e)->Bind(MakePod("p1", {Gpu(8)}), "a");
  ASSERT_FALSE(retry.ok());
  EXPECT_EQ(retry.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(retry.status().message().find("may still land"), std::string::npos)
      << retry.status().ToString();
  EXPECT_EQ(Used("a"), 8);
  ASSERT_TRUE(cache_.Assignment("p1").has_value());
  writer_.FailBinding(Status::Ok());
  EXPECT_FALSE((*e)->Bind(MakePod("p2", {Gpu(8)}), "a").ok());
  EXPECT_TRUE((*e)->Filter(MakePod("p2", {Gpu(8)}), {"a"}).fits.empty());
  // Past the hold the earlier Binding can no longer land: a plain failure of
  // the retry gives the devices back.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  writer_.FailBinding(UnavailableError("HTTP 429: the apiserver is throttling"));
  ASSERT_FALSE((*e)->Bind(MakePod("p1", {Gpu(8)}), "a").ok());
  EXPECT_TRUE(cache_.Node("a")->Idle());
  EXPECT_FALSE(cache_.Assignment("p1").has_value());
}

TEST_F(ExtenderTest, AFailedBindKeepsWhatTheWatchAlreadyShowedBound) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  // The Binding landed, the watch delivered the pod, and only then did the
  // answer fail (a 5xx read as "not written" by a writer without read-back).
  writer_.FailBinding(UnavailableError("connection reset"));
  writer_.BeforeAnswer([this](const PodInfo& pod, const PodAssignment& planned) {
    (void)cache_.ObservePod(pod.ref, planned.node, planned);
  });
  StatusOr<PodAssignment> a = ext_->Bind(MakePod("p1", {Gpu(8)}), "a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(Used("a"), 8);
  EXPECT_EQ(cache_.Bound("p1"), std::optional<bool>(true));
  // Another replica bound p2 to b while this one was binding it to c; the
  // watch shows b. This bind's failure must not drop b's record.
  AddGpuNode(cache_, "c");
  writer_.BeforeAnswer([this](const PodInfo& pod, const PodAssignment& planned) {
    PodAssignment there = planned;
    there.node = "b";
    for (AssignmentPart& part : there.parts) part.device_ids.clear();  // b's own cards
    (void)cache_.ObservePod(pod.ref, "b", there);
  });
  writer_.FailBinding(AbortedError("pod p2 is already assigned to node b"));
  a = ext_->Bind(MakePod("p2", {Gpu(4)}), "c");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(Used("b"), 4);
  EXPECT_TRUE(cache_.Node("c")->Idle());
  EXPECT_EQ(cache_.Bound("p2"), std::optional<bool>(true));
}

TEST_F(ExtenderTest, ARetriedBindOfABoundPodFinishesWithoutPlanningAgain) {
  AddGpuNode(cache_, "a");
  // A whole-node pod: planning again on a node that counts it would fail.
  ASSERT_TRUE(ext_->Bind(MakePod("p1", {Gpu(8)}), "a").ok());
  StatusOr<PodAssignment> again = ext_->Bind(MakePod("p1", {Gpu(8)}), "a");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Used("a"), 8);
  EXPECT_EQ(writer_.calls().size(), 2u);
}

TEST_F(ExtenderTest, ASecondBindOfAPodWhileTheFirstRunsIsRefused) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  Status nested;
  writer_.BeforeAnswer([&](const PodInfo& pod, const PodAssignment&) {
    if (pod.ref.uid == "p1") nested = ext_->Bind(MakePod("p1", {Gpu(8)}), "b").status();
  });
  ASSERT_TRUE(ext_->Bind(MakePod("p1", {Gpu(8)}), "a").ok());
  EXPECT_EQ(nested.code(), StatusCode::kAborted) << nested.ToString();
  EXPECT_NE(nested.message().find("still running"), std::string::npos);
  EXPECT_TRUE(cache_.Node("b")->Idle());
  EXPECT_EQ(Used("a"), 8);
}

TEST_F(ExtenderTest, BindAfterAnotherPodTookTheDevicesReplansOrFails) {
  AddGpuNode(cache_, "a");
  PodInfo p1 = MakePod("p1", {Gpu(4)});
  PodInfo p2 = MakePod("p2", {Gpu(4)});
  PodInfo p3 = MakePod("p3", {Gpu(1)});
  // All three pass filter before any bind (kube-scheduler binds asynchronously).
  EXPECT_EQ(ext_->Filter(p1, {"a"}).fits.size(), 1u);
  EXPECT_EQ(ext_->Filter(p2, {"a"}).fits.size(), 1u);
  EXPECT_EQ(ext_->Filter(p3, {"a"}).fits.size(), 1u);
  ASSERT_TRUE(ext_->Bind(p1, "a").ok());
  StatusOr<PodAssignment> b2 = ext_->Bind(p2, "a");
  ASSERT_TRUE(b2.ok()) << b2.status().ToString();
  StatusOr<PodAssignment> b3 = ext_->Bind(p3, "a");
  ASSERT_FALSE(b3.ok());
  EXPECT_EQ(b3.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(b3.status().message().find("no longer fits"), std::string::npos);
  EXPECT_EQ(Used("a"), 8);
}

TEST_F(ExtenderTest, PlanMemoFollowsNodeChanges) {
  AddGpuNode(cache_, "a");
  // Two pods of one shape: the second filter may reuse the first's plans,
  // but only while node "a" is unchanged.
  EXPECT_EQ(ext_->Filter(MakePod("s1", {Gpu(2)}), {"a"}).fits.size(), 1u);
  EXPECT_EQ(ext_->Filter(MakePod("s2", {Gpu(2)}), {"a"}).fits.size(), 1u);
  ASSERT_TRUE(ext_->Bind(MakePod("big", {Gpu(7)}), "a").ok());
  FilterDecision d = ext_->Filter(MakePod("s3", {Gpu(2)}), {"a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_EQ(d.failed.size(), 1u);
  cache_.Release("big");
  EXPECT_EQ(ext_->Filter(MakePod("s4", {Gpu(2)}), {"a"}).fits.size(), 1u);
  EXPECT_NE(RequestShape(MakePod("x", {Gpu(2)}).request),
            RequestShape(MakePod("x", {Gpu(2, 1024)}).request));
}

TEST_F(ExtenderTest, PlanMemoTellsAMigRequestFromAWholeCardOne) {
  AddGpuNode(cache_, "a");  // whole GPUs only, no MIG instance
  EXPECT_EQ(ext_->Filter(MakePod("whole", {Gpu(1)}), {"a"}).fits.size(), 1u);
  // Same container, count and node version: the memo must not hand the MIG
  // request the whole-card pod's plan.
  core::DeviceRequest mig = Gpu(1);
  mig.partition = "1g.18gb";
  FilterDecision d = ext_->Filter(MakePod("mig", {mig}), {"a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_EQ(d.unresolvable.count("a") + d.failed.count("a"), 1u);
  EXPECT_NE(RequestShape(MakePod("x", {Gpu(1)}).request),
            RequestShape(MakePod("x", {mig}).request));
}

TEST_F(ExtenderTest, PreemptCountsAVictimNamedTwiceOnce) {
  AddGpuNode(cache_, "a");
  // Both pods hold a share of every GPU of the node.
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(8, 1024)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v2", {Gpu(8, 1024)}), "a").ok());
  // Evicting v1 (named twice) leaves v2 on every GPU: 8 whole GPUs still do
  // not fit, so the node must not be offered for preemption.
  std::map<std::string, MetaVictims> proposed = {{"a", MetaVictims{{"v1", "v1"}, 0}}};
  EXPECT_TRUE(ext_->Preempt(MakePod("big", {Gpu(8)}), proposed).empty());
  proposed = {{"a", MetaVictims{{"v1", "v2"}, 0}}};
  EXPECT_EQ(ext_->Preempt(MakePod("big", {Gpu(8)}), proposed).size(), 1u);
}

TEST_F(ExtenderTest, PreemptKeepsEveryVictimKubeSchedulerChose) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(4)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v2", {Gpu(4)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("w1", {Gpu(8)}), "b").ok());
  std::map<std::string, MetaVictims> proposed = {
      {"a", MetaVictims{{"v1", "v2", "cpu-only"}, 1}},
      {"b", MetaVictims{{"cpu-only-2"}, 0}},  // freeing it frees no device
      {"c", MetaVictims{{}, 0}},
  };
  auto got = ext_->Preempt(MakePod("p", {Gpu(4)}), proposed);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got.count("a"));
  // kube-scheduler's SelectVictimsOnNode reprieved every victim its filters
  // could do without: v2 alone would free the devices, but all stay victims.
  EXPECT_EQ(got["a"], proposed["a"]);
  // Preempt only looks: nothing was released.
  EXPECT_EQ(Used("a"), 8);
}

// The audit line of a preempt names the preemptor by uid too, and the
// victims kept on each node kept, as operations.md promises.
TEST_F(ExtenderTest, ThePreemptAuditLineNamesThePodAndTheVictimsKept) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(4)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v2", {Gpu(4)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v3", {Gpu(8)}), "b").ok());
  testing::LogCapture log;
  auto e = Extender::Create(cache_, ExtenderOptions{}, &writer_, &events_, &metrics_, log.logger());
  ASSERT_TRUE(e.ok());
  ASSERT_EQ((*e)->Preempt(MakePod("p", {Gpu(8)}), {{"a", MetaVictims{{"v1", "v2"}, 0}},
                                                   {"b", MetaVictims{{"v3"}, 1}},
                                                   {"c", MetaVictims{{"v4"}, 0}}})
                .size(),
            2u);
  const std::vector<std::string> lines = log.Lines(R"("msg":"preempt")");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(R"("pod":"ns/pod-p")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("uid":"p")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("nodes_proposed":3)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("nodes_kept":2)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("victims":"a=[v1,v2] b=[v3]")"), std::string::npos) << lines[0];
}

TEST_F(ExtenderTest, PreemptNeverReprievesAVictimKubeSchedulerNeedsGone) {
  // v1 holds 4 GPUs and most of the node's CPU; the preemptor asks 2 GPUs,
  // which fit beside v1, but its CPU does not: kube-scheduler proposes {v1}.
  AddGpuNode(cache_, "a");
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(4)}), "a").ok());
  const std::map<std::string, MetaVictims> proposed = {{"a", MetaVictims{{"v1"}, 1}}};
  auto got = ext_->Preempt(MakePod("p", {Gpu(2)}), proposed);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got["a"].pod_uids, std::vector<std::string>{"v1"});
  EXPECT_EQ(got["a"].num_pdb_violations, 1);
  // Not pooled at all: kube-scheduler's answer stands.
  EXPECT_EQ(ext_->Preempt(MakePod("cpu", {}), proposed), proposed);
}

// A filter that finds no node reads at most kMaxFilterReads busy nodes back
// from the apiserver, and starts no read once its read budget is spent: a
// slow apiserver must not hold the filter past kube-scheduler's timeout.
TEST_F(ExtenderTest, AFilterBoundsItsReadsOfBusyNodes) {
  std::vector<std::string> nodes;
  for (int i = 0; i < 12; ++i) {
    nodes.push_back("n" + std::to_string(i));
    AddGpuNode(cache_, nodes.back());
    ASSERT_TRUE(ext_->Bind(MakePod("full-" + std::to_string(i), {Gpu(8)}), nodes.back()).ok());
  }
  std::vector<std::string> read;
  ExtenderOptions o;
  o.recheck_pods = [&read](const std::string& n) {
    read.push_back(n);
    return RecheckResult::kUnchanged;
  };
  auto quick = Extender::Create(cache_, o, &writer_, nullptr, nullptr, Logger());
  ASSERT_TRUE(quick.ok());
  EXPECT_TRUE((*quick)->Filter(MakePod("p", {Gpu(1)}), nodes).fits.empty());
  EXPECT_EQ(read, std::vector<std::string>(nodes.begin(), nodes.begin() + kMaxFilterReads));
  // A pod that can never fit anywhere (more cards than a node has) reads nothing.
  read.clear();
  EXPECT_TRUE((*quick)->Filter(MakePod("q", {Gpu(16)}), nodes).fits.empty());
  EXPECT_TRUE(read.empty());

  // Reads of 1 s against a budget of 1.5 s: the second starts (with 0.5 s
  // to spare for a loaded machine or ThreadSanitizer), the third is not
  // started (two reads take at least 2 s).
  read.clear();
  o.read_budget = std::chrono::milliseconds(1500);
  o.recheck_pods = [&read](const std::string& n) {
    read.push_back(n);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    return RecheckResult::kUnchanged;
  };
  auto slow = Extender::Create(cache_, o, &writer_, nullptr, nullptr, Logger());
  ASSERT_TRUE(slow.ok());
  EXPECT_TRUE((*slow)->Filter(MakePod("r", {Gpu(1)}), nodes).fits.empty());
  EXPECT_EQ(read.size(), 2u);
}

// kube-scheduler retries a waiting pod on the update that marks another pod
// deleted and again on its deletion, milliseconds apart: the second filter
// finds the node read a moment before (recheck skipped) while the watch is
// still delivering the deletion. It waits briefly for the node to change.
TEST_F(ExtenderTest, AFilterWaitsBrieflyForANodeItReadAMomentBefore) {
  AddGpuNode(cache_, "a");
  ASSERT_TRUE(ext_->Bind(MakePod("busy", {Gpu(8)}), "a").ok());
  ExtenderOptions o;
  int reads = 0;
  o.recheck_pods = [&reads](const std::string&) {
    ++reads;
    return RecheckResult::kSkipped;
  };
  o.recheck_wait = std::chrono::milliseconds(2000);
  o.recheck_waits_per_second = 1;
  auto e = Extender::Create(cache_, o, &writer_, nullptr, nullptr, Logger());
  ASSERT_TRUE(e.ok());
  const PodInfo p = MakePod("p", {Gpu(2)});
  {
    std::jthread watch([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      cache_.Release("busy");  // the DELETE event arrives
    });
    EXPECT_EQ((*e)->Filter(p, {"a"}).fits, std::vector<std::string>{"a"});
  }
  EXPECT_EQ(reads, 1);
  // The one wait of this second is spent: the next filter answers at once,
  // before a release 300 ms later.
  ASSERT_TRUE(ext_->Bind(MakePod("busy2", {Gpu(8)}), "a").ok());
  std::jthread late([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cache_.Release("busy2");
  });
  EXPECT_TRUE((*e)->Filter(MakePod("q", {Gpu(2)}), {"a"}).fits.empty());
  // A node that is not read at all (nothing could free it) is not waited for.
  o.recheck_pods = nullptr;
  auto none = Extender::Create(cache_, o, &writer_, nullptr, nullptr, Logger());
  ASSERT_TRUE(none.ok());
  late.join();
  ASSERT_TRUE(ext_->Bind(MakePod("busy3", {Gpu(8)}), "a").ok());
  EXPECT_TRUE((*none)->Filter(MakePod("r", {Gpu(2)}), {"a"}).fits.empty());
}

TEST_F(ExtenderTest, APreemptorWaitsForItsVictimsToLeaveTheCache) {
  // kube-scheduler sees the victims deleted a moment before this extender's
  // watch does, and filters the preemptor again at once: the filter waits for
  // the deletions instead of answering from the older view.
  AddGpuNode(cache_, "a");
  ASSERT_TRUE(ext_->Bind(MakePod("victim", {Gpu(8)}), "a").ok());
  const PodInfo preemptor = MakePod("p", {Gpu(2)});
  EXPECT_TRUE(ext_->Filter(preemptor, {"a"}).fits.empty());  // before any preemption: no wait
  ASSERT_EQ(ext_->Preempt(preemptor, {{"a", MetaVictims{{"victim"}, 0}}}).size(), 1u);
  std::jthread watch([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cache_.Release("victim");  // the DELETE event arrives
  });
  FilterDecision d = ext_->Filter(preemptor, {"a"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"a"});
  watch.join();
  ASSERT_TRUE(ext_->Bind(preemptor, "a").ok());
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_extender_preemption_waits_total{result="released"} 1)"),
            std::string::npos)
      << page;

  // Victims that stay (a long grace period): the wait ends, the answer is the cache's.
  ExtenderOptions o;
  o.preemption_wait = std::chrono::milliseconds(30);
  auto quick = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(quick.ok());
  AddGpuNode(cache_, "b");
  ASSERT_TRUE((*quick)->Bind(MakePod("slow", {Gpu(8)}), "b").ok());
  const PodInfo second = MakePod("q", {Gpu(1)});
  ASSERT_EQ((*quick)->Preempt(second, {{"b", MetaVictims{{"slow"}, 0}}}).size(), 1u);
  EXPECT_TRUE((*quick)->Filter(second, {"b"}).fits.empty());
  EXPECT_NE(registry_.Serialize().find(
                R"(accelpool_extender_preemption_waits_total{result="timeout"} 1)"),
            std::string::npos);
  // Another pod never waits on someone else's victims.
  EXPECT_TRUE((*quick)->Filter(MakePod("other", {Gpu(1)}), {"b"}).fits.empty());
  EXPECT_EQ(registry_.Serialize().find(R"(result="timeout"} 2)"), std::string::npos);
}

// Devices a preemption freed are held for the preemptor until it binds:
// kube-scheduler holds a nominated pod's resources in its own filters only,
// and pooled devices are not among them. A pod of lower or equal priority
// filtered meanwhile is turned away from them with why (and bind refuses it
// too); what is left beside the preemptor's plan still goes; a pod of higher
// priority is not held back; the hold ends when the preemptor binds.
TEST_F(ExtenderTest, DevicesAPreemptionFreedAreHeldForThePreemptor) {
  AddGpuNode(cache_, "a");
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(4)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v2", {Gpu(2)}), "a").ok());
  PodInfo preemptor = MakePod("p", {Gpu(4)});
  preemptor.priority = 100;
  ASSERT_EQ(ext_->Preempt(preemptor, {{"a", MetaVictims{{"v1"}, 0}}}).size(), 1u);
  PodInfo low = MakePod("low", {Gpu(4)});
  low.priority = 10;
  EXPECT_TRUE(ext_->Filter(low, {"a"}).fits.empty());  // 2 free: no room anyway
  cache_.Release("v1");                                // the eviction's DELETE event: 6 free
  FilterDecision d = ext_->Filter(low, {"a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_NE(d.failed["a"].find("held for ns/pod-p (priority 100)"), std::string::npos)
      << d.failed["a"];
  StatusOr<PodAssignment> bound = ext_->Bind(low, "a");
  EXPECT_EQ(bound.status().code(), StatusCode::kFailedPrecondition) << bound.status().ToString();
  EXPECT_TRUE(cache_.Assignment("low") == std::nullopt);
  PodInfo equal = MakePod("equal", {Gpu(4)});
  equal.priority = 100;
  EXPECT_TRUE(ext_->Filter(equal, {"a"}).fits.empty());
  PodInfo small = MakePod("small", {Gpu(2)});
  small.priority = 10;
  EXPECT_EQ(ext_->Filter(small, {"a"}).fits, std::vector<std::string>{"a"});  // beside the 4
  PodInfo urgent = MakePod("urgent", {Gpu(4)});
  urgent.priority = 1000;
  EXPECT_EQ(ext_->Filter(urgent, {"a"}).fits, std::vector<std::string>{"a"});
  // The preemptor itself is never held back by its own preemption.
  EXPECT_EQ(ext_->Filter(preemptor, {"a"}).fits, std::vector<std::string>{"a"});
  ASSERT_TRUE(ext_->Bind(preemptor, "a").ok());
  cache_.Release("v2");  // 2 free beside the preemptor's 4 ... and v2's 2: 4
  EXPECT_EQ(ext_->Filter(low, {"a"}).fits, std::vector<std::string>{"a"});
}

// Preempt counts the hold too: a node whose devices an earlier preemption
// freed for a preemptor of at least the pod's priority is dropped when the
// pod would need those devices, else kube-scheduler (whose dry run ignores
// the pooled memory) evicts victims there for nothing. Room beside the held
// devices still counts, and a pod of higher priority is not held back.
TEST_F(ExtenderTest, PreemptDropsANodeWhoseFreedDevicesAreHeldForAnotherPreemptor) {
  AddGpuNode(cache_, "a");
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(4)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("s", {Gpu(4)}), "a").ok());
  PodInfo p1 = MakePod("p1", {Gpu(4)});
  p1.priority = 100;
  ASSERT_EQ(ext_->Preempt(p1, {{"a", MetaVictims{{"v1"}, 0}}}).size(), 1u);
  cache_.Release("v1");  // evicted: its 4 are held for p1, which has not bound yet
  PodInfo p2 = MakePod("p2", {Gpu(8)});
  p2.priority = 100;
  EXPECT_TRUE(ext_->Preempt(p2, {{"a", MetaVictims{{"s"}, 0}}}).empty());
  EXPECT_EQ(Used("a"), 4);  // s stays
  PodInfo beside = MakePod("beside", {Gpu(4)});
  beside.priority = 100;
  EXPECT_EQ(ext_->Preempt(beside, {{"a", MetaVictims{{"s"}, 0}}}).size(), 1u);
  PodInfo urgent = MakePod("urgent", {Gpu(8)});
  urgent.priority = 1000;
  EXPECT_EQ(ext_->Preempt(urgent, {{"a", MetaVictims{{"s"}, 0}}}).size(), 1u);
}

// A pod that fits beside the held devices is planned beside them, so binding
// it leaves the preemptor its room; victims leaving one at a time hold what
// the first freed; a victim that held no device frees nothing to hold; a
// preemptor whose own eviction took effect on the node is not held back by
// a peer of its priority.
TEST_F(ExtenderTest, HeldDevicesStayFreeForThePreemptorWhateverBindsBeside) {
  AddGpuNode(cache_, "a");
  ASSERT_TRUE(ext_->Bind(MakePod("v1", {Gpu(2)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("v2", {Gpu(2)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("stay", {Gpu(4)}), "a").ok());  // none free
  PodInfo preemptor = MakePod("p", {Gpu(4)});
  preemptor.priority = 100;
  ASSERT_EQ(ext_->Preempt(preemptor, {{"a", MetaVictims{{"v1", "v2"}, 0}}}).size(), 1u);
  PodInfo low = MakePod("low", {Gpu(2)});
  low.priority = 10;
  // The first victim gone, the second still leaving: 2 free, too few for the
  // preemptor yet, but held for it all the same.
  cache_.Release("v1");
  FilterDecision d = ext_->Filter(low, {"a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_NE(d.failed["a"].find("held for ns/pod-p"), std::string::npos) << d.failed["a"];
  EXPECT_EQ(ext_->Bind(low, "a").status().code(), StatusCode::kFailedPrecondition);
  cache_.Release("v2");
  EXPECT_TRUE(ext_->Filter(low, {"a"}).fits.empty());
  ASSERT_EQ(ext_->Filter(preemptor, {"a"}).fits, std::vector<std::string>{"a"});
  ASSERT_TRUE(ext_->Bind(preemptor, "a").ok());

  // A preemptor deleted before it bound holds nothing.
  AddGpuNode(cache_, "e");
  ASSERT_TRUE(ext_->Bind(MakePod("e-v", {Gpu(4)}), "e").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("e-stay", {Gpu(4)}), "e").ok());
  PodInfo gone = MakePod("gone", {Gpu(4)});
  gone.priority = 100;
  ASSERT_EQ(ext_->Preempt(gone, {{"e", MetaVictims{{"e-v"}, 0}}}).size(), 1u);
  cache_.Release("e-v");
  PodInfo low_e = MakePod("low-e", {Gpu(4)});
  low_e.priority = 10;
  EXPECT_TRUE(ext_->Filter(low_e, {"e"}).fits.empty());
  cache_.Release("gone");  // deleted while its victim was leaving
  EXPECT_EQ(ext_->Filter(low_e, {"e"}).fits, std::vector<std::string>{"e"});

  // A pod whose bind outcome is unknown keeps its own devices under a hold:
  // they are not counted against it.
  AddGpuNode(cache_, "f");
  ASSERT_TRUE(ext_->Bind(MakePod("f-v", {Gpu(4)}), "f").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("f-stay", {Gpu(2)}), "f").ok());
  PodInfo r = MakePod("r", {Gpu(2)});
  r.priority = 10;
  writer_.FailBinding(Status(StatusCode::kUnknown, "504, and the pod could not be read back"));
  ASSERT_FALSE(ext_->Bind(r, "f").ok());
  writer_.FailBinding(Status::Ok());
  PodInfo pf = MakePod("pf", {Gpu(4)});
  pf.priority = 100;
  ASSERT_EQ(ext_->Preempt(pf, {{"f", MetaVictims{{"f-v"}, 0}}}).size(), 1u);
  cache_.Release("f-v");
  FilterDecision fr = ext_->Filter(r, {"f"});
  EXPECT_EQ(fr.fits, std::vector<std::string>{"f"}) << fr.failed["f"];
  EXPECT_EQ(ext_->Filter(pf, {"f"}).fits, std::vector<std::string>{"f"});

  // Room beside the held devices: a pod planned there is given GPUs the
  // preemptor's plan does not take, so the preemptor still fits after it.
  AddGpuNode(cache_, "d");
  ASSERT_TRUE(ext_->Bind(MakePod("d-v", {Gpu(4)}), "d").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("d-stay", {Gpu(2)}), "d").ok());  // 2 free
  PodInfo pd = MakePod("pd", {Gpu(4)});
  pd.priority = 100;
  ASSERT_EQ(ext_->Preempt(pd, {{"d", MetaVictims{{"d-v"}, 0}}}).size(), 1u);
  cache_.Release("d-v");  // 6 free: 4 held, 2 beside
  PodInfo low_d = MakePod("low-d", {Gpu(2)});
  low_d.priority = 10;
  ASSERT_EQ(ext_->Filter(low_d, {"d"}).fits, std::vector<std::string>{"d"});
  ASSERT_TRUE(ext_->Bind(low_d, "d").ok());
  EXPECT_EQ(ext_->Filter(pd, {"d"}).fits, std::vector<std::string>{"d"});
  ASSERT_TRUE(ext_->Bind(pd, "d").ok());

  // A victim that held no device (evicted for CPU, memory, ports) frees
  // nothing: no record, no hold.
  AddGpuNode(cache_, "b");
  ASSERT_TRUE(ext_->Bind(MakePod("b-fill", {Gpu(6)}), "b").ok());
  PodInfo other = MakePod("q", {Gpu(2)});
  other.priority = 100;
  ASSERT_EQ(ext_->Preempt(other, {{"b", MetaVictims{{"cpu-only"}, 0}}}).size(), 1u);
  EXPECT_EQ(ext_->Filter(MakePod("low-b", {Gpu(2)}), {"b"}).fits, std::vector<std::string>{"b"});

  // Two preemptors of one priority, each evicting on the node: neither is
  // held back by the other's record.
  AddGpuNode(cache_, "c");
  ASSERT_TRUE(ext_->Bind(MakePod("w1", {Gpu(4)}), "c").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("w2", {Gpu(4)}), "c").ok());
  PodInfo p1 = MakePod("p1", {Gpu(4)});
  PodInfo p2 = MakePod("p2", {Gpu(4)});
  p1.priority = p2.priority = 50;
  ASSERT_EQ(ext_->Preempt(p1, {{"c", MetaVictims{{"w1"}, 0}}}).size(), 1u);
  ASSERT_EQ(ext_->Preempt(p2, {{"c", MetaVictims{{"w2"}, 0}}}).size(), 1u);
  cache_.Release("w1");
  cache_.Release("w2");
  EXPECT_EQ(ext_->Filter(p1, {"c"}).fits, std::vector<std::string>{"c"});
  EXPECT_EQ(ext_->Filter(p2, {"c"}).fits, std::vector<std::string>{"c"});
  ASSERT_TRUE(ext_->Bind(p2, "c").ok());
  ASSERT_TRUE(ext_->Bind(p1, "c").ok());
}

// kube-scheduler's preempt proposes several nodes and evicts on the one it
// picks. Once a victim on one node is gone, the preemption is known to have
// taken effect there: the preemptor no longer waits for the victims on the
// others (they never leave), and those nodes' devices are not held for it
// when their pods end on their own.
TEST_F(ExtenderTest, APreemptionHoldsOnlyTheNodeWhereItTookEffect) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  ASSERT_TRUE(ext_->Bind(MakePod("va", {Gpu(8)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("vb", {Gpu(8)}), "b").ok());
  ExtenderOptions o;
  o.policy = "binpack";
  o.preemption_wait = std::chrono::milliseconds(300);
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, Logger());
  ASSERT_TRUE(e.ok());
  Extender& ext = **e;
  PodInfo p = MakePod("p", {Gpu(4)});
  p.priority = 100;
  ASSERT_EQ(ext.Preempt(p, {{"a", MetaVictims{{"va"}, 0}}, {"b", MetaVictims{{"vb"}, 0}}}).size(),
            2u);
  cache_.Release("va");  // kube-scheduler picked a
  EXPECT_EQ(ext.Filter(p, {"a", "b"}).fits, std::vector<std::string>{"a"});
  EXPECT_EQ(registry_.Serialize().find("accelpool_extender_preemption_waits_total{"),
            std::string::npos);            // no wait, neither released nor timed out
  PodInfo low = MakePod("low", {Gpu(6)});  // 4 left beside p: too few
  low.priority = 10;
  EXPECT_TRUE(ext.Filter(low, {"a"}).fits.empty());  // a's freed devices are held for p
  cache_.Release("vb");                              // ends on its own
  EXPECT_EQ(ext.Filter(low, {"b"}).fits, std::vector<std::string>{"b"});
}

// The node kube-scheduler nominated, when the preemptor's filter carries it,
// says where the preemption took effect even before a victim leaves (and
// whatever else leaves first); nominated where no victim held devices, the
// preemption holds nothing and the preemptor waits for no victim.
TEST_F(ExtenderTest, ThePreemptorsNominatedNodeIsWhereItsPreemptionTookEffect) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  AddGpuNode(cache_, "c");
  ASSERT_TRUE(ext_->Bind(MakePod("va", {Gpu(8)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("vb", {Gpu(8)}), "b").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("vc", {Gpu(8)}), "c").ok());
  ExtenderOptions o;
  o.policy = "binpack";
  // Long beside the 20 ms the eviction below takes, on a loaded machine too:
  // p's filter must see it released, not time out.
  o.preemption_wait = std::chrono::seconds(5);
  testing::LogCapture log;
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, log.logger());
  ASSERT_TRUE(e.ok());
  Extender& ext = **e;
  PodInfo p = MakePod("p", {Gpu(4)});
  p.priority = 100;
  ASSERT_EQ(ext.Preempt(p, {{"a", MetaVictims{{"va"}, 0}}, {"b", MetaVictims{{"vb"}, 0}}}).size(),
            2u);
  cache_.Release("vb");                    // ends on its own before the eviction on a lands
  PodInfo low = MakePod("low", {Gpu(6)});  // 4 left beside p: too few
  low.priority = 10;
  // Without the nomination, the node a victim left looks like p's.
  EXPECT_TRUE(ext.Filter(low, {"b"}).fits.empty());
  p.nominated_node = "a";
  std::jthread watch([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    cache_.Release("va");  // the eviction's DELETE event
  });
  EXPECT_EQ(ext.Filter(p, {"a", "b"}).fits, (std::vector<std::string>{"a", "b"}));
  watch.join();
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_extender_preemption_waits_total{result="released"} 1)"),
            std::string::npos)
      << page;
  EXPECT_EQ(ext.Filter(low, {"b"}).fits, std::vector<std::string>{"b"});  // not p's
  EXPECT_TRUE(ext.Filter(low, {"a"}).fits.empty());                       // p's

  // Nominated where only a victim without devices was evicted (for CPU):
  // nothing is held for q, and its filter does not wait for vc.
  PodInfo q = MakePod("q", {Gpu(4)});
  q.priority = 100;
  AddGpuNode(cache_, "d");
  ASSERT_EQ(
      ext.Preempt(q, {{"c", MetaVictims{{"vc"}, 0}}, {"d", MetaVictims{{"cpu-only"}, 0}}}).size(),
      2u);
  q.nominated_node = "d";
  EXPECT_TRUE(ext.Filter(q, {"c"}).fits.empty());
  EXPECT_EQ(registry_.Serialize().find(R"(preemption_waits_total{result="timeout"})"),
            std::string::npos);
  EXPECT_EQ(log.Lines("preemption record dropped").size(), 1u);
}

// A preemptor deleted, or bound, before it used what its victims freed: its
// record goes at once, not when the cache forgets the deletion (two
// minutes) while the record could outlive that.
TEST_F(ExtenderTest, APreemptionRecordGoesWithItsPreemptor) {
  AddGpuNode(cache_, "a");
  AddGpuNode(cache_, "b");
  ASSERT_TRUE(ext_->Bind(MakePod("va", {Gpu(8)}), "a").ok());
  ASSERT_TRUE(ext_->Bind(MakePod("vb", {Gpu(8)}), "b").ok());
  testing::LogCapture log;
  ExtenderOptions o;
  o.policy = "binpack";
  auto e = Extender::Create(cache_, o, &writer_, &events_, &metrics_, log.logger());
  ASSERT_TRUE(e.ok());
  Extender& ext = **e;
  PodInfo p = MakePod("p", {Gpu(4)});
  PodInfo q = MakePod("q", {Gpu(4)});
  p.priority = q.priority = 100;
  ASSERT_EQ(ext.Preempt(p, {{"a", MetaVictims{{"va"}, 0}}}).size(), 1u);
  ASSERT_EQ(ext.Preempt(q, {{"b", MetaVictims{{"vb"}, 0}}}).size(), 1u);
  cache_.Release("va");
  cache_.Release("vb");
  PodInfo low = MakePod("low", {Gpu(6)});  // 4 left beside p: too few
  low.priority = 10;
  EXPECT_TRUE(ext.Filter(low, {"a"}).fits.empty());
  EXPECT_TRUE(ext.Filter(low, {"b"}).fits.empty());
  cache_.Release("p");  // deleted
  AddGpuNode(cache_, "c");
  ASSERT_TRUE(ext_->Bind(q, "c").ok());  // bound elsewhere, by another replica
  EXPECT_EQ(ext.Filter(low, {"a"}).fits, std::vector<std::string>{"a"});
  EXPECT_EQ(ext.Filter(low, {"b"}).fits, std::vector<std::string>{"b"});
  std::vector<std::string> dropped = log.Lines("preemption record dropped");
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_NE(dropped[0].find("\"uid\":\"p\""), std::string::npos) << dropped[0];
  EXPECT_NE(dropped[0].find("deleted"), std::string::npos) << dropped[0];
  EXPECT_NE(dropped[1].find("bound"), std::string::npos) << dropped[1];
}

TEST_F(ExtenderTest, GaugesOfADeletedNodeLeaveTheExposition) {
  AddGpuNode(cache_, "stays");
  AddGpuNode(cache_, "goes");
  ASSERT_TRUE(ext_->Bind(MakePod("p", {Gpu(1)}), "goes").ok());
  ext_->UpdateGauges();
  const std::string dev0 = cache_.Node("goes")->inventories[0].inventory->devices[0].id;
  EXPECT_NE(registry_.Serialize().find("node=\"goes\""), std::string::npos);
  cache_.RemoveNode("goes");  // the Node was deleted (scaled down)
  ext_->UpdateGauges();
  const std::string page = registry_.Serialize();
  EXPECT_EQ(page.find("node=\"goes\""), std::string::npos) << page;
  EXPECT_NE(page.find("accelpool_extender_node_memory_allocated_mib{node=\"stays\"} 0"),
            std::string::npos);
  // Back under the same name: its series return.
  AddGpuNode(cache_, "goes");
  ext_->UpdateGauges();
  EXPECT_NE(registry_.Serialize().find("{node=\"goes\",device=\"" + dev0 + "\"}"),
            std::string::npos);
}

// Per node: idle device capacity, and the part of it the workload cannot use
// (what the fragmentation policies minimise), for dashboards and alerts.
TEST_F(ExtenderTest, GaugesShowEachNodesIdleAndFragmentedDevices) {
  ASSERT_TRUE(ext_->SetWorkload(
      {core::TaskShape{.count = 1, .compute = 500, .memory_mib = 0, .model = "", .weight = 1}}));
  AddGpuNode(cache_, "one-slot", /*shares=*/1);
  AddGpuNode(cache_, "four-slots", /*shares=*/4);
  for (const std::string node : {"one-slot", "four-slots"}) {
    ASSERT_TRUE(ext_->Bind(MakePod("q-" + node, {Gpu(1, 8192, 250)}), node).ok());
  }
  ext_->UpdateGauges();
  const std::string page = registry_.Serialize();
  // Both keep 7.75 GPUs idle; on the one-slot node the share holds its GPU's
  // last slot, so its 0.75 is idle that no half-GPU pod can take.
  for (const std::string node : {"one-slot", "four-slots"}) {
    EXPECT_NE(page.find("accelpool_extender_node_idle_devices{node=\"" + node + "\"} 7.75"),
              std::string::npos)
        << page;
  }
  EXPECT_NE(page.find("accelpool_extender_node_fragmented_devices{node=\"one-slot\"} 0.75"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("accelpool_extender_node_fragmented_devices{node=\"four-slots\"} 0\n"),
            std::string::npos)
      << page;
}

TEST_F(ExtenderTest, CordonedDevicesTakeNoNewGrantAndKeepTheirPods) {
  CacheFeeder feeder(cache_, Logger());
  api::InventoryDocument doc;
  doc.generation = 1;
  doc.inventories.push_back(testing::GpuNode("a"));
  const std::vector<core::Device>& devs = doc.inventories[0].devices;
  auto node = [&](const std::string& cordon) {
    nlohmann::json annotations = {{"accelpool.io/inventory", api::SerializeInventory(doc)}};
    if (!cordon.empty()) annotations[kCordonedDevicesAnnotation] = cordon;
    return nlohmann::json{{"metadata", {{"name", "a"}, {"annotations", annotations}}}};
  };
  feeder.OnNode(node(""));
  // A pod holds GPU 0 before the operator cordons it with six others.
  StatusOr<PodAssignment> held = ext_->Bind(MakePod("held", {Gpu(1)}), "a");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const int32_t held_dev = held->parts[0].placement.containers[0].grants[0].device;
  std::string cordon = devs[held_dev].id;
  int32_t open_dev = -1;
  for (const core::Device& d : devs) {
    if (d.index == held_dev) continue;
    if (open_dev < 0) {
      open_dev = d.index;  // the one left in service
      continue;
    }
    cordon += "," + d.id;
  }
  feeder.OnNode(node(cordon));
  // The held grant is still counted; only one device takes new grants.
  EXPECT_EQ(Used("a"), 1);
  FilterDecision two = ext_->Filter(MakePod("two", {Gpu(2)}), {"a"});
  EXPECT_TRUE(two.fits.empty());
  ASSERT_EQ(two.unresolvable.count("a"), 1u);  // preemption cannot help
  EXPECT_NE(two.unresolvable["a"].find("cordoned"), std::string::npos) << two.unresolvable["a"];
  StatusOr<PodAssignment> one = ext_->Bind(MakePod("one", {Gpu(1)}), "a");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->parts[0].placement.containers[0].grants[0].device, open_dev);
  // Shares stay off cordoned devices too; preemption is not offered there.
  EXPECT_TRUE(ext_->Filter(MakePod("frac", {Gpu(1, 1024)}), {"a"}).fits.empty());
  EXPECT_TRUE(
      ext_->Preempt(MakePod("p", {Gpu(2)}), {{"a", MetaVictims{{"one", "held"}, 0}}}).empty());
  ext_->UpdateGauges();
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find("accelpool_extender_node_cordoned_devices{node=\"a\"} 7"), std::string::npos)
      << page;
  // Uncordoned: the devices take grants again.
  feeder.OnNode(node(""));
  EXPECT_EQ(ext_->Filter(MakePod("two", {Gpu(2)}), {"a"}).fits, std::vector<std::string>{"a"});
  ext_->UpdateGauges();
  EXPECT_NE(registry_.Serialize().find("accelpool_extender_node_cordoned_devices{node=\"a\"} 0"),
            std::string::npos);
}

}  // namespace
}  // namespace accelpool::extender

namespace accelpool::extender {
namespace {

// A new workload rebuilds the policies; plans remembered under the old one
// are kept apart (the memo key carries the workload's generation), so a
// filter after the change scores with the new mix.
TEST(ExtenderWorkloadTest, PlansMadeUnderAnOldWorkloadAreNotReused) {
  Cache cache;
  testing::AddGpuNode(cache, "n1");
  auto e = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(e.ok());
  Extender& ext = **e;
  const PodInfo pod = testing::MakePod("p", {testing::Gpu(1)});
  ASSERT_EQ(ext.Filter(pod, {"n1"}).fits.size(), 1u);
  NodeSnapshotPtr snap = cache.Node("n1");
  const std::string shape = RequestShape(pod.request);
  std::shared_ptr<const NodePlan> before = snap->memo.Find(shape + "@0");
  ASSERT_NE(before, nullptr);

  // Only 8-GPU tasks: one GPU taken from the empty node strands the rest.
  core::TaskShape eight;
  eight.count = 8;
  eight.weight = 1;
  ASSERT_TRUE(ext.SetWorkload({eight}));
  EXPECT_FALSE(ext.SetWorkload({eight}));  // the same again rebuilds nothing
  EXPECT_EQ(ext.workload_generation(), 1u);
  ASSERT_EQ(ext.Filter(testing::MakePod("q", {testing::Gpu(1)}), {"n1"}).fits.size(), 1u);
  std::shared_ptr<const NodePlan> after = snap->memo.Find(shape + "@1");
  ASSERT_NE(after, nullptr);
  core::PolicyContext ctx;
  ctx.workload = {eight};
  StatusOr<core::PolicyPtr> fresh = core::MakePolicy("accelpool", ctx);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(after->score, PlanNode(pod, snap.get(), **fresh).score);
  EXPECT_LT(after->score, before->score);
  // Back to the built-in mix.
  ASSERT_TRUE(ext.SetWorkload({}));
  EXPECT_TRUE(ext.Workload().empty());
}

}  // namespace
}  // namespace accelpool::extender
