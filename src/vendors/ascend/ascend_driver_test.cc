#include "vendors/ascend/ascend_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>

#include "core/fit.h"
#include "vendors/test_util.h"

namespace accelpool::vendors::ascend {
namespace {

AscendOptions Options(std::string node, std::chrono::milliseconds poll = std::chrono::seconds(5),
                      std::string device_root = "") {
  AscendOptions o;
  o.node = std::move(node);
  o.health_poll = poll;
  o.device_root = std::move(device_root);
  return o;
}

// DCMI as an Atlas 800T A2 (8 x 910B2, 24 AI cores, 64 GiB HBM) answers; the
// NUMA affinities 6,0,6,0,4,2,4,2 are those of the published 910B2 sample.
class FakeDcmi : public DcmiLibrary {
 public:
  FakeDcmi(std::string chip, int count, std::vector<int> numa, std::string super_pod = "")
      : chip_(std::move(chip)),
        count_(count),
        numa_(std::move(numa)),
        super_pod_(std::move(super_pod)) {}

  Status Init() override { return Status::Ok(); }
  StatusOr<std::vector<DcmiChipId>> Chips() override {
    std::vector<DcmiChipId> out;
    // Cards are listed in reverse to check that logic ids decide the order.
    for (int i = count_ - 1; i >= 0; --i) {
      out.push_back({i / per_card, i % per_card});
    }
    return out;
  }
  StatusOr<DcmiDeviceInfo> Info(const DcmiChipId& c) override {
    int i = c.card * per_card + c.device;
    if (i == fail_info) {
      return UnavailableError(
          "dcmi_get_device_hbm_info failed with DCMI code -8005; check the NPU driver with "
          "npu-smi info");
    }
    DcmiDeviceInfo d;
    d.logic_id = logic_across_cards ? c.device * (count_ / per_card) + c.card : i;
    const int as = i == echo_chip ? echo_of : i;  // a driver repeating another chip's answer
    d.phy_id = (echo_phy ? as : i) + 100;         // physical ids differ from logic ids
    d.chip_name = chip_;
    d.aicore = 24;
    d.memory_mib = 65536;
    char bus[32];
    snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0xc1 + (echo_bus ? as : i));
    d.pci_bus = bus;
    d.numa = numa_[static_cast<size_t>(i) % numa_.size()];
    d.super_pod_id = super_pod_;
    return d;
  }
  StatusOr<uint32_t> Health(const DcmiChipId& c) override {
    int i = c.card * per_card + c.device;
    int h = health[static_cast<size_t>(i)].load();
    if (h < 0) {
      return UnavailableError("dcmi_get_device_health failed with DCMI code -8020");
    }
    return static_cast<uint32_t>(h);
  }

  std::array<std::atomic<int>, 16> health{};  // alarm level per chip; -1: DCMI error
  int fail_info = -1;
  int echo_chip = -1;  // this chip answers with chip echo_of's bus and/or physical id
  int echo_of = -1;
  bool echo_bus = false;
  bool echo_phy = false;
  int per_card = 2;                 // chips DCMI reports on each card
  bool logic_across_cards = false;  // logic ids go round the cards: card 0 holds 0, 2, 4, ...

 private:
  std::string chip_;
  int count_;
  std::vector<int> numa_;
  std::string super_pod_;
};

TEST(AscendDriverTest, ModelAndProfileTables) {
  struct Case {
    std::string chip;
    size_t count;
    std::string want_model;
    std::string want_profile;
  };
  const std::vector<Case> cases = {
      {"910B2", 8, "Ascend910B2", "ascend-910b-x8"},
      {"910B4", 16, "Ascend910B4", "ascend-910b-x16"},
      {"910_9392", 16, "Ascend910C", "ascend-910c-x16"},
      {"910", 8, "Ascend910A", "ascend-910a-x8"},
      {"910ProB", 4, "Ascend910A", "ascend-910a-x4"},
      // First-generation names DCMI reports: "910B" is not an A2 chip.
      {"910B", 8, "Ascend910A", "ascend-910a-x8"},
      {"910A", 8, "Ascend910A", "ascend-910a-x8"},
      {"910ProA", 8, "Ascend910A", "ascend-910a-x8"},
      {"910PremiumA", 8, "Ascend910A", "ascend-910a-x8"},
      {"910B1", 8, "Ascend910B1", "ascend-910b-x8"},
      {"910B4-1", 16, "Ascend910B4-1", "ascend-910b-x16"},
      {"310P3", 8, "Ascend310P3", "ascend-310p-duo"},
      {"310", 8, "Ascend310", "ascend-310-cards"},
      {"310", 12, "Ascend310", "ascend-310-cards"},
      {"310P3", 4, "Ascend310P3", "ascend-310p-duo"},
      {"310P3", 16, "Ascend310P3", "ascend-310p-duo"},
      {"310B1", 4, "Ascend310B1", ""},
      {"910B3", 6, "Ascend910B3", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.chip);
    EXPECT_EQ(AscendModel(c.chip), c.want_model);
    EXPECT_EQ(AscendProfile(AscendModel(c.chip), c.count), c.want_profile);
  }
}

TEST(AscendDriverTest, Maps910B2NodeWithRealNumaLayout) {
  auto dcmi = std::make_unique<FakeDcmi>("910B2", 8, std::vector<int>{6, 0, 6, 0, 4, 2, 4, 2});
  testing::FakeDevRoot host;
  host.AddVendor(core::Vendor::kAscend, 8, 100);
  AscendDriver d(std::move(dcmi), Options("npu-node", std::chrono::seconds(5), host.root()));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.topology.kind, "ascend-910b-x8");
  ASSERT_EQ(inv.devices.size(), 8u);
  std::vector<int32_t> numa;
  for (const core::Device& dev : inv.devices) {
    numa.push_back(dev.numa);
  }
  EXPECT_EQ(numa, (std::vector<int32_t>{6, 0, 6, 0, 4, 2, 4, 2}));
  EXPECT_EQ(inv.devices[0].id, "NPU-0000-c1-00.0");
  EXPECT_EQ(inv.devices[7].model, "Ascend910B2");
  EXPECT_EQ(inv.devices[7].compute_units, 24);
  EXPECT_EQ(inv.devices[7].memory_mib, 65536);

  auto spec = d.BuildContainerSpec({{inv.devices[1], 0, 0, true}, {inv.devices[3], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "101,103");  // physical ids
  EXPECT_EQ(spec->env.at("ASCEND_RT_VISIBLE_DEVICES"), "0,1");
  std::vector<std::string> paths;
  for (const DeviceNode& n : spec->devices) {
    paths.push_back(n.host_path);
  }
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/davinci101"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/davinci_manager"), paths.end());
}

TEST(AscendDriverTest, DynamicVnpuOffersTemplateSlotsAndServesASharePerContainer) {
  testing::FakeDevRoot host;
  host.AddVendor(core::Vendor::kAscend, 8, 100);
  AscendOptions o = Options("npu-node", std::chrono::seconds(5), host.root());
  o.vnpu = true;
  AscendDriver d(std::make_unique<FakeDcmi>("910B2", 8, std::vector<int>{0}), o);
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.topology.kind, "ascend-910b-x8");  // the topology rules stay
  for (const core::Device& dev : inv.devices) {
    EXPECT_EQ(dev.max_shares, 4) << "64 GiB holds four vir06_1c_16g";
  }
  EXPECT_EQ(inv.topology.slices.memory_sizes, (std::vector<int64_t>{16384, 32768}));
  EXPECT_TRUE(inv.topology.slices.compute_follows_memory);
  EXPECT_TRUE(inv.topology.slices.fraction_single_device);

  GrantedDevice share{inv.devices[3], 32768, 500, false};
  auto spec = d.BuildContainerSpec({share});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "103");  // the physical id
  EXPECT_EQ(spec->env.at("ASCEND_VNPU_SPECS"), "vir12_3c_32g");
  EXPECT_TRUE(spec->devices.empty());

  // Whole chips are served as before, device nodes and all.
  auto whole = d.BuildContainerSpec({{inv.devices[1], 0, 0, true}});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->env.count("ASCEND_VNPU_SPECS"), 0u);
  EXPECT_FALSE(whole->devices.empty());

  // A share on two chips, or a chip that is not on the node: refused.
  auto two = d.BuildContainerSpec({share, {inv.devices[4], 16384, 250, false}});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("takes one NPU"), std::string::npos);
  GrantedDevice foreign = share;
  foreign.device.id = "NPU-elsewhere";
  EXPECT_EQ(d.BuildContainerSpec({foreign}).status().code(), StatusCode::kInvalidArgument);
}

// Without --ascend-vnpu a chip has one slot: a share planned on it holds it
// alone and is served the chip whole, as before vNPU existed.
TEST(AscendDriverTest, WithoutVnpuAShareHoldsItsChipWhole) {
  testing::FakeDevRoot host;
  host.AddVendor(core::Vendor::kAscend, 8, 100);
  AscendDriver d(std::make_unique<FakeDcmi>("910B2", 8, std::vector<int>{0}),
                 Options("n", std::chrono::seconds(5), host.root()));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_EQ((*invs)[0].devices[0].max_shares, 1);
  auto spec = d.BuildContainerSpec({{(*invs)[0].devices[2], 16384, 250, false}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.count("ASCEND_VNPU_SPECS"), 0u);
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "102");
  bool node = false;
  for (const DeviceNode& n : spec->devices) node = node || n.host_path == "/dev/davinci102";
  EXPECT_TRUE(node);
}

TEST(AscendDriverTest, VnpuOnAChipWithoutTemplatesServesItWhole) {
  testing::FakeDevRoot host;
  host.AddVendor(core::Vendor::kAscend, 8, 100);
  AscendOptions o = Options("n", std::chrono::seconds(5), host.root());
  o.vnpu = true;
  AscendDriver d(std::make_unique<FakeDcmi>("950PR", 8, std::vector<int>{0}), o);
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  for (const core::Device& dev : (*invs)[0].devices) {
    EXPECT_EQ(dev.max_shares, 1) << dev.model;
  }
  EXPECT_TRUE((*invs)[0].topology.slices.memory_sizes.empty());
  auto spec = d.BuildContainerSpec({{(*invs)[0].devices[0], 16384, 250, false}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.count("ASCEND_VNPU_SPECS"), 0u) << "one slot: the share holds the chip";
}

TEST(AscendDriverTest, Maps910CSuperPodModules) {
  auto dcmi =
      std::make_unique<FakeDcmi>("910_9392", 16, std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}, "3");
  AscendDriver d(std::move(dcmi), Options("a3-node"));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.topology.kind, "ascend-910c-x16");
  EXPECT_EQ(inv.topology.super_node, "3");
  EXPECT_EQ(inv.devices[0].model, "Ascend910C");
  ASSERT_EQ(inv.topology.modules.size(), 8u);
  EXPECT_EQ(inv.topology.modules[1], (std::vector<int32_t>{2, 3}));
}

// An A3 product with 8 dies (4 HiAM modules of 2, an A200T A3 Box8) has no
// profile (ascend-910c-x16 is 16 dies), but its dies still pair by card and
// an even request must take whole modules (VENDORS.md 2.2): the cards are
// its modules, with the whole-module rule, beside NUMA groups. It used to
// get NUMA groups alone, and an even request could split a module.
TEST(AscendDriverTest, An8Die910CNodeKeepsItsModulesTakenWhole) {
  auto dcmi = std::make_unique<FakeDcmi>("910_9392", 8, std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  AscendDriver d(std::move(dcmi), Options("a3-box8"));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
  EXPECT_EQ(inv.devices[0].model, "Ascend910C");
  EXPECT_EQ(inv.topology.modules,
            (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(inv.topology.module_rule, core::ModuleRule::kWholeForEven);
  EXPECT_EQ(inv.devices[5].module, 2);
  EXPECT_EQ(inv.topology.groups, (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// A 16-die A3 node with one die left out at start (its chip info cannot be
// read) has 15 dies: no x16 profile, but its 7 complete cards stay modules
// taken whole by even requests, and the lone die is in none.
TEST(AscendDriverTest, A910CDieLeftOutAtStartKeepsTheCompleteCardsAsModules) {
  auto dcmi = std::make_unique<FakeDcmi>("910_9392", 16, std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  dcmi->fail_info = 5;  // card 2, die 1
  AscendDriver d(std::move(dcmi), Options("a3-node"));
  auto invs = d.DiscoverPartial();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  ASSERT_EQ(inv.devices.size(), 15u);
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
  EXPECT_EQ(inv.topology.module_rule, core::ModuleRule::kWholeForEven);
  // One die, or whole modules: a lone die beside a module (3) is no count.
  EXPECT_EQ(inv.topology.valid_counts, (std::vector<int32_t>{1, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_EQ(inv.topology.modules,
            (std::vector<std::vector<int32_t>>{
                {0, 1}, {2, 3}, {5, 6}, {7, 8}, {9, 10}, {11, 12}, {13, 14}}));
  EXPECT_EQ(inv.devices[4].module, -1);  // die 4, card 2's other
  EXPECT_EQ(inv.devices[5].module, 2);

  // An even request takes whole cards, never the lone die.
  core::DeviceRequest two;
  two.container = "main";
  two.vendor = core::Vendor::kAscend;
  two.count = 2;
  const core::FitResult r =
      core::Fit(core::PodRequest{{two}, {}}, inv, core::NodeUsage::Empty(inv));
  ASSERT_TRUE(r.fits());
  std::vector<int32_t> dies;
  for (const core::Grant& g : r.placement.containers[0].grants) dies.push_back(g.device);
  std::sort(dies.begin(), dies.end());
  ASSERT_EQ(dies.size(), 2u);
  EXPECT_NE(dies[0], 4);
  EXPECT_EQ(inv.devices[static_cast<size_t>(dies[0])].module,
            inv.devices[static_cast<size_t>(dies[1])].module);

  // A one-die request takes the lone die, leaving every pair whole.
  core::DeviceRequest one = two;
  one.count = 1;
  const core::FitResult o =
      core::Fit(core::PodRequest{{one}, {}}, inv, core::NodeUsage::Empty(inv));
  ASSERT_TRUE(o.fits());
  ASSERT_EQ(o.placement.containers[0].grants.size(), 1u);
  EXPECT_EQ(o.placement.containers[0].grants[0].device, 4);
}

// Two Atlas 300I cards of four 310 chips whose logic ids go round the cards:
// the cards are the chips DCMI reports under one card id, not runs of four
// inventory indices, and a request of 4 takes one card.
TEST(AscendDriverTest, Maps310CardsFromDcmiCardIds) {
  auto dcmi = std::make_unique<FakeDcmi>("310", 8, std::vector<int>{0});
  dcmi->per_card = 4;
  dcmi->logic_across_cards = true;
  AscendDriver d(std::move(dcmi), Options("infer-node"));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
  EXPECT_EQ(inv.topology.kind, "ascend-310-cards");
  EXPECT_EQ(inv.topology.module_rule, core::ModuleRule::kStayInside);
  EXPECT_EQ(inv.devices[0].model, "Ascend310");
  EXPECT_EQ(inv.topology.modules, (std::vector<std::vector<int32_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(inv.devices[3].module, 1);

  core::NodeUsage usage = core::NodeUsage::Empty(inv);
  usage.devices[0] = {65536, core::kComputeWhole, 1, true, 0, 0};  // chip 0 held whole
  core::DeviceRequest four;
  four.container = "main";
  four.vendor = core::Vendor::kAscend;
  four.count = 4;
  const core::PodRequest pod{{four}, {}};
  const core::FitResult r = core::Fit(pod, inv, usage);
  ASSERT_TRUE(r.fits());
  std::vector<int32_t> chips;
  for (const core::Grant& g : r.placement.containers[0].grants) chips.push_back(g.device);
  std::sort(chips.begin(), chips.end());
  EXPECT_EQ(chips, (std::vector<int32_t>{1, 3, 5, 7}));
  core::Placement split = r.placement;
  for (int32_t i = 0; i < 4; ++i) {
    split.containers[0].grants[static_cast<size_t>(i)].device = 4 + i;  // chips of two cards
  }
  EXPECT_FALSE(core::CheckPlacement(pod, inv, usage, split).ok());
}

// A card the 310 profile does not allow (DCMI reporting 5 chips on it) leaves
// the node to NUMA groups rather than to cards made up from the index.
TEST(AscendDriverTest, A310CardOfFiveChipsGetsNoCardProfile) {
  auto dcmi = std::make_unique<FakeDcmi>("310", 10, std::vector<int>{0});
  dcmi->per_card = 5;
  AscendDriver d(std::move(dcmi), Options("infer-node"));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.topology.kind, "");
  EXPECT_TRUE(inv.topology.modules.empty());
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
}

// Eight Atlas 300I Duo cards (16 x 310P3) whose logic ids go round the
// cards: the Duo profile with the cards DCMI reports, and an odd request takes
// the free chip of the half-used card, then a whole card.
TEST(AscendDriverTest, Maps310PDuoCardsOfAnyCount) {
  auto dcmi = std::make_unique<FakeDcmi>("310P3", 16, std::vector<int>{0});
  dcmi->logic_across_cards = true;  // card k holds chips k and k + 8
  AscendDriver d(std::move(dcmi), Options("duo-node"));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
  EXPECT_EQ(inv.topology.kind, "ascend-310p-duo");
  ASSERT_EQ(inv.topology.modules.size(), 8u);
  EXPECT_EQ(inv.topology.modules[0], (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(inv.topology.modules[7], (std::vector<int32_t>{7, 15}));

  core::NodeUsage usage = core::NodeUsage::Empty(inv);
  usage.devices[0] = {65536, core::kComputeWhole, 1, true, 0, 0};  // chip 0 held whole
  core::DeviceRequest three;
  three.container = "main";
  three.vendor = core::Vendor::kAscend;
  three.count = 3;
  const core::PodRequest pod{{three}, {}};
  const core::FitResult r = core::Fit(pod, inv, usage);
  ASSERT_TRUE(r.fits());
  std::vector<int32_t> chips;
  for (const core::Grant& g : r.placement.containers[0].grants) chips.push_back(g.device);
  std::sort(chips.begin(), chips.end());
  EXPECT_EQ(chips, (std::vector<int32_t>{1, 8, 9}));
}

// Atlas 300I Pro cards carry one 310P chip each: no Duo pairing, NUMA groups.
TEST(AscendDriverTest, A300IProGetsNoDuoPairing) {
  auto dcmi = std::make_unique<FakeDcmi>("310P3", 8, std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  dcmi->per_card = 1;
  AscendDriver d(std::move(dcmi), Options("pro-node"));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.devices[0].model, "Ascend310P3");
  EXPECT_EQ(inv.topology.kind, "");
  EXPECT_TRUE(inv.topology.modules.empty());
  EXPECT_EQ(inv.devices[1].module, -1);
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
}

TEST(AscendDriverTest, DcmiErrorMidDiscoveryIsClear) {
  auto dcmi = std::make_unique<FakeDcmi>("910B3", 8, std::vector<int>{0});
  dcmi->fail_info = 5;
  AscendDriver d(std::move(dcmi), Options("n"));
  auto invs = d.Discover();
  ASSERT_FALSE(invs.ok());
  EXPECT_NE(invs.status().message().find("NPU card 2 device 1"), std::string::npos);
  EXPECT_NE(invs.status().message().find("npu-smi"), std::string::npos);
}

// At the plugin's start (DiscoverPartial) a chip that cannot be read is left
// out, with an error naming it and what to check, and the other 7 are
// served. A later discovery that cannot read a chip fails as a whole, and the
// chips served stay allocatable.
TEST(AscendDriverTest, UnreadableChipIsLeftOutAtStartOnly) {
  auto owned = std::make_unique<FakeDcmi>("910B3", 8, std::vector<int>{0});
  FakeDcmi* dcmi = owned.get();
  dcmi->fail_info = 5;
  AscendDriver d(std::move(owned), Options("n"));
  auto log = std::make_unique<testing::LogCapture>();
  auto invs = d.DiscoverPartial();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(log->Has({"NPU card 2 device 1", "npu-smi", "not offered"}));
  log.reset();
  ASSERT_EQ((*invs)[0].devices.size(), 7u);
  for (const core::Device& dev : (*invs)[0].devices) {
    EXPECT_NE(dev.pci_bus, "0000:c6:00.0");  // chip 5's
  }
  const core::Device chip6 = (*invs)[0].devices[5];
  EXPECT_EQ(chip6.pci_bus, "0000:c7:00.0");

  dcmi->fail_info = 6;  // a served chip that cannot be read now
  auto later = d.Discover();
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("NPU card 3 device 0"), std::string::npos);
  auto spec = d.BuildContainerSpec({{chip6, 0, 0, true}});
  // Still a device of this node (no device nodes here: the spec stops at
  // the missing /dev node, not at "not on this node").
  EXPECT_NE(spec.status().code(), StatusCode::kInvalidArgument) << spec.status().ToString();

  dcmi->fail_info = -1;
  auto all = d.Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ((*all)[0].devices.size(), 8u);
}

// Two chips for which DCMI reports the same PCI bus (the device id) or the
// same physical id (the /dev/davinci node, ASCEND_VISIBLE_DEVICES) are
// refused: the inventory would hold one chip twice, and one chip's grants and
// health would land on the other.
TEST(AscendDriverTest, ChipsReportingTheSameIdOrPhysicalIdAreRefused) {
  struct Case {
    std::string name;
    bool bus;
    bool phy;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"same bus", true, false, "the id NPU-0000-c4-00.0 of NPU card 1 device 1"},
      {"same physical id", false, true, "the physical id 103 of NPU card 1 device 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto dcmi = std::make_unique<FakeDcmi>("910B3", 8, std::vector<int>{0});
    dcmi->echo_chip = 6;
    dcmi->echo_of = 3;
    dcmi->echo_bus = c.bus;
    dcmi->echo_phy = c.phy;
    AscendDriver d(std::move(dcmi), Options("n"));
    auto invs = d.Discover();
    ASSERT_FALSE(invs.ok());
    EXPECT_EQ(invs.status().code(), StatusCode::kInternal);
    EXPECT_NE(invs.status().message().find("NPU card 3 device 0 reports " + c.want),
              std::string::npos)
        << invs.status().message();
    EXPECT_NE(invs.status().message().find("npu-smi"), std::string::npos);
  }
}

TEST(AscendDriverTest, PolledHealthIsTwoWay) {
  auto owned = std::make_unique<FakeDcmi>("910B3", 8, std::vector<int>{0});
  FakeDcmi* dcmi = owned.get();
  AscendDriver d(std::move(owned), Options("n", std::chrono::milliseconds(5)));
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok());
  testing::HealthRecorder health(d);
  dcmi->health[4] = 1;  // minor alarm: still healthy
  dcmi->health[2] = 3;  // critical
  health.WaitFor(1);
  dcmi->health[2] = 0;
  health.WaitFor(2);
  dcmi->health[6] = -1;  // DCMI fails for one chip mid-call
  health.WaitFor(3);
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].device_id, (*invs)[0].devices[2].id);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_TRUE(events[1].healthy);
  EXPECT_EQ(events[2].device_id, (*invs)[0].devices[6].id);
  EXPECT_FALSE(events[2].healthy);
  EXPECT_NE(events[2].reason.find("-8020"), std::string::npos);
}

}  // namespace
}  // namespace accelpool::vendors::ascend
