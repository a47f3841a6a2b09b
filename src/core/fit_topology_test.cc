// Every topology rule of VENDORS.md section 11, one table row each, with the
// row of the summary table it encodes.
#include <gtest/gtest.h>

#include "core/fit.h"
#include "core/test_util.h"

namespace accelpool::core {
namespace {

using testing::Busy;
using testing::Devices;
using testing::MakeNode;
using testing::Pod;
using testing::Whole;

struct Case {
  const char* name;
  const char* cite;  // VENDORS.md rule
  const char* profile;
  std::vector<int32_t> busy;  // devices held by others
  int32_t count;
  bool numa_bind;
  FitCode want_code;
  std::vector<int32_t> want_devices;  // exact, when fits
  Reason want_reason;                 // when it does not fit
};

class TopologyRules : public ::testing::TestWithParam<Case> {};

TEST_P(TopologyRules, Fit) {
  const Case& c = GetParam();
  const NodeInventory inv = MakeNode(c.profile);
  ASSERT_TRUE(ValidateInventory(inv).ok()) << ValidateInventory(inv).ToString();
  const NodeUsage usage = Busy(inv, c.busy);
  DeviceRequest req = Whole(inv.vendor, c.count);
  req.numa_bind = c.numa_bind;
  const PodRequest pod = Pod({req});
  const FitResult r = Fit(pod, inv, usage);
  ASSERT_EQ(r.code, c.want_code) << c.cite << "\n"
                                 << (r.reasons.empty() ? "" : DescribeReason(r.reasons[0]));
  if (c.want_code == FitCode::kFits) {
    EXPECT_EQ(Devices(r), c.want_devices) << c.cite;
    EXPECT_TRUE(CheckPlacement(pod, inv, usage, r.placement).ok()) << c.cite;
  } else {
    ASSERT_FALSE(r.reasons.empty());
    EXPECT_EQ(r.reasons[0].reason, c.want_reason)
        << c.cite << ": " << DescribeReason(r.reasons[0]);
  }
}

const Case kCases[] = {
    // --- Ascend 910A x8: rings {0-3} {4-7}, counts 1/2/4/8, best fit 1 -> 1,3,2,4.
    {"a910a_one_prefers_ring_with_one_free", "11: 910A best fit for 1 is ring with 1 free",
     "ascend-910a-x8", {0, 1, 2, 4}, 1, false, FitCode::kFits, {3}, {}},
    {"a910a_one_prefers_three_over_two", "11: 910A order for 1 is 1,3,2,4 free",
     "ascend-910a-x8", {0, 1, 4}, 1, false, FitCode::kFits, {5}, {}},
    {"a910a_two_prefers_exact_ring", "11: 910A order for 2 is 2,4,3 free", "ascend-910a-x8",
     {0, 1}, 2, false, FitCode::kFits, {2, 3}, {}},
    {"a910a_two_never_spans_rings", "11: 910A 1,2,4 inside one ring", "ascend-910a-x8",
     {0, 1, 2, 4, 5, 6}, 2, false, FitCode::kUnschedulable, {}, Reason::kNoTopologyGroup},
    {"a910a_four_takes_a_whole_ring", "11: 910A 4 inside one ring", "ascend-910a-x8", {0},
     4, false, FitCode::kFits, {4, 5, 6, 7}, {}},
    {"a910a_three_is_invalid", "11: 910A valid counts 1,2,4,8", "ascend-910a-x8", {}, 3, false,
     FitCode::kUnresolvable, {}, Reason::kInvalidCount},
    {"a910a_eight_takes_node", "11: 910A 8 takes all", "ascend-910a-x8", {}, 8, false,
     FitCode::kFits, {0, 1, 2, 3, 4, 5, 6, 7}, {}},
    {"a910a_half_config_one_ring", "11: 910A half: one ring, 1,2,4", "ascend-910a-x4", {1}, 2,
     false, FitCode::kFits, {0, 2}, {}},
    {"a910a_half_three_invalid", "11: 910A half: 3 invalid", "ascend-910a-x4", {}, 3, false,
     FitCode::kUnresolvable, {}, Reason::kInvalidCount},
    // --- Ascend 910B x8: full mesh, any subset.
    {"a910b8_any_subset", "11: 910B A2 full HCCS mesh, any subset", "ascend-910b-x8",
     {0, 2, 4, 6}, 3, false, FitCode::kFits, {1, 3, 5}, {}},
    {"a910b8_seven_ok", "11: 910B A2 counts 1-8", "ascend-910b-x8", {3}, 7, false,
     FitCode::kFits, {0, 1, 2, 4, 5, 6, 7}, {}},
    // --- Ascend 910B Box16: rings of 8; 10/12/14 mirrored pairs.
    {"a910b16_eight_in_one_ring", "11: Box16 <=8 in one ring", "ascend-910b-x16", {0}, 8, false,
     FitCode::kFits, {8, 9, 10, 11, 12, 13, 14, 15}, {}},
    {"a910b16_small_never_spans", "11: Box16 <=8 in one ring", "ascend-910b-x16",
     {0, 1, 2, 3, 4, 8, 9, 10, 11, 12}, 4, false, FitCode::kUnschedulable, {},
     Reason::kNoTopologyGroup},
    {"a910b16_ten_as_mirrored_pairs", "11: Box16 10 as pairs (i, i+8)", "ascend-910b-x16",
     {0, 9}, 10, false, FitCode::kFits, {2, 3, 4, 5, 6, 10, 11, 12, 13, 14}, {}},
    {"a910b16_one_takes_fewest_free_ring", "2.2: Box16 best fit is the ring with the fewest free",
     "ascend-910b-x16", {0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12}, 1, false, FitCode::kFits, {6}, {}},
    {"a910b16_two_takes_fewest_free_ring", "2.2: Box16 best fit is the ring with the fewest free",
     "ascend-910b-x16", {0, 1, 2, 3, 4, 8, 9, 10, 11}, 2, false, FitCode::kFits, {5, 6}, {}},
    {"a910b16_nine_invalid", "11: Box16 9 invalid", "ascend-910b-x16", {}, 9, false,
     FitCode::kUnresolvable, {}, Reason::kInvalidCount},
    {"a910b16_twelve_needs_pairs", "11: Box16 12 as 6 mirrored pairs", "ascend-910b-x16",
     {0, 9, 2, 11}, 12, false, FitCode::kUnschedulable, {}, Reason::kNoMirroredPairs},
    // --- Ascend 910C: whole two-die modules for even counts.
    {"a910c_two_takes_whole_module", "11: 910C free {0,2,3,4} -> 2 uses {2,3}", "ascend-910c-x16",
     {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 2, false, FitCode::kFits, {2, 3}, {}},
    {"a910c_two_without_whole_module", "11: 910C even counts take whole modules",
     "ascend-910c-x16", {1, 3, 5, 7, 9, 11, 13, 15}, 2, false, FitCode::kUnschedulable, {},
     Reason::kNoWholeModule},
    {"a910c_one_prefers_used_sibling", "11: 910C 1 prefers the sibling of a used die",
     "ascend-910c-x16", {5}, 1, false, FitCode::kFits, {4}, {}},
    {"a910c_three_invalid", "11: 910C odd >1 invalid", "ascend-910c-x16", {}, 3, false,
     FitCode::kUnresolvable, {}, Reason::kInvalidCount},
    {"a910c_sixteen_whole_node", "11: 910C 16", "ascend-910c-x16", {}, 16, false,
     FitCode::kFits, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {}},
    // --- Ascend 310P Duo: <=2 on one card.
    {"a310p_two_on_one_card", "11: 310P Duo <=2 on one card", "ascend-310p-duo", {0, 3}, 2,
     false, FitCode::kFits, {4, 5}, {}},
    {"a310p_one_fills_half_used_card", "11: 310P odd remainder to a card with 1 free",
     "ascend-310p-duo", {0}, 1, false, FitCode::kFits, {1}, {}},
    {"a310p_two_never_split_cards", "11: 310P Duo <=2 on one card", "ascend-310p-duo",
     {0, 2, 4, 6}, 2, false, FitCode::kUnschedulable, {}, Reason::kNoWholeModule},
    {"a310p_three_fills_the_half_used_card", "11: 310P odd remainder to a card with 1 free",
     "ascend-310p-duo", {7}, 3, false, FitCode::kFits, {0, 1, 6}, {}},
    // --- Ascend 310, Atlas 300I cards {0-3} {4-7} {8-11} {12-15}: <=4 on one card, card
    // order 1 -> 1,3,2,4; 2 -> 2,3,4 free; above 4 the cards with the fewest free first.
    {"a310_one_prefers_card_with_one_free", "11: 310 best-fit card by free count: 1, 3, 2, 4",
     "ascend-310-cards", {0, 1, 2, 4, 8, 9}, 1, false, FitCode::kFits, {3}, {}},
    {"a310_one_order_three_before_two", "11: 310 best-fit card by free count: 1, 3, 2, 4",
     "ascend-310-cards", {0, 1, 2, 3, 4, 8, 9}, 1, false, FitCode::kFits, {5}, {}},
    {"a310_two_order_2_3_4", "2.2: 310 card order for 2 is 2, 3, 4 free (card310x4)",
     "ascend-310-cards", {0, 1, 2, 3, 4, 12, 13, 14, 15}, 2, false, FitCode::kFits, {5, 6}, {}},
    {"a310_three_order_3_4", "2.2: 310 card order for 3 is 3, 4 free (card310x4)",
     "ascend-310-cards", {0, 4, 5}, 3, false, FitCode::kFits, {1, 2, 3}, {}},
    {"a310_four_takes_a_whole_card", "11: 310 <=4 on one card", "ascend-310-cards", {0, 5}, 4,
     false, FitCode::kFits, {8, 9, 10, 11}, {}},
    {"a310_four_never_spans_cards", "11: 310 <=4 on one card", "ascend-310-cards",
     {0, 4, 8, 12}, 4, false, FitCode::kUnschedulable, {}, Reason::kNoWholeModule},
    {"a310_six_fills_fewest_free_cards_first", "2.2: 310 above 4: cards by 1,2,3,4 free",
     "ascend-310-cards", {0, 1, 2, 4, 8, 9}, 6, false, FitCode::kFits, {3, 5, 6, 7, 10, 11}, {}},
    {"a310_five_leaves_a_whole_card", "2.2: 310 above 4: cards by 1,2,3,4 free (chip310x4)",
     "ascend-310-cards", {0, 5, 13}, 5, false, FitCode::kFits, {1, 2, 3, 4, 6}, {}},
    {"a310_seven_takes_the_last_card_in_part", "2.2: 310 above 4 fills card by card (chip310x4)",
     "ascend-310-cards", {0, 1, 2}, 7, false, FitCode::kFits, {3, 4, 5, 6, 7, 8, 9}, {}},
    {"a310_sixteen_whole_node", "2.2: 310 chip mode any count", "ascend-310-cards", {}, 16, false,
     FitCode::kFits, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {}},
    // --- Kunlunxin P800 wings.
    {"p800_two_in_one_wing", "11: P800 1,2,4 inside a wing (doc)", "kunlunxin-p800-x8",
     {0, 1, 4}, 2, false, FitCode::kFits, {2, 3}, {}},
    {"p800_two_leaves_a_whole_wing", "3: P800 wing order for 2 is 2,3,4 free (HAMi topo.go)",
     "kunlunxin-p800-x8", {0}, 2, false, FitCode::kFits, {1, 2}, {}},
    {"p800_one_order_1_3_2_4", "3: P800 wing order for 1 is 1,3,2,4 free (HAMi topo.go)",
     "kunlunxin-p800-x8", {0, 4, 5}, 1, false, FitCode::kFits, {1}, {}},
    {"p800_four_never_crosses_numa", "11: P800 docs forbid crossing NUMA", "kunlunxin-p800-x8",
     {0, 4}, 4, false, FitCode::kUnschedulable, {}, Reason::kNoTopologyGroup},
    {"p800_six_invalid", "11: P800 3,5,6,7 never allocated", "kunlunxin-p800-x8", {}, 6, false,
     FitCode::kUnresolvable, {}, Reason::kInvalidCount},
    // --- MetaX C500 link zones (preferred).
    {"c500_stays_in_zone", "11: C500 keep within one MetaXLink zone", "metax-c500-x8",
     {0, 4, 5}, 3, false, FitCode::kFits, {1, 2, 3}, {}},
    {"c500_crosses_zone_when_needed", "11: C500 zones are a preference", "metax-c500-x8",
     {0, 1, 4, 5}, 3, false, FitCode::kFits, {2, 3, 6}, {}},
    // --- Cambricon MLU370-X8 boards and ring counts.
    {"mlu370_keeps_board_together", "11: MLU370-X8 keep both chips of a board", "cambricon-mlu370-x8",
     {0, 2}, 2, false, FitCode::kFits, {4, 5}, {}},
    {"mlu370_three_invalid", "11: MLU ring policies 1,2,4,8", "cambricon-mlu370-x8", {}, 3, false,
     FitCode::kUnresolvable, {}, Reason::kInvalidCount},
    // --- NVIDIA HGX: any subset, prefer one NUMA half.
    {"hgx_four_in_one_numa_half", "11: HGX prefer one NUMA/PCIe root", "nvidia-hgx-8", {0}, 4,
     false, FitCode::kFits, {4, 5, 6, 7}, {}},
    {"hgx_any_subset_when_split", "11: HGX any subset", "nvidia-hgx-8", {0, 1, 4, 5}, 4, false,
     FitCode::kFits, {2, 3, 6, 7}, {}},
    {"hgx_numa_bind_refuses_split", "NUMA binding: all devices on one NUMA node", "nvidia-hgx-8",
     {0, 1, 4, 5}, 4, true, FitCode::kUnschedulable, {}, Reason::kNumaUnsatisfiable},
    // --- NVIDIA PCIe with NVLink bridge pairs.
    {"pcie_keeps_bridged_pair", "11: PCIe keep bridged pairs", "nvidia-pcie-8", {0, 3}, 2, false,
     FitCode::kFits, {4, 5}, {}},
    // --- T-Head PPU and Hygon: NUMA default.
    {"ppu_prefers_same_numa", "11: PPU prefer the same NUMA node", "thead-ppu-x16", {0, 4, 5}, 3,
     false, FitCode::kFits, {1, 2, 3}, {}},
    {"hygon_any_subset", "11: Hygon no rule (PCIe)", "hygon-k100-x8", {1}, 3, false,
     FitCode::kFits, {0, 2, 3}, {}},
    {"too_many_devices", "count larger than the node", "nvidia-hgx-8", {}, 9, false,
     FitCode::kUnresolvable, {}, Reason::kTooFewDevices},
};

INSTANTIATE_TEST_SUITE_P(Vendors, TopologyRules, ::testing::ValuesIn(kCases),
                         [](const auto& p) { return std::string(p.param.name); });

// Atlas 300I Duo nodes of any number of cards (cards {0, 1} {2, 3} ...):
// <= 2 on one card, 1 -> a card with 1 free, then 2 (MindCluster
// card310px2); more than 2 take whole cards in card order, an odd remainder
// the first card with 1 free, else the next free card in part (chip310px2,
// distributed=true).
struct DuoCase {
  const char* name;
  int32_t chips;
  std::vector<int32_t> busy;
  int32_t count;
  FitCode want_code;
  std::vector<int32_t> want_devices;
  Reason want_reason;
};

NodeInventory DuoNode(int32_t chips) {
  NodeInventory inv = MakeNode("ascend-310p-duo");
  const std::vector<Device> eight = inv.devices;
  inv.devices.clear();
  for (int32_t i = 0; i < chips; ++i) {
    Device d = eight[static_cast<size_t>(i) % eight.size()];
    d.id = "n1-" + std::to_string(i);
    d.index = i;
    inv.devices.push_back(std::move(d));
  }
  EXPECT_TRUE(ApplyProfile("ascend-310p-duo", &inv).ok()) << chips << " chips";
  return inv;
}

class DuoRules : public ::testing::TestWithParam<DuoCase> {};

TEST_P(DuoRules, Fit) {
  const DuoCase& c = GetParam();
  const NodeInventory inv = DuoNode(c.chips);
  ASSERT_TRUE(ValidateInventory(inv).ok()) << ValidateInventory(inv).ToString();
  ASSERT_EQ(inv.topology.modules.size(), static_cast<size_t>(c.chips / 2));
  const NodeUsage usage = Busy(inv, c.busy);
  const PodRequest pod = Pod({Whole(inv.vendor, c.count)});
  const FitResult r = Fit(pod, inv, usage);
  ASSERT_EQ(r.code, c.want_code) << (r.reasons.empty() ? "" : DescribeReason(r.reasons[0]));
  if (c.want_code == FitCode::kFits) {
    EXPECT_EQ(Devices(r), c.want_devices);
    EXPECT_TRUE(CheckPlacement(pod, inv, usage, r.placement).ok());
  } else {
    ASSERT_FALSE(r.reasons.empty());
    EXPECT_EQ(r.reasons[0].reason, c.want_reason) << DescribeReason(r.reasons[0]);
  }
}

const DuoCase kDuoCases[] = {
    // 16 chips, 8 cards.
    {"x16_one_first_half_used_card", 16, {5, 12}, 1, FitCode::kFits, {4}, {}},
    {"x16_two_takes_a_whole_card", 16, {0, 3}, 2, FitCode::kFits, {4, 5}, {}},
    {"x16_three_no_half_card_splits_the_next", 16, {}, 3, FitCode::kFits, {0, 1, 2}, {}},
    {"x16_five_half_card_then_whole_cards", 16, {3, 9}, 5, FitCode::kFits, {0, 1, 2, 4, 5}, {}},
    {"x16_six_three_whole_cards", 16, {3}, 6, FitCode::kFits, {0, 1, 4, 5, 6, 7}, {}},
    {"x16_three_half_card_and_last_card", 16, {0, 2, 4, 6, 8, 10, 12}, 3, FitCode::kFits,
     {1, 14, 15}, {}},
    {"x16_four_needs_two_whole_cards", 16, {0, 2, 4, 6, 8, 10, 12}, 4, FitCode::kUnschedulable,
     {}, Reason::kNoWholeModule},
    {"x16_five_needs_two_whole_cards", 16, {0, 2, 4, 6, 8, 10, 12}, 5, FitCode::kUnschedulable,
     {}, Reason::kNoWholeModule},
    {"x16_sixteen_whole_node", 16, {}, 16, FitCode::kFits,
     {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {}},
    // 12 chips, 6 cards.
    {"x12_seven_half_card_then_whole_cards", 12, {11}, 7, FitCode::kFits,
     {0, 1, 2, 3, 4, 5, 10}, {}},
    // 4 chips, 2 cards.
    {"x4_one_half_used_card", 4, {0}, 1, FitCode::kFits, {1}, {}},
    {"x4_two_whole_card", 4, {0}, 2, FitCode::kFits, {2, 3}, {}},
    {"x4_two_never_split_cards", 4, {0, 2}, 2, FitCode::kUnschedulable, {},
     Reason::kNoWholeModule},
    {"x4_three_fills_the_half_used_card", 4, {0}, 3, FitCode::kFits, {1, 2, 3}, {}},
    {"x4_three_on_a_free_node", 4, {}, 3, FitCode::kFits, {0, 1, 2}, {}},
    // 2 chips, 1 card.
    {"x2_two_one_card", 2, {}, 2, FitCode::kFits, {0, 1}, {}},
};

INSTANTIATE_TEST_SUITE_P(Ascend310PDuo, DuoRules, ::testing::ValuesIn(kDuoCases),
                         [](const auto& p) { return std::string(p.param.name); });

// Duo cards are of exactly 2 chips: one-chip cards (an Atlas 300I Pro) are
// refused and leave the inventory as it was.
TEST(Profiles, DuoCardsAreOfTwoChips) {
  NodeInventory inv = DuoNode(6);
  EXPECT_EQ(inv.topology.kind, "ascend-310p-duo");
  const std::vector<std::vector<int32_t>> cards = {{0, 3}, {1, 4}, {2, 5}};
  ASSERT_TRUE(ApplyProfile("ascend-310p-duo", &inv, cards).ok());
  EXPECT_EQ(inv.topology.modules, cards);
  const FitResult r = Fit(Pod({Whole(inv.vendor, 2)}), inv, Busy(inv, {0}));
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), (std::vector<int32_t>{1, 4}));
  NodeInventory pro = inv;
  EXPECT_EQ(ApplyProfile("ascend-310p-duo", &pro, {{0}, {1}, {2}, {3}, {4}, {5}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pro.topology.modules, cards);
  NodeInventory seven = DuoNode(8);
  seven.devices.pop_back();
  EXPECT_EQ(ApplyProfile("ascend-310p-duo", &seven).code(), StatusCode::kInvalidArgument);
}

TEST(PodTopologyRules, CheckPlacementKeepsDuoCardsWhole) {
  const NodeInventory inv = DuoNode(8);
  const NodeUsage usage = NodeUsage::Empty(inv);
  auto placed = [&](std::vector<int32_t> chips) {
    Placement p;
    p.containers.push_back({"main", ContainerKind::kRegular, {}});
    for (int32_t d : chips) p.containers[0].grants.push_back({d, 24576, kComputeWhole, true});
    return CheckPlacement(Pod({Whole(inv.vendor, static_cast<int32_t>(chips.size()))}), inv,
                          usage, p)
        .ok();
  };
  EXPECT_TRUE(placed({0, 1, 4, 5}));
  EXPECT_FALSE(placed({0, 1, 2, 4})) << "an even count takes whole cards";
  EXPECT_TRUE(placed({0, 1, 6}));
  EXPECT_FALSE(placed({0, 2, 4})) << "an odd count leaves one card in part";
}

// The rules count a pod's whole devices together (VENDORS.md 11: counts are
// per pod), however many containers ask for them.
struct PodCase {
  const char* name;
  const char* cite;
  const char* profile;
  std::vector<int32_t> busy;
  std::vector<int32_t> counts;  // one whole-device container each
  FitCode want_code;
  std::vector<std::vector<int32_t>> want_devices;  // per container, when fits
  Reason want_reason;
};

class PodTopologyRules : public ::testing::TestWithParam<PodCase> {};

TEST_P(PodTopologyRules, Fit) {
  const PodCase& c = GetParam();
  const NodeInventory inv = MakeNode(c.profile);
  const NodeUsage usage = Busy(inv, c.busy);
  std::vector<DeviceRequest> containers;
  for (size_t i = 0; i < c.counts.size(); ++i) {
    containers.push_back(Whole(inv.vendor, c.counts[i], "c" + std::to_string(i)));
  }
  const PodRequest pod = Pod(containers);
  const FitResult r = Fit(pod, inv, usage);
  ASSERT_EQ(r.code, c.want_code) << c.cite << "\n"
                                 << (r.reasons.empty() ? "" : DescribeReason(r.reasons[0]));
  if (c.want_code == FitCode::kFits) {
    for (size_t i = 0; i < c.want_devices.size(); ++i) {
      EXPECT_EQ(Devices(r, i), c.want_devices[i]) << c.cite << ", container " << i;
    }
    EXPECT_TRUE(CheckPlacement(pod, inv, usage, r.placement).ok()) << c.cite;
  } else {
    ASSERT_FALSE(r.reasons.empty());
    EXPECT_EQ(r.reasons[0].reason, c.want_reason)
        << c.cite << ": " << DescribeReason(r.reasons[0]);
  }
}

const PodCase kPodCases[] = {
    {"a910a_one_plus_one_share_a_ring",
     "11: 910A a pod of 2 inside one ring",
     "ascend-910a-x8",
     {0, 1, 2, 4, 5},
     {1, 1},
     FitCode::kFits,
     {{6}, {7}},
     {}},
    {"a910a_one_plus_one_never_span_rings",
     "11: 910A a pod of 2 inside one ring",
     "ascend-910a-x8",
     {0, 1, 2, 4, 5, 6},
     {1, 1},
     FitCode::kUnschedulable,
     {},
     Reason::kNoTopologyGroup},
    {"a910a_pod_of_three_invalid",
     "11: 910A per-pod counts 1,2,4,8",
     "ascend-910a-x8",
     {},
     {2, 1},
     FitCode::kUnresolvable,
     {},
     Reason::kInvalidCount},
    {"a910c_one_plus_one_take_a_module",
     "11: 910C an even pod takes whole modules",
     "ascend-910c-x16",
     {1, 3},
     {1, 1},
     FitCode::kFits,
     {{4}, {5}},
     {}},
    {"a910c_two_plus_two_take_two_modules",
     "11: 910C an even pod takes whole modules",
     "ascend-910c-x16",
     {1},
     {2, 2},
     FitCode::kFits,
     {{2, 3}, {4, 5}},
     {}},
    {"a910b16_eight_plus_two_not_mirrored",
     "11: Box16 a pod of 10 as pairs (i, i+8)",
     "ascend-910b-x16",
     {},
     {8, 2},
     FitCode::kUnschedulable,
     {},
     Reason::kNoTopologyGroup},
    {"a310p_one_plus_one_on_one_card",
     "11: 310P a pod of <=2 on one Duo card",
     "ascend-310p-duo",
     {0, 2},
     {1, 1},
     FitCode::kFits,
     {{4}, {5}},
     {}},
    {"a310_two_plus_two_on_one_card",
     "11: 310 a pod of <=4 on one card",
     "ascend-310-cards",
     {0},
     {2, 2},
     FitCode::kFits,
     {{4, 5}, {6, 7}},
     {}},
    {"p800_two_plus_two_in_one_wing",
     "11: P800 a pod of 4 inside one wing",
     "kunlunxin-p800-x8",
     {0},
     {2, 2},
     FitCode::kFits,
     {{4, 5}, {6, 7}},
     {}},
    // The pod's four dies are modules 2-3 and 4-5; handed out lowest first
    // the pair would get 3 and 4, across two modules. Another split of the
    // same dies keeps every part legal.
    {"a910c_one_two_one_split_by_modules",
     "11: 910C an even pod takes whole modules",
     "ascend-910c-x16",
     {1},
     {1, 2, 1},
     FitCode::kFits,
     {{4}, {2, 3}, {5}},
     {}},
};

INSTANTIATE_TEST_SUITE_P(Vendors, PodTopologyRules, ::testing::ValuesIn(kPodCases),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(PodTopologyRules, CheckPlacementCountsThePodsDevicesTogether) {
  const NodeInventory inv = MakeNode("ascend-910a-x8");
  const NodeUsage usage = NodeUsage::Empty(inv);
  const PodRequest pod = Pod({Whole(inv.vendor, 1, "a"), Whole(inv.vendor, 1, "b")});
  Placement p;
  p.containers.push_back({"a", ContainerKind::kRegular, {{3, 32768, kComputeWhole, true}}});
  p.containers.push_back({"b", ContainerKind::kRegular, {{4, 32768, kComputeWhole, true}}});
  EXPECT_FALSE(CheckPlacement(pod, inv, usage, p).ok()) << "chips 3 and 4 are in two rings";
  p.containers[1].grants[0].device = 2;
  EXPECT_TRUE(CheckPlacement(pod, inv, usage, p).ok());
}

TEST(PodTopologyRules, CheckPlacementKeepsFour310ChipsOnOneCard) {
  const NodeInventory inv = MakeNode("ascend-310-cards");
  const NodeUsage usage = NodeUsage::Empty(inv);
  const PodRequest pod = Pod({Whole(inv.vendor, 4)});
  Placement p;
  p.containers.push_back({"main", ContainerKind::kRegular, {}});
  for (int32_t d : {2, 3, 4, 5}) p.containers[0].grants.push_back({d, 8192, kComputeWhole, true});
  EXPECT_FALSE(CheckPlacement(pod, inv, usage, p).ok()) << "chips 2, 3 and 4, 5 are on two cards";
  for (int32_t i = 0; i < 4; ++i) p.containers[0].grants[static_cast<size_t>(i)].device = 4 + i;
  EXPECT_TRUE(CheckPlacement(pod, inv, usage, p).ok());
}

// Cards as the hardware reports them (DCMI card ids), not from the index.
TEST(Profiles, ModulesGivenByTheBackendAreTheCards) {
  NodeInventory inv = MakeNode("ascend-310-cards");
  inv.devices.resize(8);
  const std::vector<std::vector<int32_t>> cards = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  ASSERT_TRUE(ApplyProfile("ascend-310-cards", &inv, cards).ok());
  ASSERT_TRUE(ValidateInventory(inv).ok()) << ValidateInventory(inv).ToString();
  EXPECT_EQ(inv.topology.kind, "ascend-310-cards");
  EXPECT_EQ(inv.topology.modules, cards);
  EXPECT_EQ(inv.devices[3].module, 1);
  const NodeUsage usage = Busy(inv, {0});
  const PodRequest pod = Pod({Whole(inv.vendor, 4)});
  const FitResult r = Fit(pod, inv, usage);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), (std::vector<int32_t>{1, 3, 5, 7}));
  Placement p;
  p.containers.push_back({"main", ContainerKind::kRegular, {}});
  for (int32_t d : {4, 5, 6, 7}) p.containers[0].grants.push_back({d, 8192, kComputeWhole, true});
  EXPECT_FALSE(CheckPlacement(pod, inv, usage, p).ok()) << "chips 4-7 are on two cards";

  // Any number of cards; without the backend's cards, whole cards of 4.
  NodeInventory twelve = MakeNode("ascend-310-cards");
  twelve.devices.resize(12);
  ASSERT_TRUE(ApplyProfile("ascend-310-cards", &twelve).ok());
  EXPECT_EQ(twelve.topology.modules.size(), 3u);
  NodeInventory ten = MakeNode("ascend-310-cards");
  ten.devices.resize(10);
  EXPECT_EQ(ApplyProfile("ascend-310-cards", &ten).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ApplyProfile("ascend-310-cards", &ten, {{0, 1, 2, 3}, {4, 5, 6}, {7, 8, 9}}).ok());

  // Cards the profile does not allow are refused and leave the inventory as it was.
  struct Bad {
    const char* profile;
    std::vector<std::vector<int32_t>> modules;
  };
  const Bad bad[] = {
      {"ascend-310-cards", {{0, 1, 2, 3, 4}, {5, 6, 7}}},  // 5 chips on a card
      {"ascend-310-cards", {{0, 1, 2, 3}, {4, 5, 6}}},     // chip 7 on no card
      {"ascend-310-cards", {{0, 1, 2, 3}, {3, 4, 5, 6}}},  // chip 3 on two cards
      {"ascend-310-cards", {{0, 1, 2, 3}, {4, 5, 6, 8}}},  // no chip 8
  };
  for (const Bad& b : bad) {
    NodeInventory copy = inv;
    EXPECT_EQ(ApplyProfile(b.profile, &copy, b.modules).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(copy.topology.modules, inv.topology.modules);
    EXPECT_EQ(copy.devices[3].module, 1);
  }
  NodeInventory a3 = MakeNode("ascend-910c-x16");
  std::vector<std::vector<int32_t>> uneven = {{0, 1, 2}};
  for (int32_t d = 3; d < 16; d += 2) uneven.push_back({d, d + 1});
  uneven.back().pop_back();  // {15}
  EXPECT_EQ(ApplyProfile("ascend-910c-x16", &a3, uneven).code(), StatusCode::kInvalidArgument)
      << "910C modules are taken whole: all of 2 dies";
}

// An inventory the validation accepts but no profile builds (Duo cards of
// two chips beside single-chip cards, under the Duo rule): the planner's
// chosen set is checked, so Fit never grants fewer devices than asked or a
// set the rules refuse.
TEST(PodTopologyRules, UnevenCardsNeverGetAShortOrIllegalSet) {
  NodeInventory inv = MakeNode("ascend-310p-duo");
  inv.topology.modules = {{0, 1}, {2}, {3}, {4, 5}, {6, 7}};
  for (int32_t d = 0; d < 8; ++d) {
    inv.devices[static_cast<size_t>(d)].module = d < 2 ? 0 : d < 4 ? d - 1 : 3 + (d - 4) / 2;
  }
  ASSERT_TRUE(ValidateInventory(inv).ok());
  for (int32_t count = 1; count <= 8; ++count) {
    SCOPED_TRACE(count);
    const PodRequest pod = Pod({Whole(Vendor::kAscend, count)});
    const FitResult r = Fit(pod, inv, NodeUsage::Empty(inv));
    if (!r.fits()) continue;
    EXPECT_EQ(Devices(r).size(), static_cast<size_t>(count));
    EXPECT_TRUE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), r.placement).ok());
  }
}

}  // namespace
}  // namespace accelpool::core
