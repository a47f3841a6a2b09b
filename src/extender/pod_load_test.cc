#include "extender/pod_load.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "api/pod_request.h"
#include "extender/test_util.h"
#include "kube/fake_api_test.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

using json = nlohmann::json;
using testing::Gpu;

json Pod(const std::string& uid, const std::string& node, const char* cpu, const char* memory,
         int gpus = 0) {
  json c = {{"name", "main"}};
  if (cpu != nullptr) c["resources"]["requests"]["cpu"] = cpu;
  if (memory != nullptr) c["resources"]["requests"]["memory"] = memory;
  if (gpus > 0) c["resources"]["limits"]["nvidia.com/gpu"] = std::to_string(gpus);
  json p = {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", "pod-" + uid}, {"namespace", "ns"}, {"uid", uid}}},
            {"spec", {{"containers", {c}}}},
            {"status", {{"phase", node.empty() ? "Pending" : "Running"}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

void AddNode(Cache& cache, const std::string& name, int64_t cpu_milli, int64_t memory_mib) {
  cache.UpsertNode(name, std::vector<core::NodeInventory>{testing::GpuNode(name)}, 1, {},
                   core::HostResources{cpu_milli, memory_mib});
}

std::optional<core::HostResources> HostFree(const Cache& cache, const std::string& node) {
  NodeSnapshotPtr snap = cache.Node(node);
  if (snap == nullptr || snap->inventories.empty()) return std::nullopt;
  return snap->inventories[0].usage.host_free;
}

TEST(PodLoadTest, TrimKeepsTheSummaryAndTheMetadataTheInformerNeeds) {
  json p = Pod("u1", "n1", "2", "4Gi", 1);
  p["metadata"]["resourceVersion"] = "42";
  p["metadata"]["creationTimestamp"] = "2026-12-01T12:00:05Z";
  p["metadata"]["annotations"] = {{"kubectl.kubernetes.io/last-applied-configuration", "{...}"},
                                  {"accelpool.io/model-include", "H100,H200"}};
  p["metadata"]["labels"] = {{"app", "x"}};
  p["metadata"]["ownerReferences"] = {{{"kind", "ReplicaSet"}, {"name", "rs"}, {"uid", "x"}}};
  p["spec"]["containers"][0]["image"] = "trainer:1";
  p["spec"]["volumes"] = json::array({{{"name", "data"}}});
  const PodLoad::Summary whole = PodLoad::Summarize(p);
  json trimmed = p;
  PodLoad::Trim(trimmed);
  // The informer's key and relist need name, namespace and resourceVersion;
  // the learner's watermark the creation time.
  EXPECT_EQ(trimmed["metadata"], json({{"name", "pod-u1"},
                                       {"namespace", "ns"},
                                       {"uid", "u1"},
                                       {"resourceVersion", "42"},
                                       {"creationTimestamp", "2026-12-01T12:00:05Z"}}));
  EXPECT_EQ(trimmed.size(), 2u);  // metadata and the packed summary, nothing else
  EXPECT_LT(trimmed.dump().size(), p.dump().size() / 2);
  const PodLoad::Summary back = PodLoad::SummaryOf(trimmed);
  EXPECT_EQ(back.uid, "u1");
  EXPECT_EQ(back.key, "ns/pod-u1");
  EXPECT_EQ(back.created, "2026-12-01T12:00:05Z");
  EXPECT_EQ(back.node, "n1");
  EXPECT_TRUE(back.host_ok && back.shape_ok);
  EXPECT_EQ(back.host, (core::HostResources{2000, 4096}));
  EXPECT_EQ(back.shape, whole.shape);
  EXPECT_EQ(back.shape.model, "H100|H200");
  EXPECT_EQ(back.shape.cpu_milli, 2000);
  EXPECT_FALSE(back.finished || back.fixture);
  // A DaemonSet's pod, a finished pod and a malformed one keep what they are.
  json ds = Pod("ds", "n1", "1", "1Gi");
  ds["metadata"]["ownerReferences"] = {{{"kind", "DaemonSet"}}};
  json done = Pod("done", "n1", "1", "1Gi");
  done["status"]["phase"] = "Failed";
  json bad = Pod("bad", "n1", "1", "1Gi");
  bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1.5";
  for (json* q : {&ds, &done, &bad}) {
    const PodLoad::Summary before = PodLoad::Summarize(*q);
    PodLoad::Trim(*q);
    const PodLoad::Summary after = PodLoad::SummaryOf(*q);
    EXPECT_EQ(after.fixture, before.fixture);
    EXPECT_EQ(after.finished, before.finished);
    EXPECT_EQ(after.shape_ok, before.shape_ok);
    EXPECT_EQ(after.host_ok, before.host_ok);
    EXPECT_EQ(after.error, before.error);
  }
  EXPECT_TRUE(PodLoad::SummaryOf(ds).fixture);
  EXPECT_TRUE(PodLoad::SummaryOf(done).finished);
  EXPECT_FALSE(PodLoad::SummaryOf(bad).shape_ok);
  EXPECT_TRUE(PodLoad::SummaryOf(bad).host_ok);
  EXPECT_NE(PodLoad::SummaryOf(bad).error.find("1.5"), std::string::npos);
}

TEST(PodLoadTest, TrimKeepsAShareAskedInPercentOfTheDevicesMemory) {
  json p = Pod("u1", "n1", "1", "1Gi");
  p["spec"]["containers"][0]["resources"]["limits"] = {{"nvidia.com/gpu", "1"},
                                                       {"nvidia.com/gpumem-percentage", "25"},
                                                       {"nvidia.com/gpucores", "30"}};
  const PodLoad::Summary whole = PodLoad::Summarize(p);
  ASSERT_TRUE(whole.shape_ok) << whole.error;
  ASSERT_EQ(whole.shape.memory_percent, 25);
  PodLoad::Trim(p);
  // The informer hands the learner trimmed pods: the share is learned as 25%
  // of a device's memory, not as a share that needs no memory.
  const PodLoad::Summary back = PodLoad::SummaryOf(p);
  EXPECT_EQ(back.shape.memory_percent, 25);
  EXPECT_EQ(back.shape, whole.shape);
}

TEST(PodLoadTest, BoundPodsTakeTheirNodesHostUntilTheyFinishOrGo) {
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "n1", 16000, 65536);
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  ASSERT_EQ(HostFree(cache, "n1"), (core::HostResources{16000, 65536}));

  json p = Pod("u1", "", "4", "8Gi");
  load.OnPodAdded(p);  // pending: counts nowhere
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{16000, 65536}));
  json before = p;
  p["spec"]["nodeName"] = "n1";
  load.OnPodUpdated(before, p);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{12000, 57344}));
  EXPECT_EQ(cache.Node("n1")->host_pods, 1);
  load.OnPodUpdated(p, p);  // the same again changes nothing
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{12000, 57344}));
  load.OnPodAdded(Pod("u2", "n1", "20", "1Gi"));  // overcommitted: free stays at zero
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{0, 56320}));
  before = p;
  p["status"]["phase"] = "Succeeded";
  load.OnPodUpdated(before, p);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{0, 64512}));
  load.OnPodDeleted(Pod("u2", "n1", "20", "1Gi"));
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{16000, 65536}));
  EXPECT_EQ(cache.HostPods(), 0);
}

// Two pods each asking for the most one request may (2^62 milli-cores) sum
// past 64 bits: the node reads as full, never as free, and comes back whole
// when they go.
TEST(PodLoadTest, HugeRequestsOnOneNodeSaturateInsteadOfWrapping) {
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "n1", 16000, 65536);
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  for (const char* uid : {"u1", "u2", "u3"}) {
    load.OnPodAdded(Pod(uid, "n1", "4e15", "1Gi"));
  }
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{0, 62464}));
  for (const char* uid : {"u1", "u2", "u3"}) {
    load.OnPodDeleted(Pod(uid, "n1", "4e15", "1Gi"));
  }
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{16000, 65536}));
}

TEST(PodLoadTest, APodRecreatedUnderItsNameLeavesNoHostRequestsBehind) {
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "n1", 16000, 65536);
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  const json old = Pod("u1", "n1", "4", "8Gi");
  load.OnPodAdded(old);
  ASSERT_EQ(HostFree(cache, "n1"), (core::HostResources{12000, 57344}));
  // A relist after a watch expiry reports web-0 deleted and created again
  // (a new uid) as one update of the name: only the new pod counts.
  load.OnPodUpdated(old, Pod("u1-new", "n1", "2", "1Gi"));
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{14000, 64512}));
  EXPECT_EQ(cache.HostPods(), 1);
  // The new pod is an arrival of its own, as a new name in the relist is.
  EXPECT_EQ(load.arrivals(), 2u);
  // An update of the same pod is none.
  load.OnPodUpdated(Pod("u1-new", "n1", "2", "1Gi"), Pod("u1-new", "n1", "2", "1Gi"));
  EXPECT_EQ(load.arrivals(), 2u);
}

TEST(PodLoadTest, PodsSeenBeforeTheirNodeCountWhenItArrives) {
  Cache cache;
  cache.TrackHost(true);
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  load.OnPodAdded(Pod("u1", "n1", "3", "1Gi"));
  AddNode(cache, "n1", 16000, 65536);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{13000, 64512}));
  // Re-listing the node (any update) keeps the count.
  AddNode(cache, "n1", 32000, 65536);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{29000, 64512}));
}

TEST(PodLoadTest, WithoutTrackingOrAllocatableTheHostIsNotScored) {
  Cache cache;
  AddNode(cache, "n1", 16000, 65536);
  cache.UpsertNode("n2", std::vector<core::NodeInventory>{testing::GpuNode("n2")}, 1, {});
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  load.OnPodAdded(Pod("u1", "n1", "3", "1Gi"));
  EXPECT_FALSE(HostFree(cache, "n1").has_value());  // tracking is off
  cache.TrackHost(true);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{13000, 64512}));
  EXPECT_FALSE(HostFree(cache, "n2").has_value());  // no allocatable
  cache.TrackHost(false);
  EXPECT_FALSE(HostFree(cache, "n1").has_value());
}

TEST(PodLoadTest, UnparsablePodsAreCountedAndChangeNothing) {
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "n1", 16000, 65536);
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  json bad = Pod("u1", "n1", "lots", nullptr);
  load.OnPodAdded(bad);
  EXPECT_EQ(load.unparsable(), 1);
  EXPECT_EQ(load.arrivals(), 0u);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{16000, 65536}));
  json bad_gpu = Pod("u2", "n1", "1", nullptr);
  bad_gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1.5";
  load.OnPodAdded(bad_gpu);  // its devices do not parse; its host request still counts
  EXPECT_EQ(load.unparsable(), 2);
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{15000, 65536}));
  load.OnPodAdded(json::array());
  load.OnPodAdded(json{{"metadata", {{"uid", "u3"}}}});
  EXPECT_EQ(load.arrivals(), 0u);
}

TEST(PodLoadTest, TheExtenderScoresWithTheLearnedWorkload) {
  Cache cache;
  StatusOr<std::unique_ptr<Extender>> ext =
      Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodLoadOptions o;
  o.learner.min_arrivals = 10;
  PodLoad load(cache, o, nullptr, Logger());
  for (int i = 0; i < 9; ++i) load.OnPodAdded(Pod("a" + std::to_string(i), "", "8", "32Gi", 1));
  EXPECT_FALSE(load.Refresh(**ext));  // too few arrivals: the built-in mix stays
  EXPECT_TRUE((*ext)->Workload().empty());
  // Node fixtures and finished pods are not arrivals.
  json ds = Pod("ds", "n1", "1", "1Gi");
  ds["metadata"]["ownerReferences"] = {{{"kind", "DaemonSet"}}};
  load.OnPodAdded(ds);
  json mirror = Pod("static", "n1", "1", "1Gi");
  mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] = "abc";
  load.OnPodAdded(mirror);
  json done = Pod("done", "n1", "1", "1Gi");
  done["status"]["phase"] = "Succeeded";
  load.OnPodAdded(done);
  EXPECT_EQ(load.arrivals(), 9u);
  EXPECT_FALSE(load.Refresh(**ext));
  load.OnPodAdded(Pod("cpu", "", "2", "4Gi"));  // a pod without devices is an arrival too
  EXPECT_TRUE(load.Refresh(**ext));
  std::vector<core::TaskShape> w = (*ext)->Workload();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].count, 1);
  EXPECT_EQ(w[0].cpu_milli, 8000);
  EXPECT_EQ(w[0].host_memory_mib, 32768);
  EXPECT_DOUBLE_EQ(w[0].weight, 9);
  EXPECT_EQ(w[1].count, 0);
  EXPECT_EQ((*ext)->workload_generation(), 1u);
  EXPECT_FALSE(load.Refresh(**ext));  // nothing new: no rebuild
  EXPECT_EQ((*ext)->workload_generation(), 1u);
}

TEST(PodLoadTest, AHostWithoutCpuLeftIsWhereTheNextGpuPodGoes) {
  // Tasks need a GPU and 8 cores. n1's CPU is mostly taken by a CPU-only pod:
  // its GPUs are stranded, so a GPU pod that fits there should go there and
  // leave n2 whole for the tasks to come. Blind to the host, n1 and n2 are
  // the same.
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "n1", 16000, 262144);
  AddNode(cache, "n2", 16000, 262144);
  StatusOr<std::unique_ptr<Extender>> ext =
      Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodLoadOptions o;
  o.learner.min_arrivals = 1;
  PodLoad load(cache, o, nullptr, Logger());
  for (int i = 0; i < 20; ++i) load.OnPodAdded(Pod("a" + std::to_string(i), "", "8", "32Gi", 1));
  load.OnPodAdded(Pod("cpu-hog", "n1", "10", "8Gi"));
  ASSERT_TRUE(load.Refresh(**ext));

  PodInfo pod = MakePodInfo(PodRef{"new", "ns", "new", ""},
                            core::PodRequest{{Gpu(1)}, core::HostResources{4000, 16384}});
  FilterDecision d = (*ext)->Filter(pod, {"n1", "n2"});
  ASSERT_EQ(d.fits.size(), 2u);
  std::vector<HostPriority> ranked = (*ext)->Prioritize(pod, {"n1", "n2"});
  ASSERT_EQ(ranked.size(), 2u);
  std::map<std::string, int64_t> score;
  for (const HostPriority& h : ranked) score[h.host] = h.score;
  EXPECT_GT(score["n1"], score["n2"]);

  // The policy score itself, with and without the host.
  core::PolicyContext ctx;
  ctx.workload = (*ext)->Workload();
  StatusOr<core::PolicyPtr> policy = core::MakePolicy("accelpool", ctx);
  ASSERT_TRUE(policy.ok());
  EXPECT_GT(PlanNode(pod, cache.Node("n1").get(), **policy).score,
            PlanNode(pod, cache.Node("n2").get(), **policy).score);
  cache.TrackHost(false);
  EXPECT_EQ(PlanNode(pod, cache.Node("n1").get(), **policy).score,
            PlanNode(pod, cache.Node("n2").get(), **policy).score);
}

// A pod that asks for no device (routed by the host-pod webhook) is scored by
// the host it takes: where its CPU would leave idle GPUs without the 8 cores
// the workload's tasks need, the policy scores it low; a node without
// devices, one with CPU to spare, or one whose GPUs are all taken strands
// nothing and ties for the best. Every node tied for the best gets 10
// (kube-scheduler's own scores, on in the host-pod profile, choose among
// them), and the filter answers every node, picking none.
TEST(PodLoadTest, APodThatAsksForNoDeviceGoesWhereItStrandsNoDevice) {
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "small", 16000, 262144);  // 10 cores of the pod leave 6: GPUs stranded
  AddNode(cache, "big-1", 64000, 262144);
  AddNode(cache, "big-2", 64000, 262144);
  AddNode(cache, "busy", 64000, 262144);  // all 8 GPUs taken below
  ExtenderOptions eo;
  eo.pick_in_filter = true;
  StatusOr<std::unique_ptr<Extender>> ext =
      Extender::Create(cache, eo, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodLoadOptions o;
  o.learner.min_arrivals = 1;
  PodLoad load(cache, o, nullptr, Logger());
  for (int i = 0; i < 20; ++i) load.OnPodAdded(Pod("a" + std::to_string(i), "", "8", "32Gi", 1));
  ASSERT_TRUE(load.Refresh(**ext));

  PodInfo busy = MakePodInfo(PodRef{"busy", "ns", "busy", ""},
                             core::PodRequest{{Gpu(8)}, core::HostResources{8000, 32768}});
  ASSERT_TRUE((*ext)->Bind(busy, "busy").ok());

  PodInfo pod = MakePodInfo(PodRef{"cpu", "ns", "cpu", ""}, core::PodRequest{{}, {10000, 16384}});
  ASSERT_FALSE(pod.Pooled());
  // Every node fits, known to the cache or not (no accelpool inventory: a
  // CPU node), and the filter picks none of them.
  const std::vector<std::string> all = {"small", "big-1", "big-2", "busy", "cpu-node"};
  FilterDecision d = (*ext)->Filter(pod, all);
  EXPECT_EQ(d.fits, all);
  std::map<std::string, int64_t> score;
  for (const HostPriority& h : (*ext)->Prioritize(pod, all)) score[h.host] = h.score;
  EXPECT_EQ(score["big-1"], core::kMaxRankScore);
  EXPECT_EQ(score["big-2"], core::kMaxRankScore);
  EXPECT_EQ(score["busy"], core::kMaxRankScore);  // no packing step for such a pod
  EXPECT_EQ(score["cpu-node"], core::kMaxRankScore);
  EXPECT_LT(score["small"], core::kMaxRankScore);

  // The policy scores behind them: on "small" the pod strands the idle GPUs.
  core::PolicyContext ctx;
  ctx.workload = (*ext)->Workload();
  StatusOr<core::PolicyPtr> policy = core::MakePolicy("accelpool", ctx);
  ASSERT_TRUE(policy.ok());
  const NodePlan on_small = PlanNode(pod, cache.Node("small").get(), **policy);
  const NodePlan on_big = PlanNode(pod, cache.Node("big-1").get(), **policy);
  const NodePlan on_cpu_node = PlanNode(pod, nullptr, **policy);
  EXPECT_TRUE(on_small.fits() && on_big.fits() && on_cpu_node.fits());
  EXPECT_TRUE(on_small.parts.empty());
  EXPECT_LT(on_small.score, on_big.score);
  EXPECT_EQ(on_big.score, on_cpu_node.score);
  EXPECT_EQ(PlanNode(pod, cache.Node("busy").get(), **policy).score, on_cpu_node.score);
  // Blind to the host, nothing tells the nodes apart.
  cache.TrackHost(false);
  EXPECT_EQ(PlanNode(pod, cache.Node("small").get(), **policy).score,
            PlanNode(pod, cache.Node("big-1").get(), **policy).score);
  // A node whose inventory does not parse may have devices: one below a node
  // known to have none, so it is not among the best.
  cache.UpsertNode("unparsable", InvalidArgumentError("not an inventory"), 1, {},
                   core::HostResources{64000, 262144});
  EXPECT_EQ(PlanNode(pod, cache.Node("unparsable").get(), **policy).score, on_cpu_node.score - 1);
  // Every policy scores such a pod; those that do not weigh the host against
  // the devices give every node the same score, leaving the choice to
  // kube-scheduler's own scores.
  cache.TrackHost(true);
  const NodeSnapshotPtr small = cache.Node("small");
  const NodeSnapshotPtr busy_node = cache.Node("busy");
  for (const std::string& name : core::PolicyNames()) {
    SCOPED_TRACE(name);
    StatusOr<core::PolicyPtr> p = core::MakePolicy(name, ctx);
    ASSERT_TRUE(p.ok());
    const bool weighs_host = name == "accelpool" || name == "fragmentation";
    for (const NodeSnapshot* snap :
         {small.get(), busy_node.get(), static_cast<const NodeSnapshot*>(nullptr)}) {
      const NodePlan plan = PlanNode(pod, snap, **p);
      EXPECT_TRUE(plan.fits());
      EXPECT_GE(plan.score, 0);
      EXPECT_LE(plan.score, 100);
      if (!weighs_host) {
        EXPECT_EQ(plan.score, core::Policy::kNeutralHostScore);
      }
    }
    if (weighs_host) {
      EXPECT_LT(PlanNode(pod, small.get(), **p).score, PlanNode(pod, nullptr, **p).score);
    }
  }
}

class PodLoadInformerTest : public kube::testing::FakeApiTest {};

TEST_F(PodLoadInformerTest, TheTrimmedWatchOfEveryPodFeedsTheHostCounts) {
  Cache cache;
  cache.TrackHost(true);
  AddNode(cache, "n1", 16000, 65536);
  PodLoad load(cache, PodLoadOptions{}, nullptr, Logger());
  api_.Put("/api/v1/namespaces/ns/pods", Pod("u1", "n1", "2", "2Gi"));
  json other = Pod("u2", "n1", "1", "1Gi");
  other["spec"]["schedulerName"] = "default-scheduler";  // every scheduler's pods count
  api_.Put("/api/v1/namespaces/ns/pods", other);
  kube::InformerOptions io;
  io.resource = kube::Pods();
  io.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  io.transform = &PodLoad::Trim;
  kube::Informer inf(*client_, io, load.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(5)));
  EXPECT_EQ(HostFree(cache, "n1"), (core::HostResources{13000, 62464}));
  EXPECT_EQ(load.arrivals(), 2u);
  std::optional<json> kept = inf.Get("ns/pod-u1");
  ASSERT_TRUE(kept.has_value());
  EXPECT_FALSE((*kept)["metadata"].contains("labels"));
  inf.Stop();
}

json Created(json pod, const std::string& at) {
  pod["metadata"]["creationTimestamp"] = at;
  return pod;
}

TEST_F(PodLoadInformerTest, TheLearnedWorkloadOutlivesTheExtender) {
  Cache cache;
  WorkloadStore store(*client_, "accelpool", "accelpool-workload");
  PodLoadOptions o;
  o.learner.min_arrivals = 4;
  std::vector<json> running;
  for (int i = 0; i < 6; ++i) {
    running.push_back(Created(Pod("a" + std::to_string(i), "n1", "8", "32Gi", 1),
                              "2026-12-01T10:00:0" + std::to_string(i) + "Z"));
  }
  // Two pods created in the same second: the watermark's second.
  running.push_back(Created(Pod("b0", "n1", "2", "4Gi"), "2026-12-01T10:00:09Z"));
  running.push_back(Created(Pod("b1", "n1", "2", "4Gi"), "2026-12-01T10:00:09Z"));
  std::vector<core::TaskShape> learned;
  {
    PodLoad first(cache, o, nullptr, Logger());
    first.SetStore(&store, nullptr);
    ASSERT_TRUE(first.Restore().ok());  // nothing stored yet
    EXPECT_FALSE(first.Persist());      // nothing arrived: nothing to write
    for (const json& p : running) first.OnPodAdded(p);
    EXPECT_TRUE(first.Persist());
    EXPECT_FALSE(first.Persist());  // unchanged
    const WorkloadState kept = first.Snapshot();
    EXPECT_EQ(kept.watermark, "2026-12-01T10:00:09Z");
    EXPECT_EQ(kept.watermark_uids, (std::vector<std::string>{"b0", "b1"}));
    EXPECT_EQ(kept.observed, 8u);
    StatusOr<std::unique_ptr<Extender>> ext =
        Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
    ASSERT_TRUE(ext.ok());
    ASSERT_TRUE(first.Refresh(**ext));
    learned = (*ext)->Workload();
  }

  // The next extender reads it back before its informer lists: the pods that
  // were counted are not counted again; those created since are.
  PodLoad next(cache, o, nullptr, Logger());
  bool may_write = false;
  next.SetStore(&store, [&may_write] { return may_write; });
  ASSERT_TRUE(next.Restore().ok());
  EXPECT_EQ(next.arrivals(), 8u);
  for (const json& p : running) next.OnPodAdded(p);
  EXPECT_EQ(next.already_counted(), 8u);
  EXPECT_EQ(next.arrivals(), 8u);
  StatusOr<std::unique_ptr<Extender>> ext =
      Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  ASSERT_TRUE(next.Refresh(**ext));
  EXPECT_EQ((*ext)->Workload(), learned);  // from its first refresh

  next.OnPodAdded(Created(Pod("b2", "n1", "2", "4Gi"), "2026-12-01T10:00:09Z"));  // same second
  next.OnPodAdded(Created(Pod("c0", "n1", "8", "32Gi", 1), "2026-12-01T10:05:00Z"));
  next.OnPodAdded(Pod("no-time", "n1", "8", "32Gi", 1));  // counted: nothing says it was
  EXPECT_EQ(next.arrivals(), 11u);
  EXPECT_EQ(next.already_counted(), 8u);
  EXPECT_FALSE(next.Persist());  // not the active replica
  may_write = true;
  EXPECT_TRUE(next.Persist());
  StatusOr<std::optional<WorkloadState>> stored = store.Load();
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->observed, 11u);
  EXPECT_EQ((*stored)->watermark, "2026-12-01T10:05:00Z");
  EXPECT_EQ((*stored)->watermark_uids, (std::vector<std::string>{"c0"}));
}

TEST_F(PodLoadInformerTest, AStoreThatCannotBeReadLeavesTheLearnerEmpty) {
  Cache cache;
  WorkloadStore store(*client_, "accelpool", "accelpool-workload");
  PodLoadOptions o;
  o.learner.min_arrivals = 1;
  {
    PodLoad first(cache, o, nullptr, Logger());
    first.SetStore(&store, nullptr);
    first.OnPodAdded(Created(Pod("a", "n1", "8", "32Gi", 1), "2026-12-01T10:00:00Z"));
    ASSERT_TRUE(first.Persist());
  }
  // An apiserver that is briefly unavailable is waited for.
  api_.FailNext(2, 503);
  PodLoad patient(cache, o, nullptr, Logger());
  patient.SetStore(&store, nullptr);
  EXPECT_TRUE(patient.Restore(std::chrono::seconds(10)).ok());
  EXPECT_EQ(patient.arrivals(), 1u);
  // Refused access is not: the learner starts empty and counts every pod.
  api_.FailNext(1, 403);
  PodLoad denied(cache, o, nullptr, Logger());
  denied.SetStore(&store, nullptr);
  EXPECT_EQ(denied.Restore(std::chrono::seconds(10)).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.arrivals(), 0u);
  denied.OnPodAdded(Created(Pod("a", "n1", "8", "32Gi", 1), "2026-12-01T10:00:00Z"));
  EXPECT_EQ(denied.arrivals(), 1u);
  EXPECT_EQ(denied.already_counted(), 0u);
  // So is a document that does not parse.
  api_.Put("/api/v1/namespaces/accelpool/configmaps",
           {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", "accelpool-workload"}, {"namespace", "accelpool"}}},
            {"data", {{WorkloadStore::kDataKey, "not json"}}}});
  PodLoad fresh(cache, o, nullptr, Logger());
  fresh.SetStore(&store, nullptr);
  EXPECT_EQ(fresh.Restore().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fresh.arrivals(), 0u);
}

}  // namespace
}  // namespace accelpool::extender
