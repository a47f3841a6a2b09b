// Fractional sharing, vendor slice rounding, multi-container pods and the
// request filters (model, id, NUMA).
#include <gtest/gtest.h>

#include "core/fit.h"
#include "core/policy.h"
#include "core/test_util.h"

namespace accelpool::core {
namespace {

using testing::Devices;
using testing::MakeNode;
using testing::Pod;
using testing::Share;
using testing::Whole;

// Places `pod` and applies it to usage; fails the test when it does not fit.
Placement PlaceOrDie(const PodRequest& pod, const NodeInventory& inv, NodeUsage* usage) {
  FitResult r = Fit(pod, inv, *usage);
  EXPECT_TRUE(r.fits()) << (r.reasons.empty() ? "" : DescribeReason(r.reasons[0]));
  EXPECT_TRUE(ApplyPlacement(r.placement, inv, usage).ok());
  return r.placement;
}

TEST(FitShare, ManySmallPodsShareOneGpuThenMove) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  NodeUsage usage = NodeUsage::Empty(inv);
  // 1 GiB / 1% pods: binpack keeps them on one GPU until the split cap (10).
  for (int i = 0; i < 10; ++i) {
    const Placement p = PlaceOrDie(Pod({Share(Vendor::kNvidia, 1, 1024, 10)}), inv, &usage);
    EXPECT_EQ(p.containers[0].grants[0].device, 0) << "pod " << i;
  }
  const Placement eleventh = PlaceOrDie(Pod({Share(Vendor::kNvidia, 1, 1024, 10)}), inv, &usage);
  EXPECT_NE(eleventh.containers[0].grants[0].device, 0);
  EXPECT_EQ(usage.devices[0].shares, 10);
  EXPECT_EQ(usage.devices[0].memory_mib, 10 * 1024);
  EXPECT_EQ(usage.devices[0].compute, 100);
}

TEST(FitShare, ComputeAndMemoryNeverOvercommitted) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  NodeUsage usage = NodeUsage::Empty(inv);
  for (int i = 0; i < 4 * 8; ++i) {
    PlaceOrDie(Pod({Share(Vendor::kNvidia, 1, 4096, 250)}), inv, &usage);
  }
  for (const auto& u : usage.devices) EXPECT_EQ(u.compute, 1000);
  const FitResult r = Fit(Pod({Share(Vendor::kNvidia, 1, 4096, 250)}), inv, usage);
  EXPECT_EQ(r.code, FitCode::kUnschedulable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0].reason, Reason::kInsufficientCompute);
  // A whole-card request cannot take a shared card.
  const FitResult whole = Fit(Pod({Whole(Vendor::kNvidia, 1)}), inv, usage);
  EXPECT_EQ(whole.reasons[0].reason, Reason::kInsufficientDevices);
}

TEST(FitShare, ExclusiveCardIsNotShared) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  NodeUsage usage = NodeUsage::Empty(inv);
  DeviceRequest excl = Share(Vendor::kNvidia, 8, 1024, 0);
  excl.exclusive = true;
  PlaceOrDie(Pod({excl}), inv, &usage);
  const FitResult r = Fit(Pod({Share(Vendor::kNvidia, 1, 1024, 10)}), inv, usage);
  EXPECT_EQ(r.code, FitCode::kUnschedulable);
  EXPECT_EQ(r.reasons[0].reason, Reason::kExclusiveTaken);
}

TEST(FitShare, HundredPercentComputeIsExclusive) {
  DeviceRequest r = Share(Vendor::kNvidia, 1, 2048, kComputeWhole);
  EXPECT_FALSE(r.Fractional());
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  const FitResult f = Fit(Pod({r}), inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(f.fits());
  EXPECT_TRUE(f.placement.containers[0].grants[0].exclusive);
}

TEST(FitShare, MemoryPercentAndComputeOnlyDefaults) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  DeviceRequest pct = Share(Vendor::kNvidia, 1, 0, 0);
  pct.memory_percent = 25;
  // Rounded down, so that shares of 100/N percent fit N to a device.
  EXPECT_EQ(EffectiveMemory(pct, inv.devices[0], inv.topology.slices), 143771 * 25 / 100);
  EXPECT_EQ(EffectiveCompute(pct, inv.devices[0], inv.topology.slices), 0);
  // Compute only: memory in proportion, so every share carries a memory cap.
  const DeviceRequest cmp = Share(Vendor::kNvidia, 1, 0, 500);
  EXPECT_EQ(EffectiveMemory(cmp, inv.devices[0], inv.topology.slices), 143771 / 2);
}

TEST(FitShare, SharesOfAQuarterFitFourToADevice) {
  // An H200's 143771 MiB is not a multiple of 4: four 25% shares (by
  // percent of memory, or by compute only) must still share one GPU.
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  for (const bool by_percent : {true, false}) {
    SCOPED_TRACE(by_percent ? "gpumem-percentage: 25" : "gpucores: 25");
    NodeUsage usage = NodeUsage::Empty(inv);
    for (int i = 0; i < 4; ++i) {
      DeviceRequest r = Share(Vendor::kNvidia, 1, 0, by_percent ? 0 : 250);
      r.memory_percent = by_percent ? 25 : 0;
      r.id_include = {inv.devices[0].id};  // all four on GPU 0
      const FitResult res = Fit(Pod({r}), inv, usage);
      ASSERT_TRUE(res.fits()) << i;
      ASSERT_EQ(res.placement.containers[0].grants[0].device, 0) << i;
      ASSERT_TRUE(ApplyPlacement(res.placement, inv, &usage).ok());
    }
  }
}

TEST(FitShare, SixteenthsOfAMooreThreadsCardFitSixteenToACard) {
  // mthreads.com/sgpu-core: 1 is 1/16 of a card, 62 thousandths as the pod
  // request parser rounds it down (PodRequestTest.
  // MthreadsSgpuCoreSixteenthsFitOneCard); the S4000 profile gives each card
  // 16 share slots. With 512 MiB each (sgpu-memory: 1), all 16 land on one
  // card.
  const NodeInventory inv = MakeNode("mthreads-s4000-x8");
  ASSERT_EQ(inv.devices[0].max_shares, 16);
  for (const int32_t compute : {62, 63}) {
    SCOPED_TRACE(compute);
    NodeUsage usage = NodeUsage::Empty(inv);
    int landed = 0;
    for (int i = 0; i < 16; ++i) {
      DeviceRequest r = Share(Vendor::kMthreads, 1, 512, compute);
      r.id_include = {inv.devices[0].id};
      const FitResult res = Fit(Pod({r}), inv, usage);
      if (!res.fits()) break;
      ASSERT_EQ(res.placement.containers[0].grants[0].device, 0) << i;
      ASSERT_TRUE(ApplyPlacement(res.placement, inv, &usage).ok());
      ++landed;
    }
    // Rounded up, 16 x 63 = 1008 thousandths: the 16th does not fit.
    EXPECT_EQ(landed, compute == 62 ? 16 : 15);
  }
}

TEST(FitShare, MemoryLargerThanAnyDeviceIsUnresolvable) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  const FitResult r = Fit(Pod({Share(Vendor::kNvidia, 1, 200000, 10)}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  EXPECT_EQ(r.reasons[0].reason, Reason::kMemoryTooLarge);
  EXPECT_NE(DescribeReason(r.reasons[0]).find("200000"), std::string::npos);
}

// Past the largest vNPU template and past the chip itself: refused, not
// served as the whole chip (a mixed cluster's webhook check goes by its
// largest device, so such a pod reaches smaller chips' nodes).
TEST(FitShare, AShareLargerThanTheChipIsNotRoundedDownToIt) {
  const NodeInventory inv = MakeNode("ascend-910b-x16");
  ASSERT_LT(inv.devices[0].memory_mib, 40000);
  const FitResult r = Fit(Pod({Share(Vendor::kAscend, 1, 40000, 0)}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0].reason, Reason::kMemoryTooLarge);
}

TEST(FitShare, MemoryTooLargeNamesTheMemoryAfterRounding) {
  // 100% of a 49000 MiB card rounds up to 49152 in 512 MiB steps: more
  // than the card; the reason gives the rounded memory, not 0.
  NodeInventory inv = MakeNode("mthreads-s4000-x8");
  for (auto& d : inv.devices) d.memory_mib = 49000;
  DeviceRequest all = Whole(Vendor::kMthreads, 1);
  all.memory_percent = 100;
  const FitResult r = Fit(Pod({all}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0], (FitReason{Reason::kMemoryTooLarge, 49152, 49000}));
}

struct SliceCase {
  const char* name;
  const char* cite;
  const char* profile;
  int64_t request_mib;
  int64_t want_mib;  // after rounding
  int32_t want_compute;
};

class SliceRounding : public ::testing::TestWithParam<SliceCase> {};

TEST_P(SliceRounding, RoundsAsTheVendorDoes) {
  const SliceCase& c = GetParam();
  const NodeInventory inv = MakeNode(c.profile);
  const DeviceRequest r = Share(inv.vendor, 1, c.request_mib, 0);
  EXPECT_EQ(EffectiveMemory(r, inv.devices[0], inv.topology.slices), c.want_mib) << c.cite;
  if (c.want_compute >= 0) {
    EXPECT_EQ(EffectiveCompute(r, inv.devices[0], inv.topology.slices), c.want_compute) << c.cite;
  }
}

const SliceCase kSlices[] = {
    {"kunlun_quarter", "3: vXPU <=24576 -> 1/4 card", "kunlunxin-p800-x8", 1000, 24576, 250},
    {"kunlun_half", "3: vXPU <=49152 -> 1/2 card", "kunlunxin-p800-x8", 30000, 49152, 500},
    {"kunlun_whole", "3: vXPU above half -> whole card", "kunlunxin-p800-x8", 60000, 98304, 1000},
    {"mthreads_512_steps", "5: sgpu-memory in 512 MiB units", "mthreads-s4000-x8", 1000, 1024, -1},
    {"mthreads_exact_step", "5: sgpu-memory in 512 MiB units", "mthreads-s4000-x8", 2048, 2048, -1},
    {"ascend_910b_template_16g", "2.3: vNPU rounds up to the smallest template", "ascend-910b-x8",
     9000, 16384, -1},
    {"ascend_910b_template_32g", "2.3: vNPU 910B3 vir10_3c_32g", "ascend-910b-x8", 20000, 32768,
     -1},
    {"ascend_910a_vir04", "2.3: 910A vir04 4369 MiB", "ascend-910a-x8", 3000, 4369, -1},
    {"ascend_910b_past_the_chip", "2.3: no template holds more than the chip (refused in Fit)",
     "ascend-910b-x16", 40000, 40000, -1},
    {"cambricon_256_steps", "7: vmemory in 256 MiB units", "cambricon-mlu370-x8", 300, 512, -1},
};

INSTANTIATE_TEST_SUITE_P(Vendors, SliceRounding, ::testing::ValuesIn(kSlices),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(FitShare, KunlunxinOneSliceSizePerDevice) {
  const NodeInventory inv = MakeNode("kunlunxin-p800-x8");
  NodeUsage usage = NodeUsage::Empty(inv);
  const Placement quarter = PlaceOrDie(Pod({Share(Vendor::kKunlunxin, 1, 20000, 0)}), inv, &usage);
  const int32_t d = quarter.containers[0].grants[0].device;
  // A half slice never lands on a device hosting quarters (3: FitVXPU).
  const Placement half = PlaceOrDie(Pod({Share(Vendor::kKunlunxin, 1, 40000, 0)}), inv, &usage);
  EXPECT_NE(half.containers[0].grants[0].device, d);
  // More quarters pack beside the first one.
  const Placement q2 = PlaceOrDie(Pod({Share(Vendor::kKunlunxin, 1, 20000, 0)}), inv, &usage);
  EXPECT_EQ(q2.containers[0].grants[0].device, d);
}

// The refusal names the slice size the request needs on the devices that
// refused it, also when device 0 is not one of them (excluded by id here).
TEST(FitShare, SliceSizeMismatchNamesTheSizeAskedOfARefusingDevice) {
  const NodeInventory inv = MakeNode("kunlunxin-p800-x8");
  NodeUsage usage = NodeUsage::Empty(inv);
  for (size_t d = 1; d < inv.devices.size(); ++d) {
    DeviceRequest half = Share(Vendor::kKunlunxin, 1, 40000, 0);
    half.id_include = {inv.devices[d].id};
    PlaceOrDie(Pod({half}), inv, &usage);
  }
  DeviceRequest quarter = Share(Vendor::kKunlunxin, 1, 20000, 0);
  quarter.id_exclude = {inv.devices[0].id};
  const FitResult r = Fit(Pod({quarter}), inv, usage);
  ASSERT_FALSE(r.fits());
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0].reason, Reason::kSliceSizeMismatch);
  EXPECT_EQ(r.reasons[0].requested, 24576);  // the quarter slice
  EXPECT_NE(DescribeReason(r.reasons[0]).find("need 24576 MiB"), std::string::npos)
      << DescribeReason(r.reasons[0]);
}

TEST(FitShare, KunlunxinHandleBudget) {
  // 3: physical devices + slices <= 32: 8 devices leave room for 24 slices.
  const NodeInventory inv = MakeNode("kunlunxin-p800-x8");
  NodeUsage usage = NodeUsage::Empty(inv);
  int placed = 0;
  for (int i = 0; i < 40; ++i) {
    const FitResult r = Fit(Pod({Share(Vendor::kKunlunxin, 1, 20000, 0)}), inv, usage);
    if (!r.fits()) {
      EXPECT_EQ(r.reasons[0].reason, Reason::kHandleBudget);
      break;
    }
    ASSERT_TRUE(ApplyPlacement(r.placement, inv, &usage).ok());
    ++placed;
  }
  EXPECT_EQ(placed, 24);
}

// A slice whose compute follows its memory must hold the compute asked for
// too: 40 % of the cores with little memory is the half slice / the 50 %
// template, never a quarter that would give 25 %.
TEST(FitShare, ComputeFollowingSlicesAreLargeEnoughForTheComputeAsked) {
  struct Case {
    const char* profile;
    Vendor vendor;
    int64_t memory;
    int32_t compute;
    int64_t want_mib;
    int32_t want_compute;
  };
  const Case cases[] = {
      {"kunlunxin-p800-x8", Vendor::kKunlunxin, 1000, 400, 49152, 500},
      {"kunlunxin-p800-x8", Vendor::kKunlunxin, 1000, 200, 24576, 250},
      {"kunlunxin-p800-x8", Vendor::kKunlunxin, 1000, 0, 24576, 250},
      {"ascend-910b-x8", Vendor::kAscend, 4096, 400, 32768, 500},
      {"ascend-910b-x8", Vendor::kAscend, 4096, 0, 16384, 250},
      {"ascend-310p-duo", Vendor::kAscend, 0, 300, 12288, 500},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.profile) + " " + std::to_string(c.memory) + " MiB " +
                 std::to_string(c.compute));
    NodeInventory inv = MakeNode(c.profile);
    for (Device& d : inv.devices) d.max_shares = std::max(d.max_shares, 4);  // vNPU slots
    NodeUsage usage = NodeUsage::Empty(inv);
    const Placement p = PlaceOrDie(Pod({Share(c.vendor, 1, c.memory, c.compute)}), inv, &usage);
    EXPECT_EQ(p.containers[0].grants[0].memory_mib, c.want_mib);
    EXPECT_EQ(p.containers[0].grants[0].compute, c.want_compute);
  }
}

// Ascend vNPU: templates pack onto one chip until its memory (and so its
// cores) is spent; a fifth quarter goes to another chip.
TEST(FitShare, AscendTemplatesFillAChipBeforeTheNext) {
  NodeInventory inv = MakeNode("ascend-910b-x8");
  for (Device& d : inv.devices) d.max_shares = 4;
  NodeUsage usage = NodeUsage::Empty(inv);
  const Placement half = PlaceOrDie(Pod({Share(Vendor::kAscend, 1, 20000, 0)}), inv, &usage);
  const int32_t chip = half.containers[0].grants[0].device;
  for (int i = 0; i < 2; ++i) {
    const Placement q = PlaceOrDie(Pod({Share(Vendor::kAscend, 1, 16384, 0)}), inv, &usage);
    EXPECT_EQ(q.containers[0].grants[0].device, chip);
  }
  const Placement next = PlaceOrDie(Pod({Share(Vendor::kAscend, 1, 16384, 0)}), inv, &usage);
  EXPECT_NE(next.containers[0].grants[0].device, chip);
  const FitResult two = Fit(Pod({Share(Vendor::kAscend, 2, 16384, 0)}), inv, usage);
  EXPECT_EQ(two.code, FitCode::kUnresolvable);
}

// The smallest 910A template (vir02, 2184 MiB, 2 of 30 cores) fifteen times
// fills a 32768 MiB chip: its compute, rounded down, adds up to no more than
// the chip (rounded up, 15 x 67 thousandths, the 15th was refused).
TEST(FitShare, FifteenOfTheSmallest910ATemplatesFillOneChip) {
  NodeInventory inv = MakeNode("ascend-910a-x8");
  for (Device& d : inv.devices) d.max_shares = 15;
  NodeUsage usage = testing::Busy(inv, {1, 2, 3, 4, 5, 6, 7});
  for (int i = 0; i < 15; ++i) {
    SCOPED_TRACE(i);
    const Placement p = PlaceOrDie(Pod({Share(Vendor::kAscend, 1, 2000, 0)}), inv, &usage);
    EXPECT_EQ(p.containers[0].grants[0].device, 0);
    EXPECT_EQ(p.containers[0].grants[0].memory_mib, 2184);
    EXPECT_GE(p.containers[0].grants[0].compute * 32768, 2184 * 1000 - 32768);
  }
  EXPECT_NE(Fit(Pod({Share(Vendor::kAscend, 1, 2000, 0)}), inv, usage).code, FitCode::kFits);
}

// A share of a one-slot chip holds all of it. Where chips with share slots
// (Ascend vNPU) sit beside one-slot chips, every policy puts the share on a
// chip with slots to spare, on the node and across nodes.
TEST(FitShare, SharesPreferChipsWithSlotsOverOneSlotChips) {
  NodeInventory mixed = MakeNode("ascend-910b-x8", "mixed");
  for (size_t i = 0; i < mixed.devices.size(); ++i) mixed.devices[i].max_shares = i >= 6 ? 4 : 1;
  NodeInventory one_slot = MakeNode("ascend-910b-x8", "one-slot");
  for (Device& d : one_slot.devices) d.max_shares = 1;
  NodeInventory slots = MakeNode("ascend-910b-x8", "slots");
  for (Device& d : slots.devices) d.max_shares = 4;
  const PodRequest pod = Pod({Share(Vendor::kAscend, 1, 16384, 0)});
  for (const std::string& name : PolicyNames()) {
    SCOPED_TRACE(name);
    StatusOr<PolicyPtr> policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    const FitResult on_mixed = Fit(pod, mixed, NodeUsage::Empty(mixed), policy->get());
    ASSERT_EQ(on_mixed.code, FitCode::kFits);
    EXPECT_GE(Devices(on_mixed)[0], 6);
    const FitResult a = Fit(pod, one_slot, NodeUsage::Empty(one_slot), policy->get());
    const FitResult b = Fit(pod, slots, NodeUsage::Empty(slots), policy->get());
    ASSERT_EQ(a.code, FitCode::kFits);
    ASSERT_EQ(b.code, FitCode::kFits);
    if (name == "spread") continue;
    EXPECT_GT((*policy)->NodeScore(slots, NodeUsage::Empty(slots), b.placement),
              (*policy)->NodeScore(one_slot, NodeUsage::Empty(one_slot), a.placement));
  }
  // Taking the last slot of a chip already shared ends its packing: binpack
  // and the fragmentation-aware policies still fill it before opening a chip.
  for (const std::string& name : {std::string("binpack"), std::string("accelpool")}) {
    SCOPED_TRACE(name);
    StatusOr<PolicyPtr> policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok());
    NodeUsage usage = NodeUsage::Empty(slots);
    int32_t chip = -1;
    for (int i = 0; i < 4; ++i) {
      const FitResult r = Fit(pod, slots, usage, policy->get());
      ASSERT_EQ(r.code, FitCode::kFits);
      if (chip < 0) chip = Devices(r)[0];
      EXPECT_EQ(Devices(r)[0], chip) << "share " << i;
      ASSERT_TRUE(ApplyPlacement(r.placement, slots, &usage).ok());
    }
  }
}

TEST(FitShare, SingleDeviceFractionVendorsRejectCountAboveOne) {
  const NodeInventory inv = MakeNode("mthreads-s4000-x8");
  const FitResult r = Fit(Pod({Share(Vendor::kMthreads, 2, 1024, 0)}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  EXPECT_EQ(r.reasons[0].reason, Reason::kInvalidCount);
  EXPECT_NE(DescribeReason(r.reasons[0]).find("a share takes one device"), std::string::npos)
      << DescribeReason(r.reasons[0]);
}

TEST(FitFilters, ModelIncludeExcludeAndIds) {
  NodeInventory inv = MakeNode("nvidia-hgx-8");
  for (int i = 4; i < 8; ++i) inv.devices[static_cast<size_t>(i)].model = "NVIDIA A100-SXM4-80GB";
  DeviceRequest want_a100 = Whole(Vendor::kNvidia, 2);
  want_a100.model_include = {"a100"};
  FitResult r = Fit(Pod({want_a100}), inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  for (int32_t d : Devices(r)) EXPECT_GE(d, 4);
  DeviceRequest no_h200 = Whole(Vendor::kNvidia, 1);
  no_h200.model_exclude = {"H200", "A100"};
  r = Fit(Pod({no_h200}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  EXPECT_EQ(r.reasons[0].reason, Reason::kModelMismatch);
  // One matching device for a count of 2 is the model's fault, not the ids'
  // (no ids were given).
  DeviceRequest two_h100 = Whole(Vendor::kNvidia, 2);
  inv.devices[3].model = "NVIDIA H100 80GB HBM3";
  two_h100.model_include = {"h100"};
  r = Fit(Pod({two_h100}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0], (FitReason{Reason::kModelMismatch, 2, 1}));
  EXPECT_NE(DescribeReason(r.reasons[0]).find("allowed model"), std::string::npos);
  DeviceRequest by_id = Whole(Vendor::kNvidia, 1);
  by_id.id_include = {inv.devices[6].id};
  r = Fit(Pod({by_id}), inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{6});
  DeviceRequest not_ids = Whole(Vendor::kNvidia, 8);
  not_ids.id_exclude = {inv.devices[0].id};
  r = Fit(Pod({not_ids}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.reasons[0].reason, Reason::kIdMismatch);
}

TEST(FitFilters, UnhealthyDevicesAreSkippedAndComeBack) {
  NodeInventory inv = MakeNode("nvidia-hgx-8");
  for (auto& d : inv.devices) d.healthy = false;
  FitResult r = Fit(Pod({Whole(Vendor::kNvidia, 1)}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.code, FitCode::kUnschedulable);
  EXPECT_EQ(r.reasons[0].reason, Reason::kUnhealthy);
  inv.devices[3].healthy = true;
  r = Fit(Pod({Whole(Vendor::kNvidia, 1)}), inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{3});
}

TEST(FitFilters, CordonedDevicesAreSkippedUntilTheOperatorReturnsThem) {
  NodeInventory inv = MakeNode("nvidia-hgx-8");
  for (auto& d : inv.devices) d.cordoned = d.index != 5;
  FitResult r = Fit(Pod({Whole(Vendor::kNvidia, 2)}), inv, NodeUsage::Empty(inv));
  // No pod leaving brings a cordoned device back: not a case for preemption.
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0], (FitReason{Reason::kCordoned, 2, 1}));
  EXPECT_NE(DescribeReason(r.reasons[0]).find("cordoned"), std::string::npos);
  r = Fit(Pod({Whole(Vendor::kNvidia, 1)}), inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{5});
  // The one device in service turns unhealthy: none is left to place on.
  inv.devices[5].healthy = false;
  r = Fit(Pod({Whole(Vendor::kNvidia, 1)}), inv, NodeUsage::Empty(inv));
  EXPECT_EQ(r.reasons[0], (FitReason{Reason::kCordoned, 1, 0}));
  inv.devices[5].healthy = true;
  for (auto& d : inv.devices) d.cordoned = false;
  EXPECT_TRUE(Fit(Pod({Whole(Vendor::kNvidia, 8)}), inv, NodeUsage::Empty(inv)).fits());
}

TEST(FitFilters, ForeignMemoryKeepsWholeRequestsOffAndSharesInTheRest) {
  NodeInventory inv = MakeNode("nvidia-hgx-8");
  const int64_t mem = inv.devices[0].memory_mib;
  for (auto& d : inv.devices) d.foreign_mib = d.index == 6 ? 0 : 20480;
  NodeUsage usage = NodeUsage::Empty(inv);
  // A whole GPU: only the one without foreign memory.
  FitResult r = Fit(Pod({Whole(Vendor::kNvidia, 1)}), inv, usage);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{6});
  // Two whole GPUs: refused for now, saying why and how many are affected;
  // a pod leaving cannot help but the memory being freed can.
  r = Fit(Pod({Whole(Vendor::kNvidia, 2)}), inv, usage);
  EXPECT_EQ(r.code, FitCode::kUnschedulable);
  ASSERT_FALSE(r.reasons.empty());
  bool named = false;
  for (const FitReason& why : r.reasons) {
    if (why.reason == Reason::kForeignMemory) {
      named = true;
      EXPECT_EQ(why.available, 7);
      EXPECT_NE(DescribeReason(why).find("no grant accounts for"), std::string::npos);
      // Names the Node Event the device plugin records (its reason, as kubectl shows it).
      EXPECT_NE(DescribeReason(why).find("the node's AccelpoolForeignMemory events"),
                std::string::npos);
    }
  }
  EXPECT_TRUE(named);
  // Shares fit in what is left beside the foreign memory, and not beyond it.
  inv.devices[6].foreign_mib = 20480;
  EXPECT_TRUE(Fit(Pod({Share(Vendor::kNvidia, 1, mem - 20480, 500)}), inv, usage).fits());
  r = Fit(Pod({Share(Vendor::kNvidia, 1, mem - 20479, 500)}), inv, usage);
  EXPECT_FALSE(r.fits());
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0].reason, Reason::kInsufficientMemory);
  EXPECT_EQ(r.reasons[0].available, mem - 20480);
  // Freed again: whole requests fit every GPU.
  for (auto& d : inv.devices) d.foreign_mib = 0;
  EXPECT_TRUE(Fit(Pod({Whole(Vendor::kNvidia, 8)}), inv, usage).fits());
}

// A node with two whole GPUs and one GPU split into MIG instances
// (3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb): a MIG request lands only on an
// instance of its profile, every other request only on whole GPUs.
NodeInventory MigNode() {
  NodeInventory inv;
  inv.node = "mig-node";
  inv.vendor = Vendor::kNvidia;
  const std::vector<std::pair<std::string, int64_t>> devs = {
      {"", 143771},       {"", 143771},       {"3g.71gb", 71424},
      {"2g.35gb", 33280}, {"1g.18gb", 16384}, {"1g.18gb", 16384}};
  for (size_t i = 0; i < devs.size(); ++i) {
    Device d;
    d.index = static_cast<int32_t>(i);
    d.vendor = Vendor::kNvidia;
    d.id = (devs[i].first.empty() ? "GPU-" : "MIG-") + std::to_string(i);
    d.model = "H200";
    d.partition = devs[i].first;
    d.memory_mib = devs[i].second;
    d.max_shares = devs[i].first.empty() ? 10 : 1;
    d.numa = 0;
    inv.devices.push_back(d);
  }
  ApplyNumaDefault(&inv);
  return inv;
}

DeviceRequest Mig(const std::string& profile, int32_t count, std::string name = "main") {
  DeviceRequest r = Whole(Vendor::kNvidia, count, std::move(name));
  r.partition = profile;
  return r;
}

TEST(FitPartitions, MigRequestsLandOnlyOnTheirProfile) {
  const NodeInventory inv = MigNode();
  NodeUsage usage = NodeUsage::Empty(inv);
  FitResult r = Fit(Pod({Mig("1g.18gb", 2)}), inv, usage);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(r.placement.containers[0].grants[0].exclusive);
  EXPECT_EQ(r.placement.containers[0].grants[0].memory_mib, 16384);
  r = Fit(Pod({Mig("3g.71gb", 1)}), inv, usage);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{2});
  // Only one 3g.71gb instance: two never fit, whatever leaves.
  r = Fit(Pod({Mig("3g.71gb", 2)}), inv, usage);
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0], (FitReason{Reason::kPartitionMismatch, 2, 1}));
  EXPECT_NE(DescribeReason(r.reasons[0]).find("nvidia.com/mig-<profile>"), std::string::npos);
  EXPECT_EQ(Fit(Pod({Mig("7g.141gb", 1)}), inv, usage).reasons[0].reason,
            Reason::kPartitionMismatch);

  // Whole-GPU and shared requests never take a MIG instance.
  r = Fit(Pod({Whole(Vendor::kNvidia, 2)}), inv, usage);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(Fit(Pod({Whole(Vendor::kNvidia, 3)}), inv, usage).reasons[0],
            (FitReason{Reason::kPartitionMismatch, 3, 2}));
  usage = testing::Busy(inv, {0, 1});
  EXPECT_EQ(Fit(Pod({Share(Vendor::kNvidia, 1, 1024, 100)}), inv, usage).code,
            FitCode::kUnschedulable);
  EXPECT_TRUE(Fit(Pod({Mig("1g.18gb", 1)}), inv, usage).fits());

  // An instance is held whole: the second 1g.18gb pod takes the other one,
  // a third waits.
  usage = NodeUsage::Empty(inv);
  PlaceOrDie(Pod({Mig("1g.18gb", 1)}), inv, &usage);
  r = Fit(Pod({Mig("1g.18gb", 1)}), inv, usage);
  ASSERT_TRUE(r.fits());
  ASSERT_TRUE(ApplyPlacement(r.placement, inv, &usage).ok());
  EXPECT_EQ(Fit(Pod({Mig("1g.18gb", 1)}), inv, usage).code, FitCode::kUnschedulable);
}

// NVIDIA's 1g.18gb+me (advertised as nvidia.com/mig-1g.18gb.me) has the
// slices and memory of 1g.18gb but the media engines too: a profile of its
// own, never handed to a plain 1g.18gb request, nor a plain one to it.
TEST(FitPartitions, AMediaExtensionInstanceIsItsOwnProfile) {
  NodeInventory inv = MigNode();
  inv.devices[5].partition = "1g.18gb.me";
  const NodeUsage empty = NodeUsage::Empty(inv);
  FitResult r = Fit(Pod({Mig("1g.18gb.me", 1)}), inv, empty);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{5});
  r = Fit(Pod({Mig("1g.18gb", 1)}), inv, empty);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(Devices(r), std::vector<int32_t>{4});
  r = Fit(Pod({Mig("1g.18gb", 2)}), inv, empty);
  EXPECT_EQ(r.code, FitCode::kUnresolvable);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_EQ(r.reasons[0], (FitReason{Reason::kPartitionMismatch, 2, 1}));
  EXPECT_EQ(Fit(Pod({Mig("1g.18gb.me", 1)}), inv, testing::Busy(inv, {5})).code,
            FitCode::kUnschedulable);
  Placement on_me;
  on_me.containers.push_back({"main", ContainerKind::kRegular, {{5, 16384, kComputeWhole, true}}});
  EXPECT_EQ(CheckPlacement(Pod({Mig("1g.18gb", 1)}), inv, empty, on_me).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckPlacement(Pod({Mig("1g.18gb.me", 1)}), inv, empty, on_me).ok());
}

TEST(FitPartitions, ForgedPlacementsAcrossPartitionsAreRefused) {
  const NodeInventory inv = MigNode();
  const PodRequest whole = Pod({Whole(Vendor::kNvidia, 1)});
  Placement on_mig;
  on_mig.containers.push_back({"main", ContainerKind::kRegular, {{4, 16384, kComputeWhole, true}}});
  EXPECT_EQ(CheckPlacement(whole, inv, NodeUsage::Empty(inv), on_mig).code(),
            StatusCode::kFailedPrecondition);
  const PodRequest mig = Pod({Mig("1g.18gb", 1)});
  EXPECT_TRUE(CheckPlacement(mig, inv, NodeUsage::Empty(inv), on_mig).ok());
  Placement wrong_profile = on_mig;
  wrong_profile.containers[0].grants[0] = {3, 33280, kComputeWhole, true};
  EXPECT_EQ(CheckPlacement(mig, inv, NodeUsage::Empty(inv), wrong_profile).code(),
            StatusCode::kFailedPrecondition);
}

TEST(FitPartitions, AMigRequestIsWholeAndItsProfileIsChecked) {
  DeviceRequest r = Mig("1g.18gb", 1);
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.memory_mib = 4096;
  Status st = ValidateRequest(r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("granted whole"), std::string::npos) << st.message();
  for (const char* good : {"1g.18gb", "1c.3g.71gb", "7g.141gb", "4g.24gb", "1g.1gb", "1g.18gb.me",
                           "1g.24gb-me", "1g.24gb.me.all", "2g.48gb.gfx", "1c.2g.48gb-me"}) {
    EXPECT_TRUE(ValidMigProfile(good)) << good;
  }
  for (const char* bad : {"",
                          "1g",
                          "g.18gb",
                          "0g.18gb",
                          "1g.0gb",
                          "1g.18",
                          "1g.18gb+",
                          "1g.18gb+Me",
                          "1g.18gb+me",
                          "1g.18gb+me.",
                          "1g.18gb.",
                          "1g.18gb.Me",
                          "1g.18gb..me",
                          "1g.18gb-",
                          "1g.18gb.me1",
                          "1g.18gb.a.b.c.d",
                          "1g.18gb.abcdefghi",
                          "1c.1c.1g.5gb",
                          "1g.18gb ",
                          "123g.1gb",
                          "1g.18gb/x",
                          "1g.12345gb"}) {
    EXPECT_FALSE(ValidMigProfile(bad)) << bad;
  }
}

TEST(FitPods, MultiContainerPodsGetDistinctWholeDevices) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  const PodRequest pod = Pod({Whole(Vendor::kNvidia, 2, "a"), Whole(Vendor::kNvidia, 2, "b")});
  const FitResult r = Fit(pod, inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(r.placement.containers.size(), 2u);
  std::vector<int32_t> all = Devices(r, 0);
  for (int32_t d : Devices(r, 1)) {
    EXPECT_EQ(std::count(all.begin(), all.end(), d), 0);
  }
  EXPECT_TRUE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), r.placement).ok());
}

TEST(FitPods, InitContainerDevicesAreReusedByRegularContainers) {
  // kubelet runs init containers one at a time before the app containers;
  // the footprint is the max over phases, not the sum.
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  DeviceRequest init = Whole(Vendor::kNvidia, 8, "warmup");
  init.kind = ContainerKind::kInit;
  const PodRequest pod = Pod({init, Whole(Vendor::kNvidia, 8, "main")});
  const FitResult r = Fit(pod, inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  NodeUsage usage = NodeUsage::Empty(inv);
  ASSERT_TRUE(ApplyPlacement(r.placement, inv, &usage).ok());
  for (const auto& u : usage.devices) EXPECT_EQ(u.shares, 1);
  ASSERT_TRUE(ReleasePlacement(r.placement, inv, &usage).ok());
  EXPECT_EQ(usage, NodeUsage::Empty(inv));
}

TEST(FitPods, SidecarRunsBesideInitAndRegular) {
  // A sidecar (restartable init) holds its share through every later phase.
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  DeviceRequest sidecar = Whole(Vendor::kNvidia, 4, "proxy");
  sidecar.kind = ContainerKind::kSidecar;
  DeviceRequest init = Whole(Vendor::kNvidia, 4, "setup");
  init.kind = ContainerKind::kInit;
  const PodRequest ok_pod = Pod({sidecar, init, Whole(Vendor::kNvidia, 4, "main")});
  EXPECT_TRUE(Fit(ok_pod, inv, NodeUsage::Empty(inv)).fits());
  const PodRequest too_big = Pod({sidecar, init, Whole(Vendor::kNvidia, 5, "main")});
  EXPECT_FALSE(Fit(too_big, inv, NodeUsage::Empty(inv)).fits());
}

// The phases are counted in the placement's order: one rebuilt in another
// order than the pod's (an init container listed before the sidecar that
// runs beside it) would be counted without the sidecar's share.
TEST(FitPods, CheckPlacementRefusesContainersOutOfThePodsOrder) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  DeviceRequest sidecar = Share(Vendor::kNvidia, 1, 4096, 600, "proxy");
  sidecar.kind = ContainerKind::kSidecar;
  DeviceRequest init = Share(Vendor::kNvidia, 1, 4096, 600, "setup");
  init.kind = ContainerKind::kInit;
  const PodRequest pod = Pod({sidecar, init});
  const FitResult r = Fit(pod, inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(r.placement.containers.size(), 2u);
  EXPECT_TRUE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), r.placement).ok());
  // Both on one GPU: 120% while setup runs beside proxy; refused in the pod's order.
  Placement same = r.placement;
  same.containers[1].grants[0].device = same.containers[0].grants[0].device;
  EXPECT_EQ(CheckPlacement(pod, inv, NodeUsage::Empty(inv), same).code(),
            StatusCode::kFailedPrecondition);
  Placement reordered = same;
  std::swap(reordered.containers[0], reordered.containers[1]);
  const Status st = CheckPlacement(pod, inv, NodeUsage::Empty(inv), reordered);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("against the pod's order"), std::string::npos) << st.message();
}

TEST(FitPods, KunlunxinInitSliceKeepsTheDeviceToOneSize) {
  // A device hosts slices of one size (VENDORS.md 3), across a pod's phases
  // too: the footprint keeps the steady size, so an init container of
  // another size goes elsewhere and a later pod of its size never joins the
  // regular container's slice.
  const NodeInventory inv = MakeNode("kunlunxin-p800-x8");
  for (const bool init_larger : {true, false}) {
    const int64_t init_mib = init_larger ? 40000 : 20000;
    const int64_t main_mib = init_larger ? 20000 : 40000;
    DeviceRequest init = Share(Vendor::kKunlunxin, 1, init_mib, 0, "setup");
    init.kind = ContainerKind::kInit;
    NodeUsage usage = NodeUsage::Empty(inv);
    const Placement p =
        PlaceOrDie(Pod({init, Share(Vendor::kKunlunxin, 1, main_mib, 0, "main")}), inv, &usage);
    ASSERT_EQ(p.containers.size(), 2u);
    const int32_t steady = p.containers[1].grants[0].device;
    EXPECT_NE(p.containers[0].grants[0].device, steady) << init_larger;
    EXPECT_EQ(usage.devices[static_cast<size_t>(steady)].slice_mib, init_larger ? 24576 : 49152);
    const FitResult later = Fit(Pod({Share(Vendor::kKunlunxin, 1, init_mib, 0)}), inv, usage);
    ASSERT_TRUE(later.fits());
    EXPECT_NE(Devices(later), std::vector<int32_t>{steady}) << init_larger;
    // A placement whose phases mix sizes on one device is refused.
    Placement mixed = p;
    mixed.containers[0].grants[0].device = steady;
    NodeUsage empty = NodeUsage::Empty(inv);
    EXPECT_EQ(ApplyPlacement(mixed, inv, &empty).code(), StatusCode::kFailedPrecondition);
  }
}

TEST(FitPods, WholeInitContainerBesideSharesOfTheSameDevice) {
  // The init container holds the device alone while it runs, the two shares
  // hold it together afterwards: the pod holds it whole, one holder.
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  DeviceRequest init = Whole(Vendor::kNvidia, 1, "setup");
  init.kind = ContainerKind::kInit;
  const PodRequest pod = Pod(
      {init, Share(Vendor::kNvidia, 1, 4096, 100, "a"), Share(Vendor::kNvidia, 1, 4096, 100, "b")});
  const FitResult r = Fit(pod, inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits()) << (r.reasons.empty() ? "" : DescribeReason(r.reasons[0]));
  EXPECT_TRUE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), r.placement).ok());
  NodeUsage usage = NodeUsage::Empty(inv);
  ASSERT_TRUE(ApplyPlacement(r.placement, inv, &usage).ok());
  EXPECT_TRUE(UsageWithinCapacity(inv, usage));
  // Binpack puts all three on the first GPU.
  const size_t d = static_cast<size_t>(r.placement.containers[0].grants[0].device);
  ASSERT_EQ(Devices(r, 1), std::vector<int32_t>{static_cast<int32_t>(d)});
  ASSERT_EQ(Devices(r, 2), std::vector<int32_t>{static_cast<int32_t>(d)});
  EXPECT_TRUE(usage.devices[d].exclusive);
  EXPECT_EQ(usage.devices[d].shares, 1);
  // Nothing else lands on a device the pod holds whole.
  EXPECT_FALSE(ApplyPlacement(r.placement, inv, &usage).ok());
  ASSERT_TRUE(ReleasePlacement(r.placement, inv, &usage).ok());
  EXPECT_EQ(usage, NodeUsage::Empty(inv));
  // A whole grant beside shares of one device in one phase is still refused.
  Placement forged = r.placement;
  forged.containers[0].kind = ContainerKind::kRegular;
  EXPECT_EQ(ApplyPlacement(forged, inv, &usage).code(), StatusCode::kFailedPrecondition);
}

// In pod order the share would take the one device the whole-device
// container after it needs (its best rank is there); the pod fits all the
// same, whole-device containers planned first, under every policy.
TEST(FitPods, AShareBeforeAWholeDeviceContainerDoesNotTakeItsDevice) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  NodeUsage u = testing::Busy(inv, {2, 3, 5, 6, 7});
  for (size_t d : {0u, 1u}) {
    u.devices[d].shares = 1;
    u.devices[d].memory_mib = 1000;
    u.devices[d].compute = 100;
  }
  const PodRequest pod =
      Pod({Share(Vendor::kNvidia, 1, 1000, 100, "side"), Whole(Vendor::kNvidia, 1, "main")});
  for (const std::string& name : PolicyNames()) {
    SCOPED_TRACE(name);
    auto policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok());
    const FitResult r = Fit(pod, inv, u, policy->get());
    ASSERT_TRUE(r.fits()) << (r.reasons.empty() ? "" : DescribeReason(r.reasons[0]));
    ASSERT_EQ(r.placement.containers.size(), 2u);
    EXPECT_EQ(r.placement.containers[0].container, "side");  // pod order kept
    EXPECT_EQ(Devices(r, 1), std::vector<int32_t>{4});
    EXPECT_NE(Devices(r, 0), std::vector<int32_t>{4});
    EXPECT_TRUE(CheckPlacement(pod, inv, u, r.placement).ok());
  }
  // Two shares: a small one first must not take the room the large one needs.
  NodeUsage v = testing::Busy(inv, {1, 2, 3, 4, 5, 6, 7});
  v.devices[0].exclusive = false;
  v.devices[0].shares = 1;
  v.devices[0].memory_mib = inv.devices[0].memory_mib - 60000;
  v.devices[0].compute = 100;
  NodeUsage w = v;
  w.devices[1] = NodeUsage::Empty(inv).devices[1];
  w.devices[1].shares = 1;
  w.devices[1].memory_mib = inv.devices[1].memory_mib - 30000;
  w.devices[1].compute = 100;
  const PodRequest two = Pod({Share(Vendor::kNvidia, 1, 20000, 100, "small"),
                              Share(Vendor::kNvidia, 1, 50000, 100, "large")});
  const FitResult t = Fit(two, inv, w);
  ASSERT_TRUE(t.fits()) << (t.reasons.empty() ? "" : DescribeReason(t.reasons[0]));
  EXPECT_EQ(Devices(t, 1), std::vector<int32_t>{0});
  EXPECT_EQ(Devices(t, 0), std::vector<int32_t>{1});
  EXPECT_TRUE(CheckPlacement(two, inv, w, t.placement).ok());
}

// The steady state's own shares count against the device's cap also where
// an init container holds the device whole (the merge counts the pod as one
// holder there): three shares on a device that takes two are refused.
TEST(CheckPlacement, SharesPastTheCapBesideAWholeInitContainerAreRefused) {
  NodeInventory inv = MakeNode("nvidia-hgx-8");
  inv.devices[0].max_shares = 2;
  DeviceRequest init = Whole(Vendor::kNvidia, 1, "setup");
  init.kind = ContainerKind::kInit;
  std::vector<DeviceRequest> containers = {init};
  Placement p;
  p.containers.push_back(
      {"setup", ContainerKind::kInit, {{0, inv.devices[0].memory_mib, kComputeWhole, true}}});
  for (const char* name : {"a", "b", "c"}) {
    containers.push_back(Share(Vendor::kNvidia, 1, 1024, 100, name));
    p.containers.push_back({name, ContainerKind::kRegular, {{0, 1024, 100, false}}});
  }
  const PodRequest pod = Pod(containers);
  NodeUsage usage = NodeUsage::Empty(inv);
  const Status applied = ApplyPlacement(p, inv, &usage);
  EXPECT_EQ(applied.code(), StatusCode::kFailedPrecondition) << applied.ToString();
  EXPECT_EQ(usage, NodeUsage::Empty(inv));
  EXPECT_FALSE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), p).ok());
  // Two shares are within the cap.
  containers.pop_back();
  p.containers.pop_back();
  EXPECT_TRUE(ApplyPlacement(p, inv, &usage).ok());
}

TEST(FitPods, OtherVendorsContainersAreIgnored) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  const PodRequest pod = Pod({Whole(Vendor::kAscend, 2, "npu"), Whole(Vendor::kNvidia, 1, "gpu")});
  const FitResult r = Fit(pod, inv, NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(r.placement.containers.size(), 1u);
  EXPECT_EQ(r.placement.containers[0].container, "gpu");
}

TEST(CheckPlacement, RejectsForgedPlacements) {
  const NodeInventory inv = MakeNode("ascend-910c-x16");
  const PodRequest pod = Pod({Whole(Vendor::kAscend, 2)});
  Placement split;
  split.containers.push_back({"main", ContainerKind::kRegular,
                              {{1, 65536, kComputeWhole, true}, {2, 65536, kComputeWhole, true}}});
  Status s = CheckPlacement(pod, inv, NodeUsage::Empty(inv), split);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("topology"), std::string::npos) << s.message();
  Placement out_of_range = split;
  out_of_range.containers[0].grants[1].device = 99;
  EXPECT_FALSE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), out_of_range).ok());
  Placement good = split;
  good.containers[0].grants[0].device = 2;
  good.containers[0].grants[1].device = 3;
  EXPECT_TRUE(CheckPlacement(pod, inv, NodeUsage::Empty(inv), good).ok());
  // The same devices twice: the second booking is refused.
  NodeUsage usage = NodeUsage::Empty(inv);
  ASSERT_TRUE(ApplyPlacement(good.containers.empty() ? Placement{} : good, inv, &usage).ok());
  EXPECT_EQ(CheckPlacement(pod, inv, usage, good).code(), StatusCode::kFailedPrecondition);
}

TEST(CheckPlacement, RefusesWhatFitRefuses) {
  NodeInventory inv = MakeNode("nvidia-hgx-8");
  inv.devices[0].foreign_mib = 10000;
  const int64_t gpu_mib = inv.devices[0].memory_mib;
  const PodRequest whole = Pod({Whole(Vendor::kNvidia, 1)});
  const Placement on_foreign{
      {{"main", ContainerKind::kRegular, {{0, gpu_mib, kComputeWhole, true}}}}, {}};
  Placement elsewhere = on_foreign;
  elsewhere.containers[0].grants[0].device = 1;
  const NodeUsage empty = NodeUsage::Empty(inv);
  EXPECT_TRUE(CheckPlacement(whole, inv, empty, elsewhere).ok());
  // A whole device that holds foreign memory.
  EXPECT_EQ(CheckPlacement(whole, inv, empty, on_foreign).code(), StatusCode::kFailedPrecondition);
  // A share larger than the memory left beside the foreign memory and the
  // grants: 2048 MiB left, 4096 asked.
  const PodRequest share = Pod({Share(Vendor::kNvidia, 1, 4096, 100)});
  const Placement share_on_0{{{"main", ContainerKind::kRegular, {{0, 4096, 100, false}}}}, {}};
  NodeUsage used = empty;
  used.devices[0] = {.memory_mib = gpu_mib - 10000 - 2048,
                     .compute = 100,
                     .shares = 1,
                     .exclusive = false,
                     .slice_mib = 0,
                     .slices = 1};
  EXPECT_TRUE(CheckPlacement(share, inv, empty, share_on_0).ok());
  EXPECT_EQ(CheckPlacement(share, inv, used, share_on_0).code(), StatusCode::kFailedPrecondition);
  used.devices[0].memory_mib -= 2048;
  EXPECT_TRUE(CheckPlacement(share, inv, used, share_on_0).ok());
  // The same container twice: every entry would be booked.
  Placement twice = elsewhere;
  twice.containers.push_back(twice.containers[0]);
  twice.containers[1].grants[0].device = 2;
  EXPECT_EQ(CheckPlacement(whole, inv, empty, twice).code(), StatusCode::kFailedPrecondition);
  // A container of another kind than the request's (an init container
  // booked as a regular one is counted in another phase).
  DeviceRequest init = Whole(Vendor::kNvidia, 1);
  init.kind = ContainerKind::kInit;
  EXPECT_EQ(CheckPlacement(Pod({init}), inv, empty, elsewhere).code(),
            StatusCode::kFailedPrecondition);
  Placement as_init = elsewhere;
  as_init.containers[0].kind = ContainerKind::kInit;
  EXPECT_TRUE(CheckPlacement(Pod({init}), inv, empty, as_init).ok());
}

}  // namespace
}  // namespace accelpool::core
