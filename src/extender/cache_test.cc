#include "extender/cache.h"

#include <gtest/gtest.h>

#include "core/fit.h"
#include "core/usage.h"
#include "extender/convert.h"
#include "extender/extender.h"
#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::AddGpuNode;
using testing::GpuNode;

PodAssignment Shared(const std::string& node, int32_t device, int64_t mem, int32_t slot,
                     const std::string& container = "main") {
  PodAssignment a;
  a.node = node;
  a.policy = "binpack";
  core::Placement p;
  p.containers.push_back(core::ContainerPlacement{
      container, core::ContainerKind::kRegular, {core::Grant{device, mem, 250, false}}});
  a.parts.push_back(AssignmentPart{core::Vendor::kNvidia, p, {{slot}}, {}});
  return a;
}

PodRef Ref(const std::string& uid, const std::string& job = "") {
  return PodRef{uid, "ns", "p-" + uid, job};
}

int64_t UsedMemory(const Cache& c, const std::string& node, int device) {
  return c.Node(node)->inventories.at(0).usage.devices.at(static_cast<size_t>(device)).memory_mib;
}

TEST(CacheTest, ReserveReleaseAndVersions) {
  Cache c;
  AddGpuNode(c, "a");
  const uint64_t v0 = c.Node("a")->version;
  ASSERT_TRUE(c.Reserve(Ref("p1"), Shared("a", 0, 4096, 0), v0).ok());
  EXPECT_EQ(UsedMemory(c, "a", 0), 4096);
  EXPECT_GT(c.Node("a")->version, v0);
  EXPECT_EQ(c.Stats().pods_reserved, 1);
  // Same slot for another pod: aborted, usage unchanged.
  Status conflict = c.Reserve(Ref("p2"), Shared("a", 0, 4096, 0), v0);
  EXPECT_EQ(conflict.code(), StatusCode::kAborted);
  EXPECT_EQ(UsedMemory(c, "a", 0), 4096);
  // Same pod again with the same assignment is idempotent; another is refused.
  EXPECT_TRUE(c.Reserve(Ref("p1"), Shared("a", 0, 4096, 0), v0).ok());
  EXPECT_EQ(c.Reserve(Ref("p1"), Shared("a", 1, 10, 0), v0).code(), StatusCode::kAlreadyExists);
  c.Release("p1");
  EXPECT_EQ(UsedMemory(c, "a", 0), 0);
  EXPECT_EQ(c.Stats().pods_reserved, 0);
  EXPECT_EQ(c.Reserve(Ref("p3"), Shared("missing", 0, 1, 0), 0).code(), StatusCode::kNotFound);
}

// Two pods planned on one snapshot both pass Fit beside a device's foreign
// memory; the second reservation, counted under the lock after the first,
// must see the memory the first took (and a whole grant is never taken on
// such a device), or the device is overbooked.
TEST(CacheTest, AReservationKeepsBesideForeignMemory) {
  Cache c;
  core::NodeInventory inv = GpuNode("a");
  core::Device& d0 = inv.devices.at(0);
  const int64_t total = d0.memory_mib;
  d0.foreign_mib = total / 4;
  const int64_t half_of_rest = (total - d0.foreign_mib) * 3 / 5;  // two do not fit beside it
  inv.devices.at(2).foreign_mib = 1024;
  c.UpsertNode("a", std::vector<core::NodeInventory>{inv}, 1, {});
  const uint64_t v0 = c.Node("a")->version;
  ASSERT_TRUE(c.Reserve(Ref("p1"), Shared("a", 0, half_of_rest, 0), v0).ok());
  const Status second = c.Reserve(Ref("p2"), Shared("a", 0, half_of_rest, 1), v0);
  EXPECT_EQ(second.code(), StatusCode::kAborted) << second.ToString();  // re-plan
  EXPECT_NE(second.message().find("too little memory left beside"), std::string::npos)
      << second.ToString();
  EXPECT_EQ(UsedMemory(c, "a", 0), half_of_rest);  // the refused one left nothing behind
  EXPECT_EQ(c.Stats().pods_reserved, 1);
  // What is left beside it still goes (and both would fit the device without
  // the foreign memory).
  ASSERT_LE(2 * half_of_rest, total);
  EXPECT_TRUE(
      c.Reserve(Ref("p3"), Shared("a", 0, total - d0.foreign_mib - half_of_rest, 2), v0).ok());
  // A whole grant on a device holding foreign memory (device 2: 1 GiB) is
  // refused.
  PodAssignment whole = Shared("a", 2, total, 0);
  whole.parts[0].placement.containers[0].grants[0] = core::Grant{2, total, 1000, true};
  const Status whole_status = c.Reserve(Ref("p4"), whole, v0);
  EXPECT_EQ(whole_status.code(), StatusCode::kAborted) << whole_status.ToString();
  EXPECT_NE(whole_status.message().find("not granted whole"), std::string::npos)
      << whole_status.ToString();
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
  // Device 1 holds none: a share as large goes there.
  EXPECT_TRUE(c.Reserve(Ref("p5"), Shared("a", 1, half_of_rest, 0), v0).ok());
}

// A bind that began before the pod's deletion (or end) reached the cache
// would book devices no later event of the pod frees: a Reserve for a uid
// Release saw go is refused, and books nothing.
TEST(CacheTest, ADeletedPodCannotReserveAfterwards) {
  Cache c;
  AddGpuNode(c, "a");
  const uint64_t v0 = c.Node("a")->version;
  c.Release("late");  // its DELETE event, before the bind's reservation
  const Status st = c.Reserve(Ref("late"), Shared("a", 0, 4096, 0), v0);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("was deleted or has finished"), std::string::npos);
  EXPECT_EQ(UsedMemory(c, "a", 0), 0);
  EXPECT_EQ(c.Stats().pods_reserved, 0);
  EXPECT_TRUE(c.Reserve(Ref("other"), Shared("a", 0, 4096, 0), v0).ok());
}

TEST(CacheTest, APodReleasedAsGoneIgnoresItsOlderEventsUntilItsDeletion) {
  Cache c;
  AddGpuNode(c, "a");
  ASSERT_TRUE(c.ObservePod(Ref("p1"), "a", Shared("a", 0, 4096, 0)).ok());
  ASSERT_TRUE(c.Reserve(Ref("p2"), Shared("a", 1, 4096, 0), c.Node("a")->version).ok());
  EXPECT_EQ(c.BoundPods("a"), std::vector<std::string>{"p1"});  // p2 is only reserved
  EXPECT_TRUE(c.BoundPods("b").empty());
  c.ReleaseGone("p1");
  EXPECT_EQ(UsedMemory(c, "a", 0), 0);
  // The watch, behind the apiserver, still shows p1 bound: nothing is booked.
  EXPECT_TRUE(c.ObservePod(Ref("p1"), "a", Shared("a", 0, 4096, 0)).ok());
  EXPECT_EQ(c.Assignment("p1"), std::nullopt);
  EXPECT_EQ(UsedMemory(c, "a", 0), 0);
  // Its deletion arrives; the uid is forgotten (a uid is never reused, so a
  // later observation is taken again).
  c.Release("p1");
  ASSERT_TRUE(c.ObservePod(Ref("p1"), "a", Shared("a", 0, 4096, 0)).ok());
  EXPECT_EQ(UsedMemory(c, "a", 0), 4096);
}

TEST(CacheTest, OvercommitIsRefused) {
  Cache c;
  AddGpuNode(c, "a");
  const int64_t cap = GpuNode("a").devices[0].memory_mib;
  ASSERT_TRUE(c.Reserve(Ref("p1"), Shared("a", 0, cap - 100, 0), 0).ok());
  EXPECT_EQ(c.Reserve(Ref("p2"), Shared("a", 0, 200, 1), 0).code(), StatusCode::kAborted);
  EXPECT_TRUE(c.Reserve(Ref("p3"), Shared("a", 0, 100, 1), 0).ok());
}

TEST(CacheTest, WatchEventsReconcileRecords) {
  struct Step {
    const char* what;
    std::string node_name;  // spec.nodeName
    bool with_assignment;
    int64_t want_used;
  };
  Cache c;
  AddGpuNode(c, "a");
  ASSERT_TRUE(c.Reserve(Ref("p1"), Shared("a", 2, 1000, 0), 0).ok());
  const Step steps[] = {
      {"annotation written, not bound yet: reservation stays", "", true, 1000},
      {"bound with the same assignment", "a", true, 1000},
      {"bound again (resync) changes nothing", "a", true, 1000},
  };
  for (const Step& s : steps) {
    SCOPED_TRACE(s.what);
    std::optional<PodAssignment> a;
    if (s.with_assignment) a = Shared("a", 2, 1000, 0);
    ASSERT_TRUE(c.ObservePod(Ref("p1"), s.node_name, a).ok());
    EXPECT_EQ(UsedMemory(c, "a", 2), s.want_used);
  }
  EXPECT_EQ(c.Stats().pods_bound, 1);
  // A pod seen only through the watch (after a restart) counts too.
  ASSERT_TRUE(c.ObservePod(Ref("p2"), "a", Shared("a", 2, 500, 1)).ok());
  EXPECT_EQ(UsedMemory(c, "a", 2), 1500);
  // Finished/deleted pods give their devices back.
  c.Release("p1");
  c.Release("p2");
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
}

TEST(CacheTest, BoundPodsKeepTheAssignmentTheyWereBoundWith) {
  Cache c;
  AddGpuNode(c, "a");
  AddGpuNode(c, "b");
  const PodAssignment bound = Shared("a", 2, 1000, 0);
  ASSERT_TRUE(c.Reserve(Ref("p1"), bound, 0).ok());
  c.MarkBound("p1", *c.Assignment("p1"));
  struct Edit {
    const char* what;
    std::string node_name;
    std::optional<PodAssignment> seen;
  };
  const Edit edits[] = {
      {"annotation removed or unparsable", "a", std::nullopt},
      {"less memory", "a", Shared("a", 2, 100, 0)},
      {"another device", "a", Shared("a", 3, 1000, 0)},
      {"another node in the annotation", "a", Shared("b", 2, 1000, 0)},
  };
  int64_t ignored = 0;
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.what);
    EXPECT_EQ(c.ObservePod(Ref("p1"), e.node_name, e.seen).code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(c.Stats().assignment_changes_ignored, ++ignored);
    EXPECT_EQ(c.Assignment("p1"), bound);
    EXPECT_EQ(UsedMemory(c, "a", 2), 1000);
    EXPECT_EQ(UsedMemory(c, "a", 3), 0);
    EXPECT_EQ(UsedMemory(c, "b", 2), 0);
  }
  // The same assignment again (a resync) is no edit; finishing still frees.
  EXPECT_TRUE(c.ObservePod(Ref("p1"), "a", bound).ok());
  EXPECT_EQ(c.Stats().assignment_changes_ignored, ignored);
  c.Release("p1");
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
  // A reservation not yet bound still follows what the apiserver shows.
  ASSERT_TRUE(c.Reserve(Ref("p2"), Shared("a", 2, 500, 1), 0).ok());
  EXPECT_TRUE(c.ObservePod(Ref("p2"), "a", Shared("a", 4, 300, 1)).ok());
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
  EXPECT_EQ(UsedMemory(c, "a", 4), 300);
}

TEST(CacheTest, AnAssignmentWithoutDevicesHoldsNothing) {
  // Older extenders bound pods asking for `nvidia.com/gpu: 0` with an empty
  // assignment, which kept the node from ever looking idle.
  Cache c;
  AddGpuNode(c, "a");
  EXPECT_TRUE(c.ObservePod(Ref("z"), "a", PodAssignment{"a", "binpack", {}}).ok());
  EXPECT_EQ(c.Assignment("z"), std::nullopt);
  EXPECT_TRUE(c.Node("a")->Idle());
  EXPECT_EQ(c.Stats().pods_bound, 0);
}

TEST(CacheTest, PodsBeforeTheirNodeAreAppliedWhenItArrives) {
  Cache c;
  EXPECT_EQ(c.ObservePod(Ref("p1"), "late", Shared("late", 1, 300, 0)).code(),
            StatusCode::kNotFound);
  AddGpuNode(c, "late");
  EXPECT_EQ(UsedMemory(c, "late", 1), 300);
}

TEST(CacheTest, InventoryUpdateKeepsUsageByDeviceId) {
  Cache c;
  AddGpuNode(c, "a");
  ASSERT_TRUE(c.Reserve(Ref("p1"), Shared("a", 1, 700, 0), 0).ok());
  core::NodeInventory inv = GpuNode("a");
  std::swap(inv.devices[1].id, inv.devices[4].id);  // the plugin re-ordered ids
  EXPECT_EQ(c.UpsertNode("a", std::vector<core::NodeInventory>{inv}, 2, {}), 0);
  EXPECT_EQ(UsedMemory(c, "a", 4), 700);
  EXPECT_EQ(UsedMemory(c, "a", 1), 0);
  EXPECT_EQ(c.Node("a")->generation, 2);
}

// The annotation Bind writes for `pod`, read back the way the pod watch does.
PodAssignment Annotation(const Cache& c, const PodInfo& pod, const PodAssignment& a) {
  StatusOr<api::Assignment> doc = ToApiAssignment(a, *c.Node(a.node), pod);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  StatusOr<PodAssignment> back =
      FromApiAssignment(*api::ParseAssignment(api::SerializeAssignment(*doc)));
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return *back;
}

// GpuNode(name, shares) with device `gone` missing: the devices after it
// move down one index.
core::NodeInventory Without(const std::string& name, int32_t gone, int32_t shares = 4) {
  core::NodeInventory inv = GpuNode(name, shares);
  inv.devices.erase(inv.devices.begin() + gone);
  for (size_t i = 0; i < inv.devices.size(); ++i) {
    inv.devices[i].index = static_cast<int32_t>(i);
  }
  inv.topology = core::Topology{};
  return inv;
}

// Shared() as planned on GpuNode(node): it knows its device's id.
PodAssignment Planned(const std::string& node, int32_t device, int64_t mem, int32_t slot) {
  PodAssignment a = Shared(node, device, mem, slot);
  RecordDeviceIds(a.parts.at(0), GpuNode(node));
  return a;
}

int32_t GrantedDevice(const PodAssignment& a) {
  return a.parts.at(0).placement.containers.at(0).grants.at(0).device;
}

// Devices some pod holds on `node`.
int64_t BusyDevices(const Cache& c, const std::string& node) {
  int64_t n = 0;
  for (const core::DeviceUsage& u : c.Node(node)->inventories.at(0).usage.devices) {
    n += u.shares > 0 || u.exclusive ? 1 : 0;
  }
  return n;
}

TEST(CacheTest, UnparsableInventoryKeepsPodsAndTheirUsage) {
  Cache c;
  testing::AddGpuNode(c, "a", 1);
  auto ext = Extender::Create(c, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  const PodInfo p1 = testing::MakePod("p1", {testing::Gpu(8)});
  StatusOr<PodAssignment> a = (*ext)->Bind(p1, "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const PodAssignment annotation = Annotation(c, p1, *a);
  ASSERT_TRUE(c.ObservePod(p1.ref, "a", annotation).ok());
  const int64_t used = BusyDevices(c, "a");
  ASSERT_EQ(used, 8);

  c.UpsertNode("a", StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("boom")), 2,
               {});
  EXPECT_FALSE(c.Node("a")->Idle());
  EXPECT_EQ(c.Assignment("p1"), *a);
  EXPECT_FALSE((*ext)->Bind(testing::MakePod("p2", {testing::Gpu(1)}), "a").ok());

  c.UpsertNode("a", std::vector<core::NodeInventory>{GpuNode("a", 1)}, 3, {});
  EXPECT_EQ(BusyDevices(c, "a"), used);
  EXPECT_EQ(c.Assignment("p1"), *a);
  EXPECT_TRUE(c.ObservePod(p1.ref, "a", annotation).ok());
  EXPECT_EQ(c.Stats().assignment_changes_ignored, 0);
  EXPECT_FALSE((*ext)->Bind(testing::MakePod("p2", {testing::Gpu(8)}), "a").ok());
}

TEST(CacheTest, DeviceThatLeavesAndReturnsKeepsItsHolder) {
  Cache c;
  testing::AddGpuNode(c, "a", 1);
  auto ext = Extender::Create(c, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  const PodInfo p1 = testing::MakePod("p1", {testing::Gpu(1)});
  StatusOr<PodAssignment> a = (*ext)->Bind(p1, "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const PodAssignment annotation = Annotation(c, p1, *a);
  ASSERT_TRUE(c.ObservePod(p1.ref, "a", annotation).ok());
  ASSERT_TRUE((*ext)->Bind(testing::MakePod("fill", {testing::Gpu(7)}), "a").ok());
  const int32_t held = a->parts.at(0).placement.containers.at(0).grants.at(0).device;

  // The device p1 holds drops out of the inventory (and the others shift).
  EXPECT_EQ(c.UpsertNode("a", std::vector<core::NodeInventory>{Without("a", held, 1)}, 2, {}), 1);
  EXPECT_EQ(BusyDevices(c, "a"), 7);  // the other pod's devices followed their ids
  EXPECT_EQ(c.AppliedAssignment("p1")->parts.at(0).placement.containers.at(0).grants.size(), 0u);
  EXPECT_FALSE((*ext)->Bind(testing::MakePod("p2", {testing::Gpu(1)}), "a").ok());

  EXPECT_EQ(c.UpsertNode("a", std::vector<core::NodeInventory>{GpuNode("a", 1)}, 3, {}), 0);
  EXPECT_EQ(BusyDevices(c, "a"), 8);
  EXPECT_EQ(c.AppliedAssignment("p1"), *a);
  StatusOr<PodAssignment> p2 = (*ext)->Bind(testing::MakePod("p2", {testing::Gpu(1)}), "a");
  EXPECT_FALSE(p2.ok()) << "bound onto "
                        << p2->parts.at(0).placement.containers.at(0).grants.at(0).device;
  EXPECT_TRUE(c.ObservePod(p1.ref, "a", annotation).ok());
  c.Release("p1");
  EXPECT_EQ(BusyDevices(c, "a"), 7);
}

TEST(CacheTest, ABoundPodThatOvercommitsIsCountedPastTheDevicesCapacity) {
  // After a restart the watch shows two bound pods whose assignments
  // overlap on device 1 (an edit by hand before the guard, a lost update):
  // p2's grant on device 2 must count, and so must its grant on device 1,
  // past the device's memory: both pods run there, and a device shown with
  // 100 MiB free would take a third.
  Cache c;
  AddGpuNode(c, "a");
  const core::Device dev1 = GpuNode("a").devices[1];
  const int64_t cap = dev1.memory_mib;
  ASSERT_TRUE(c.ObservePod(Ref("p1"), "a", Shared("a", 1, cap - 100, 0)).ok());
  PodAssignment two = Shared("a", 1, 200, 1);
  two.parts[0].placement.containers[0].grants.push_back(core::Grant{2, 500, 250, false});
  two.parts[0].slots[0].push_back(0);
  EXPECT_EQ(c.ObservePod(Ref("p2"), "a", two).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(UsedMemory(c, "a", 1), cap + 100);
  EXPECT_EQ(UsedMemory(c, "a", 2), 500);
  EXPECT_EQ(core::FreeMemory(dev1, c.Node("a")->inventories.at(0).usage.devices.at(1)), 0);
  EXPECT_EQ(c.Stats().grants_conflicting, 1);
  EXPECT_EQ(c.Node("a")->pods, 2);
  // A 100 MiB pod finds no room on device 1.
  EXPECT_EQ(c.Reserve(Ref("p3"), Shared("a", 1, 100, 2), 0).code(), StatusCode::kAborted);
  // An inventory update keeps that (nothing counted twice).
  c.UpsertNode("a", std::vector<core::NodeInventory>{GpuNode("a")}, 2, {});
  EXPECT_EQ(UsedMemory(c, "a", 1), cap + 100);
  EXPECT_EQ(UsedMemory(c, "a", 2), 500);
  // p1 leaves: p2 is counted in full.
  c.Release("p1");
  EXPECT_EQ(UsedMemory(c, "a", 1), 200);
  EXPECT_EQ(UsedMemory(c, "a", 2), 500);
  EXPECT_EQ(c.Stats().grants_conflicting, 0);
  c.Release("p2");
  EXPECT_EQ(UsedMemory(c, "a", 1), 0);
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
  EXPECT_TRUE(c.Node("a")->Idle());
}

TEST(CacheTest, AnOverlappingPodIsCountedOnceOnEachOfItsDevices) {
  // p2's grants on devices 1 and 2 fit, the one on device 3 overlaps p1's:
  // each device counts p2 once (counting device by device must not apply
  // the devices already counted again).
  Cache c;
  AddGpuNode(c, "a");
  const int64_t cap = GpuNode("a").devices[3].memory_mib;
  ASSERT_TRUE(c.ObservePod(Ref("p1"), "a", Shared("a", 3, cap - 100, 0)).ok());
  PodAssignment two = Shared("a", 1, 300, 0);
  auto& grants = two.parts[0].placement.containers[0].grants;
  grants.push_back(core::Grant{2, 400, 250, false});
  grants.push_back(core::Grant{3, 500, 250, false});
  two.parts[0].slots[0] = {0, 0, 1};
  EXPECT_EQ(c.ObservePod(Ref("p2"), "a", two).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(UsedMemory(c, "a", 1), 300);
  EXPECT_EQ(UsedMemory(c, "a", 2), 400);
  EXPECT_EQ(UsedMemory(c, "a", 3), cap + 400);
  EXPECT_EQ(c.Stats().grants_conflicting, 1);
  c.Release("p2");
  EXPECT_EQ(UsedMemory(c, "a", 1), 0);
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
  EXPECT_EQ(UsedMemory(c, "a", 3), cap - 100);
}

TEST(CacheTest, TwoPodsBoundToOneSlotAndOneWholeCardGiveItBackOnlyWhenBothLeave) {
  // Two bound pods name the same slot of device 3, one of them whole (its
  // grant exclusive): both count, the slot stays with the first, and the
  // device stays taken until both have left, whichever leaves first.
  for (const int order : {0, 1, 2, 3}) {
    const bool whole_first = order < 2;  // which is observed first
    const bool first_leaves_first = order % 2 == 0;
    SCOPED_TRACE(std::string(whole_first ? "whole card observed first" : "share observed first") +
                 (first_leaves_first ? ", leaves first" : ", leaves last"));
    Cache c;
    AddGpuNode(c, "a");
    PodAssignment whole = Shared("a", 3, 0, 0);
    whole.parts[0].placement.containers[0].grants[0] = core::Grant{3, 0, 1000, true};
    const PodAssignment share = Shared("a", 3, 1024, 0);
    const std::string first = whole_first ? "whole" : "share";
    const std::string second = whole_first ? "share" : "whole";
    ASSERT_TRUE(c.ObservePod(Ref(first), "a", whole_first ? whole : share).ok());
    EXPECT_FALSE(c.ObservePod(Ref(second), "a", whole_first ? share : whole).ok());
    const auto usage = [&] { return c.Node("a")->inventories.at(0).usage.devices.at(3); };
    EXPECT_TRUE(usage().exclusive);
    EXPECT_EQ(usage().shares, 2);
    // One holder leaves: the other is all that is counted, exclusive mark
    // included.
    const std::string leaving = first_leaves_first ? first : second;
    const std::string staying = first_leaves_first ? second : first;
    c.Release(leaving);
    EXPECT_EQ(usage().exclusive, staying == "whole");
    EXPECT_EQ(usage().shares, 1);
    EXPECT_EQ(usage().memory_mib, staying == "share" ? 1024 : 0);
    EXPECT_EQ(c.Stats().grants_conflicting, 0);
    EXPECT_EQ(c.Reserve(Ref("p3"), Shared("a", 3, 100, 0), 0).code(), StatusCode::kAborted);
    c.Release(staying);
    EXPECT_TRUE(c.Node("a")->Idle());
    EXPECT_EQ(c.Reserve(Ref("p3"), Shared("a", 3, 100, 0), 0).code(), StatusCode::kOk);
  }
}

TEST(CacheTest, UnparsableInventoryKeepsNodeVisible) {
  Cache c;
  c.UpsertNode("bad", StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("boom")), 0,
               {});
  NodeSnapshotPtr s = c.Node("bad");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->inventory_status.ok());
  EXPECT_EQ(c.Stats().nodes_unparsable, 1);
  c.RemoveNode("bad");
  EXPECT_EQ(c.Node("bad"), nullptr);
}

TEST(CacheTest, JobIndexCountsPodsPerNode) {
  Cache c;
  AddGpuNode(c, "a");
  AddGpuNode(c, "b");
  ASSERT_TRUE(c.Reserve(Ref("p1", "ns/job"), Shared("a", 0, 10, 0), 0).ok());
  ASSERT_TRUE(c.Reserve(Ref("p2", "ns/job"), Shared("a", 1, 10, 0), 0).ok());
  ASSERT_TRUE(c.Reserve(Ref("p3", "ns/job"), Shared("b", 1, 10, 0), 0).ok());
  EXPECT_EQ(c.JobNodes("ns/job"), (std::map<std::string, int>{{"a", 2}, {"b", 1}}));
  c.Release("p3");
  EXPECT_EQ(c.JobNodes("ns/job"), (std::map<std::string, int>{{"a", 2}}));
  EXPECT_TRUE(c.JobNodes("other").empty());
}

TEST(CacheTest, AfterARestartGrantsFollowTheAnnotationsDeviceIds) {
  // Before the restart: p1 was bound to GPU 3 of the full node.
  Cache before;
  AddGpuNode(before, "a");
  const PodInfo p1 = testing::MakePod("p1", {testing::Gpu(1, 700)});
  const PodAssignment annotation = Annotation(before, p1, Shared("a", 3, 700, 0));
  const std::string gpu3 = GpuNode("a").devices[3].id;

  // The restarted extender lists the node with GPU 2 missing: GPU 3 is now
  // index 2, and index 3 is another card.
  Cache c;
  c.UpsertNode("a", std::vector<core::NodeInventory>{Without("a", 2)}, 2, {});
  ASSERT_TRUE(c.ObservePod(p1.ref, "a", annotation).ok());
  EXPECT_EQ(UsedMemory(c, "a", 2), 700) << "the grant stays on " << gpu3;
  EXPECT_EQ(UsedMemory(c, "a", 3), 0);
  EXPECT_EQ(GrantedDevice(*c.AppliedAssignment("p1")), 2);

  // GPU 2 comes back: the grant is on index 3 again, and the pod's
  // annotation is still the one it was bound with.
  EXPECT_EQ(c.UpsertNode("a", std::vector<core::NodeInventory>{GpuNode("a")}, 3, {}), 0);
  EXPECT_EQ(UsedMemory(c, "a", 3), 700);
  EXPECT_EQ(UsedMemory(c, "a", 2), 0);
  EXPECT_TRUE(c.ObservePod(p1.ref, "a", annotation).ok());
  EXPECT_EQ(c.Stats().assignment_changes_ignored, 0);
}

TEST(CacheTest, AReservationNeedsTheDevicesItWasPlannedOn) {
  Cache c;
  c.UpsertNode("a", std::vector<core::NodeInventory>{Without("a", 3)}, 2, {});
  Status st = c.Reserve(Ref("p1"), Planned("a", 3, 700, 0), 0);
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st.ToString();
  EXPECT_EQ(BusyDevices(c, "a"), 0);
  EXPECT_FALSE(c.Assignment("p1").has_value());
  EXPECT_TRUE(c.Node("a")->Idle());

  // Planned before GPU 1 left: the reservation lands on the same card, now
  // at index 2, and the annotation names that card.
  c.UpsertNode("a", std::vector<core::NodeInventory>{Without("a", 1)}, 3, {});
  const PodAssignment planned = Planned("a", 3, 700, 0);
  ASSERT_TRUE(c.Reserve(Ref("p1"), planned, 0).ok());
  EXPECT_EQ(UsedMemory(c, "a", 2), 700);
  const PodInfo p1 = MakePodInfo(Ref("p1"), core::PodRequest{{testing::Gpu(1, 700)}, {}});
  StatusOr<api::Assignment> doc = ToApiAssignment(planned, *c.Node("a"), p1);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const api::AssignedDevice& d = doc->containers.at(0).devices.at(0);
  EXPECT_EQ(d.id, GpuNode("a").devices[3].id);
  EXPECT_EQ(d.index, 2);
  EXPECT_EQ(d.slot, GpuNode("a").devices[3].id + "::0");

  // The bound pod's annotation (index 2) is the reservation (index 3 on the
  // node it was planned on): the same card, not an edit.
  c.MarkBound("p1", *c.Assignment("p1"));
  StatusOr<PodAssignment> back = FromApiAssignment(*doc);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(c.ObservePod(Ref("p1"), "a", *back).ok());
  EXPECT_EQ(c.Stats().assignment_changes_ignored, 0);
  EXPECT_EQ(UsedMemory(c, "a", 2), 700);

  // A card that left between reservation and bind is not written as another.
  c.UpsertNode("a", std::vector<core::NodeInventory>{Without("a", 3)}, 4, {});
  StatusOr<api::Assignment> gone = ToApiAssignment(planned, *c.Node("a"), p1);
  EXPECT_EQ(gone.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gone.status().message().find(GpuNode("a").devices[3].id), std::string::npos)
      << gone.status().ToString();
}

TEST(CacheTest, AReservationRefusesDevicesThatTurnedUnhealthyOrCordonedSincePlanning) {
  Cache c;
  AddGpuNode(c, "a");
  const uint64_t planned_at = c.Node("a")->version;
  // GPU 0 turns unhealthy and GPU 1 is cordoned after the plan was made.
  core::NodeInventory inv = GpuNode("a");
  inv.devices[0].healthy = false;
  inv.devices[1].cordoned = true;
  c.UpsertNode("a", std::vector<core::NodeInventory>{inv}, 2, {});
  for (int32_t dev : {0, 1}) {
    Status st = c.Reserve(Ref("p" + std::to_string(dev)), Shared("a", dev, 4096, 0), planned_at);
    EXPECT_EQ(st.code(), StatusCode::kAborted) << st.ToString();
    EXPECT_NE(st.message().find(dev == 0 ? "unhealthy" : "cordoned"), std::string::npos)
        << st.ToString();
    EXPECT_EQ(UsedMemory(c, "a", dev), 0);
    EXPECT_FALSE(c.Assignment("p" + std::to_string(dev)).has_value());
  }
  EXPECT_TRUE(c.Node("a")->Idle());
  EXPECT_EQ(c.Stats().pods_reserved, 0);
  // A healthy device in service still takes the reservation.
  ASSERT_TRUE(c.Reserve(Ref("p2"), Shared("a", 2, 4096, 0), planned_at).ok());
  EXPECT_EQ(UsedMemory(c, "a", 2), 4096);
  // A pod the apiserver shows bound there keeps counting on it.
  EXPECT_TRUE(c.ObservePod(Ref("b0"), "a", Shared("a", 0, 4096, 0)).ok());
  EXPECT_EQ(UsedMemory(c, "a", 0), 4096);
  // So does a reservation made before its device turned unhealthy.
  inv.devices[2].healthy = false;
  c.UpsertNode("a", std::vector<core::NodeInventory>{inv}, 3, {});
  EXPECT_EQ(UsedMemory(c, "a", 2), 4096);
  EXPECT_EQ(c.Stats().pods_reserved, 1);
}

TEST(CacheTest, SameAssignmentComparesDevicesById) {
  PodAssignment a = Planned("a", 3, 700, 0);
  PodAssignment moved = a;
  moved.parts[0].placement.containers[0].grants[0].device = 2;
  moved.parts[0].device_ids = {{2, a.parts[0].device_ids.at(3)}};
  EXPECT_TRUE(SameAssignment(a, moved));
  EXPECT_FALSE(a == moved);
  PodAssignment other = moved;
  other.parts[0].device_ids = {{2, GpuNode("a").devices[2].id}};
  EXPECT_FALSE(SameAssignment(a, other));
  PodAssignment no_ids = Shared("a", 3, 700, 0);
  EXPECT_TRUE(SameAssignment(a, no_ids));  // by index where one side has no id
  EXPECT_FALSE(SameAssignment(a, Planned("a", 3, 701, 0)));
  EXPECT_FALSE(SameAssignment(a, Planned("a", 3, 700, 1)));
}

}  // namespace
}  // namespace accelpool::extender
