#include "extender/node_state.h"

#include <memory>

#include <gtest/gtest.h>

#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::GpuNode;

core::Placement OneGrant(std::vector<std::pair<std::string, core::ContainerKind>> containers,
                         int32_t device, int64_t mem) {
  core::Placement p;
  for (const auto& [name, kind] : containers) {
    p.containers.push_back(core::ContainerPlacement{name, kind, {core::Grant{device, mem, 100, false}}});
  }
  return p;
}

TEST(NodeStateTest, AssignSlotsReusesPodSlotsLikeKubelet) {
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, core::ContainerKind>> containers;
    std::vector<bool> taken;  // slot occupancy of device 0 before
    std::vector<int32_t> want;
  };
  using K = core::ContainerKind;
  const Case cases[] = {
      {"one regular", {{"main", K::kRegular}}, {false, false, false, false}, {0}},
      {"skips taken", {{"main", K::kRegular}}, {true, false, false, false}, {1}},
      {"init then main share",
       {{"init", K::kInit}, {"main", K::kRegular}},
       {true, false, false, false},
       {1, 1}},
      {"two regulars differ",
       {{"a", K::kRegular}, {"b", K::kRegular}},
       {false, false, false, false},
       {0, 1}},
      {"sidecar and main differ",
       {{"side", K::kSidecar}, {"main", K::kRegular}},
       {false, true, false, false},
       {0, 2}},
      // An init container after a sidecar runs beside it: its own slot, which
      // main then reuses (kubelet reuses init devices, never a sidecar's).
      {"init after a sidecar",
       {{"side", K::kSidecar}, {"init", K::kInit}, {"main", K::kRegular}},
       {false, false, false, false},
       {0, 1, 1}},
      {"init, sidecar, init",
       {{"i1", K::kInit}, {"side", K::kSidecar}, {"i2", K::kInit}, {"main", K::kRegular}},
       {false, false, false, false},
       {0, 0, 1, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    InventoryState st = InventoryState::Empty(std::make_shared<core::NodeInventory>(GpuNode("n")));
    st.slots[0] = c.taken;
    StatusOr<std::vector<std::vector<int32_t>>> slots =
        AssignSlots(st, OneGrant(c.containers, 0, 1024));
    ASSERT_TRUE(slots.ok()) << slots.status().ToString();
    std::vector<int32_t> got;
    for (const auto& s : *slots) got.push_back(s.at(0));
    EXPECT_EQ(got, c.want);
  }
}

TEST(NodeStateTest, NoFreeSlotIsFailedPrecondition) {
  InventoryState st = InventoryState::Empty(std::make_shared<core::NodeInventory>(GpuNode("n", 1)));
  st.slots[2] = {true};
  auto slots = AssignSlots(st, OneGrant({{"main", core::ContainerKind::kRegular}}, 2, 10));
  ASSERT_FALSE(slots.ok());
  EXPECT_EQ(slots.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(slots.status().message().find("no free slot"), std::string::npos);
}

TEST(NodeStateTest, ApplyAndReleaseAreInverse) {
  InventoryState st = InventoryState::Empty(std::make_shared<core::NodeInventory>(GpuNode("n")));
  AssignmentPart part{core::Vendor::kNvidia,
                      OneGrant({{"main", core::ContainerKind::kRegular}}, 3, 4096),
                      {{0}},
                      {}};
  InventoryState before = st;
  ASSERT_TRUE(ApplyPart(part, &st).ok());
  EXPECT_EQ(st.usage.devices[3].memory_mib, 4096);
  EXPECT_TRUE(st.slots[3][0]);
  // The same slot twice is refused and changes nothing.
  InventoryState again = st;
  Status twice = ApplyPart(part, &again);
  EXPECT_EQ(twice.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.usage, st.usage);
  ASSERT_TRUE(ReleasePart(part, &st).ok());
  EXPECT_EQ(st.usage, before.usage);
  EXPECT_EQ(st.slots, before.slots);
}

}  // namespace
}  // namespace accelpool::extender
