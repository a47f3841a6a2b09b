#include "api/assignment_codec.h"

#include <gtest/gtest.h>

#include "api/inventory_codec.h"

namespace accelpool::api {
namespace {

core::NodeInventory Node() {
  core::NodeInventory inv;
  inv.node = "node-a";
  inv.vendor = core::Vendor::kNvidia;
  for (int i = 0; i < 4; ++i) {
    core::Device d;
    d.id = "GPU-" + std::to_string(i);
    d.index = i;
    d.vendor = inv.vendor;
    d.memory_mib = 81920;
    d.max_shares = 10;
    inv.devices.push_back(d);
  }
  return inv;
}

TEST(AssignmentCodecTest, ProtocolExampleRoundTrips) {
  const std::string text = R"({"version": 1, "node": "node-a", "policy": "accelpool",
    "containers": [
      {"name": "init-warmup", "kind": "init", "vendor": "nvidia", "resource": "nvidia.com/gpu",
       "devices": [{"id": "GPU-8f2c", "index": 0, "slot": "GPU-8f2c::1", "memory_mib": 4096,
                    "compute": 250, "exclusive": false}]},
      {"name": "main", "kind": "regular", "vendor": "nvidia", "resource": "nvidia.com/gpu",
       "devices": [{"id": "GPU-8f2c", "index": 0, "slot": "GPU-8f2c::1", "memory_mib": 4096,
                    "compute": 250, "exclusive": false}]}]})";
  auto a = ParseAssignment(text);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->node, "node-a");
  ASSERT_EQ(a->containers.size(), 2u);
  EXPECT_EQ(a->containers[0].kind, core::ContainerKind::kInit);
  EXPECT_EQ(a->containers[1].devices[0].compute, 250);
  auto again = ParseAssignment(SerializeAssignment(*a));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
}

TEST(AssignmentCodecTest, BadDocumentsNameThePath) {
  struct Case {
    std::string name, text, want;
  };
  const std::vector<Case> cases = {
      {"garbage", "nope", "is not valid JSON"},
      {"no node", R"({"version":1,"containers":[]})", "node: required"},
      {"bad kind",
       R"({"version":1,"node":"n","containers":[{"name":"m","kind":"daemon","vendor":"nvidia","devices":[]}]})",
       "containers[0].kind: want regular|init|sidecar"},
      {"bad vendor",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"voodoo","devices":[]}]})",
       "containers[0].vendor: unknown vendor"},
      {"compute over 1000",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"G::0","compute":1001}]}]})",
       "containers[0].devices[0].compute: want an integer in [0, 1000]"},
      {"memory past 1 EiB (sums of grants would overflow)",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"G::0","memory_mib":1099511627777}]}]})",
       "containers[0].devices[0].memory_mib: want an integer in [0, 1099511627776]"},
      {"slot of other device",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"H::0"}]}]})",
       "does not belong to device"},
      {"slot malformed",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"G:0"}]}]})",
       "containers[0].devices[0].slot"},
      {"path traversal in a container name",
       R"({"version":1,"node":"n","containers":[{"name":"../../etc","vendor":"nvidia","devices":[]}]})",
       "containers[0].name: \"../../etc\" is not a Kubernetes container name"},
      {"slash in a container name",
       R"({"version":1,"node":"n","containers":[{"name":"a/b","vendor":"nvidia","devices":[]}]})",
       "containers[0].name:"},
      {"empty container name",
       R"({"version":1,"node":"n","containers":[{"name":"","vendor":"nvidia","devices":[]}]})",
       "containers[0].name:"},
      // The plugin matches slot ids with kubelet's as text, the extender reads
      // the number: a slot written two ways would be two slots to one and one
      // to the other.
      {"slot with a leading zero",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"G::01"}]}]})",
       "containers[0].devices[0].slot: \"G::01\" is not written as \"G::1\""},
      {"slot with a sign",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"G::-0"}]}]})",
       "containers[0].devices[0].slot"},
      {"one device twice in a container",
       R"({"version":1,"node":"n","containers":[{"name":"m","vendor":"nvidia","devices":[{"id":"G","index":0,"slot":"G::0"},{"id":"G","index":0,"slot":"G::1"}]}]})",
       "containers[0].devices[1].id: device \"G\" is given to this container twice"},
  };
  for (const Case& c : cases) {
    auto r = ParseAssignment(c.text);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().message();
  }
}

// An annotation nested past kMaxAnnotationDepth is refused before it is
// parsed (anyone who may annotate a pod may write one), with what to do.
TEST(AssignmentCodecTest, DeeplyNestedAnnotationsAreRefusedBeforeParsing) {
  const std::string deep =
      "{\"containers\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  for (const auto& st : {ParseAssignment(deep).status(), ParseAllocation(deep).status(),
                         ParseInventory(deep, "n").status()}) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("deeper than 32 levels"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("delete the annotation"), std::string::npos) << st.message();
  }
}

TEST(AssignmentCodecTest, ContainerNamesAreDns1123LabelsAndUidsArePlain) {
  struct Case {
    std::string in;
    bool name_ok;
    bool uid_ok;
  };
  const std::vector<Case> cases = {
      {"main", true, true},
      {"init-warmup-2", true, true},
      {"0", true, true},
      {std::string(63, 'a'), true, true},
      {std::string(64, 'a'), false, true},
      {std::string(65, 'a'), false, false},
      {"6f1c2a9e-3b1d-4c55-9e0a-7d2f1b8c4e21", true, true},
      {"Main", false, true},
      {"-main", false, true},
      {"main-", false, true},
      {"", false, false},
      {"..", false, false},
      {"../../etc", false, false},
      {"a/b", false, false},
      {"a_b", false, false},
      {"a.b", false, false},
      {std::string("a\0b", 3), false, false},
      {"a\nb", false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CheckContainerName(c.in).ok(), c.name_ok) << c.in;
    EXPECT_EQ(CheckPodUid(c.in).ok(), c.uid_ok) << c.in;
    if (!c.name_ok) {
      EXPECT_EQ(CheckContainerName(c.in).code(), StatusCode::kInvalidArgument);
      EXPECT_NE(CheckContainerName(c.in).message().find("DNS-1123"), std::string::npos);
    }
  }
  // Control bytes are escaped in the message, never copied into a log line.
  EXPECT_EQ(CheckContainerName("a\nb").message().find('\n'), std::string::npos);
}

TEST(AssignmentCodecTest, AllocationRoundTripAndErrors) {
  Allocation a;
  a.phase = AllocationPhase::kFailed;
  a.allocated = {{"main", "nvidia.com/gpu"}, {"main", "huawei.com/Ascend910C"}, {"init", ""}};
  a.message = "device GPU-1 vanished";
  auto back = ParseAllocation(SerializeAllocation(a));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, a);
  // The names are written too, for a plugin that reads only them.
  auto doc = nlohmann::json::parse(SerializeAllocation(a));
  EXPECT_EQ(doc["containers"], nlohmann::json::array({"main", "init"}));
  EXPECT_FALSE(ParseAllocation(R"({"version":1,"phase":"Pending"})").ok());
  EXPECT_FALSE(ParseAllocation(R"({"version":1,"phase":"Allocated","containers":[1]})").ok());
  EXPECT_FALSE(ParseAllocation(R"({"version":1,"phase":"Allocated","allocated":["main"]})").ok());
  EXPECT_FALSE(
      ParseAllocation(R"({"version":1,"phase":"Allocated","allocated":[{"resource":"x/y"}]})")
          .ok());
  EXPECT_EQ(ParseAllocation(R"({"version":3,"phase":"Allocated"})").status().code(),
            StatusCode::kUnimplemented);
}

// A record of a plugin that wrote container names only (before resources
// were recorded) still reads, each name standing for every resource of its
// container, and survives a newer plugin's merge.
TEST(AssignmentCodecTest, AnOlderPluginsAllocationRecordStillReads) {
  auto old = ParseAllocation(R"({"version":1,"phase":"Allocated","containers":["init","main"]})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->allocated, (std::vector<AllocatedResource>{{"init", ""}, {"main", ""}}));
  // A newer record lists its names too; they add nothing of their own.
  auto now = ParseAllocation(R"({"version":1,"phase":"Allocated","containers":["main"],)"
                             R"("allocated":[{"container":"main","resource":"nvidia.com/gpu"}]})");
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->allocated, (std::vector<AllocatedResource>{{"main", "nvidia.com/gpu"}}));
  // Another vendor's plugin, upgraded, merges its own over the old record:
  // the old entries keep their meaning.
  Allocation ours;
  ours.allocated = {{"main", "huawei.com/Ascend910C"}};
  Allocation merged = MergeAllocation(*old, ours);
  auto back = ParseAllocation(SerializeAllocation(merged));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->allocated, (std::vector<AllocatedResource>{
                                 {"init", ""}, {"main", ""}, {"main", "huawei.com/Ascend910C"}}));
  EXPECT_EQ(back->phase, AllocationPhase::kAllocated);
}

TEST(AssignmentCodecTest, SlotIds) {
  struct Case {
    std::string in;
    bool ok;
    std::string id;
    int32_t slot;
  };
  const std::vector<Case> cases = {
      {"GPU-8f2c::1", true, "GPU-8f2c", 1},
      {"MIG::x::12", true, "MIG::x", 12},
      {"GPU", false, "", 0},
      {"::3", false, "", 0},
      {"G::", false, "", 0},
      {"G::-1", false, "", 0},
      {"G::1a", false, "", 0},
      {"G::99999999999", false, "", 0},
  };
  for (const Case& c : cases) {
    auto r = ParseSlotId(c.in);
    EXPECT_EQ(r.ok(), c.ok) << c.in;
    if (r.ok()) {
      EXPECT_EQ(r->first, c.id);
      EXPECT_EQ(r->second, c.slot);
      EXPECT_EQ(SlotId(r->first, r->second), c.in);
    }
  }
}

TEST(AssignmentCodecTest, PlacementConversionBothWays) {
  const core::NodeInventory inv = Node();
  core::Placement p;
  p.containers.push_back({"warm", core::ContainerKind::kInit, {{2, 4096, 250, false}}});
  p.containers.push_back(
      {"main", core::ContainerKind::kRegular, {{0, 81920, 1000, true}, {1, 81920, 1000, true}}});
  Assignment a;
  a.node = inv.node;
  a.policy = "binpack";
  Status st = AppendPlacement(
      a, p, inv, [](const std::string&) { return std::string("nvidia.com/gpu"); },
      [](int32_t device, const std::string& c) { return c == "warm" ? 3 : device; });
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(a.containers.size(), 2u);
  EXPECT_EQ(a.containers[0].devices[0].slot, "GPU-2::3");
  EXPECT_EQ(a.containers[1].devices[1].slot, "GPU-1::1");
  EXPECT_EQ(a.containers[1].resource, "nvidia.com/gpu");

  // Through JSON and back to the same placement.
  auto parsed = ParseAssignment(SerializeAssignment(a));
  ASSERT_TRUE(parsed.ok());
  auto back = ToPlacement(*parsed, inv);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, p);

  // Containers of another vendor are skipped.
  core::NodeInventory other = inv;
  other.vendor = core::Vendor::kAscend;
  auto none = ToPlacement(*parsed, other);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(AssignmentCodecTest, PlacementConversionErrors) {
  const core::NodeInventory inv = Node();
  Assignment a;
  a.node = "node-a";
  a.containers.push_back({"main",
                          core::ContainerKind::kRegular,
                          core::Vendor::kNvidia,
                          "nvidia.com/gpu",
                          {{"GPU-9", 0, "GPU-9::0", 0, 0, true}}});
  EXPECT_EQ(ToPlacement(a, inv).status().code(), StatusCode::kFailedPrecondition);
  a.containers[0].devices[0] = {"GPU-1", 3, "GPU-1::0", 0, 0, true};
  auto moved = ToPlacement(a, inv);
  EXPECT_EQ(moved.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(moved.status().message().find("has index 1"), std::string::npos);

  core::Placement p;
  p.containers.push_back({"main", core::ContainerKind::kRegular, {{7, 0, 0, true}}});
  Assignment b;
  EXPECT_EQ(AppendPlacement(b, p, inv, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(b.containers.empty());
}

}  // namespace
}  // namespace accelpool::api
