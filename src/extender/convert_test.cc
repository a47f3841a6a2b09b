#include "extender/convert.h"

#include <gtest/gtest.h>

#include "api/inventory_codec.h"
#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::Gpu;

TEST(ConvertTest, AssignmentRoundTripsThroughTheProtocolDocument) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  auto ext = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  PodInfo pod = testing::MakePod(
      "u1", {Gpu(1, 4096, 250, "warm", core::ContainerKind::kInit), Gpu(1, 4096, 250, "main"),
             Gpu(2, 0, 0, "train")});
  pod.resources = {"nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/gpu"};
  StatusOr<PodAssignment> a = (*ext)->Bind(pod, "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  StatusOr<api::Assignment> doc = ToApiAssignment(*a, *cache.Node("a"), pod);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->node, "a");
  ASSERT_EQ(doc->containers.size(), 3u);
  EXPECT_EQ(doc->containers[0].kind, core::ContainerKind::kInit);
  EXPECT_EQ(doc->containers[0].resource, "nvidia.com/gpu");
  // Init and main share the device and the slot, as kubelet reuses it.
  EXPECT_EQ(doc->containers[0].devices[0].slot, doc->containers[1].devices[0].slot);
  StatusOr<api::Assignment> parsed = api::ParseAssignment(api::SerializeAssignment(*doc));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  StatusOr<PodAssignment> back = FromApiAssignment(*parsed);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *a);
}

TEST(ConvertTest, AnAssignmentNamingOneIndexForTwoDevicesIsRefused) {
  api::Assignment doc;
  doc.node = "a";
  doc.policy = "binpack";
  for (const char* id : {"GPU-aaaa", "GPU-bbbb"}) {
    api::AssignedContainer c;
    c.name = std::string("c-") + id[4];
    c.vendor = core::Vendor::kNvidia;
    c.devices.push_back({id, 2, std::string(id) + "::0", 1024, 100, false});
    doc.containers.push_back(c);
  }
  StatusOr<PodAssignment> a = FromApiAssignment(doc);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("device index 2 names both GPU-aaaa and GPU-bbbb"),
            std::string::npos)
      << a.status().ToString();
  doc.containers[1].devices[0] = {"GPU-aaaa", 2, "GPU-aaaa::1", 1024, 100, false};
  a = FromApiAssignment(doc);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->parts.at(0).device_ids, (std::map<int32_t, std::string>{{2, "GPU-aaaa"}}));
}

TEST(ConvertTest, PodPolicyAnnotationReachesThePlan) {
  for (const char* key : {"accelpool.io/policy", "hami.io/gpu-scheduler-policy"}) {
    SCOPED_TRACE(key);
    nlohmann::json pod = {
        {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"},
                      {"annotations", {{key, "spread"}}}}},
        {"spec", {{"containers", {{{"name", "main"},
                                   {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}}}}}};
    StatusOr<PodInfo> info = PodInfoFromJson(pod);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->policy, "spread");
    EXPECT_EQ(info->policy_devices_only, std::string(key) == "hami.io/gpu-scheduler-policy");
  }
  nlohmann::json pod = {
      {"metadata",
       {{"name", "p"},
        {"namespace", "ns"},
        {"uid", "u"},
        {"annotations", {{"hami.io/node-scheduler-policy", "spread"}}}}},
      {"spec",
       {{"containers",
         {{{"name", "main"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}}}}}};
  StatusOr<PodInfo> info = PodInfoFromJson(pod);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->node_policy, "spread");
}

TEST(ConvertTest, SoftPreferencesAndPreferNoScheduleTaintsAreSeen) {
  // What keeps --pick-in-filter from deciding alone: kube-scheduler scores
  // preferred affinity terms and PreferNoSchedule taints.
  auto pod_with = [](nlohmann::json affinity) {
    nlohmann::json pod = {
        {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"}}},
        {"spec", {{"containers", {{{"name", "main"},
                                   {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}}}}}};
    if (!affinity.is_null()) pod["spec"]["affinity"] = std::move(affinity);
    return pod;
  };
  const nlohmann::json term = nlohmann::json::array({{{"weight", 10}}});
  struct Case {
    const char* name;
    nlohmann::json affinity;
    bool want;
  };
  const Case cases[] = {
      {"none", nullptr, false},
      {"required only",
       {{"nodeAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", {{"x", 1}}}}}},
       false},
      {"empty preferred list",
       {{"nodeAffinity", {{"preferredDuringSchedulingIgnoredDuringExecution", nlohmann::json::array()}}}},
       false},
      {"affinity not an object", "oops", false},
      {"preferred node affinity", {{"nodeAffinity", {{"preferredDuringSchedulingIgnoredDuringExecution", term}}}}, true},
      {"preferred pod affinity", {{"podAffinity", {{"preferredDuringSchedulingIgnoredDuringExecution", term}}}}, true},
      {"preferred anti-affinity", {{"podAntiAffinity", {{"preferredDuringSchedulingIgnoredDuringExecution", term}}}}, true},
  };
  for (const Case& tc : cases) {
    StatusOr<PodInfo> info = PodInfoFromJson(pod_with(tc.affinity));
    ASSERT_TRUE(info.ok()) << tc.name << ": " << info.status().ToString();
    EXPECT_EQ(info->soft_preferences, tc.want) << tc.name;
  }
  // spec.priority (set by the priority admission plugin) is kept for the
  // preemption hold; absent, not an integer or out of int32: 0.
  for (const auto& [value, want] : std::vector<std::pair<nlohmann::json, int32_t>>{
           {1000000, 1000000}, {-5, -5}, {nullptr, 0}, {"7", 0}, {int64_t{1} << 40, 0}}) {
    nlohmann::json pod = pod_with(nullptr);
    if (!value.is_null()) pod["spec"]["priority"] = value;
    StatusOr<PodInfo> info = PodInfoFromJson(pod);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->priority, want) << value;
  }
  // status.nominatedNodeName tells the preemption hold where kube-scheduler
  // evicted for the pod.
  nlohmann::json nominated = pod_with(nullptr);
  EXPECT_EQ(PodInfoFromJson(nominated)->nominated_node, "");
  nominated["status"]["nominatedNodeName"] = "node-a";
  EXPECT_EQ(PodInfoFromJson(nominated)->nominated_node, "node-a");
  auto node_with = [](nlohmann::json taints) {
    return nlohmann::json{{"metadata", {{"name", "n"}}}, {"spec", {{"taints", std::move(taints)}}}};
  };
  EXPECT_TRUE(NodeEntryFromJson(node_with({{{"key", "k"}, {"effect", "PreferNoSchedule"}}}))
                  ->domains.prefer_no_schedule);
  EXPECT_FALSE(NodeEntryFromJson(node_with({{{"key", "k"}, {"effect", "NoSchedule"}}}))
                   ->domains.prefer_no_schedule);
  EXPECT_FALSE(NodeEntryFromJson(node_with("junk"))->domains.prefer_no_schedule);
}

TEST(ConvertTest, NodeEntries) {
  api::InventoryDocument doc;
  doc.generation = 7;
  doc.inventories.push_back(testing::GpuNode("n1"));
  doc.inventories[0].topology.super_node = "sp-3";
  struct Case {
    const char* name;
    nlohmann::json node;
    bool want_ok, want_inventory, want_parsed;
  };
  const Case cases[] = {
      {"with inventory",
       {{"metadata",
         {{"name", "n1"},
          {"labels", {{"accelpool.io/rack", "r1"}}},
          {"annotations", {{"accelpool.io/inventory", api::SerializeInventory(doc)}}}}}},
       true, true, true},
      {"no annotation", {{"metadata", {{"name", "n2"}}}}, true, false, true},
      {"garbage annotation",
       {{"metadata", {{"name", "n3"}, {"annotations", {{"accelpool.io/inventory", "{oops"}}}}}},
       true, true, false},
      {"no name", {{"metadata", nlohmann::json::object()}}, false, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StatusOr<NodeEntry> e = NodeEntryFromJson(c.node);
    ASSERT_EQ(e.ok(), c.want_ok);
    if (!e.ok()) continue;
    EXPECT_EQ(e->has_inventory, c.want_inventory);
    EXPECT_EQ(e->inventories.ok(), c.want_parsed);
  }
  StatusOr<NodeEntry> e = NodeEntryFromJson(cases[0].node);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->generation, 7);
  EXPECT_EQ(e->domains, (NodeDomains{"sp-3", "r1", ""}));
  ASSERT_EQ(e->inventories->size(), 1u);
  EXPECT_EQ((*e->inventories)[0].devices.size(), 8u);

  // The super node: the inventory's, else accelpool.io/super-node, else
  // NVIDIA's multi-node NVLink clique label.
  const std::string clique = "00112233-4455-6677-8899-aabbccddeeff.7";
  auto labelled = [](nlohmann::json labels) {
    return nlohmann::json{{"metadata", {{"name", "n"}, {"labels", std::move(labels)}}}};
  };
  EXPECT_EQ(NodeEntryFromJson(labelled({{"nvidia.com/gpu.clique", clique}}))->domains.super_node,
            clique);
  EXPECT_EQ(NodeEntryFromJson(
                labelled({{"nvidia.com/gpu.clique", clique}, {"accelpool.io/super-node", "sn-1"}}))
                ->domains.super_node,
            "sn-1");
  nlohmann::json both = cases[0].node;
  both["metadata"]["labels"]["nvidia.com/gpu.clique"] = clique;
  EXPECT_EQ(NodeEntryFromJson(both)->domains.super_node, "sp-3");
}

TEST(ConvertTest, TheCordonAnnotationTakesNamedDevicesOutOfService) {
  api::InventoryDocument doc;
  doc.inventories.push_back(testing::GpuNode("n1"));
  const std::string id2 = doc.inventories[0].devices[2].id;
  const std::string id5 = doc.inventories[0].devices[5].id;
  auto node_with = [&](const std::string& cordon) {
    nlohmann::json annotations = {{"accelpool.io/inventory", api::SerializeInventory(doc)}};
    annotations[kCordonedDevicesAnnotation] = cordon;
    return nlohmann::json{{"metadata", {{"name", "n1"}, {"annotations", annotations}}}};
  };
  auto cordoned = [](const NodeEntry& e) {
    std::vector<int32_t> out;
    for (const core::Device& d : (*e.inventories)[0].devices) {
      if (d.cordoned) out.push_back(d.index);
    }
    return out;
  };
  // Spaces, an empty entry, a repeat and an unknown id: the known ids are
  // cordoned once each; the unknown one is reported, once.
  StatusOr<NodeEntry> e =
      NodeEntryFromJson(node_with(" " + id5 + " ,," + id2 + ",GPU-gone," + id5 + ",GPU-gone,"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(cordoned(*e), (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(e->cordoned, (std::vector<std::string>{id5, id2}));
  EXPECT_EQ(e->cordon_unknown, std::vector<std::string>{"GPU-gone"});
  // An index or a prefix of an id is not an id.
  e = NodeEntryFromJson(node_with("2," + id2.substr(0, id2.size() - 1)));
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(cordoned(*e).empty());
  EXPECT_EQ(e->cordon_unknown.size(), 2u);
  // Empty or blank: nothing cordoned, nothing reported.
  for (const char* text : {"", " , ,"}) {
    e = NodeEntryFromJson(node_with(text));
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE(cordoned(*e).empty());
    EXPECT_TRUE(e->cordon_unknown.empty());
  }
}

TEST(ConvertTest, ObservedPods) {
  nlohmann::json pod = {{"metadata",
                         {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"},
                          {"annotations", {{"accelpool.io/assignment", "not json"}}}}},
                        {"spec", {{"nodeName", "a"}}},
                        {"status", {{"phase", "Succeeded"}}}};
  ObservedPod o = ObservePodJson(pod);
  EXPECT_EQ(o.ref.uid, "u");
  EXPECT_EQ(o.node_name, "a");
  EXPECT_TRUE(o.finished);
  EXPECT_FALSE(o.assignment.has_value());
  EXPECT_FALSE(o.problem.empty());
}

}  // namespace
}  // namespace accelpool::extender
