#include "extender/handlers.h"

#include <gtest/gtest.h>

#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::AddGpuNode;
using testing::FakeWriter;

constexpr const char* kPod =
    R"({"metadata":{"name":"p","namespace":"ns","uid":"u-1"},"spec":{"containers":[)"
    R"({"name":"main","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}})";

// Asks for an explicit zero of a pooled resource: kube-scheduler sends it to
// the extender (a managed resource is named), yet it wants no device.
constexpr const char* kZeroPod =
    R"({"metadata":{"name":"zero","namespace":"ns","uid":"u-0"},"spec":{"containers":[)"
    R"({"name":"main","resources":{"limits":{"nvidia.com/gpu":"0","cpu":"1"}}}]}})";

class FakePods : public PodSource {
 public:
  StatusOr<nlohmann::json> GetPod(const std::string& ns, const std::string& name,
                                  const std::string& /*uid*/) override {
    if (name == "p") return nlohmann::json::parse(kPod);
    if (name == "zero") return nlohmann::json::parse(kZeroPod);
    if (name == "mine" || name == "theirs") {  // kPod, under a scheduler name of its own
      nlohmann::json pod = nlohmann::json::parse(kPod);
      pod["metadata"]["name"] = name;
      pod["metadata"]["uid"] = name == "mine" ? "u-m" : "u-t";
      pod["spec"]["schedulerName"] =
          name == "mine" ? "accelpool-scheduler" : "accelpool-scheduler-hosts";
      return pod;
    }
    return NotFoundError("pods \"" + name + "\" not found");
  }
};

class HandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddGpuNode(cache_, "node-a");
    AddGpuNode(cache_, "node-b");
    AddGpuNode(cache_, "node-full");
    auto reg = ExtenderMetrics::Register(registry_);
    ASSERT_TRUE(reg.ok());
    metrics_ = *reg;
    ExtenderOptions o;
    o.policy = "binpack";
    auto e = Extender::Create(cache_, o, &writer_, nullptr, &metrics_, Logger());
    ASSERT_TRUE(e.ok());
    ext_ = std::move(e).value();
    ASSERT_TRUE(ext_->Bind(testing::MakePod("filler", {testing::Gpu(8)}), "node-full").ok());
    h_ =
        std::make_unique<Handlers>(*ext_, &pods_, &metrics_, Logger(), HandlerOptions{1 << 20, ""});
  }
  static std::string Args(const std::string& names) {
    return std::string(R"({"Pod":)") + kPod + R"(,"Nodes":null,"NodeNames":)" + names + "}";
  }

  Cache cache_;
  MetricsRegistry registry_;
  ExtenderMetrics metrics_;
  FakeWriter writer_;
  FakePods pods_;
  std::unique_ptr<Extender> ext_;
  std::unique_ptr<Handlers> h_;
};

TEST_F(HandlersTest, FilterAnswersInKubeSchedulerFormat) {
  Reply r = h_->Filter(Args(R"(["node-a","node-full","node-x"])"));
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json got = nlohmann::json::parse(r.body);
  // Exactly the ExtenderFilterResult fields, nothing else.
  std::vector<std::string> keys;
  for (const auto& item : got.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"Error", "FailedAndUnresolvableNodes", "FailedNodes",
                                            "NodeNames", "Nodes"}));
  EXPECT_EQ(got["NodeNames"], nlohmann::json::parse(R"(["node-a"])"));
  EXPECT_TRUE(got["Nodes"].is_null());
  EXPECT_EQ(got["Error"], "");
  ASSERT_TRUE(got["FailedNodes"].contains("node-full"));
  EXPECT_FALSE(got["FailedNodes"]["node-full"].get<std::string>().empty());
  ASSERT_TRUE(got["FailedAndUnresolvableNodes"].contains("node-x"));
  EXPECT_NE(got["FailedAndUnresolvableNodes"]["node-x"].get<std::string>().find("device plugin"),
            std::string::npos);
}

// With --scheduler-name set, a pod asking for devices under another
// scheduler name (the host-pod profile of the same kube-scheduler) is refused
// with what to set: the pod cache watches only --scheduler-name's pods, so
// its grant would never be freed. Pods asking for none pass.
TEST_F(HandlersTest, DevicePodsOfAnotherSchedulerNameAreRefused) {
  Handlers h(*ext_, &pods_, &metrics_, Logger(), HandlerOptions{1 << 20, "accelpool-scheduler"});
  auto args = [](const std::string& pod) {
    return R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["node-a"]})";
  };
  auto with_scheduler = [](std::string pod, const std::string& name) {
    nlohmann::json j = nlohmann::json::parse(pod);
    j["spec"]["schedulerName"] = name;
    return j.dump();
  };
  const nlohmann::json refused =
      nlohmann::json::parse(h.Filter(args(with_scheduler(kPod, "accelpool-scheduler-hosts"))).body);
  EXPECT_TRUE(refused["NodeNames"].is_null() || refused["NodeNames"].empty()) << refused;
  EXPECT_NE(refused["Error"].get<std::string>().find(
                "asks for accelerators under scheduler \"accelpool-scheduler-hosts\""),
            std::string::npos)
      << refused;
  EXPECT_NE(
      refused["Error"].get<std::string>().find("set spec.schedulerName to \"accelpool-scheduler\""),
      std::string::npos)
      << refused;
  // No name at all reads as the apiserver's default-scheduler.
  EXPECT_NE(nlohmann::json::parse(h.Filter(args(kPod)).body)["Error"].get<std::string>().find(
                "\"default-scheduler\""),
            std::string::npos);
  const nlohmann::json served =
      nlohmann::json::parse(h.Filter(args(with_scheduler(kPod, "accelpool-scheduler"))).body);
  EXPECT_EQ(served["Error"], "") << served;
  EXPECT_EQ(served["NodeNames"], nlohmann::json::parse(R"(["node-a"])"));
  const nlohmann::json host_pod = nlohmann::json::parse(
      h.Filter(args(with_scheduler(kZeroPod, "accelpool-scheduler-hosts"))).body);
  EXPECT_EQ(host_pod["Error"], "") << host_pod;
  // Bind of a pod this replica did not filter reads it from the apiserver,
  // and refuses it under another scheduler name as well.
  const std::string refused_bind = nlohmann::json::parse(
      h.Bind(R"({"PodName":"theirs","PodNamespace":"ns","PodUID":"u-t","Node":"node-a"})")
          .body)["Error"];
  EXPECT_NE(
      refused_bind.find("asks for accelerators under scheduler \"accelpool-scheduler-hosts\""),
      std::string::npos)
      << refused_bind;
  EXPECT_EQ(cache_.Assignment("u-t"), std::nullopt);
  EXPECT_NE(registry_.Serialize().find(R"(accelpool_extender_bind_failures_total{stage="pod"} 1)"),
            std::string::npos);
  const std::string bound =
      h.Bind(R"({"PodName":"mine","PodNamespace":"ns","PodUID":"u-m","Node":"node-a"})").body;
  EXPECT_EQ(nlohmann::json::parse(bound)["Error"], "") << bound;
  EXPECT_TRUE(cache_.Assignment("u-m").has_value());
}

TEST_F(HandlersTest, FilterWithFullNodesAnswersNodes) {
  const std::string body =
      std::string(R"({"Pod":)") + kPod +
      R"(,"Nodes":{"metadata":{},"items":[{"metadata":{"name":"node-a","labels":{"k":"v"}}},)"
      R"({"metadata":{"name":"node-full"}}]},"NodeNames":null})";
  Reply r = h_->Filter(body);
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json got = nlohmann::json::parse(r.body);
  EXPECT_TRUE(got["NodeNames"].is_null());
  EXPECT_EQ(got["Nodes"]["items"],
            nlohmann::json::parse(R"([{"metadata":{"name":"node-a","labels":{"k":"v"}}}])"));
}

TEST_F(HandlersTest, PrioritizeGolden) {
  Reply r = h_->Prioritize(Args(R"(["node-b","node-a"])"));
  ASSERT_EQ(r.status, 200) << r.body;
  // Equal nodes: the stable salted order decides (core::StableNodeOrder with the
  // default salt 0 puts node-b first), and only one node gets the maximum.
  EXPECT_EQ(r.body, R"([{"Host":"node-b","Score":10},{"Host":"node-a","Score":9}])");
}

TEST_F(HandlersTest, BindGoldenAndLookupOfUnfilteredPods) {
  // Not filtered here: the pod is read through the PodSource.
  Reply r = h_->Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"Error":""})");
  EXPECT_TRUE(cache_.Assignment("u-1").has_value());
  Reply missing =
      h_->Bind(R"({"PodName":"gone","PodNamespace":"ns","PodUID":"u-9","Node":"node-a"})");
  ASSERT_EQ(missing.status, 200);
  EXPECT_NE(missing.body.find("not found"), std::string::npos) << missing.body;
  Reply recreated =
      h_->Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"other","Node":"node-a"})");
  EXPECT_NE(recreated.body.find("uid changed"), std::string::npos) << recreated.body;
  h_->SetBindGate([] { return std::string("another replica holds Lease ns/l"); });
  Reply follower =
      h_->Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})");
  EXPECT_NE(follower.body.find("not the leader (another replica holds Lease ns/l)"),
            std::string::npos)
      << follower.body;
  h_->SetBindGate([] { return std::string(); });
  Reply leader = h_->Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})");
  EXPECT_EQ(leader.body.find("not the leader"), std::string::npos) << leader.body;
}

// Binds refused before planning (caches not synced, not the leader, the pod
// gone, re-created or never filtered here) count in bind_failures_total and
// write the audit line `bind failed`, as binds failing later do.
TEST_F(HandlersTest, BindsRefusedBeforePlanningAreCountedAndLogged) {
  testing::LogCapture log;
  auto e = Extender::Create(cache_, ExtenderOptions{}, &writer_, nullptr, &metrics_, log.logger());
  ASSERT_TRUE(e.ok());
  Handlers h(**e, &pods_, &metrics_, Logger());
  bool synced = false;
  h.SetSyncGate([&synced] { return synced; });
  const std::string bind = R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})";
  EXPECT_NE(h.Bind(bind).body.find("still reading"), std::string::npos);
  synced = true;
  h.SetBindGate([] { return std::string("another replica holds Lease ns/l"); });
  EXPECT_NE(h.Bind(bind).body.find("not the leader"), std::string::npos);
  h.SetBindGate(nullptr);
  EXPECT_NE(h.Bind(R"({"PodName":"gone","PodNamespace":"ns","PodUID":"u-9","Node":"node-a"})")
                .body.find("not found"),
            std::string::npos);
  EXPECT_NE(h.Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"other","Node":"node-a"})")
                .body.find("uid changed"),
            std::string::npos);
  Handlers no_source(**e, nullptr, &metrics_, Logger());
  EXPECT_NE(no_source.Bind(bind).body.find("not filtered by this extender"), std::string::npos);
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_extender_bind_failures_total{stage="gate"} 2)"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find(R"(accelpool_extender_bind_failures_total{stage="pod"} 3)"),
            std::string::npos)
      << page;
  const std::vector<std::string> lines = log.Lines("\"msg\":\"bind failed\"");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[0].find(R"("pod":"ns/p")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("uid":"u-1")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("node":"node-a")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("stage":"gate")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[3].find(R"("stage":"pod")"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("uid changed"), std::string::npos) << lines[3];
  EXPECT_FALSE(cache_.Assignment("u-1").has_value());  // nothing was bound
}

TEST_F(HandlersTest, PreemptGolden) {
  const std::string body =
      std::string(R"({"Pod":)") + kPod +
      R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":)"
      R"({"node-full":{"Pods":[{"UID":"filler"},{"UID":"x"}],"NumPDBViolations":0},)"
      R"("node-x":{"Pods":[{"UID":"y"}],"NumPDBViolations":0}}})";
  Reply r = h_->Preempt(body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(
      r.body,
      R"({"NodeNameToMetaVictims":{"node-full":{"NumPDBViolations":0,"Pods":[{"UID":"filler"},{"UID":"x"}]}}})");
}

TEST_F(HandlersTest, NothingIsDecidedBeforeTheCachesHaveSynced) {
  // After an extender restart kube-scheduler calls at once, readiness or not;
  // a cache without the pods yet would see every device free.
  bool synced = false;
  h_->SetSyncGate([&synced] { return synced; });
  Reply f = h_->Filter(Args(R"(["node-a","node-full"])"));
  ASSERT_EQ(f.status, 200) << f.body;
  const nlohmann::json got = nlohmann::json::parse(f.body);
  EXPECT_EQ(got["NodeNames"], nlohmann::json::array());
  EXPECT_EQ(got["FailedNodes"]["node-a"], kNotSyncedReason);
  EXPECT_EQ(got["FailedNodes"]["node-full"], kNotSyncedReason);
  EXPECT_EQ(got["Error"], "");
  Reply full =
      h_->Filter(std::string(R"({"Pod":)") + kPod +
                 R"(,"Nodes":{"items":[{"metadata":{"name":"node-a"}}]},"NodeNames":null})");
  EXPECT_EQ(nlohmann::json::parse(full.body)["Nodes"]["items"], nlohmann::json::array());
  Reply p = h_->Prioritize(Args(R"(["node-b","node-a"])"));
  EXPECT_EQ(p.body, R"([{"Host":"node-b","Score":0},{"Host":"node-a","Score":0}])");
  Reply b = h_->Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})");
  EXPECT_NE(b.body.find("still reading nodes and pods"), std::string::npos) << b.body;
  EXPECT_FALSE(cache_.Assignment("u-1").has_value());
  Reply pre = h_->Preempt(std::string(R"({"Pod":)") + kPod +
                          R"(,"NodeNameToMetaVictims":{"node-full":{"Pods":[{"UID":"filler"}]}}})");
  EXPECT_EQ(pre.status, 503) << pre.body;
  EXPECT_NE(pre.body.find("still reading nodes and pods"), std::string::npos) << pre.body;

  synced = true;
  EXPECT_EQ(nlohmann::json::parse(h_->Filter(Args(R"(["node-a"])")).body)["NodeNames"],
            nlohmann::json::parse(R"(["node-a"])"));
  b = h_->Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})");
  EXPECT_EQ(b.body, R"({"Error":""})");
  EXPECT_TRUE(cache_.Assignment("u-1").has_value());
}

TEST_F(HandlersTest, APodAskingForZeroDevicesFitsAnyNodeAndHoldsNothing) {
  Reply f = h_->Filter(std::string(R"({"Pod":)") + kZeroPod +
                       R"(,"NodeNames":["node-x","node-full","node-a"]})");
  ASSERT_EQ(f.status, 200) << f.body;
  const nlohmann::json got = nlohmann::json::parse(f.body);
  // node-x has no accelpool inventory at all; node-full has no free device.
  EXPECT_EQ(got["NodeNames"], nlohmann::json::parse(R"(["node-x","node-full","node-a"])"));
  EXPECT_TRUE(got["FailedNodes"].empty()) << f.body;
  EXPECT_TRUE(got["FailedAndUnresolvableNodes"].empty()) << f.body;

  for (const char* node : {"node-x", "node-a"}) {
    SCOPED_TRACE(node);
    Reply b = h_->Bind(std::string(R"({"PodName":"zero","PodNamespace":"ns","PodUID":"u-0",)") +
                       R"("Node":")" + node + R"("})");
    EXPECT_EQ(b.body, R"({"Error":""})");
    EXPECT_EQ(writer_.calls().back(), std::string("bind u-0 ") + node);
    EXPECT_FALSE(cache_.Assignment("u-0").has_value());
  }
  EXPECT_TRUE(cache_.Node("node-a")->Idle());
  EXPECT_EQ(cache_.Stats().pods_reserved + cache_.Stats().pods_bound, 1);  // the filler only
}

TEST_F(HandlersTest, BadInputGetsClearErrorsNeverACrash) {
  struct Case {
    const char* name;
    std::function<Reply(Handlers&, const std::string&)> call;
    std::string body;
    int want_status;
    const char* want;  // substring of the body
  };
  auto filter = [](Handlers& h, const std::string& b) { return h.Filter(b); };
  auto prio = [](Handlers& h, const std::string& b) { return h.Prioritize(b); };
  auto bind = [](Handlers& h, const std::string& b) { return h.Bind(b); };
  auto preempt = [](Handlers& h, const std::string& b) { return h.Preempt(b); };
  const Case cases[] = {
      {"truncated", filter, R"({"Pod":{"metadata":)", 400, "malformed JSON"},
      {"hostile nesting", filter, std::string(100000, '['), 400, "nested deeper"},
      {"huge body", filter, std::string(2 << 20, ' '), 400, "over the limit"},
      {"wrong type", filter, R"({"NodeNames":{"a":1}})", 400, "NodeNames must be"},
      {"missing pod", filter, R"({"NodeNames":["node-a"]})", 200, "no Pod"},
      {"bad quantity", filter,
       R"({"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"m",)"
       R"("resources":{"limits":{"nvidia.com/gpu":"1.5"}}}]}},"NodeNames":["node-a"]})",
       200, "1.5"},
      {"unknown fields are ignored", filter, Args(R"(["node-a"])").insert(1, R"("Future":1,)"), 200,
       "node-a"},
      {"prioritize missing pod", prio, R"({"NodeNames":["node-a"]})", 400, "no Pod"},
      {"both node lists", filter,
       R"({"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"m",)"
       R"("resources":{"limits":{"nvidia.com/gpu":"0"}}}]}},"NodeNames":["node-a"],)"
       R"("Nodes":{"items":[]}})",
       400, "both NodeNames and Nodes"},
      {"bind not an object", bind, "[]", 400, "JSON object"},
      {"bind missing node", bind, R"({"PodName":"p","PodNamespace":"ns"})", 400, "Node"},
      {"preempt bad victims", preempt, R"({"Pod":{},"NodeNameToMetaVictims":[]})", 400,
       "NodeNameToMetaVictims"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Reply r = c.call(*h_, c.body);
    EXPECT_EQ(r.status, c.want_status) << r.body;
    EXPECT_NE(r.body.find(c.want), std::string::npos) << r.body;
    EXPECT_TRUE(nlohmann::json::accept(r.body)) << r.body;
  }
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_extender_bad_requests_total{verb="filter"} 5)"),
            std::string::npos)
      << page;
}

}  // namespace
}  // namespace accelpool::extender
