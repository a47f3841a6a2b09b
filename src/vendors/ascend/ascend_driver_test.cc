#include "vendors/ascend/ascend_driver.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>

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
      out.push_back({i / 2, i % 2});
    }
    return out;
  }
  StatusOr<DcmiDeviceInfo> Info(const DcmiChipId& c) override {
    int i = c.card * 2 + c.device;
    if (i == fail_info) {
      return UnavailableError(
          "dcmi_get_device_hbm_info failed with DCMI code -8005; check the NPU driver with "
          "npu-smi info");
    }
    DcmiDeviceInfo d;
    d.logic_id = i;
    d.phy_id = i + 100;  // physical ids differ from logic ids on real boards
    d.chip_name = chip_;
    d.aicore = 24;
    d.memory_mib = 65536;
    char bus[32];
    snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0xc1 + i);
    d.pci_bus = bus;
    d.numa = numa_[static_cast<size_t>(i) % numa_.size()];
    d.super_pod_id = super_pod_;
    return d;
  }
  StatusOr<uint32_t> Health(const DcmiChipId& c) override {
    int i = c.card * 2 + c.device;
    int h = health[static_cast<size_t>(i)].load();
    if (h < 0) {
      return UnavailableError("dcmi_get_device_health failed with DCMI code -8020");
    }
    return static_cast<uint32_t>(h);
  }

  std::array<std::atomic<int>, 16> health{};  // alarm level per chip; -1: DCMI error
  int fail_info = -1;

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
      {"310P3", 8, "Ascend310P3", "ascend-310p-duo"},
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

TEST(AscendDriverTest, DcmiErrorMidDiscoveryIsClear) {
  auto dcmi = std::make_unique<FakeDcmi>("910B3", 8, std::vector<int>{0});
  dcmi->fail_info = 5;
  AscendDriver d(std::move(dcmi), Options("n"));
  auto invs = d.Discover();
  ASSERT_FALSE(invs.ok());
  EXPECT_NE(invs.status().message().find("NPU card 2 device 1"), std::string::npos);
  EXPECT_NE(invs.status().message().find("npu-smi"), std::string::npos);
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
