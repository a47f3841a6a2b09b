// The DCMI dlopen binding run against a fake libdcmi (testlibs/fake_dcmi.cc)
// through AscendDriver, the way the device plugin runs it.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <tuple>

#include "vendors/ascend/ascend_driver.h"
#include "vendors/ascend/dcmi_library.h"
#include "vendors/test_util.h"

namespace accelpool::vendors::ascend {
namespace {

using vendors::testing::ExpectDiscoveryFails;
using vendors::testing::FakeDevRoot;
using vendors::testing::FakeHandle;
using vendors::testing::FakeSysfs;
using vendors::testing::HealthRecorder;

StatusOr<std::unique_ptr<AscendDriver>> Driver(
    const std::string& sysfs, const std::string& device_root = "",
    std::chrono::milliseconds poll = std::chrono::seconds(5)) {
  StatusOr<DcmiLibraryPtr> lib = NewDlDcmi({ACCELPOOL_FAKE_DCMI}, sysfs);
  if (!lib.ok()) {
    return lib.status();
  }
  AscendOptions o;
  o.node = "npu-node";
  o.health_poll = poll;
  o.device_root = device_root;
  return std::make_unique<AscendDriver>(std::move(lib).value(), o);
}

TEST(DcmiBindingTest, MapsAnAtlas800TA2) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  // Kunpeng 920, four NUMA nodes: buses 00-3f, 40-7f, 80-bf, c0-ff.
  FakeSysfs sysfs;
  const std::vector<std::pair<std::string, int>> numa = {
      {"0000:c1:00.0", 3}, {"0000:c2:00.0", 3}, {"0000:81:00.0", 2}, {"0000:82:00.0", 2},
      {"0000:01:00.0", 0}, {"0000:02:00.0", 0}, {"0000:41:00.0", 1}, {"0000:42:00.0", 1}};
  for (const auto& [bus, node] : numa) {
    sysfs.Numa(bus, node);
  }
  FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kAscend, 8);
  auto driver = Driver(sysfs.root(), dev.root());
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  ASSERT_EQ(invs->size(), 1u);
  const core::NodeInventory& inv = invs->front();
  EXPECT_EQ(inv.vendor, core::Vendor::kAscend);
  EXPECT_EQ(inv.topology.kind, "ascend-910b-x8");
  EXPECT_EQ(inv.topology.super_node, "");  // the super-pod query is not supported here
  ASSERT_EQ(inv.devices.size(), 8u);
  EXPECT_EQ(inv.devices[0].id, "NPU-0000-c1-00.0");
  EXPECT_EQ(inv.devices[4].id, "NPU-0000-01-00.0");
  EXPECT_EQ(inv.devices[0].model, "Ascend910B3");
  EXPECT_EQ(inv.devices[0].memory_mib, 65536);  // HBM, not the 0 MB of DDR
  EXPECT_EQ(inv.devices[0].compute_units, 20);
  EXPECT_EQ(inv.devices[2].pci_bus, "0000:81:00.0");
  for (size_t i = 0; i < numa.size(); ++i) {
    EXPECT_EQ(inv.devices[i].numa, numa[i].second) << i;
  }
  auto spec = (*driver)->BuildContainerSpec({{inv.devices[6], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "6");
  bool found = false;
  for (const DeviceNode& n : spec->devices) {
    found = found || n.host_path == "/dev/davinci6";
  }
  EXPECT_TRUE(found);
}

// Selects the fake's product for one test and restores the 800T A2 after it.
class Product {
 public:
  Product(const FakeHandle& fake, int product)
      : set_(reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_product"))) {
    if (set_ != nullptr) {
      set_(product);
    }
  }
  ~Product() {
    if (set_ != nullptr) {
      set_(0);
    }
  }
  bool ok() const { return set_ != nullptr; }

 private:
  void (*set_)(int);
};

// A fake /dev holding the nodes of `chips` chips, a driver over it and the
// fake library, and the driver's first discovery: the set-up of the tests
// that map one of the fake's products.
struct DiscoveredNode {
  explicit DiscoveredNode(int chips) {
    dev.AddVendor(core::Vendor::kAscend, chips);
    driver = Driver("/nonexistent", dev.root());
    if (driver.ok()) {
      invs = (*driver)->Discover();
    }
  }

  FakeDevRoot dev;
  StatusOr<std::unique_ptr<AscendDriver>> driver = InternalError("no driver made");
  StatusOr<std::vector<core::NodeInventory>> invs = InternalError("no discovery: no driver");
};

TEST(DcmiBindingTest, Maps310PDuoCardsThroughTheMemoryInfoFallback) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  Product duo(fake, 1);  // 4 x Atlas 300I Duo: the HBM query is not supported
  ASSERT_TRUE(duo.ok());
  DiscoveredNode node(8);
  ASSERT_TRUE(node.driver.ok()) << node.driver.status().ToString();
  ASSERT_TRUE(node.invs.ok()) << node.invs.status().ToString();
  const core::NodeInventory& inv = node.invs->front();
  EXPECT_EQ(inv.topology.kind, "ascend-310p-duo");
  ASSERT_EQ(inv.devices.size(), 8u);
  EXPECT_EQ(inv.devices[0].model, "Ascend310P3");
  EXPECT_EQ(inv.devices[0].id, "NPU-0000-03-00.0");
  EXPECT_EQ(inv.devices[7].id, "NPU-0000-c4-00.0");
  EXPECT_EQ(inv.devices[0].compute_units, 8);
  for (const core::Device& d : inv.devices) {
    EXPECT_EQ(d.memory_mib, 24576) << d.id;  // DDR, from the memory-info query
  }
  ASSERT_EQ(inv.topology.modules.size(), 4u);  // two chips per Duo card
  EXPECT_EQ(inv.topology.modules[1], (std::vector<int32_t>{2, 3}));
  auto spec =
      (*node.driver)
          ->BuildContainerSpec({{inv.devices[2], 0, 0, true}, {inv.devices[3], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "2,3");
}

// One and two Atlas 300I Duo cards (2 and 4 x 310P3): the Duo profile, a
// module per card; two chips on one card, an odd three a whole card and the
// half-used one.
TEST(DcmiBindingTest, Maps310PDuoNodesOfOneAndTwoCards) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  for (int chips : {2, 4}) {
    SCOPED_TRACE(chips);
    fake.Configure(chips, -1, -1, 0);
    Product duo(fake, 1);
    ASSERT_TRUE(duo.ok());
    DiscoveredNode node(chips);
    ASSERT_TRUE(node.driver.ok()) << node.driver.status().ToString();
    ASSERT_TRUE(node.invs.ok()) << node.invs.status().ToString();
    const core::NodeInventory& inv = node.invs->front();
    ASSERT_EQ(inv.devices.size(), static_cast<size_t>(chips));
    EXPECT_EQ(inv.topology.kind, "ascend-310p-duo");
    ASSERT_EQ(inv.topology.modules.size(), static_cast<size_t>(chips / 2));
    EXPECT_EQ(inv.topology.modules.back(), (std::vector<int32_t>{chips - 2, chips - 1}));
  }
  fake.Configure(8, -1, -1, 0);
}

// Atlas 300I Pro cards (one 310P3 a card): no Duo pairing, NUMA groups.
TEST(DcmiBindingTest, A300IProCardsGetNoDuoPairing) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  Product pro(fake, 5);
  ASSERT_TRUE(pro.ok());
  DiscoveredNode node(8);
  ASSERT_TRUE(node.driver.ok()) << node.driver.status().ToString();
  ASSERT_TRUE(node.invs.ok()) << node.invs.status().ToString();
  const core::NodeInventory& inv = node.invs->front();
  ASSERT_EQ(inv.devices.size(), 8u);
  EXPECT_EQ(inv.devices[0].model, "Ascend310P3");
  EXPECT_EQ(inv.devices[0].memory_mib, 24576);
  EXPECT_EQ(inv.topology.kind, "");
  EXPECT_TRUE(inv.topology.modules.empty());
}

// An A3 super-pod node: 16 dies in 8 modules, and the super-pod id that
// DCMI reports through dcmi_get_device_info(DCMI_MAIN_CMD_CHIP_INF,
// DCMI_CHIP_INF_SUB_CMD_SPOD_INFO), the only way DCMI publishes it.
TEST(DcmiBindingTest, MapsAnA3SuperPodNodeWithItsSuperPodId) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(16, -1, -1, 0);
  Product a3(fake, 3);
  ASSERT_TRUE(a3.ok());
  DiscoveredNode node(16);
  fake.Configure(8, -1, -1, 0);
  ASSERT_TRUE(node.driver.ok()) << node.driver.status().ToString();
  ASSERT_TRUE(node.invs.ok()) << node.invs.status().ToString();
  const core::NodeInventory& inv = node.invs->front();
  ASSERT_EQ(inv.devices.size(), 16u);
  EXPECT_EQ(inv.devices[0].model, "Ascend910C");
  EXPECT_EQ(inv.topology.kind, "ascend-910c-x16");
  EXPECT_EQ(inv.topology.super_node, "7");
  auto spec =
      (*node.driver)
          ->BuildContainerSpec({{inv.devices[14], 0, 0, true}, {inv.devices[15], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "14,15");
}

// Two Atlas 300I cards of four 310 chips: the Ascend 310 card profile, with
// each card's chips (by DCMI card id) one module.
TEST(DcmiBindingTest, Maps310ChipsOfTwoAtlas300ICards) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  Product cards(fake, 4);
  ASSERT_TRUE(cards.ok());
  DiscoveredNode node(8);
  ASSERT_TRUE(node.driver.ok()) << node.driver.status().ToString();
  ASSERT_TRUE(node.invs.ok()) << node.invs.status().ToString();
  const core::NodeInventory& inv = node.invs->front();
  ASSERT_EQ(inv.devices.size(), 8u);
  EXPECT_EQ(inv.devices[0].model, "Ascend310");
  EXPECT_EQ(inv.devices[0].memory_mib, 8192);  // LPDDR4X, from the memory-info query
  EXPECT_EQ(inv.topology.kind, "ascend-310-cards");
  EXPECT_EQ(inv.topology.modules, (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  auto spec = (*node.driver)->BuildContainerSpec({{inv.devices[5], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "5");
}

// DCMI is not documented as safe to call from two threads at once; the
// binding serialises discovery and the health poller.
TEST(DcmiBindingTest, DiscoveryAndHealthPollingDoNotOverlapInTheLibrary) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto overlaps = reinterpret_cast<int (*)()>(fake.Symbol("accelpool_fake_dcmi_overlaps"));
  ASSERT_NE(overlaps, nullptr);
  auto driver = Driver("/nonexistent", "", std::chrono::milliseconds(1));
  ASSERT_TRUE(driver.ok());
  ASSERT_TRUE((*driver)->Discover().ok());
  overlaps();
  {
    HealthRecorder health(**driver);
    for (int i = 0; i < 10; ++i) {
      auto invs = (*driver)->Discover();
      ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    }
    EXPECT_TRUE(health.Stop().empty());
  }
  EXPECT_EQ(overlaps(), 0) << "two DCMI calls were inside the library at once";
}

TEST(DcmiBindingTest, NoMemoryQueryIsAClearError) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  Product old_driver(fake, 2);  // 300I Duo whose memory-info query is not supported either
  ASSERT_TRUE(old_driver.ok());
  auto driver = Driver("/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_FALSE(invs.ok());
  EXPECT_EQ(invs.status().code(), StatusCode::kUnimplemented);
  for (const char* w : {"NPU card 1 device 0", "dcmi_get_device_hbm_info (is not supported)",
                        "dcmi_get_device_memory_info_v3", "npu-smi"}) {
    EXPECT_NE(invs.status().message().find(w), std::string::npos)
        << w << " not in: " << invs.status().message();
  }
}

TEST(DcmiBindingTest, PolledHealthIsTwoWay) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto driver = Driver("/nonexistent", "", std::chrono::milliseconds(10));
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  HealthRecorder health(**driver);
  fake.Configure(8, -1, 2, 0);  // NPU 2 raises a major alarm
  health.WaitFor(1);
  fake.Configure(8, -1, -1, 0);
  health.WaitFor(2);
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, invs->front().devices[2].id);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("alarm level 2"), std::string::npos) << events[0].reason;
  EXPECT_TRUE(events[1].healthy);
}

TEST(DcmiBindingTest, ErrorsAreClearAndNeverCrash) {
  struct Case {
    std::string name;
    int fail_device;
    int init_error;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      // An HBM error other than "not supported" is reported, not papered over.
      {"inner error mid-discovery",
       5,
       0,
       {"NPU card 5 device 0", "dcmi_get_device_hbm_info", "DCMI code -8005", "npu-smi"}},
      {"driver not ready", -1, -8012, {"dcmi_init", "DCMI code -8012"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeHandle fake(ACCELPOOL_FAKE_DCMI);
    ASSERT_TRUE(fake.ok());
    fake.Configure(8, c.fail_device, -1, c.init_error);
    auto driver = Driver("/nonexistent");
    ASSERT_TRUE(driver.ok());
    ExpectDiscoveryFails(**driver, c.want);
  }
}

// A driver that reports a garbage chip count for a card is refused, rather
// than making (and querying) a chip id for each.
TEST(DcmiBindingTest, AGarbageChipCountPerCardIsRefused) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto chips_in_card =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_chips_in_card"));
  ASSERT_NE(chips_in_card, nullptr);
  chips_in_card(1 << 30);
  auto driver = Driver("/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  chips_in_card(INT_MIN);
  ASSERT_FALSE(invs.ok());
  EXPECT_EQ(invs.status().code(), StatusCode::kInternal);  // a broken library, as CheckedCount
  for (const char* want : {"dcmi_get_device_num_in_card", "1073741824 chips", "npu-smi"}) {
    EXPECT_NE(invs.status().message().find(want), std::string::npos) << invs.status().message();
  }
}

// A negative count is not "no NPUs" or "no chips on this card": answering
// with fewer devices would withdraw the others from service as if they had
// gone (the plugin keeps a failing backend's devices, not a shorter list).
TEST(DcmiBindingTest, NegativeCardOrChipCountsFailDiscovery) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto chips_in_card =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_chips_in_card"));
  auto cards_listed =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_cards_listed"));
  ASSERT_NE(chips_in_card, nullptr);
  ASSERT_NE(cards_listed, nullptr);
  auto driver = Driver("/nonexistent");
  ASSERT_TRUE(driver.ok());
  ASSERT_TRUE((*driver)->Discover().ok());
  for (const auto& [cards, chips, want] :
       {std::tuple{-1, INT_MIN, "-1 cards"}, std::tuple{65, INT_MIN, "65 cards"},
        std::tuple{INT_MIN, -1, "-1 chips"}}) {
    cards_listed(cards);
    chips_in_card(chips);
    auto invs = (*driver)->Discover();
    cards_listed(INT_MIN);
    chips_in_card(INT_MIN);
    ASSERT_FALSE(invs.ok()) << want;
    EXPECT_EQ(invs.status().code(), StatusCode::kInternal);
    EXPECT_NE(invs.status().message().find(want), std::string::npos) << invs.status().message();
    EXPECT_NE(invs.status().message().find("npu-smi"), std::string::npos);
  }
  ASSERT_TRUE((*driver)->Discover().ok());
}

// npu-smi info -t proc-mem -i <id> lists the same processes (PID, memory).
TEST(DcmiBindingTest, ProcessesOnEachChipAreListedAndSummedAsMemoryInUse) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto add = reinterpret_cast<void (*)(int, int, int)>(fake.Symbol("accelpool_fake_dcmi_process"));
  auto mode = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_resource_mode"));
  ASSERT_NE(add, nullptr);
  ASSERT_NE(mode, nullptr);
  add(-1, 0, 0);
  add(2, 899293, 57280);  // a vLLM worker
  add(2, 899301, 3072);
  add(5, 4242, 1024);
  auto driver = Driver("/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::vector<core::Device>& devs = invs->front().devices;

  auto held = (*driver)->MemoryHolders();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 8u);  // every chip, most with none
  EXPECT_TRUE(held->at(devs[0].id).empty());
  EXPECT_EQ(held->at(devs[2].id), (std::vector<ProcessMemory>{{899293, 57280}, {899301, 3072}}));
  EXPECT_EQ(held->at(devs[5].id), (std::vector<ProcessMemory>{{4242, 1024}}));
  auto used = (*driver)->MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  EXPECT_EQ(used->at(devs[2].id), 60352);  // the processes' memory, not the HBM's 3378 MB
  EXPECT_EQ(used->at(devs[5].id), 1024);
  EXPECT_EQ(used->at(devs[0].id), 0);

  // A chip whose query fails is left out; the others are read.
  fake.Configure(8, 5, -1, 0);
  used = (*driver)->MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  EXPECT_FALSE(used->contains(devs[5].id));
  EXPECT_EQ(used->at(devs[2].id), 60352);
  fake.Configure(8, -1, -1, 0);

  // A driver whose DCMI does not support the query: not measured, and why.
  mode(1);
  used = (*driver)->MemoryInUse();
  EXPECT_EQ(used.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(used.status().message().find("npu-smi info -t proc-mem"), std::string::npos)
      << used.status().ToString();
  // A count beyond the buffer is refused, not read past its end.
  mode(2);
  used = (*driver)->MemoryInUse();
  ASSERT_FALSE(used.ok());
  EXPECT_NE(used.status().message().find("reports 1000 processes"), std::string::npos)
      << used.status().ToString();
  mode(0);
  add(-1, 0, 0);
}

// A driver that has dcmi_get_device_pcie_info_v2 but fails it for one chip
// has not said that chip's bus, its id: the chip is left out at start like
// any chip that cannot be read, and a later discovery fails as a whole (the
// chips served stay as they are), never renaming the chip NPU-phy<N>.
TEST(DcmiBindingTest, AFailingPcieQueryIsTheChipsErrorNotAnotherId) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto pcie_fails = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_pcie_fails"));
  ASSERT_NE(pcie_fails, nullptr);
  FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kAscend, 8);
  auto driver = Driver("/nonexistent", dev.root());
  ASSERT_TRUE(driver.ok());

  pcie_fails(3);
  auto start = (*driver)->DiscoverPartial();
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  ASSERT_EQ(start->front().devices.size(), 7u);
  for (const core::Device& d : start->front().devices) {
    EXPECT_EQ(d.id.rfind("NPU-phy", 0), std::string::npos) << d.id;
    EXPECT_NE(d.id, "NPU-0000-82-00.0");  // chip 3's
  }

  pcie_fails(-1);
  auto all = (*driver)->Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->front().devices.size(), 8u);
  const core::Device chip3 = all->front().devices[3];
  EXPECT_EQ(chip3.id, "NPU-0000-82-00.0");

  // Served now: a failing query fails the discovery, and chip 3 keeps its id.
  pcie_fails(3);
  auto later = (*driver)->Discover();
  pcie_fails(-1);
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), StatusCode::kUnavailable);
  for (const char* want : {"NPU card 3 device 0", "dcmi_get_device_pcie_info_v2", "npu-smi"}) {
    EXPECT_NE(later.status().message().find(want), std::string::npos) << later.status().message();
  }
  auto spec = (*driver)->BuildContainerSpec({{chip3, 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "3");
}

// A driver that exports the PCIe query but answers "not supported" for every
// chip (a lasting answer; npu-smi takes it as "no PCIe info") names the chips
// by their physical ids, as one without the query does: nothing is left out.
TEST(DcmiBindingTest, APcieQueryAnsweredNotSupportedNamesTheChipsByPhysicalId) {
  FakeHandle fake(ACCELPOOL_FAKE_DCMI);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto pcie_fails = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_dcmi_pcie_fails"));
  ASSERT_NE(pcie_fails, nullptr);
  FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kAscend, 8);
  auto driver = Driver("/nonexistent", dev.root());
  ASSERT_TRUE(driver.ok());
  pcie_fails(-2);
  auto start = (*driver)->DiscoverPartial();
  auto again = (*driver)->Discover();
  pcie_fails(-1);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  ASSERT_EQ(start->front().devices.size(), 8u);
  EXPECT_EQ(start->front().devices[3].id.rfind("NPU-phy", 0), 0u) << start->front().devices[3].id;
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->front().devices[3].id, start->front().devices[3].id) << "stable";
}

TEST(DcmiBindingTest, AbsentOrForeignLibraryIsAClearError) {
  auto absent = NewDlDcmi({"/nonexistent/libdcmi.so"});
  EXPECT_EQ(absent.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(absent.status().message().find("install the vendor driver"), std::string::npos);
  auto foreign = NewDlDcmi({ACCELPOOL_FAKE_NVIDIA_ML});
  ASSERT_TRUE(foreign.ok());
  Status st = (*foreign)->Init();
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("dcmi_init"), std::string::npos) << st.ToString();
  EXPECT_FALSE((*foreign)->Chips().ok());
  EXPECT_FALSE((*foreign)->Health({0, 0}).ok());
}

}  // namespace
}  // namespace accelpool::vendors::ascend
