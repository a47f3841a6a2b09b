// kubectl accelpool's reports over nodes and pods built here, and its load
// against an in-memory apiserver.
#include "ctl/cluster_view.h"

#include <gtest/gtest.h>

#include <limits>

#include "api/assignment_codec.h"
#include "api/inventory_codec.h"
#include "extender/convert.h"
#include "extender/extender.h"
#include "extender/test_util.h"
#include "extender/workload_store.h"
#include "kube/fake_api_test.h"
#include "kube/objects.h"

namespace accelpool::ctl {
namespace {

using nlohmann::json;

json Node(const std::string& name, bool one_unhealthy = false) {
  api::InventoryDocument doc;
  doc.generation = 3;
  doc.inventories.push_back(extender::testing::GpuNode(name));
  if (one_unhealthy) doc.inventories[0].devices[7].healthy = false;
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"annotations", {{"accelpool.io/inventory", api::SerializeInventory(doc)}}}}}};
}

json Pod(const std::string& name, const json& limits) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}},
          {"spec",
           {{"schedulerName", "accelpool-scheduler"},
            {"containers", {{{"name", "main"}, {"resources", {{"limits", limits}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

// Binds pods one after another on a cluster of its own, as the extender
// would, and returns each pod with its assignment annotation.
class Binder {
 public:
  explicit Binder(const std::vector<std::string>& nodes) {
    for (const std::string& n : nodes) extender::testing::AddGpuNode(cache_, n);
    ext_ = std::move(extender::Extender::Create(cache_, extender::ExtenderOptions{}, nullptr,
                                                nullptr, nullptr, Logger()))
               .value();
  }
  json Bind(json pod, const std::string& node) {
    StatusOr<extender::PodInfo> info = extender::PodInfoFromJson(pod);
    StatusOr<extender::PodAssignment> a = ext_->Bind(*info, node);
    StatusOr<api::Assignment> doc = extender::ToApiAssignment(*a, *cache_.Node(node), *info);
    pod["metadata"]["annotations"] = {{"accelpool.io/assignment", api::SerializeAssignment(*doc)}};
    pod["spec"]["nodeName"] = node;
    pod["status"]["phase"] = "Running";
    return pod;
  }

 private:
  extender::Cache cache_;
  std::unique_ptr<extender::Extender> ext_;
};

json Bound(json pod, const std::string& node) { return Binder({node}).Bind(std::move(pod), node); }

class ClusterViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    json bad = Node("node-c");
    bad["metadata"]["annotations"]["accelpool.io/inventory"] = "{not json";
    json cpu = {{"metadata", {{"name", "cpu-only"}}}};
    json done = Bound(Pod("done", {{"nvidia.com/gpu", "8"}}), "node-b");
    done["status"]["phase"] = "Succeeded";
    Binder binder({"node-a"});
    view_ = ClusterView::FromObjects(
        {Node("node-a"), Node("node-b", true), bad, cpu},
        {binder.Bind(Pod("train", {{"nvidia.com/gpu", "2"}}), "node-a"),
         binder.Bind(Pod("infer", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}}),
                     "node-a"),
         done, Pod("waiting", {{"nvidia.com/gpu", "1"}})});
  }
  std::unique_ptr<ClusterView> view_;
};

TEST_F(ClusterViewTest, NodesReportCountsWhatTheAssignmentsHold) {
  Report r = NodesReport(*view_);
  ASSERT_EQ(r.json["nodes"].size(), 3u) << r.json.dump(2);  // cpu-only has no inventory
  const json& a = r.json["nodes"][0];
  EXPECT_EQ(a["name"], "node-a");
  EXPECT_EQ(a["pods"], 2);
  const json& inv = a["inventories"][0];
  EXPECT_EQ(inv["vendor"], "nvidia");
  EXPECT_EQ(inv["devices"], 8);
  EXPECT_EQ(inv["free_whole"], 5);               // 2 whole for train, a share of one for infer
  EXPECT_EQ(inv["compute_assigned"], 2000 + 0);  // infer asked memory only: no compute
  // node-b: one unhealthy device, and the finished pod holds nothing.
  const json& b = r.json["nodes"][1]["inventories"][0];
  EXPECT_EQ(b["unhealthy"], 1);
  EXPECT_EQ(b["free_whole"], 7);
  EXPECT_EQ(r.json["nodes"][1]["pods"], 0);
  EXPECT_TRUE(r.json["nodes"][2].contains("inventory_error"));
  EXPECT_EQ(r.json["totals"]["devices"], 16);
  EXPECT_NE(r.text.find("node-c  -       inventory does not parse"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("3 nodes, 16 devices (12 free whole)"), std::string::npos) << r.text;
  EXPECT_FALSE(a["unschedulable"].get<bool>());
  // Idle on node-a: six GPUs (infer holds memory, no compute). Of the built-in
  // mix, the 8-GPU shape (4%) and the pods that ask for no GPU (10%) cannot
  // use them: 0.14 x 6 fragmented, as the extender's gauges would say.
  EXPECT_DOUBLE_EQ(inv["idle_devices"].get<double>(), 6.0);
  EXPECT_NEAR(inv["fragmented_devices"].get<double>(), 0.84, 1e-9);
  EXPECT_NE(r.text.find("0.84/6 "), std::string::npos) << r.text;
  EXPECT_EQ(r.json["workload"]["source"], "the built-in mix");
  EXPECT_NE(r.text.find("of 13 idle devices fragmented ("), std::string::npos) << r.text;
}

// A node's inventory annotation is written by whoever controls the node: the
// reason it does not parse quotes it, cut where it may split a character,
// and -o json still prints (the dump once threw on such a string).
TEST(ClusterViewNodesTest, AnInventoryErrorCutMidCharacterStillPrintsAsJson) {
  std::string text = "a";
  for (int i = 0; i < 40; ++i) text += "\xc3\xa9";  // é
  json n = Node("node-a");
  n["metadata"]["annotations"]["accelpool.io/inventory"] =
      json({{"version", 1}, {"generation", 1}, {"inventories", text}}).dump();
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({n}, {});
  ASSERT_EQ(view->bad_nodes().count("node-a"), 1u);
  for (const StatusOr<Report>& r :
       {StatusOr<Report>(NodesReport(*view)), NodeReport(*view, "node-a")}) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::string out;
    EXPECT_ANY_THROW((void)r->json.dump(2)) << "the plain dump -o json used to print with";
    ASSERT_NO_THROW(out = ReportJsonText(*r));
    const json back = json::parse(out, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(back.is_discarded()) << out;
    EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos) << "U+FFFD where the cut is: " << out;
  }
}

// Nodes grouped by super node (an NVLink domain here, read from NVIDIA's
// clique label or accelpool's): how many of each a multi-node job could take
// whole now, most idle first.
TEST(ClusterViewNodes, SuperNodesShowTheirIdleNodes) {
  const std::string nvl = "00112233-4455-6677-8899-aabbccddeeff.7";
  json a = Node("tray-a"), b = Node("tray-b"), c = Node("tray-c"), d = Node("tray-d");
  a["metadata"]["labels"] = {{"nvidia.com/gpu.clique", nvl}};
  b["metadata"]["labels"] = {{"nvidia.com/gpu.clique", nvl}};
  c["metadata"]["labels"] = {{"accelpool.io/super-node", "rack-2"}};
  Binder binder({"tray-a"});
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects(
      {a, b, c, d}, {binder.Bind(Pod("small", {{"nvidia.com/gpu", "1"}}), "tray-a")});
  Report r = NodesReport(*view);
  ASSERT_EQ(r.json["super_nodes"].size(), 2u) << r.json.dump(2);
  EXPECT_EQ(r.json["super_nodes"][0], (json{{"name", nvl}, {"nodes", 2}, {"idle_nodes", 1}}));
  EXPECT_EQ(r.json["super_nodes"][1], (json{{"name", "rack-2"}, {"nodes", 1}, {"idle_nodes", 1}}));
  EXPECT_EQ(r.json["nodes"][0]["super_node"], nvl);
  EXPECT_FALSE(r.json["nodes"][3].contains("super_node"));
  EXPECT_NE(r.text.find("super nodes, idle nodes/nodes: " + nvl + " 1/2 rack-2 1/1"),
            std::string::npos)
      << r.text;
}

TEST_F(ClusterViewTest, NodesReportMeasuresFragmentationForTheWorkloadGiven) {
  // Only whole single GPUs arrive: free whole GPUs are never fragment.
  ReportWorkload whole{
      {core::TaskShape{.count = 1, .compute = 1000, .memory_mib = 0, .model = "", .weight = 1}},
      "test"};
  Report r = NodesReport(*view_, whole);
  EXPECT_DOUBLE_EQ(r.json["nodes"][0]["inventories"][0]["fragmented_devices"].get<double>(), 0);
  EXPECT_EQ(r.json["workload"]["source"], "test");
  EXPECT_NE(r.text.find("0 of 13 idle devices fragmented (0.0%) for test"), std::string::npos)
      << r.text;
}

TEST(ClusterViewNodesTest, ACordonedNodeIsMarkedAndItsFreeCardsCountedApart) {
  json b = Node("node-b");
  b["spec"]["unschedulable"] = true;
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({Node("node-a"), b}, {});
  Report r = NodesReport(*view);
  EXPECT_TRUE(r.json["nodes"][1]["unschedulable"].get<bool>());
  EXPECT_EQ(r.json["totals"]["free_whole_on_cordoned_nodes"], 8);
  EXPECT_NE(r.text.find("node-b (cordoned)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("2 nodes, 16 devices (16 free whole, 8 of them on cordoned nodes)"),
            std::string::npos)
      << r.text;
}

// A device whose plugin measured memory no grant accounts for is not free
// whole, and the node's device list says why.
TEST(ClusterViewNodesTest, ADeviceHoldingForeignMemoryIsNotFreeWhole) {
  api::InventoryDocument doc;
  doc.inventories.push_back(extender::testing::GpuNode("node-a"));
  doc.inventories[0].devices[2].foreign_mib = 8192;
  json n = Node("node-a");
  n["metadata"]["annotations"]["accelpool.io/inventory"] = api::SerializeInventory(doc);
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({n}, {});
  Report r = NodesReport(*view);
  EXPECT_EQ(r.json["nodes"][0]["inventories"][0]["free_whole"], 7);
  StatusOr<Report> one = NodeReport(*view, "node-a");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->json["devices"][2]["state"], "foreign 8192 MiB") << one->json.dump(2);
  EXPECT_EQ(one->json["devices"][2]["foreign_mib"], 8192);
  EXPECT_EQ(one->json["devices"][1]["state"], "ok");
  EXPECT_NE(one->text.find("foreign 8192 MiB"), std::string::npos) << one->text;
}

// The host is tracked as by the extender (--host-aware, its default): a pod
// that asks for no GPU takes its share of the node's free CPU, and the idle
// GPUs count as fragment in that proportion.
TEST(ClusterViewNodesTest, FragmentationCountsTheHostAsTheExtenderDoes) {
  json node = Node("node-a");
  node["status"]["allocatable"] = {{"cpu", "16"}, {"memory", "256Gi"}, {"pods", "110"}};
  json web = Pod("web", json::object());
  web["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "8"}}}};
  web["spec"]["nodeName"] = "node-a";
  web["status"]["phase"] = "Running";
  core::TaskShape cpu_only{.count = 0, .compute = 0, .memory_mib = 0, .model = "", .weight = 1};
  cpu_only.cpu_milli = 4000;
  const ReportWorkload workload{{cpu_only}, "test"};
  auto fragmented = [&](const std::vector<json>& pods) {
    std::unique_ptr<ClusterView> view = ClusterView::FromObjects({node}, pods);
    return NodesReport(*view, workload)
        .json["nodes"][0]["inventories"][0]["fragmented_devices"]
        .get<double>();
  };
  EXPECT_DOUBLE_EQ(fragmented({}), 8 * 4.0 / 16);    // a quarter of 16 free cores
  EXPECT_DOUBLE_EQ(fragmented({web}), 8 * 4.0 / 8);  // half of the 8 left
  // As an extender run with --host-aware=false: the host is not known, and
  // a pod that asks for no GPU leaves all of them idle.
  std::unique_ptr<ClusterView> blind =
      ClusterView::FromObjects({node}, {web}, ViewOptions{.host_aware = false});
  EXPECT_DOUBLE_EQ(NodesReport(*blind, workload)
                       .json["nodes"][0]["inventories"][0]["fragmented_devices"]
                       .get<double>(),
                   8.0);
}

TEST_F(ClusterViewTest, NodeReportNamesEachDevicesHolders) {
  StatusOr<Report> r = NodeReport(*view_, "node-a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int whole = 0, shared = 0;
  for (const json& d : r->json["devices"]) {
    for (const json& h : d["holders"]) {
      if (h["pod"] == "ml/train") {
        EXPECT_TRUE(h["exclusive"].get<bool>());
        ++whole;
      } else {
        EXPECT_EQ(h["pod"], "ml/infer");
        EXPECT_EQ(h["memory_mib"], 4096);
        ++shared;
      }
    }
  }
  EXPECT_EQ(whole, 2);
  EXPECT_EQ(shared, 1);
  EXPECT_NE(r->text.find("ml/train[main] whole"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("ml/infer[main] 4096 MiB"), std::string::npos) << r->text;
  StatusOr<Report> b = NodeReport(*view_, "node-b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->json["devices"][7]["state"], "unhealthy");
  StatusOr<Report> none = NodeReport(*view_, "cpu-only");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("kubectl accelpool nodes"), std::string::npos);
}

TEST_F(ClusterViewTest, PodsReportSumsWhatEachPodHolds) {
  Report r = PodsReport(*view_, "");
  ASSERT_EQ(r.json["pods"].size(), 2u) << r.json.dump(2);  // done finished, waiting holds none
  const json& infer = r.json["pods"][0];
  EXPECT_EQ(infer["pod"], "ml/infer");
  EXPECT_EQ(infer["node"], "node-a");
  EXPECT_TRUE(infer["counted"].get<bool>());
  EXPECT_EQ(infer["vendors"][0]["devices"], 1);
  EXPECT_EQ(infer["vendors"][0]["whole"], 0);
  EXPECT_EQ(infer["vendors"][0]["memory_mib"], 4096);
  const json& train = r.json["pods"][1];
  EXPECT_EQ(train["vendors"][0]["whole"], 2);
  // Whole cards count their whole memory and compute.
  EXPECT_EQ(train["vendors"][0]["memory_mib"],
            2 * extender::testing::GpuNode("x").devices[0].memory_mib);
  EXPECT_EQ(train["vendors"][0]["compute"], 2000);
  EXPECT_NE(r.text.find("2 pods holding devices\n"), std::string::npos) << r.text;
  EXPECT_TRUE(PodsReport(*view_, "other").json["pods"].empty());
  EXPECT_NE(PodsReport(*view_, "ml").text.find("in namespace ml"), std::string::npos);
}

// A finished pod holds nothing: explain says so, not that it was bound
// without the extender.
TEST(ClusterViewExplainTest, AFinishedPodIsSaidToHaveReleasedItsDevices) {
  json done = Bound(Pod("done", {{"nvidia.com/gpu", "2"}}), "node-a");
  done["status"]["phase"] = "Succeeded";
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({Node("node-a")}, {done});
  StatusOr<Report> r = ExplainReport(*view, done, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->text.find("finished (Succeeded): its devices were released"), std::string::npos)
      << r->text;
  EXPECT_EQ(r->text.find("bound without the extender"), std::string::npos) << r->text;
  EXPECT_EQ(r->json["phase"], "Succeeded");
}

// An init container's devices count as the node counts them: the most the
// pod holds on each device at any moment (an init container alone on a card
// holds it whole; a larger init share wins over the main container's).
TEST(ClusterViewPodsTest, InitContainersCountAsTheNodeCountsThem) {
  auto with_init = [](const std::string& name, const json& init, const json& main) {
    json pod = Pod(name, main);
    pod["spec"]["initContainers"] = {{{"name", "prep"}, {"resources", {{"limits", init}}}}};
    return pod;
  };
  Binder binder({"node-a"});
  json whole = binder.Bind(with_init("whole", {{"nvidia.com/gpu", "1"}}, json::object()), "node-a");
  json larger =
      binder.Bind(with_init("larger", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8000"}},
                            {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4000"}}),
                  "node-a");
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({Node("node-a")}, {whole, larger});
  Report r = PodsReport(*view, "");
  ASSERT_EQ(r.json["pods"].size(), 2u) << r.json.dump(2);
  const json& l = r.json["pods"][0];
  EXPECT_EQ(l["pod"], "ml/larger");
  EXPECT_GE(l["vendors"][0]["memory_mib"].get<int64_t>(), 8000) << l.dump();
  const json& w = r.json["pods"][1];
  EXPECT_EQ(w["pod"], "ml/whole");
  EXPECT_EQ(w["vendors"][0]["whole"], 1) << w.dump();
  EXPECT_EQ(w["vendors"][0]["compute"], 1000);
  EXPECT_EQ(w["vendors"][0]["memory_mib"], extender::testing::GpuNode("x").devices[0].memory_mib);
}

TEST_F(ClusterViewTest, ExplainSaysWhereAPendingPodFitsAndWhyNot) {
  // 7 cards: node-b has 7 healthy (one unhealthy), node-a has 5 free.
  StatusOr<Report> r = ExplainReport(*view_, Pod("big", {{"nvidia.com/gpu", "7"}}), "accelpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->json["fits"].size(), 1u) << r->json.dump(2);
  EXPECT_EQ(r->json["fits"][0]["node"], "node-b");
  EXPECT_TRUE(r->json["rejected"]["node-a"]["could_fit_later"].get<bool>());
  EXPECT_NE(r->json["rejected"]["node-c"]["reason"].get<std::string>().find("inventory"),
            std::string::npos)
      << r->json.dump(2);
  EXPECT_NE(r->text.find("fits on 1 of 3 accelpool nodes, best first: node-b"), std::string::npos)
      << r->text;
  EXPECT_NE(r->text.find("nvidia x7 (whole)"), std::string::npos) << r->text;
  // 8 cards: nowhere.
  r = ExplainReport(*view_, Pod("bigger", {{"nvidia.com/gpu", "8"}}), "binpack");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json["fits"].empty());
  EXPECT_EQ(r->json["policy"], "binpack");
  EXPECT_EQ(r->json["node_policy"], "binpack");
  EXPECT_NE(r->text.find("fits on none of the 3 accelpool nodes"), std::string::npos) << r->text;
  // HAMi's gpu-scheduler-policy picks the devices; the nodes keep the cluster's.
  json hami = Pod("hami", {{"nvidia.com/gpu", "1"}});
  hami["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = "spread";
  r = ExplainReport(*view_, hami, "binpack");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->json["policy"], "spread");
  EXPECT_EQ(r->json["node_policy"], "binpack");
  EXPECT_NE(r->text.find("with policy spread (nodes scored by binpack)"), std::string::npos)
      << r->text;
  EXPECT_NE(r->text.find("does not fit:"), std::string::npos);
  // An unknown policy is an error that names the flag.
  EXPECT_FALSE(ExplainReport(*view_, Pod("p", {{"nvidia.com/gpu", "1"}}), "nonsense").ok());
}

TEST_F(ClusterViewTest, ExplainShowsABoundPodsDevicesAndRefusesNothing) {
  json train = Bound(Pod("train", {{"nvidia.com/gpu", "2"}}), "node-a");
  StatusOr<Report> r = ExplainReport(*view_, train, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["node"], "node-a");
  ASSERT_EQ(r->json["assignment"].size(), 2u) << r->json.dump(2);
  EXPECT_TRUE(r->json["assignment"][0]["exclusive"].get<bool>());
  // Bound by hand, without an assignment.
  json by_hand = Pod("by-hand", {{"nvidia.com/gpu", "1"}});
  by_hand["spec"]["nodeName"] = "node-a";
  r = ExplainReport(*view_, by_hand, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json["assignment"].is_null());
  EXPECT_NE(r->text.find("holds no accelpool devices there"), std::string::npos) << r->text;
  // A request that does not parse, and one for no accelerator.
  r = ExplainReport(*view_, Pod("odd", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "x"}}),
                    "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json.contains("request_error")) << r->json.dump(2);
  r = ExplainReport(*view_, Pod("cpu", {{"cpu", "1"}}), "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json["asks"].empty());
}

// kube-scheduler's node filters run before the extender's: a node they turn
// away is named with the selector or taint, never offered as a fit.
TEST(ClusterViewExplainTest, KubeSchedulersNodeFiltersComeFirst) {
  json a = Node("node-a");
  a["metadata"]["labels"] = {{"accelpool.io/pool", "train"}};
  json b = Node("node-b");
  b["metadata"]["labels"] = {{"accelpool.io/pool", "infer"}};
  json c = Node("node-c");
  c["metadata"]["labels"] = {{"accelpool.io/pool", "train"}};
  c["spec"]["taints"] = {{{"key", "maintenance"}, {"effect", "NoSchedule"}}};
  json d = Node("node-d");
  d["metadata"]["labels"] = {{"accelpool.io/pool", "train"}};
  d["spec"]["unschedulable"] = true;
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({a, b, c, d}, {});
  json pod = Pod("pinned", {{"nvidia.com/gpu", "1"}});
  pod["spec"]["nodeSelector"] = {{"accelpool.io/pool", "train"}};
  StatusOr<Report> r = ExplainReport(*view, pod, "accelpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->json["fits"].size(), 1u) << r->json.dump(2);
  EXPECT_EQ(r->json["fits"][0]["node"], "node-a");
  const json& no = r->json["rejected"];
  EXPECT_EQ(no["node-b"]["by"], "kube-scheduler");
  EXPECT_EQ(no["node-b"]["reason"],
            "nodeSelector accelpool.io/pool=train: the node's label is accelpool.io/pool=infer");
  EXPECT_EQ(no["node-c"]["reason"], "taint maintenance:NoSchedule is not tolerated");
  EXPECT_NE(no["node-d"]["reason"].get<std::string>().find("cordoned"), std::string::npos);
  EXPECT_FALSE(no["node-d"]["could_fit_later"].get<bool>());
  EXPECT_NE(r->text.find("1 node (node-b): kube-scheduler: nodeSelector"), std::string::npos)
      << r->text;
  // Tolerating the taint opens node-c; the extender then turns a full
  // node away in its own words.
  pod["spec"]["tolerations"] = {{{"key", "maintenance"}, {"operator", "Exists"}}};
  pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "9";
  r = ExplainReport(*view, pod, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json["fits"].empty());
  EXPECT_EQ(r->json["rejected"]["node-c"]["by"], "accelpool") << r->json.dump(2);
  EXPECT_EQ(r->json["rejected"]["node-a"]["by"], "accelpool");
  EXPECT_EQ(r->json["rejected"]["node-b"]["by"], "kube-scheduler");
}

// A claim bound to a local volume on node-b: kube-scheduler's volume binding
// rules out node-a before the extender sees it.
TEST(ClusterViewExplainTest, ALocalVolumeRulesOutTheOtherNodes) {
  json a = Node("node-a");
  a["metadata"]["labels"] = {{"kubernetes.io/hostname", "node-a"}};
  json b = Node("node-b");
  b["metadata"]["labels"] = {{"kubernetes.io/hostname", "node-b"}};
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({a, b}, {});
  json pod = Pod("reader", {{"nvidia.com/gpu", "1"}});
  pod["spec"]["volumes"] = {{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}};
  const json requirement = {
      {"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", json::array({"node-b"})}};
  json pv = {{"metadata", {{"name", "local-b"}}}};
  pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] =
      json::array({json{{"matchExpressions", json::array({requirement})}}});
  const json pvc = {
      {"metadata",
       {{"name", "data"}, {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}}}},
      {"spec", {{"volumeName", "local-b"}}}};
  const PodVolumes volumes = PodVolumes::Read(
      pod, [&](const std::string& kind, const std::string&, const std::string&) -> StatusOr<json> {
        return kind == "persistentvolumeclaims" ? pvc : pv;
      });
  StatusOr<Report> r = ExplainReport(*view, pod, "accelpool", ExplainInputs{nullptr, &volumes});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->json["fits"].size(), 1u) << r->json.dump(2);
  EXPECT_EQ(r->json["fits"][0]["node"], "node-b");
  EXPECT_EQ(r->json["rejected"]["node-a"]["by"], "kube-scheduler");
  EXPECT_NE(r->json["rejected"]["node-a"]["reason"].get<std::string>().find(
                "PersistentVolume's node affinity: local-b (claim data)"),
            std::string::npos);
  EXPECT_FALSE(r->json.contains("volumes_not_judged"));
  // Volumes not read: judged by nobody, and said so.
  r = ExplainReport(*view, pod, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["fits"].size(), 2u);
  EXPECT_EQ(r->json["volumes_not_judged"], "not read");
}

// A ReadWriteOncePod claim mounted by a bound pod (any scheduler's) rules out
// every node; a missing claim does too, before any node filter speaks.
TEST(ClusterViewExplainTest, VolumeRestrictionsAndPreFilterReasonsReachEveryNode) {
  json a = Node("node-a");
  json b = Node("node-b");
  b["spec"]["taints"] = {{{"key", "dedicated"}, {"value", "x"}, {"effect", "NoSchedule"}}};
  json writer = Pod("writer", {{"cpu", "1"}});
  writer["spec"]["nodeName"] = "node-a";
  writer["spec"]["volumes"] = {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "solo"}}}}};
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({a, b}, {writer});
  EXPECT_EQ(view->Use("node-a").claims.count(writer["metadata"]["namespace"].get<std::string>() +
                                             "/solo"),
            1u);
  json pod = Pod("reader", {{"nvidia.com/gpu", "1"}});
  pod["spec"]["volumes"] = writer["spec"]["volumes"];
  const json pvc = {
      {"metadata",
       {{"name", "solo"}, {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}}}},
      {"spec", {{"volumeName", "pv-solo"}, {"accessModes", {"ReadWriteOncePod"}}}}};
  const PodVolumes volumes = PodVolumes::Read(
      pod, [&](const std::string& kind, const std::string&, const std::string&) -> StatusOr<json> {
        if (kind == "persistentvolumeclaims") return pvc;
        return json{{"metadata", {{"name", "pv-solo"}}}};
      });
  StatusOr<Report> r = ExplainReport(*view, pod, "accelpool", ExplainInputs{nullptr, &volumes});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json["fits"].empty()) << r->json.dump(2);
  EXPECT_NE(r->json["rejected"]["node-a"]["reason"].get<std::string>().find(
                "ReadWriteOncePod access mode already in-use by another pod: claim solo is "
                "mounted by pod " +
                writer["metadata"]["namespace"].get<std::string>() + "/writer on node-a"),
            std::string::npos)
      << r->json.dump(2);
  // node-b's taint is kube-scheduler's first word there (a Filter runs after PreFilter).
  EXPECT_NE(r->json["rejected"]["node-b"]["reason"].get<std::string>().find("taint"),
            std::string::npos)
      << r->json.dump(2);
  // A gated pod: kube-scheduler does not try it until the gates are gone.
  json gated = Pod("gated", {{"nvidia.com/gpu", "1"}});
  gated["spec"]["schedulingGates"] = {{{"name", "kueue.x-k8s.io/admission"}}};
  r = ExplainReport(*view, gated, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["scheduling_gates"], json::array({"kueue.x-k8s.io/admission"}));
  EXPECT_NE(r->text.find("gated: kube-scheduler does not try to place it until its scheduling "
                         "gates are removed (kueue.x-k8s.io/admission"),
            std::string::npos)
      << r->text;
  EXPECT_TRUE(r->json.contains("fits")) << "where it would go once ungated is still shown";
  // Resource claims (dynamic resource allocation) are counted, not judged.
  json dra = Pod("dra", {{"nvidia.com/gpu", "1"}});
  dra["spec"]["resourceClaims"] = {{{"name", "gpu"}, {"resourceClaimName", "gpu-claim"}}};
  r = ExplainReport(*view, dra, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["resource_claims_not_judged"], 1);
  EXPECT_NE(r->text.find("DynamicResources"), std::string::npos) << r->text;
  // A missing claim: PreFilter's reason on both nodes, the tainted one too.
  const PodVolumes missing = PodVolumes::Read(
      pod, [](const std::string&, const std::string&, const std::string&) -> StatusOr<json> {
        return Status(StatusCode::kNotFound, "none");
      });
  r = ExplainReport(*view, pod, "accelpool", ExplainInputs{nullptr, &missing});
  ASSERT_TRUE(r.ok());
  for (const char* n : {"node-a", "node-b"}) {
    EXPECT_EQ(r->json["rejected"][n]["reason"], "persistentvolumeclaim \"solo\" not found") << n;
  }
}

// kube-scheduler's resource fit counts every pod bound to a node, accelpool's
// or not, against the node's allocatable.
// Pods whose requests together pass what an int64 holds fill the node; the
// sum neither wraps round to a negative (room for anything) nor is undefined.
TEST(ClusterViewExplainTest, HugeRequestsOnANodeSaturate) {
  json a = Node("node-a");
  a["status"]["allocatable"] = {{"cpu", "8"}, {"pods", "110"}, {"nvidia.com/gpu", "8"}};
  std::vector<json> pods;
  for (const char* name : {"big-1", "big-2", "big-3"}) {
    json p = Pod(name, {{"cpu", "9000000000000000"}});  // 9e18 milli-CPU each
    p["spec"]["nodeName"] = "node-a";
    p["status"]["phase"] = "Running";
    pods.push_back(p);
  }
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({a}, pods);
  EXPECT_EQ(view->Use("node-a").requested.at("cpu"), std::numeric_limits<int64_t>::max());
  StatusOr<Report> r =
      ExplainReport(*view, Pod("train", {{"nvidia.com/gpu", "1"}, {"cpu", "1"}}), "accelpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->json["fits"].empty()) << r->json.dump(2);
  EXPECT_EQ(r->json["rejected"]["node-a"]["reason"], "Insufficient cpu: asks 1, 0 of 8 free");
}

TEST(ClusterViewExplainTest, ResourceFitCountsEveryPodOnTheNode) {
  json a = Node("node-a");
  a["status"]["allocatable"] = {{"cpu", "8"}, {"pods", "110"}, {"nvidia.com/gpu", "8"}};
  json b = Node("node-b");
  b["status"]["allocatable"] = {{"cpu", "8"}, {"pods", "110"}, {"nvidia.com/gpu", "8"}};
  json web = Pod("web", {{"cpu", "6"}});
  web["spec"]["nodeName"] = "node-a";
  json done = Pod("batch", {{"cpu", "8"}});
  done["spec"]["nodeName"] = "node-b";
  done["status"]["phase"] = "Succeeded";  // finished: holds nothing
  std::unique_ptr<ClusterView> view = ClusterView::FromObjects({a, b}, {web, done});
  EXPECT_EQ(view->Use("node-a").pods, 1);
  EXPECT_EQ(view->Use("node-b").pods, 0);
  StatusOr<Report> r =
      ExplainReport(*view, Pod("train", {{"nvidia.com/gpu", "1"}, {"cpu", "4"}}), "accelpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->json["fits"].size(), 1u) << r->json.dump(2);
  EXPECT_EQ(r->json["fits"][0]["node"], "node-b");
  EXPECT_EQ(r->json["rejected"]["node-a"]["by"], "kube-scheduler");
  EXPECT_EQ(r->json["rejected"]["node-a"]["reason"], "Insufficient cpu: asks 4, 2 of 8 free");
  // Anti-affinity to the web pod's labels, per host: node-a is ruled out.
  json spread = Pod("replica", {{"nvidia.com/gpu", "1"}});
  spread["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      {{{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
        {"topologyKey", "kubernetes.io/hostname"}}};
  json a2 = a;
  a2["metadata"]["labels"] = {{"kubernetes.io/hostname", "node-a"}};
  json b2 = b;
  b2["metadata"]["labels"] = {{"kubernetes.io/hostname", "node-b"}};
  web["metadata"]["labels"] = {{"app", "web"}};
  view = ClusterView::FromObjects({a2, b2}, {web});
  r = ExplainReport(*view, spread, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["rejected"]["node-a"]["reason"],
            "pod anti-affinity: 1 pod matching app=web in kubernetes.io/hostname=node-a")
      << r->json.dump(2);
  EXPECT_EQ(r->json["fits"][0]["node"], "node-b");
  // The bound web pod's own anti-affinity keeps other web pods off its host.
  web["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
      {{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
       {"topologyKey", "kubernetes.io/hostname"}}};
  view = ClusterView::FromObjects({a2, b2}, {web});
  json web2 = Pod("web2", {{"nvidia.com/gpu", "1"}});
  web2["metadata"]["labels"] = {{"app", "web"}};
  r = ExplainReport(*view, web2, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["rejected"]["node-a"]["reason"],
            "anti-affinity of pods already there: 1 pod in kubernetes.io/hostname=node-a keeps "
            "out pods matching app=web")
      << r->json.dump(2);
  // A term selecting namespaces by label: judged with the namespaces'
  // labels, else skipped and said so.
  json near = Pod("near", {{"nvidia.com/gpu", "1"}});
  near["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
      {{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
       {"namespaceSelector", {{"matchLabels", {{"tier", "front"}}}}},
       {"topologyKey", "kubernetes.io/hostname"}}};
  r = ExplainReport(*view, near, "accelpool");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->json["affinity_terms_not_judged"], 1);
  EXPECT_NE(r->text.find("grant list on namespaces"), std::string::npos) << r->text;
  const NamespaceLabels front = {{"ml", {{"tier", "front"}}}};
  r = ExplainReport(*view, near, "accelpool", ExplainInputs{&front, nullptr});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->json.contains("affinity_terms_not_judged"));
  ASSERT_EQ(r->json["fits"].size(), 1u) << r->json.dump(2);
  EXPECT_EQ(r->json["fits"][0]["node"], "node-a") << "next to the web pod in ml (tier=front)";
}

class ClusterViewLoadTest : public kube::testing::FakeApiTest {};

TEST_F(ClusterViewLoadTest, LoadsNodesAndUnfinishedPodsWithProgress) {
  api_.Put("/api/v1/nodes", Node("node-a"));
  api_.Put("/api/v1/namespaces/ml/pods", Bound(Pod("train", {{"nvidia.com/gpu", "2"}}), "node-a"));
  json done = Bound(Pod("done", {{"nvidia.com/gpu", "4"}}), "node-a");
  done["status"]["phase"] = "Failed";
  api_.Put("/api/v1/namespaces/ml/pods", done);
  api_.Put("/api/v1/namespaces/ml/pods", Pod("waiting", {{"nvidia.com/gpu", "1"}}));
  std::vector<std::string> lines;
  StatusOr<std::unique_ptr<ClusterView>> view =
      ClusterView::Load(*client_, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ((*view)->pods().size(), 1u);
  EXPECT_EQ((*view)->cache().Node("node-a")->FreeWholeDevices(), 6);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "listed 1 nodes; listing pods");
  EXPECT_EQ(lines[2], "listed 2 pods, 1 holding accelpool devices");  // the failed one not asked
  // The apiserver refusing: the error says what access is needed.
  api_.FailNext(1, 403);
  StatusOr<std::unique_ptr<ClusterView>> refused = ClusterView::Load(*client_, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("needs list on nodes"), std::string::npos)
      << refused.status().ToString();
}

TEST_F(ClusterViewLoadTest, TheLearnedWorkloadIsReadFromTheExtendersConfigMap) {
  const std::string where = "accelpool/accelpool-workload";
  // Not written yet: the built-in mix, and the report says why.
  StatusOr<ReportWorkload> none = ReadWorkload(*client_, where);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->shapes.empty());
  EXPECT_NE(none->source.find("holds no learned workload yet"), std::string::npos);
  extender::WorkloadState state;
  auto shape = [](int32_t count, int32_t compute) {
    core::TaskShape t;
    t.count = count;
    t.compute = compute;
    return t;
  };
  for (int i = 0; i < 10; ++i) state.arrivals.push_back(shape(1, 500));
  state.observed = 10;
  extender::WorkloadStore store(*client_, "accelpool", "accelpool-workload");
  ASSERT_TRUE(store.Save(state).ok());
  StatusOr<ReportWorkload> few = ReadWorkload(*client_, where);
  ASSERT_TRUE(few.ok()) << few.status().ToString();
  EXPECT_TRUE(few->shapes.empty());
  EXPECT_NE(few->source.find("10 arrivals"), std::string::npos) << few->source;
  // 30 halves and 10 whole 8-GPU pods: the extender's two shapes, 3:1.
  for (int i = 0; i < 20; ++i) state.arrivals.push_back(shape(1, 500));
  for (int i = 0; i < 10; ++i) state.arrivals.push_back(shape(8, 1000));
  state.observed = 40;
  ASSERT_TRUE(store.Save(state).ok());
  StatusOr<ReportWorkload> learned = ReadWorkload(*client_, where);
  ASSERT_TRUE(learned.ok()) << learned.status().ToString();
  ASSERT_EQ(learned->shapes.size(), 2u);
  EXPECT_EQ(learned->shapes[0].count + learned->shapes[1].count, 9);
  EXPECT_NE(learned->source.find("2 shapes from 40 arrivals"), std::string::npos)
      << learned->source;
  // Bad input: the name's form, and a refusal that says what access is needed.
  StatusOr<ReportWorkload> bad = ReadWorkload(*client_, "accelpool-workload");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("NAMESPACE/NAME"), std::string::npos);
  api_.FailNext(1, 403);
  StatusOr<ReportWorkload> refused = ReadWorkload(*client_, where);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("needs get on configmaps in accelpool"),
            std::string::npos)
      << refused.status().ToString();
}

TEST_F(ClusterViewLoadTest, NamespaceLabelsAreListed) {
  api_.Put("/api/v1/namespaces",
           {{"metadata", {{"name", "ml"}, {"labels", {{"team", "research"}, {"n", 3}}}}}});
  api_.Put("/api/v1/namespaces", {{"metadata", {{"name", "bare"}}}});
  StatusOr<NamespaceLabels> labels = ListNamespaceLabels(*client_);
  ASSERT_TRUE(labels.ok()) << labels.status().ToString();
  const NamespaceLabels want = {{"bare", {}}, {"ml", {{"team", "research"}}}};
  EXPECT_EQ(*labels, want);
  api_.FailNext(1, 403);
  StatusOr<NamespaceLabels> refused = ListNamespaceLabels(*client_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace accelpool::ctl
