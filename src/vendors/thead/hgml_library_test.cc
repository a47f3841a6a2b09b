#include "vendors/thead/hgml_library.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "vendors/library_driver.h"
#include "vendors/library_specs.h"
#include "vendors/test_util.h"

namespace accelpool::vendors::thead {
namespace {

// HGML as a 16-PPU node answers: "PPU-ZW810E", 96 GiB, NUMA groups of four
// on nodes 4, 2, 6, 0 (the published 16-PPU sample).
class FakeHgml : public nvidia::NvmlLibrary {
 public:
  Status Init() override { return Status::Ok(); }
  StatusOr<int32_t> DeviceCount() override { return 16; }
  StatusOr<nvidia::NvmlDeviceInfo> DeviceInfo(int32_t i) override {
    if (i == fail) {
      return UnavailableError(
          "hgmlDeviceGetMemoryInfo failed: Unknown Error (code 999); "
          "check the driver with ppu-smi");
    }
    static const int kNuma[] = {4, 2, 6, 0};
    nvidia::NvmlDeviceInfo d;
    d.uuid = "PPU-" + std::to_string(7000 + i);
    d.name = "PPU-ZW810E";
    d.memory_mib = 98304;
    d.minor = i;
    d.numa = kNuma[i / 4];
    d.pci_bus = "00000000:" + std::to_string(10 + i) + ":00.0";
    return d;
  }
  StatusOr<nvidia::P2PLevel> CommonAncestor(int32_t, int32_t) override {
    return nvidia::P2PLevel::kSystem;
  }
  StatusOr<std::vector<nvidia::NvLinkRemote>> NvLinkRemotes(int32_t) override {
    return std::vector<nvidia::NvLinkRemote>{};
  }
  StatusOr<nvidia::XidRegistration> RegisterXidEvents() override {
    return UnimplementedError("no events");
  }
  Status RegisterXidEventsFor(int32_t) override { return UnimplementedError("no events"); }
  StatusOr<bool> RetiredPagesPending(int32_t) override {
    return UnimplementedError("no page retirement");
  }
  StatusOr<std::optional<nvidia::XidEvent>> WaitXid(int32_t) override {
    return std::optional<nvidia::XidEvent>();
  }
  Status Probe(int32_t i) override {
    return i == fail ? UnavailableError("PPU does not answer") : Status::Ok();
  }
  StatusOr<int64_t> MemoryUsedMib(int32_t i) override {
    if (i == fail) return UnavailableError("PPU does not answer");
    return i == 2 ? 30720 : 0;
  }
  StatusOr<std::vector<nvidia::NvmlProcess>> RunningProcesses(int32_t i) override {
    if (i == fail) return UnavailableError("PPU does not answer");
    if (i == 2) return std::vector<nvidia::NvmlProcess>{{4242, 28672}, {4300, -1}};
    return std::vector<nvidia::NvmlProcess>{};
  }
  int fail = -1;
};

// Memory in use comes from HGML's memory query (as NVML's), per PPU; a PPU
// that does not answer is left out.
TEST(HgmlLibraryTest, MemoryInUseIsHgmlsFigurePerPpu) {
  auto fake = std::make_unique<FakeHgml>();
  FakeHgml* hgml = fake.get();
  LibraryDriver d(HgmlDeviceLibrary(std::move(fake)), TheadSpec(), "ppu-node");
  ASSERT_TRUE(d.Discover().ok());
  auto used = d.MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  ASSERT_EQ(used->size(), 16u);
  EXPECT_EQ(used->at("PPU-7002"), 30720);
  EXPECT_EQ(used->at("PPU-7003"), 0);
  hgml->fail = 2;
  used = d.MemoryInUse();
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(used->count("PPU-7002"), 0u);
  EXPECT_EQ(used->size(), 15u);
}

// HGML lists each PPU's processes as NVML does (the NVML binding with the
// hgml prefix), so the Event for foreign memory names them on T-Head too.
TEST(HgmlLibraryTest, MemoryHoldersAreHgmlsProcessListsPerPpu) {
  auto fake = std::make_unique<FakeHgml>();
  FakeHgml* hgml = fake.get();
  LibraryDriver d(HgmlDeviceLibrary(std::move(fake)), TheadSpec(), "ppu-node");
  EXPECT_EQ(d.MemoryHolders().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(d.Discover().ok());
  auto held = d.MemoryHolders();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 16u);
  EXPECT_EQ(held->at("PPU-7002"), (std::vector<ProcessMemory>{{4242, 28672}, {4300, -1}}));
  EXPECT_TRUE(held->at("PPU-7003").empty());
  hgml->fail = 2;
  held = d.MemoryHolders();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->count("PPU-7002"), 0u);
}

TEST(HgmlLibraryTest, MapsA16PpuNodeThroughTheSharedDriver) {
  vendors::testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kThead, 16);
  LibraryDriverSpec spec_in = TheadSpec();
  spec_in.device_root = dev.root();
  LibraryDriver d(HgmlDeviceLibrary(std::make_unique<FakeHgml>()), spec_in, "ppu-node");
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.vendor, core::Vendor::kThead);
  EXPECT_EQ(inv.topology.kind, "thead-ppu-x16");
  ASSERT_EQ(inv.devices.size(), 16u);
  EXPECT_EQ(inv.devices[0].id, "PPU-7000");
  EXPECT_EQ(inv.devices[5].numa, 2);
  EXPECT_EQ(inv.devices[15].numa, 0);
  // ICN everywhere: the profile's link levels are kept, same-NUMA pairs first.
  EXPECT_GT(inv.LinkScore(0, 15), 0);
  EXPECT_GE(inv.LinkScore(0, 1), inv.LinkScore(0, 15));
  auto spec = d.BuildContainerSpec({{inv.devices[3], 0, 0, true}, {inv.devices[9], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("CUDA_VISIBLE_DEVICES"), "0,1");
}

// Counts calls that enter while another is still inside (HGML's thread
// safety is not published, unlike NVML's).
class CountingHgml : public FakeHgml {
 public:
  explicit CountingHgml(std::shared_ptr<std::atomic<int>> overlaps)
      : overlaps_(std::move(overlaps)) {}
  StatusOr<int32_t> DeviceCount() override {
    InCall c(this);
    return FakeHgml::DeviceCount();
  }
  StatusOr<nvidia::NvmlDeviceInfo> DeviceInfo(int32_t i) override {
    InCall c(this);
    return FakeHgml::DeviceInfo(i);
  }
  Status Probe(int32_t i) override {
    InCall c(this);
    return FakeHgml::Probe(i);
  }

 private:
  struct InCall {
    explicit InCall(CountingHgml* h) : h_(h) {
      if (h_->inside_.fetch_add(1) > 0) {
        h_->overlaps_->fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ~InCall() { h_->inside_.fetch_sub(1); }
    CountingHgml* h_;
  };
  std::atomic<int> inside_{0};
  std::shared_ptr<std::atomic<int>> overlaps_;
};

TEST(HgmlLibraryTest, DiscoveryAndHealthPollingDoNotOverlapInTheLibrary) {
  auto overlaps = std::make_shared<std::atomic<int>>(0);
  LibraryDriverSpec spec = TheadSpec();
  spec.health_poll = std::chrono::milliseconds(1);
  LibraryDriver d(HgmlDeviceLibrary(std::make_unique<CountingHgml>(overlaps)), spec, "n");
  ASSERT_TRUE(d.Discover().ok());
  {
    vendors::testing::HealthRecorder health(d);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(d.Discover().ok());
    }
    EXPECT_TRUE(health.Stop().empty());
  }
  EXPECT_EQ(overlaps->load(), 0) << "two HGML calls were inside the library at once";
}

TEST(HgmlLibraryTest, ErrorsMidDiscoveryAndAbsentLibrary) {
  auto fake = std::make_unique<FakeHgml>();
  fake->fail = 9;
  LibraryDriver d(HgmlDeviceLibrary(std::move(fake)), TheadSpec(), "n");
  auto invs = d.Discover();
  ASSERT_FALSE(invs.ok());
  EXPECT_NE(invs.status().message().find("HGML device 9"), std::string::npos);
  EXPECT_NE(invs.status().message().find("ppu-smi"), std::string::npos);
  EXPECT_EQ(NewHgmlLibrary().status().code(), StatusCode::kUnavailable);
}

// At the plugin's start (DiscoverPartial) a PPU that cannot be read is left
// out, with an error naming it and what to check, and the other 15 are
// served. A later discovery that cannot read a PPU fails as a whole, and the
// PPUs served stay allocatable.
TEST(HgmlLibraryTest, UnreadablePpuIsLeftOutAtStartOnly) {
  auto owned = std::make_unique<FakeHgml>();
  FakeHgml* fake = owned.get();
  fake->fail = 9;
  LibraryDriver d(HgmlDeviceLibrary(std::move(owned)), TheadSpec(), "n");
  auto log = std::make_unique<vendors::testing::LogCapture>();
  auto invs = d.DiscoverPartial();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(log->Has({"HGML device 9", "ppu-smi", "not offered"}));
  log.reset();
  ASSERT_EQ((*invs)[0].devices.size(), 15u);
  const core::Device last = (*invs)[0].devices.back();

  auto later = d.Discover();  // PPU 9 still cannot be read
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("HGML device 9"), std::string::npos);
  auto spec = d.BuildContainerSpec({{last, 0, 0, true}});
  // Still a device of this node (no device nodes here: the spec stops at
  // the missing /dev node, not at "not on this node").
  EXPECT_NE(spec.status().code(), StatusCode::kInvalidArgument) << spec.status().ToString();

  fake->fail = -1;
  auto all = d.Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ((*all)[0].devices.size(), 16u);
}

}  // namespace
}  // namespace accelpool::vendors::thead
