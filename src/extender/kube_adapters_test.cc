// The Kubernetes side against an in-memory apiserver (port 0).
#include "extender/kube_adapters.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "api/inventory_codec.h"
#include "api/signature_test_util.h"
#include "common/metrics.h"
#include "extender/convert.h"
#include "extender/leader.h"
#include "extender/test_util.h"
#include "kube/fake_api_test.h"
#include "kube/fake_apiserver.h"
#include "kube/hooked_client.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

using testing::Gpu;

template <typename F>
bool Eventually(F f) {
  for (int i = 0; i < 400; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

class KubeAdaptersTest : public kube::testing::FakeApiTest {
 public:
  kube::FakeApiServer& api() { return api_; }
  kube::KubeClient& client() { return *client_; }

  nlohmann::json Node(const std::string& name) {
    api::InventoryDocument doc;
    doc.generation = 3;
    doc.inventories.push_back(testing::GpuNode(name));
    return {{"apiVersion", "v1"},
            {"kind", "Node"},
            {"metadata",
             {{"name", name},
              {"annotations", {{"accelpool.io/inventory", api::SerializeInventory(doc)}}}}}};
  }
  nlohmann::json Pod(const std::string& name, const std::string& uid) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", uid}}},
            {"spec",
             {{"schedulerName", "accelpool-scheduler"},
              {"containers",
               {{{"name", "main"}, {"resources", {{"limits", {{"nvidia.com/gpu", "2"}}}}}}}}}}};
  }
};

// An extender binding through the fake apiserver, with node-a in its cache
// and pod ns/p (uid-p) stored there.
struct BindRig {
  explicit BindRig(KubeAdaptersTest& t) {
    t.api().Put("/api/v1/namespaces/ns/pods", t.Pod("p", "uid-p"));
    testing::AddGpuNode(cache, "node-a");
    writer = std::make_unique<KubePodWriter>(t.client(), cache);
    auto made =
        Extender::Create(cache, ExtenderOptions{}, writer.get(), nullptr, nullptr, Logger());
    if (made.ok()) ext = std::move(made).value();
  }
  PodInfo Pod(int32_t gpus) const {
    PodInfo pod = testing::MakePod("uid-p", {Gpu(gpus)});
    pod.ref.name = "p";
    return pod;
  }
  Cache cache;
  std::unique_ptr<KubePodWriter> writer;
  std::unique_ptr<Extender> ext;
};

// kube-scheduler retries a pod on the Node update that takes a card out of
// accelpool.io/cordoned-devices, a moment before the extender's own watch
// delivers it. The filter that would turn the pod away for cordoned devices
// re-reads the node, so the pod goes in on that retry; a node is re-read at
// most once per interval.
TEST_F(KubeAdaptersTest, AFilterTurningAPodAwayForCordonedDevicesReReadsTheNode) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  nlohmann::json cordoned = Node("node-a");
  std::string ids;
  for (const auto& d : testing::GpuNode("node-a").devices) {
    ids += (ids.empty() ? "" : ",") + d.id;
  }
  cordoned["metadata"]["annotations"][kCordonedDevicesAnnotation] = ids;
  feeder.OnNode(cordoned);  // what the watch delivered last
  NodeRefresher refresher(*client_, feeder, std::chrono::seconds(60), Logger());
  ExtenderOptions o;
  o.refresh_node = [&refresher](const std::string& n) { return refresher.Refresh(n); };
  auto ext = Extender::Create(cache, o, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  // The apiserver already has the card back in service (no annotation).
  api_.Put("/api/v1/nodes", Node("node-a"));
  FilterDecision d = (*ext)->Filter(testing::MakePod("p", {Gpu(2)}), {"node-a"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"node-a"});
  // Cordoned again, in the cache and the apiserver; the card then returns in
  // the apiserver only: within the interval the node is not read again.
  feeder.OnNode(cordoned);
  api_.Put("/api/v1/nodes", Node("node-a"));
  d = (*ext)->Filter(testing::MakePod("q", {Gpu(2)}), {"node-a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_NE(d.unresolvable["node-a"].find("cordoned"), std::string::npos)
      << d.unresolvable["node-a"];
  // A node the apiserver does not have: no crash, the pod is turned away.
  NodeRefresher other(*client_, feeder, std::chrono::seconds(0), Logger());
  EXPECT_FALSE(other.Refresh("node-gone"));
  // All nodes together: at most `qps` reads a second.
  NodeRefresher slow(*client_, feeder, std::chrono::seconds(0), Logger(), 1.0);
  EXPECT_TRUE(slow.Refresh("node-a"));
  EXPECT_FALSE(slow.Refresh("node-a"));
}

// A watch event of the node that lands while the re-read is in flight is
// newer than what the read brings: the read does not undo it, and a node
// deleted meanwhile does not come back.
TEST_F(KubeAdaptersTest, ANodeReReadDoesNotUndoAWatchEventDuringTheRead) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  nlohmann::json cordoned = Node("node-a");
  std::string ids;
  for (const auto& d : testing::GpuNode("node-a").devices) ids += (ids.empty() ? "" : ",") + d.id;
  cordoned["metadata"]["annotations"][kCordonedDevicesAnnotation] = ids;
  feeder.OnNode(Node("node-a"));
  api_.Put("/api/v1/nodes", Node("node-a"));  // what the read will bring: all in service
  kube::testing::HookedClient hooked(*client_);
  hooked.after_get = [&] {
    feeder.OnNode(cordoned);  // the watch: cordoned since
    hooked.after_get = nullptr;
  };
  NodeRefresher refresher(hooked, feeder, std::chrono::seconds(0), Logger());
  EXPECT_TRUE(refresher.Refresh("node-a"));
  ExtenderOptions o;
  auto ext = Extender::Create(cache, o, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  FilterDecision d = (*ext)->Filter(testing::MakePod("p", {Gpu(2)}), {"node-a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_NE(d.unresolvable["node-a"].find("cordoned"), std::string::npos)
      << d.unresolvable["node-a"];
  // Deleted by the watch during the read: it stays deleted.
  hooked.after_get = [&] {
    feeder.OnNodeDeleted(cordoned);
    hooked.after_get = nullptr;
  };
  EXPECT_TRUE(refresher.Refresh("node-a"));
  EXPECT_EQ(cache.Node("node-a"), nullptr);
  // With no event in between, the read applies.
  EXPECT_TRUE(refresher.Refresh("node-a"));
  ASSERT_NE(cache.Node("node-a"), nullptr);
  EXPECT_EQ((*ext)->Filter(testing::MakePod("q", {Gpu(2)}), {"node-a"}).fits,
            std::vector<std::string>{"node-a"});
}

// kubelet updates its Node's status every few minutes (conditions' heartbeat
// times, images): nothing the cache holds changes, so its entry is not
// rebuilt and plans made on the node stay valid. A change of what the cache
// reads (labels, annotations, taints, allocatable) is applied.
TEST_F(KubeAdaptersTest, ANodeHeartbeatRebuildsNothingAndAChangeIsApplied) {
  Cache cache;
  MetricsRegistry registry;
  StatusOr<ExtenderMetrics> metrics = ExtenderMetrics::Register(registry);
  ASSERT_TRUE(metrics.ok());
  CacheFeeder feeder(cache, Logger(), &*metrics);
  nlohmann::json node = Node("node-a");
  feeder.OnNode(node);
  const NodeSnapshotPtr first = cache.Node("node-a");
  ASSERT_NE(first, nullptr);
  for (int i = 0; i < 3; ++i) {
    node["metadata"]["resourceVersion"] = std::to_string(100 + i);
    node["status"]["conditions"] = {
        {{"type", "Ready"}, {"status", "True"}, {"lastHeartbeatTime", "t" + std::to_string(i)}}};
    feeder.OnNode(node);
  }
  EXPECT_EQ(cache.Node("node-a"), first);
  // A re-read that brings the same is no change either.
  EXPECT_TRUE(feeder.OnNodeRead(node, feeder.NodeEvents()));
  EXPECT_EQ(cache.Node("node-a"), first);
  EXPECT_EQ(feeder.NodeUpdatesApplied(), 1u);
  EXPECT_EQ(feeder.NodeUpdatesUnchanged(), 4u);

  std::vector<std::function<void(nlohmann::json&)>> changes = {
      [](nlohmann::json& n) { n["metadata"]["labels"][kSuperNodeLabel] = "sn-1"; },
      [](nlohmann::json& n) {
        n["spec"]["taints"] = {{{"key", "k"}, {"effect", "PreferNoSchedule"}}};
      },
      [](nlohmann::json& n) {
        n["status"]["allocatable"] = {{"cpu", "64"}, {"memory", "512Gi"}};
      },
      [](nlohmann::json& n) {
        n["metadata"]["annotations"][kCordonedDevicesAnnotation] =
            testing::GpuNode("node-a").devices[0].id;
      },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    const NodeSnapshotPtr before = cache.Node("node-a");
    changes[i](node);
    feeder.OnNode(node);
    ASSERT_NE(cache.Node("node-a"), nullptr);
    EXPECT_NE(cache.Node("node-a"), before) << "change " << i;
  }
  EXPECT_EQ(cache.Node("node-a")->domains.super_node, "sn-1");
  EXPECT_TRUE(cache.Node("node-a")->domains.prefer_no_schedule);
  EXPECT_EQ(feeder.NodeUpdatesApplied(), 1u + changes.size());
  // The inventory gone and back: applied both times.
  nlohmann::json bare = node;
  bare["metadata"]["annotations"].erase(std::string(api::kInventoryAnnotation));
  feeder.OnNode(bare);
  EXPECT_EQ(cache.Node("node-a"), nullptr);
  feeder.OnNode(node);
  EXPECT_NE(cache.Node("node-a"), nullptr);
  // Deleted and created again with the same object: applied.
  feeder.OnNodeDeleted(node);
  feeder.OnNode(node);
  EXPECT_NE(cache.Node("node-a"), nullptr);
  const std::string page = registry.Serialize();
  EXPECT_NE(page.find("accelpool_extender_node_updates_total{result=\"unchanged\"} 4"),
            std::string::npos)
      << page;
}

// Nodes come and go under new names in an autoscaled cluster: a deleted
// node's record is kept only for a while (so a read begun before the
// deletion cannot bring the node back), then dropped; a read begun before a
// dropped deletion is not applied.
TEST_F(KubeAdaptersTest, DeletedNodesAreForgottenAfterAWhileAndStayDeleted) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  for (int i = 0; i < 100; ++i) {
    feeder.OnNode(Node("kept-" + std::to_string(i)));
    feeder.OnNodeDeleted(Node("kept-" + std::to_string(i)));
  }
  feeder.OnNode(Node("live"));
  EXPECT_EQ(feeder.NodesRemembered(), 101u);  // within the default memory
  const uint64_t before = feeder.NodeEvents();
  feeder.SetDeletedNodeMemory(std::chrono::seconds(0));
  for (int i = 0; i < 1000; ++i) {
    feeder.OnNode(Node("gone-" + std::to_string(i)));
    feeder.OnNodeDeleted(Node("gone-" + std::to_string(i)));
  }
  EXPECT_EQ(feeder.NodesRemembered(), 1u);  // the live node
  // Begun before those deletions: dropped, whichever node it read.
  EXPECT_FALSE(feeder.OnNodeRead(Node("gone-7"), before));
  EXPECT_FALSE(feeder.OnNodeRead(Node("kept-7"), before));
  EXPECT_EQ(cache.Node("gone-7"), nullptr);
  EXPECT_EQ(cache.Node("kept-7"), nullptr);
  // Begun after: applied (the node is back in the apiserver).
  EXPECT_TRUE(feeder.OnNodeRead(Node("gone-7"), feeder.NodeEvents()));
  EXPECT_NE(cache.Node("gone-7"), nullptr);
  EXPECT_NE(cache.Node("live"), nullptr);
}

// The same for a card that is healthy again, and for a node whose first
// inventory the watch has not delivered; a filter that finds a node reads
// nothing.
TEST_F(KubeAdaptersTest, AFilterThatFindsNoNodeReReadsUnhealthyAndUnknownNodes) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  api::InventoryDocument doc;
  doc.generation = 3;
  doc.inventories.push_back(testing::GpuNode("node-a"));
  for (core::Device& d : doc.inventories[0].devices) {
    d.healthy = false;
  }
  nlohmann::json sick = Node("node-a");
  sick["metadata"]["annotations"]["accelpool.io/inventory"] = api::SerializeInventory(doc);
  feeder.OnNode(sick);
  feeder.OnNode(Node("node-b"));
  NodeRefresher refresher(*client_, feeder, std::chrono::milliseconds(0), Logger());
  ExtenderOptions o;
  o.refresh_node = [&refresher](const std::string& n) { return refresher.Refresh(n); };
  auto ext = Extender::Create(cache, o, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  api_.Put("/api/v1/nodes", Node("node-a"));  // healthy again
  api_.Put("/api/v1/nodes", Node("node-c"));  // new
  // node-b fits: nothing is read, node-a stays as the watch left it.
  FilterDecision d = (*ext)->Filter(testing::MakePod("p", {Gpu(2)}), {"node-a", "node-b"});
  EXPECT_EQ(d.fits.size(), 1u);
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 0);
  // Pinned to node-a: it is read, and the pod fits.
  d = (*ext)->Filter(testing::MakePod("q", {Gpu(2)}), {"node-a"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"node-a"});
  // Pinned to node-c, which the cache has not seen: read, and it fits.
  ASSERT_EQ(cache.Node("node-c"), nullptr);
  d = (*ext)->Filter(testing::MakePod("r", {Gpu(2)}), {"node-c"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"node-c"});
}

// kube-scheduler retries a pod on another pod's deletion (or completion) a
// moment before the extender's pod watch delivers it. A filter that finds no
// node re-reads the pods of the nodes that turned the pod away only for
// devices held, and frees those the apiserver shows gone or finished; older
// watch events of a freed pod book nothing again.
TEST_F(KubeAdaptersTest, AFilterThatFindsNoNodeFreesPodsTheApiserverShowsGone) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  feeder.OnNode(Node("node-a"));
  MetricsRegistry registry;
  StatusOr<ExtenderMetrics> metrics = ExtenderMetrics::Register(registry);
  ASSERT_TRUE(metrics.ok());
  KubePodWriter writer(*client_, cache);
  PodRechecker rechecker(*client_, cache, "accelpool-scheduler", std::chrono::milliseconds(0),
                         1000.0, Logger());
  ExtenderOptions o;
  o.recheck_pods = [&rechecker](const std::string& n) { return rechecker.Recheck(n); };
  auto ext = Extender::Create(cache, o, &writer, nullptr, &*metrics, Logger());
  ASSERT_TRUE(ext.ok());
  // Four pods of 2 GPUs fill the node, each bound through the apiserver.
  std::vector<nlohmann::json> bound;
  for (int i = 1; i <= 4; ++i) {
    const std::string name = "p" + std::to_string(i);
    api_.Put("/api/v1/namespaces/ns/pods", Pod(name, "uid-" + std::to_string(i)));
    StatusOr<PodInfo> info = PodInfoFromJson(Pod(name, "uid-" + std::to_string(i)));
    ASSERT_TRUE(info.ok());
    ASSERT_TRUE((*ext)->Bind(*info, "node-a").ok());
    bound.push_back(*api_.Object("/api/v1/namespaces/ns/pods", name));
  }
  ASSERT_EQ(cache.Stats().pods_bound, 4);
  const PodInfo waiting = testing::MakePod("w", {Gpu(2)});
  // Every pod still there: the node is read, nothing is freed.
  FilterDecision d = (*ext)->Filter(waiting, {"node-a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_NE(
      registry.Serialize().find(R"(accelpool_extender_pod_rechecks_total{result="unchanged"} 1)"),
      std::string::npos);
  // p1 is deleted and p2 has finished, in the apiserver only.
  api_.Remove("/api/v1/namespaces/ns/pods", "p1");
  nlohmann::json done = bound[1];
  done["status"]["phase"] = "Succeeded";
  api_.Put("/api/v1/namespaces/ns/pods", done);
  d = (*ext)->Filter(waiting, {"node-a"});
  EXPECT_EQ(d.fits, std::vector<std::string>{"node-a"});
  EXPECT_EQ(cache.Assignment("uid-1"), std::nullopt);
  EXPECT_EQ(cache.Assignment("uid-2"), std::nullopt);
  EXPECT_TRUE(cache.Assignment("uid-3").has_value());
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 4);
  EXPECT_NE(registry.Serialize().find(R"(accelpool_extender_pod_rechecks_total{result="freed"} 1)"),
            std::string::npos)
      << registry.Serialize();
  // The watch then delivers p1's and p2's older events: nothing is booked.
  feeder.OnPod(bound[0]);
  feeder.OnPod(bound[1]);
  EXPECT_EQ(cache.Assignment("uid-1"), std::nullopt);
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 4);
  // A bind in flight (reserved, not in the apiserver as bound) is never freed.
  StatusOr<PodInfo> next = PodInfoFromJson(Pod("p5", "uid-5"));
  ASSERT_TRUE(next.ok());
  StatusOr<PodAssignment> plan = (*ext)->Bind(*next, "node-a");  // no such pod: the write fails
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 4);  // the failed bind gave it back
  PodAssignment reserved = *cache.Assignment("uid-3");
  cache.Release("uid-3");
  ASSERT_TRUE(cache.Reserve(PodRef{"uid-r", "ns", "r", ""}, reserved, 0).ok());
  EXPECT_EQ(rechecker.Recheck("node-a"), RecheckResult::kUnchanged);  // p4 is there; r is not bound
  EXPECT_TRUE(cache.Assignment("uid-r").has_value());
  // A node where the cache holds no bound pod is not read.
  const size_t requests = api_.Requests().size();
  EXPECT_EQ(rechecker.Recheck("node-none"), RecheckResult::kUnchanged);
  EXPECT_EQ(api_.Requests().size(), requests);
  // The read asks for the node's pods of this scheduler only.
  bool selected = false;
  for (const std::string& r : api_.Requests()) {
    selected = selected || (r.find("fieldSelector=spec.nodeName=node-a,") != std::string::npos &&
                            r.find("spec.schedulerName=accelpool-scheduler") != std::string::npos);
  }
  EXPECT_TRUE(selected) << api_.Requests().back();
}

// A node is read at most once per interval, and all nodes together at most
// `qps` times a second; a read that fails frees nothing.
TEST_F(KubeAdaptersTest, PodRechecksAreRateLimited) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  feeder.OnNode(Node("node-a"));
  feeder.OnNode(Node("node-b"));
  KubePodWriter writer(*client_, cache);
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  for (const std::string node : {"node-a", "node-b"}) {
    api_.Put("/api/v1/namespaces/ns/pods", Pod("p-" + node, "uid-" + node));
    StatusOr<PodInfo> info = PodInfoFromJson(Pod("p-" + node, "uid-" + node));
    ASSERT_TRUE(info.ok());
    ASSERT_TRUE((*ext)->Bind(*info, node).ok());
  }
  PodRechecker rechecker(*client_, cache, "accelpool-scheduler", std::chrono::seconds(60), 1.0,
                         Logger());
  EXPECT_EQ(rechecker.Recheck("node-a"), RecheckResult::kUnchanged);
  EXPECT_EQ(rechecker.Recheck("node-a"), RecheckResult::kSkipped);  // the node's interval
  EXPECT_EQ(rechecker.Recheck("node-b"), RecheckResult::kSkipped);  // 1 read a second in all
  api_.Remove("/api/v1/namespaces/ns/pods", "p-node-b");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(rechecker.Recheck("node-b"), RecheckResult::kFreed);
  EXPECT_EQ(cache.Assignment("uid-node-b"), std::nullopt);
  // The apiserver refusing: the read fails and the cache keeps the pod.
  api_.Remove("/api/v1/namespaces/ns/pods", "p-node-a");
  api_.FailNext(10, 403);
  PodRechecker refused(*client_, cache, "accelpool-scheduler", std::chrono::seconds(0), 100.0,
                       Logger());
  EXPECT_EQ(refused.Recheck("node-a"), RecheckResult::kFailed);
  EXPECT_TRUE(cache.Assignment("uid-node-a").has_value());
}

// A StatefulSet's pod deleted and re-created under the same name: the pod
// informer may still hold the old copy when kube-scheduler binds the new one.
// Bind reads the apiserver before calling the pod re-created, and binds it.
TEST_F(KubeAdaptersTest, BindOfARecreatedPodReadsTheApiserverOverAStaleInformerCopy) {
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-old"));
  kube::InformerOptions po;
  po.resource = kube::Pods();
  kube::Informer pods(*client_, po, kube::InformerHandlers{});
  pods.Start();
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(5)));
  pods.Stop();  // the store keeps uid-old: the watch has not delivered the new pod
  api_.Remove("/api/v1/namespaces/ns/pods", "p");
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-new"));
  KubePodSource source(*client_, &pods);
  StatusOr<nlohmann::json> any = source.GetPod("ns", "p", "");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ((*any)["metadata"]["uid"], "uid-old");  // no uid asked: the store answers
  StatusOr<nlohmann::json> fresh = source.GetPod("ns", "p", "uid-new");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ((*fresh)["metadata"]["uid"], "uid-new");

  KubePodWriter writer(*client_, cache);
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  Handlers h(**ext, &source, nullptr, Logger());
  EXPECT_EQ(
      h.Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"uid-new","Node":"node-a"})").body,
      R"({"Error":""})");
  EXPECT_TRUE(cache.Assignment("uid-new").has_value());
  // A bind for the old pod still fails: the Binding is guarded by its uid.
  EXPECT_NE(
      h.Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"uid-old","Node":"node-a"})").body,
      R"({"Error":""})");
  EXPECT_FALSE(cache.Assignment("uid-old").has_value());
}

TEST_F(KubeAdaptersTest, OneBindingSetsNodeAndAssignmentThenWatchConfirms) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  api_.Put("/api/v1/nodes", Node("node-a"));
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-p"));
  kube::InformerOptions no;
  no.resource = kube::Nodes();
  kube::Informer nodes(*client_, no, feeder.NodeHandlers());
  kube::InformerOptions po;
  po.resource = kube::Pods();
  kube::Informer pods(*client_, po, feeder.PodHandlers());
  nodes.Start();
  pods.Start();
  ASSERT_TRUE(nodes.WaitForSync(std::chrono::seconds(5)));
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(5)));
  ASSERT_NE(cache.Node("node-a"), nullptr);
  EXPECT_EQ(cache.Node("node-a")->generation, 3);

  KubePodWriter writer(*client_, cache);
  KubePodSource source(*client_, &pods);
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  Handlers h(**ext, &source, nullptr, Logger());
  Reply r = h.Bind(R"({"PodName":"p","PodNamespace":"ns","PodUID":"uid-p","Node":"node-a"})");
  EXPECT_EQ(r.body, R"({"Error":""})");
  std::optional<nlohmann::json> stored = api_.Object("/api/v1/namespaces/ns/pods", "p");
  ASSERT_TRUE(stored.has_value());
  const std::string text = (*stored)["metadata"]["annotations"]["accelpool.io/assignment"];
  EXPECT_NE(text.find("\"node\":\"node-a\""), std::string::npos) << text;
  EXPECT_EQ((*stored)["spec"]["nodeName"], "node-a");
  // The watch shows the pod bound with the same assignment: still 2 devices.
  ASSERT_TRUE(Eventually([&] { return cache.Stats().pods_bound == 1; }));
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 6);
  // Edits by hand of the bound pod's assignment (removed; unparsable; one
  // device instead of two) free nothing: the cache keeps the bound one.
  nlohmann::json edited = *stored;
  edited["metadata"]["annotations"].erase("accelpool.io/assignment");
  api_.Put("/api/v1/namespaces/ns/pods", edited);
  edited["metadata"]["annotations"]["accelpool.io/assignment"] = "{";
  api_.Put("/api/v1/namespaces/ns/pods", edited);
  nlohmann::json smaller = nlohmann::json::parse(text);
  smaller["containers"][0]["devices"].erase(1);
  edited["metadata"]["annotations"]["accelpool.io/assignment"] = smaller.dump();
  api_.Put("/api/v1/namespaces/ns/pods", edited);
  ASSERT_TRUE(Eventually([&] { return cache.Stats().assignment_changes_ignored == 3; }));
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 6);
  EXPECT_EQ(cache.Stats().pods_bound, 1);
  // A deleted pod gives its devices back.
  api_.Remove("/api/v1/namespaces/ns/pods", "p");
  EXPECT_TRUE(Eventually([&] { return cache.Node("node-a")->FreeWholeDevices() == 8; }));
  pods.Stop();
  nodes.Stop();
}

TEST_F(KubeAdaptersTest, AReplicaThatStopsLeadingDuringABindWritesNoBinding) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  feeder.OnNode(Node("node-a"));
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-p"));
  KubePodWriter writer(*client_, cache);
  std::string why;  // leads while empty
  writer.SetWriteGate([&why] { return why; });
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  StatusOr<PodInfo> info = PodInfoFromJson(Pod("p", "uid-p"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  // The bind verb's gate passed; the lease ended before the write.
  why = "the lease expired";
  StatusOr<PodAssignment> a = (*ext)->Bind(*info, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("the lease expired"), std::string::npos);
  std::optional<nlohmann::json> stored = api_.Object("/api/v1/namespaces/ns/pods", "p");
  ASSERT_TRUE(stored.has_value());
  EXPECT_FALSE(stored->contains("spec") && (*stored)["spec"].contains("nodeName"));
  EXPECT_TRUE(cache.Node("node-a")->Idle());  // the reservation was given back
  // Leading again: the same bind goes through.
  why.clear();
  a = (*ext)->Bind(*info, "node-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  stored = api_.Object("/api/v1/namespaces/ns/pods", "p");
  EXPECT_EQ((*stored)["spec"]["nodeName"], "node-a");
}

// A Binding is bounded by how long this replica still leads: sent with that
// as the apiserver's timeout (so it cannot commit long after another replica
// took over), and not sent at all with under a second left.
TEST_F(KubeAdaptersTest, ABindingIsBoundedByTheLeadershipLeft) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  feeder.OnNode(Node("node-a"));
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-p"));
  KubePodWriter writer(*client_, cache);
  std::chrono::milliseconds left{500};
  writer.SetWriteTimeLeft([&left] { return left; });
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  StatusOr<PodInfo> info = PodInfoFromJson(Pod("p", "uid-p"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  StatusOr<PodAssignment> a = (*ext)->Bind(*info, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("leadership ends in 500 ms"), std::string::npos)
      << a.status().ToString();
  EXPECT_TRUE(cache.Node("node-a")->Idle());
  for (const std::string& r : api_.Requests()) EXPECT_EQ(r.find("binding"), std::string::npos) << r;
  left = std::chrono::milliseconds(7250);
  a = (*ext)->Bind(*info, "node-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  bool sent = false;
  for (const std::string& r : api_.Requests()) {
    if (r.find("/pods/p/binding") == std::string::npos) continue;
    sent = true;
    EXPECT_NE(r.find("timeout=7250ms"), std::string::npos) << r;
  }
  EXPECT_TRUE(sent);
  std::optional<nlohmann::json> stored = api_.Object("/api/v1/namespaces/ns/pods", "p");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ((*stored)["spec"]["nodeName"], "node-a");
}

TEST_F(KubeAdaptersTest, APodReCreatedUnderItsNameDuringARelistFreesTheOldOnesDevices) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  feeder.OnNode(Node("node-a"));
  auto ext = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  StatusOr<PodInfo> info = PodInfoFromJson(Pod("p", "uid-old"));
  ASSERT_TRUE(info.ok());
  StatusOr<PodAssignment> a = (*ext)->Bind(*info, "node-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  StatusOr<api::Assignment> doc = ToApiAssignment(*a, *cache.Node("node-a"), *info);
  ASSERT_TRUE(doc.ok());
  nlohmann::json old_pod = Pod("p", "uid-old");
  old_pod["spec"]["nodeName"] = "node-a";
  old_pod["metadata"]["annotations"] = {
      {"accelpool.io/assignment", api::SerializeAssignment(*doc)}};
  feeder.OnPod(old_pod);
  ASSERT_EQ(cache.Stats().pods_bound, 1);
  ASSERT_EQ(cache.Node("node-a")->FreeWholeDevices(), 6);
  // A relist after 410 Gone matches by namespace/name: the new pod (not bound
  // yet) arrives as an update of the old one.
  feeder.PodHandlers().on_update(old_pod, Pod("p", "uid-new"));
  EXPECT_EQ(cache.Assignment("uid-old"), std::nullopt);
  EXPECT_EQ(cache.Node("node-a")->FreeWholeDevices(), 8);
  EXPECT_TRUE(cache.Node("node-a")->Idle());
  // Same uid: an ordinary update keeps the record.
  StatusOr<PodAssignment> b = (*ext)->Bind(*PodInfoFromJson(Pod("p", "uid-new")), "node-a");
  ASSERT_TRUE(b.ok());
  feeder.PodHandlers().on_update(Pod("p", "uid-new"), Pod("p", "uid-new"));
  EXPECT_TRUE(cache.Assignment("uid-new").has_value());
}

TEST_F(KubeAdaptersTest, RetriedBindOfAnAlreadyBoundPodSucceeds) {
  // kube-scheduler timed out on a bind whose Binding landed, and binds again:
  // the apiserver answers 409; bound to the same node is success.
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-p"));
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  testing::AddGpuNode(cache, "node-b");
  KubePodWriter writer(*client_, cache);
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodInfo pod = testing::MakePod("uid-p", {Gpu(1)});
  pod.ref.name = "p";
  StatusOr<PodAssignment> first = (*ext)->Bind(pod, "node-a");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<PodAssignment> again = (*ext)->Bind(pod, "node-a");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->parts.size(), first->parts.size());
  // Bound elsewhere, or a different pod of that name: still a failure.
  PodAssignment elsewhere = *first;
  elsewhere.node = "node-b";
  EXPECT_FALSE(writer.Bind(pod, elsewhere).ok());
  PodInfo other = pod;
  other.ref.uid = "other-uid";
  EXPECT_FALSE(writer.Bind(other, *first).ok());
}

TEST_F(KubeAdaptersTest, ABindOfAPodBoundMeanwhileWithOtherDevicesIsNotASuccess) {
  // Another replica's Binding landed (the pod on node-a with GPU 7) before
  // this replica's watch showed it; this replica plans other devices, and the
  // apiserver answers 409.
  PodInfo pod = testing::MakePod("uid-p", {Gpu(1)});
  pod.ref.name = "p";
  Cache scratch;
  testing::AddGpuNode(scratch, "node-a");
  auto planner = Extender::Create(scratch, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(planner.ok());
  StatusOr<PodAssignment> planned = (*planner)->Bind(pod, "node-a");
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_EQ(planned->parts.size(), 1u);
  ASSERT_EQ(planned->parts[0].placement.containers.at(0).grants.size(), 1u);
  const int32_t mine = planned->parts[0].placement.containers[0].grants[0].device;
  const int32_t theirs = mine == 7 ? 6 : 7;
  PodAssignment other = *planned;
  other.parts[0].placement.containers[0].grants[0].device = theirs;
  other.parts[0].device_ids = {{theirs, testing::GpuNode("node-a").devices[theirs].id}};
  StatusOr<api::Assignment> doc = ToApiAssignment(other, *scratch.Node("node-a"), pod);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  nlohmann::json bound = Pod("p", "uid-p");
  bound["spec"]["nodeName"] = "node-a";
  bound["metadata"]["annotations"] = {{api::kAssignmentAnnotation, api::SerializeAssignment(*doc)}};
  api_.Put("/api/v1/namespaces/ns/pods", bound);

  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  KubePodWriter writer(*client_, cache);
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  StatusOr<PodAssignment> a = (*ext)->Bind(pod, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kAlreadyExists) << a.status().ToString();
  // The reservation of devices the pod does not hold is given back ...
  EXPECT_TRUE(cache.Node("node-a")->Idle());
  EXPECT_FALSE(cache.Assignment("uid-p").has_value());
  // ... and the watch counts the ones it does.
  CacheFeeder feeder(cache, Logger());
  feeder.OnPod(bound);
  EXPECT_EQ(cache.Stats().assignment_changes_ignored, 0);
  std::optional<PodAssignment> counted = cache.AppliedAssignment("uid-p");
  ASSERT_TRUE(counted.has_value());
  EXPECT_EQ(counted->parts.at(0).placement.containers.at(0).grants.at(0).device, theirs);
}

// A bound pod whose assignment annotation does not parse (after a restart
// the cache holds no record of it) runs on devices the extender cannot tell:
// they stay booked, not free for another pod. The device ids still legible
// in it are booked whole; with none, the whole node takes no pooled pod. The
// booking ends when the pod goes or its annotation parses again.
TEST_F(KubeAdaptersTest, ABoundPodWhoseAssignmentDoesNotParseKeepsWhatItMayUseBooked) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  feeder.OnNode(Node("node-a"));
  auto ext = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  auto fits = [&](int32_t gpus) {
    return !(*ext)->Filter(testing::MakePod("new", {Gpu(gpus)}), {"node-a"}).fits.empty();
  };
  nlohmann::json bad = Pod("bad", "uid-bad");
  bad["spec"]["nodeName"] = "node-a";
  bad["metadata"]["annotations"][api::kAssignmentAnnotation] =
      R"({"version":1,"node":"node-a","containers":[{"name":"main","vendor":"nope",)"
      R"("devices":[]}]})";
  feeder.OnPod(bad);
  EXPECT_FALSE(fits(8));
  FilterDecision d = (*ext)->Filter(testing::MakePod("new", {Gpu(1)}), {"node-a"});
  EXPECT_TRUE(d.fits.empty());
  EXPECT_NE(d.failed["node-a"].find("ns/bad runs here with an accelpool.io/assignment annotation "
                                    "that does not parse"),
            std::string::npos)
      << d.failed["node-a"];
  EXPECT_EQ(cache.Stats().pods_unreadable, 1);
  // A pod asking for no device still goes.
  EXPECT_FALSE((*ext)->Filter(testing::MakePod("host", {}), {"node-a"}).fits.empty());
  feeder.OnPodDeleted(bad);
  EXPECT_TRUE(fits(8));
  EXPECT_TRUE(cache.Node("node-a")->Idle());

  // Device ids still legible: those two devices are booked whole.
  const core::NodeInventory inv = testing::GpuNode("node-a");
  nlohmann::json ids = Pod("ids", "uid-ids");
  ids["spec"]["nodeName"] = "node-a";
  ids["metadata"]["annotations"][api::kAssignmentAnnotation] =
      R"({"version":1,"node":"node-a","containers":[{"name":"main","vendor":"nope",)"
      R"("devices":[{"id":")" +
      inv.devices[0].id + R"(","index":0,"slot":")" + inv.devices[0].id + R"(::0"},{"slot":")" +
      inv.devices[5].id + R"(::1"}]}]})";
  feeder.OnPod(ids);
  EXPECT_FALSE(fits(8));
  EXPECT_FALSE(fits(7));
  EXPECT_TRUE(fits(6));
  // Mended: what it names now is counted, and nothing else.
  PodAssignment two;
  two.node = "node-a";
  two.parts.push_back(AssignmentPart{core::Vendor::kNvidia, {}, {{0}}, {{1, inv.devices[1].id}}});
  two.parts[0].placement.containers.push_back(core::ContainerPlacement{
      "main", core::ContainerKind::kRegular, {core::Grant{1, 0, 0, true}}});
  PodInfo info = testing::MakePod("uid-ids", {Gpu(1)});
  StatusOr<api::Assignment> doc = ToApiAssignment(two, *cache.Node("node-a"), info);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  ids["metadata"]["annotations"][api::kAssignmentAnnotation] = api::SerializeAssignment(*doc);
  feeder.OnPod(ids);
  EXPECT_EQ(cache.Stats().pods_unreadable, 0);
  EXPECT_TRUE(fits(7));
  EXPECT_FALSE(fits(8));
}

TEST_F(KubeAdaptersTest, ABindingWhoseAnswerIsLostIsSettledByReadingThePodBack) {
  BindRig rig(*this);
  ASSERT_NE(rig.ext, nullptr);
  Cache& cache = rig.cache;
  KubePodWriter& writer = *rig.writer;
  const std::unique_ptr<Extender>* ext = &rig.ext;
  PodInfo pod = rig.Pod(1);
  // A 429 on the Binding (turned away before any handler), and the pod
  // reads back unbound: not written, so the devices go back.
  api_.FailNext(1, 429);
  StatusOr<PodAssignment> a = (*ext)->Bind(pod, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable) << a.status().ToString();
  EXPECT_TRUE(cache.Node("node-a")->Idle());
  ASSERT_TRUE(writer.BoundNode(pod).ok());
  EXPECT_EQ(*writer.BoundNode(pod), "");
  // A 500 or 503 (an etcd timeout, a proxy losing the apiserver mid-request)
  // may still commit: shown unbound, the devices stay reserved.
  for (int code : {500, 503}) {
    SCOPED_TRACE(code);
    BindRig fresh(*this);
    ASSERT_NE(fresh.ext, nullptr);
    api_.FailNext(1, code);
    StatusOr<PodAssignment> kept = fresh.ext->Bind(fresh.Pod(1), "node-a");
    ASSERT_FALSE(kept.ok());
    EXPECT_EQ(kept.status().code(), StatusCode::kUnknown) << kept.status().ToString();
    EXPECT_NE(kept.status().message().find("stay reserved"), std::string::npos);
    EXPECT_FALSE(fresh.cache.Node("node-a")->Idle());
  }
  // The read fails too: whether the Binding landed is unknown, the devices
  // stay reserved.
  api_.FailNext(2, 503);
  a = (*ext)->Bind(pod, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnknown) << a.status().ToString();
  EXPECT_NE(a.status().message().find("stay reserved"), std::string::npos);
  EXPECT_FALSE(cache.Node("node-a")->Idle());
  // kube-scheduler retries: the Binding is written this time.
  a = (*ext)->Bind(pod, "node-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(writer.BoundNode(pod).ok());
  EXPECT_EQ(*writer.BoundNode(pod), "node-a");
  // A 504 on a Binding that did land (the retry of a bound pod here): the
  // read back shows the pod on the node, which is success.
  api_.FailNext(1, 504);
  EXPECT_TRUE((*ext)->Bind(pod, "node-a").ok());
  EXPECT_EQ(cache.Stats().pods_bound, 1);
}

// A Binding whose answer timed out (the apiserver's 504) may still commit
// after the read back showed the pod unbound: the devices stay with the pod,
// its retry filters onto that node (planned without its own devices) and
// finishes the bind there. A pod the read back finds gone (404) holds nothing.
TEST_F(KubeAdaptersTest, ATimedOutBindingKeepsItsDevicesForThePodsRetryAndAGonePodFreesThem) {
  BindRig rig(*this);
  ASSERT_NE(rig.ext, nullptr);
  Cache& cache = rig.cache;
  KubePodWriter& writer = *rig.writer;
  const std::unique_ptr<Extender>* ext = &rig.ext;
  PodInfo pod = rig.Pod(8);
  api_.FailNext(1, 504);
  StatusOr<PodAssignment> a = (*ext)->Bind(pod, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnknown) << a.status().ToString();
  EXPECT_NE(a.status().message().find("may still land"), std::string::npos);
  EXPECT_FALSE(cache.Node("node-a")->Idle());
  // Another pod cannot have those devices; the pod itself still fits there.
  PodInfo other = testing::MakePod("uid-q", {Gpu(8)});
  EXPECT_TRUE((*ext)->Filter(other, {"node-a"}).fits.empty());
  EXPECT_EQ((*ext)->Filter(pod, {"node-a"}).fits, std::vector<std::string>{"node-a"});
  a = (*ext)->Bind(pod, "node-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(writer.BoundNode(pod).ok());
  EXPECT_EQ(*writer.BoundNode(pod), "node-a");
  EXPECT_EQ(cache.Stats().pods_bound, 1);

  // Deleted while kube-scheduler was binding it: the Binding fails with a
  // 503 and the read back finds no pod. Its devices go back at once: no
  // deletion will come on the watch to free them.
  PodInfo gone = testing::MakePod("uid-gone", {Gpu(8)});
  gone.ref.name = "gone";
  testing::AddGpuNode(cache, "node-b");
  api_.FailNext(1, 503);
  a = (*ext)->Bind(gone, "node-b");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable) << a.status().ToString();
  EXPECT_TRUE(cache.Node("node-b")->Idle());
  EXPECT_FALSE(cache.Assignment("uid-gone").has_value());
}

TEST_F(KubeAdaptersTest, WithAKeyTheBindingCarriesTheAssignmentsSignature) {
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "uid-p"));
  api_.Put("/api/v1/namespaces/ns/pods", Pod("q", ""));
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  api::testing::TempKeyDir keydir;
  std::unique_ptr<api::AssignmentKeyRing> keys = keydir.Ring();
  KubePodWriter writer(*client_, cache, keys.get());
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodInfo pod = testing::MakePod("uid-p", {Gpu(1)});
  pod.ref.name = "p";
  ASSERT_TRUE((*ext)->Bind(pod, "node-a").ok());
  std::optional<nlohmann::json> stored = api_.Object("/api/v1/namespaces/ns/pods", "p");
  ASSERT_TRUE(stored.has_value());
  const nlohmann::json& ann = (*stored)["metadata"]["annotations"];
  const std::string text = ann.value("accelpool.io/assignment", "");
  const std::string sig = ann.value("accelpool.io/assignment-signature", "");
  EXPECT_EQ(sig.rfind("v1.k1.", 0), 0u) << sig;
  EXPECT_TRUE(keys->Verify("uid-p", "node-a", text, sig).ok());
  EXPECT_FALSE(keys->Verify("uid-p", "node-b", text, sig).ok());

  // No uid to sign for: refused before anything is written.
  PodInfo no_uid = testing::MakePod("", {Gpu(1)});
  no_uid.ref.name = "q";
  PodAssignment a;
  a.node = "node-a";
  const Status st = writer.Bind(no_uid, a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ((*api_.Object("/api/v1/namespaces/ns/pods", "q"))
                .value("spec", nlohmann::json())
                .value("nodeName", ""),
            "");
}

TEST_F(KubeAdaptersTest, AssignmentIsGuardedByUid) {
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  api_.Put("/api/v1/namespaces/ns/pods", Pod("p", "new-uid"));
  KubePodWriter writer(*client_, cache);
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodInfo old = testing::MakePod("old-uid", {Gpu(1)});
  old.ref.name = "p";
  StatusOr<PodAssignment> a = (*ext)->Bind(old, "node-a");
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(cache.Node("node-a")->Idle());
}

TEST_F(KubeAdaptersTest, OneLeaderAtATime) {
  LeaderOptions o;
  o.ns = "kube-system";
  o.identity = "replica-1";
  LeaderElector one(*client_, o, Logger());
  o.identity = "replica-2";
  LeaderElector two(*client_, o, Logger());
  EXPECT_TRUE(one.TryAcquireOrRenew());
  EXPECT_FALSE(two.TryAcquireOrRenew());
  EXPECT_TRUE(one.TryAcquireOrRenew());  // renew
}

// With signing, the leader writes the key id it signs with on the Lease at
// each acquire and renewal; a follower writes nothing.
TEST_F(KubeAdaptersTest, TheLeaderReportsItsSigningKeyOnTheLease) {
  std::string signing = "k1";
  LeaderOptions o;
  o.ns = "kube-system";
  o.identity = "replica-1";
  o.signing_key = [&signing] { return signing; };
  LeaderElector one(*client_, o, Logger());
  o.identity = "replica-2";
  o.signing_key = [] { return std::string("k9"); };
  LeaderElector two(*client_, o, Logger());
  const auto reported = [&] {
    StatusOr<kube::Lease> l = kube::GetLease(*client_, "kube-system", "accelpool-extender");
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? l->annotations["accelpool.io/assignment-signing-key"] : std::string();
  };
  ASSERT_TRUE(one.TryAcquireOrRenew());
  EXPECT_EQ(reported(), "k1");
  EXPECT_FALSE(two.TryAcquireOrRenew());
  EXPECT_EQ(reported(), "k1");
  signing = "k2";
  ASSERT_TRUE(one.TryAcquireOrRenew());
  EXPECT_EQ(reported(), "k2");
}

// kube-scheduler's Lease of the tests, held by `holder` and renewed `age` ago.
void PutSchedulerLease(kube::KubeClient& client, const std::string& holder,
                       std::chrono::seconds age = std::chrono::seconds(0)) {
  ASSERT_TRUE(testing::PutSchedulerLease(client, "sched-ns", "accelpool-scheduler", holder, age));
}

LeaderOptions Follower(const std::string& host) {
  LeaderOptions o;
  o.ns = "sched-ns";
  o.identity = host + "-1";
  o.scheduler_lease_ns = "sched-ns";
  o.scheduler_lease_name = "accelpool-scheduler";
  o.host = host;
  o.signing_key = [host] { return host == "pod-a" ? std::string("k1") : std::string("k2"); };
  return o;
}

// The chart's layout: kube-scheduler and the extender share a pod, and
// kube-scheduler calls only its own pod's extender. The extender beside the
// leading kube-scheduler leads, whatever happened to the extenders' own
// Lease, and reports itself (and its signing key) there.
TEST_F(KubeAdaptersTest, FollowsTheKubeSchedulerInItsOwnPod) {
  LeaderElector a(*client_, Follower("pod-a"), Logger());
  LeaderElector b(*client_, Follower("pod-b"), Logger());
  LeaderElector prefix(*client_, Follower("pod"), Logger());  // "pod-a_..." is not "pod_..."
  const auto report = [&]() -> std::pair<std::string, std::string> {
    StatusOr<kube::Lease> l = kube::GetLease(*client_, "sched-ns", "accelpool-extender");
    if (!l.ok()) return {"", ""};
    return {l->holder, l->annotations["accelpool.io/assignment-signing-key"]};
  };

  // No kube-scheduler Lease yet: nobody leads, nothing is written.
  EXPECT_FALSE(a.TryAcquireOrRenew());
  EXPECT_EQ(report().first, "");

  PutSchedulerLease(*client_, "pod-a_0c6f1e2a-77b4-4f0e-9d1c-2f6a1b9e3d10");
  EXPECT_TRUE(a.TryAcquireOrRenew());
  EXPECT_FALSE(b.TryAcquireOrRenew());
  EXPECT_FALSE(prefix.TryAcquireOrRenew());
  EXPECT_EQ(report(), std::make_pair(std::string("pod-a-1"), std::string("k1")));

  // B's extender once held the report Lease (say, from an earlier election):
  // it does not matter; kube-scheduler's Lease decides.
  PutSchedulerLease(*client_, "pod-b_5d0b7c44-1f1e-4a43-8f7e-6b1a0c2d9e8f");
  EXPECT_FALSE(a.TryAcquireOrRenew());
  EXPECT_TRUE(b.TryAcquireOrRenew());
  EXPECT_EQ(report(), std::make_pair(std::string("pod-b-1"), std::string("k2")));
  StatusOr<kube::Lease> l = kube::GetLease(*client_, "sched-ns", "accelpool-extender");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->transitions, 1);

  // Held by pod-a but not renewed for longer than its duration: nobody leads.
  PutSchedulerLease(*client_, "pod-a_0c6f1e2a-77b4-4f0e-9d1c-2f6a1b9e3d10",
                    std::chrono::seconds(60));
  EXPECT_FALSE(a.TryAcquireOrRenew());
  // Released (kube-scheduler's ReleaseOnCancel empties the holder).
  PutSchedulerLease(*client_, "");
  EXPECT_FALSE(a.TryAcquireOrRenew());
  EXPECT_FALSE(b.TryAcquireOrRenew());
  EXPECT_NE(a.NotLeaderReason().find("does not hold Lease sched-ns/accelpool-scheduler"),
            std::string::npos)
      << a.NotLeaderReason();
}

// The running elector: leadership moves with kube-scheduler's Lease, at once
// for a bind (IsLeaderNow) and at the next round otherwise.
TEST_F(KubeAdaptersTest, AFollowerTakesOverWhenItsKubeSchedulerAcquires) {
  PutSchedulerLease(*client_, "pod-b_1");
  LeaderOptions o = Follower("pod-a");
  o.retry = std::chrono::seconds(30);  // no second round during this part
  o.lease_duration = std::chrono::seconds(60);
  {
    kube::testing::HookedClient hooked(*client_);
    std::atomic<int> reads{0};
    hooked.after_get = [&] { ++reads; };
    LeaderElector a(hooked, o, Logger());
    a.Start();
    ASSERT_TRUE(Eventually([&] { return reads.load() >= 1; }));  // its first round read pod-b
    EXPECT_FALSE(a.IsLeader());
    EXPECT_FALSE(a.IsLeaderNow());
    // kube-scheduler in pod-a acquires and schedules; its first bind arrives
    // long before the elector's next round and is let through.
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past IsLeaderNow's rate limit
    PutSchedulerLease(*client_, "pod-a_2");
    EXPECT_FALSE(a.IsLeader());
    EXPECT_TRUE(a.IsLeaderNow());
    EXPECT_TRUE(a.IsLeader());
  }

  // Rounds every second: the report is written, and when kube-scheduler in
  // pod-b takes over, pod-a stops binding at its next read.
  o.retry = std::chrono::seconds(1);
  o.lease_duration = std::chrono::seconds(4);
  LeaderElector a(*client_, o, Logger());
  a.Start();
  EXPECT_TRUE(Eventually([&] { return a.IsLeader(); }));
  EXPECT_TRUE(Eventually([&] {
    StatusOr<kube::Lease> l = kube::GetLease(*client_, "sched-ns", "accelpool-extender");
    return l.ok() && l->holder == "pod-a-1";
  }));
  PutSchedulerLease(*client_, "pod-b_3");
  EXPECT_TRUE(Eventually([&] { return !a.IsLeader(); }));
  a.Stop();
}
}  // namespace
}  // namespace accelpool::extender
