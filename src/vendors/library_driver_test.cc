#include "vendors/library_driver.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>

#include "core/fit.h"
#include "vendors/hygon/rocm_smi_library.h"
#include "vendors/library_specs.h"
#include "vendors/test_util.h"

namespace accelpool::vendors {
namespace {

// A vendor library answering what the vendor's own tool prints for a node.
class FakeLibrary : public DeviceLibrary {
 public:
  FakeLibrary(std::string name, int count, int64_t memory, std::vector<int> numa,
              std::function<LinkKind(int, int)> link)
      : name_(std::move(name)),
        count_(count),
        memory_(memory),
        numa_(std::move(numa)),
        link_(std::move(link)) {}

  std::string_view LibraryName() const override { return "fake SMI"; }
  Status Init() override { return Status::Ok(); }
  StatusOr<int32_t> Count() override { return count_; }
  StatusOr<LibraryDevice> Device(int32_t i) override {
    if (i == fail_index) {
      return UnavailableError("query failed; check the driver with the vendor smi tool");
    }
    LibraryDevice d;
    d.uuid = uuid_empty ? "" : "U-" + std::to_string(i);
    d.name = name_;
    d.memory_mib = memory_;
    char bus[32];
    snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x10 + i);
    d.pci_bus = bus;
    d.numa = numa_[static_cast<size_t>(i) % numa_.size()];
    d.minor = 20 + i;
    return d;
  }
  StatusOr<LinkKind> Link(int32_t a, int32_t b) override {
    if (a == link_fails_from && b == link_fails_to) {
      return UnavailableError("link query failed; check the driver with the vendor smi tool");
    }
    if (!link_) {
      return UnimplementedError("no link query");
    }
    return link_(a, b);
  }
  StatusOr<bool> Healthy(int32_t i) override {
    int h = health[static_cast<size_t>(i)].load();
    if (h < 0) {
      return UnavailableError("device does not answer");
    }
    return h == 0;
  }

  std::array<std::atomic<int>, 16> health{};  // 0 ok, 1 fault, -1 no answer
  int fail_index = -1;
  bool uuid_empty = false;
  int link_fails_from = -1;  // the link query of this pair fails
  int link_fails_to = -1;

 private:
  std::string name_;
  int count_;
  int64_t memory_;
  std::vector<int> numa_;
  std::function<LinkKind(int, int)> link_;
};

bool SameQuad(int a, int b) { return a / 4 == b / 4; }

TEST(LibraryDriverTest, MapsEachVendorsDocumentedNode) {
  struct Case {
    std::string name;
    LibraryDriverSpec spec;
    std::string product;
    int count;
    int64_t memory;
    std::vector<int> numa;
    std::function<LinkKind(int, int)> link;
    std::string want_model;
    std::string want_kind;
    std::vector<std::pair<int, int>> want_fast;  // pairs scoring 100
    std::vector<std::pair<int, int>> want_slow;  // pairs scoring below 100
  };
  const std::vector<Case> cases = {
      // P800: wings {0-3} {4-7} full mesh plus direct links (i, i+4); wing = NUMA.
      {"kunlunxin p800",
       KunlunxinSpec(),
       "P800 OAM",
       8,
       98304,
       {0, 0, 0, 0, 1, 1, 1, 1},
       [](int a, int b) {
         return SameQuad(a, b) || std::abs(a - b) == 4 ? LinkKind::kVendorLink
                                                       : LinkKind::kCrossNuma;
       },
       "P800",
       "kunlunxin-p800-x8",
       {{0, 3}, {1, 5}},
       {{0, 5}}},
      // C500: MetaXLink zones {0-3} {4-7}, SYS between, NUMA 0/1.
      {"metax c500",
       MetaxSpec(),
       "MetaX C500",
       8,
       65536,
       {0, 0, 0, 0, 1, 1, 1, 1},
       [](int a, int b) { return SameQuad(a, b) ? LinkKind::kVendorLink : LinkKind::kCrossNuma; },
       "C500",
       "metax-c500-x8",
       {{4, 7}},
       {{3, 4}}},
      // S4000/S5000 sample: NODE inside {0-3} {4-7}, SYS between, no MtLink.
      {"moore threads s4000",
       MthreadsSpec(),
       "MTT S4000",
       8,
       49152,
       {0, 0, 0, 0, 1, 1, 1, 1},
       [](int a, int b) { return SameQuad(a, b) ? LinkKind::kSameNuma : LinkKind::kCrossNuma; },
       "MTT S4000",
       "mthreads-s4000-x8",
       {},
       {{0, 1}, {0, 7}}},
      // MLU370-X8: the two chips of a board are MLULinked.
      {"cambricon mlu370-x8",
       CambriconSpec(),
       "MLU370-X8",
       8,
       24576,
       {0, 0, 0, 0, 1, 1, 1, 1},
       [](int a, int b) {
         return a / 2 == b / 2 ? LinkKind::kVendorLink : LinkKind::kPcieHostBridge;
       },
       "MLU370-X8",
       "cambricon-mlu370-x8",
       {{2, 3}},
       {{1, 2}}},
      // K100-AI sample: all pairs PXB, all NUMA 0.
      {"hygon k100-ai",
       HygonSpec(),
       "K100_AI",
       8,
       65536,
       {0},
       [](int, int) { return LinkKind::kPcieSwitch; },
       "K100-AI",
       "hygon-k100-x8",
       {},
       {{0, 7}}},
      // 16 PPUs, every pair on ICN; NUMA groups of 4 are 4, 2, 6, 0.
      {"thead ppu",
       TheadSpec(),
       "PPU-ZW810E",
       16,
       98304,
       {4, 4, 4, 4, 2, 2, 2, 2, 6, 6, 6, 6, 0, 0, 0, 0},
       [](int, int) { return LinkKind::kVendorLink; },
       "PPU-ZW810E",
       "thead-ppu-x16",
       {{0, 15}},
       {}},
      // An unknown shape falls back to NUMA groups, without link data.
      {"hygon x3", HygonSpec(), "K100_AI", 3, 65536, {0, 1, 1}, nullptr, "K100-AI", "", {}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LibraryDriver d(std::make_unique<FakeLibrary>(c.product, c.count, c.memory, c.numa, c.link),
                    c.spec, "node-a");
    auto invs = d.Discover();
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    ASSERT_EQ(invs->size(), 1u);
    const core::NodeInventory& inv = (*invs)[0];
    EXPECT_EQ(inv.vendor, c.spec.vendor);
    ASSERT_EQ(inv.devices.size(), static_cast<size_t>(c.count));
    EXPECT_EQ(inv.devices[0].model, c.want_model);
    EXPECT_EQ(inv.topology.kind, c.want_kind);
    EXPECT_EQ(inv.devices[1].numa, c.numa[1 % c.numa.size()]);
    EXPECT_EQ(inv.devices[1].memory_mib, c.memory);
    for (auto [a, b] : c.want_fast) {
      EXPECT_EQ(inv.LinkScore(a, b), 100) << a << "-" << b;
    }
    for (auto [a, b] : c.want_slow) {
      EXPECT_LT(inv.LinkScore(a, b), 100) << a << "-" << b;
    }
    if (!c.link) {
      EXPECT_TRUE(inv.topology.links.empty());
      EXPECT_EQ(inv.topology.groups.size(), 2u);  // NUMA 0 and 1
    }
  }
}

TEST(LibraryDriverTest, ContainerSpecUsesVendorNodesAndEnv) {
  testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kMetax, 8, 20);
  LibraryDriverSpec spec_in = MetaxSpec();
  spec_in.nodes_from_sysfs_only = false;  // the fake library lists no sysfs nodes
  spec_in.device_root = dev.root();
  LibraryDriver d(
      std::make_unique<FakeLibrary>("MetaX C500", 8, 65536, std::vector<int>{0}, nullptr), spec_in,
      "n");
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok());
  const auto& devs = (*invs)[0].devices;
  auto spec = d.BuildContainerSpec({{devs[2], 0, 0, true}, {devs[5], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->env.empty());  // the mounted nodes select the GPUs: no host number in env
  std::vector<std::string> paths;
  for (const DeviceNode& n : spec->devices) {
    paths.push_back(n.host_path);
  }
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/dri/card22"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/mxcd"), paths.end());
  core::Device other = devs[0];
  other.id = "MX-elsewhere";
  EXPECT_EQ(d.BuildContainerSpec({{other, 0, 0, true}}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(LibraryDriverTest, LibraryErrorsAndMissingIdsAreClear) {
  {
    auto lib = std::make_unique<FakeLibrary>("P800", 8, 98304, std::vector<int>{0}, nullptr);
    lib->fail_index = 6;
    LibraryDriver d(std::move(lib), KunlunxinSpec(), "n");
    auto invs = d.Discover();
    ASSERT_FALSE(invs.ok());
    EXPECT_NE(invs.status().message().find("fake SMI device 6"), std::string::npos);
  }
  {
    auto lib = std::make_unique<FakeLibrary>("P800", 2, 98304, std::vector<int>{0}, nullptr);
    lib->uuid_empty = true;  // ids come from the PCI bus then
    LibraryDriver d(std::move(lib), KunlunxinSpec(), "n");
    auto invs = d.Discover();
    ASSERT_TRUE(invs.ok());
    EXPECT_EQ((*invs)[0].devices[1].id, "XPU-0000-11-00.0");
  }
}

// A link query failing for one pair partway through the matrix keeps the
// profile's links (the pair would score 0 beside the pairs that were read)
// and serves every device: a library that errors for a link must not take
// the node's devices away.
TEST(LibraryDriverTest, ALinkQueryFailingMidMatrixKeepsTheProfilesLinks) {
  // What the profile alone gives: a library that cannot say (kUnimplemented).
  LibraryDriver none(
      std::make_unique<FakeLibrary>("MetaX C500", 8, 65536, std::vector<int>{0}, nullptr),
      MetaxSpec(), "n");
  auto profile_only = none.Discover();
  ASSERT_TRUE(profile_only.ok()) << profile_only.status().ToString();
  EXPECT_EQ((*profile_only)[0].topology.kind, "metax-c500-x8");

  auto make = [] {
    // Measured links unlike the profile's: every pair across NUMA nodes.
    return std::make_unique<FakeLibrary>("MetaX C500", 8, 65536,
                                         std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1},
                                         [](int, int) { return LinkKind::kCrossNuma; });
  };
  auto measured_lib = make();
  LibraryDriver measured(std::move(measured_lib), MetaxSpec(), "n");
  auto read = measured.Discover();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_NE((*read)[0].topology.links, (*profile_only)[0].topology.links)
      << "the fake's links must differ from the profile's for this test to tell them apart";

  auto lib = make();
  lib->link_fails_from = 5;
  lib->link_fails_to = 6;
  LibraryDriver d(std::move(lib), MetaxSpec(), "n");
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  ASSERT_EQ((*invs)[0].devices.size(), 8u);
  EXPECT_EQ((*invs)[0].topology.kind, "metax-c500-x8");
  EXPECT_EQ((*invs)[0].topology.links, (*profile_only)[0].topology.links);

  // A pair the library answers with a link kind it does not name (ROCm SMI:
  // an IO link type other than XGMI or PCIe) is as good as unread: beside
  // measured pairs it would score 0, below two devices across the sockets.
  auto unknown = std::make_unique<FakeLibrary>(
      "MetaX C500", 8, 65536, std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1},
      [](int a, int b) { return a == 2 && b == 3 ? LinkKind::kUnknown : LinkKind::kCrossNuma; });
  LibraryDriver u(std::move(unknown), MetaxSpec(), "n");
  testing::LogCapture log;
  auto with_unknown = u.Discover();
  ASSERT_TRUE(with_unknown.ok()) << with_unknown.status().ToString();
  EXPECT_EQ((*with_unknown)[0].topology.links, (*profile_only)[0].topology.links);
  EXPECT_TRUE(log.Has({"devices 2 and 3", "link kind it does not name", "metax-c500-x8"}));
}

// A library that numbers the XPUs across the sockets alternately: a P800's
// wings (required groups) follow the NUMA nodes it reports, never one that
// spans both, and the profile's link scores follow the devices: the two
// XPUs of one wing score as one wing, the direct cross-wing partners as such.
TEST(LibraryDriverTest, WingsFollowNumaNotIndex) {
  LibraryDriver d(std::make_unique<FakeLibrary>("P800 OAM", 8, 98304,
                                                std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}, nullptr),
                  KunlunxinSpec(), "n");
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.topology.kind, "kunlunxin-p800-x8");
  EXPECT_EQ(inv.topology.group_rule, core::GroupRule::kRequired);
  const std::vector<std::vector<int32_t>> want = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  EXPECT_EQ(inv.topology.groups, want);
  ASSERT_TRUE(core::ValidateInventory(inv).ok());
  // XPU 2 stands where the profile's 1 does (same wing as 0); XPU 1 where its 4 does.
  EXPECT_EQ(inv.LinkScore(0, 2), inv.LinkScore(0, 6));
  EXPECT_GT(inv.LinkScore(0, 2), inv.LinkScore(0, 3));
  EXPECT_GT(inv.LinkScore(0, 1), inv.LinkScore(0, 3)) << "0 and 1 are direct cross-wing partners";

  // NUMA nodes that do not split the XPUs four and four leave the profile's wings.
  LibraryDriver uneven(std::make_unique<FakeLibrary>(
                           "P800 OAM", 8, 98304, std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1}, nullptr),
                       KunlunxinSpec(), "n");
  auto kept = uneven.Discover();
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  const std::vector<std::vector<int32_t>> index_wings = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ((*kept)[0].topology.groups, index_wings);
}

TEST(LibraryDriverTest, PolledHealthIsTwoWay) {
  auto owned = std::make_unique<FakeLibrary>("K100_AI", 8, 65536, std::vector<int>{0}, nullptr);
  FakeLibrary* lib = owned.get();
  LibraryDriverSpec spec = HygonSpec();
  spec.health_poll = std::chrono::milliseconds(5);
  LibraryDriver d(std::move(owned), spec, "n");
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  lib->health[3] = 1;
  health.WaitFor(1);
  lib->health[3] = 0;
  health.WaitFor(2);
  lib->health[5] = -1;
  health.WaitFor(3);
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_TRUE(events[1].healthy);
  EXPECT_EQ(events[2].device_id, "U-5");
  EXPECT_NE(events[2].reason.find("does not answer"), std::string::npos);
}

TEST(RocmSmiTest, BdfIdsDecodeAsLspciPrintsThem) {
  struct Case {
    uint64_t id;
    std::string want;
  };
  const std::vector<Case> cases = {
      {(0x3bULL << 8), "0000:3b:00.0"},
      {(1ULL << 32) | (0xc1ULL << 8) | (0x1fULL << 3) | 0x7, "0001:c1:1f.7"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(hygon::BdfFromId(c.id), c.want);
  }
  EXPECT_EQ(hygon::NewRocmSmiLibrary().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace accelpool::vendors
