#include "vendors/nvidia/nvidia_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "core/fit.h"
#include "vendors/dl_library.h"
#include "vendors/nvidia/xid.h"
#include "vendors/test_util.h"

namespace accelpool::vendors::nvidia {
namespace {

// An HGX H200 as nvidia-smi reports it: 8 x "NVIDIA H200", 143771 MiB,
// bus ids 19/3B/4C/5D on NUMA 0 and 9B/BB/CB/DB on NUMA 1, 18 NVLinks per GPU
// to the NVSwitches ("nvidia-smi topo -m": NV18 for every pair).
class FakeNvml : public NvmlLibrary {
 public:
  FakeNvml() {
    const char* buses[] = {"19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"};
    for (int i = 0; i < 8; ++i) {
      NvmlDeviceInfo d;
      d.uuid = "GPU-" + std::to_string(1000 + i) + "-h200";
      d.name = "NVIDIA H200";
      d.pci_bus = std::string("00000000:") + buses[i] + ":00.0";
      d.memory_mib = 143771;
      d.minor = i;
      d.numa = i < 4 ? 0 : 1;
      devices.push_back(d);
      std::vector<NvLinkRemote> l;
      for (int k = 0; k < 18; ++k) {
        l.push_back({"00000000:0" + std::to_string(5 + k % 4) + ":00.0",  // NVSwitches
                     NvLinkPeer::kSwitch});
      }
      links.push_back(l);
    }
  }

  Status Init() override { return init_status; }
  StatusOr<int32_t> DeviceCount() override { return static_cast<int32_t>(devices.size()); }
  StatusOr<NvmlDeviceInfo> DeviceInfo(int32_t i) override {
    if (i == fail_info_index) {
      return UnavailableError("nvmlDeviceGetMemoryInfo failed: GPU is lost (NVML code 15)");
    }
    return devices.at(static_cast<size_t>(i));
  }
  StatusOr<P2PLevel> CommonAncestor(int32_t a, int32_t b) override {
    if (a == ancestor_fails || b == ancestor_fails) {
      return UnavailableError("nvmlDeviceGetTopologyCommonAncestor failed: Unknown Error");
    }
    return devices[a].numa == devices[b].numa ? same_numa_level : P2PLevel::kSystem;
  }
  StatusOr<std::vector<NvLinkRemote>> NvLinkRemotes(int32_t i) override {
    if (i == remotes_fail) {
      return UnavailableError("nvmlDeviceGetNvLinkRemotePciInfo_v2 failed: Unknown Error");
    }
    return links.at(static_cast<size_t>(i));
  }
  StatusOr<XidRegistration> RegisterXidEvents() override {
    std::lock_guard<std::mutex> lock(mu);
    return register_result;
  }
  Status RegisterXidEventsFor(int32_t i) override {
    std::lock_guard<std::mutex> lock(mu);
    ++register_one_calls;
    return ((register_one_fail_mask >> i) & 1u) != 0
               ? UnavailableError("nvmlDeviceRegisterEvents failed: Unknown Error (code 999)")
               : Status::Ok();
  }
  StatusOr<std::optional<XidEvent>> WaitXid(int32_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu);
    if (!queue.empty()) {
      auto e = queue.front();
      queue.pop_front();
      lock.unlock();
      if (!e.ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return e;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
    return std::optional<XidEvent>();
  }
  Status Probe(int32_t i) override {
    if (((probe_fail_mask.load() >> i) & 1u) != 0) {
      return FailedPreconditionError("rows are pending remapping; reset the GPU");
    }
    return probe_ok.load() ? Status::Ok() : UnavailableError("GPU " + std::to_string(i) + " lost");
  }

  StatusOr<bool> RetiredPagesPending(int32_t i) override {
    const int pending = retire_pending.load();
    if (pending == -2) return UnimplementedError("no page retirement");
    return i == pending;
  }

  StatusOr<std::vector<NvmlMigInfo>> MigDevices(int32_t i) override {
    auto it = migs.find(i);
    return it == migs.end() ? StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>())
                            : it->second;
  }

  StatusOr<NvmlFabric> FabricInfo(int32_t i) override {
    auto it = fabric.find(i);
    return it == fabric.end() ? StatusOr<NvmlFabric>(UnimplementedError("no fabric query"))
                              : it->second;
  }

  void Push(StatusOr<std::optional<XidEvent>> e) {
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(std::move(e));
  }

  std::vector<NvmlDeviceInfo> devices;
  std::vector<std::vector<NvLinkRemote>> links;
  std::map<int32_t, StatusOr<std::vector<NvmlMigInfo>>> migs;
  std::map<int32_t, StatusOr<NvmlFabric>> fabric;
  Status init_status;
  int32_t fail_info_index = -1;
  P2PLevel same_numa_level = P2PLevel::kNode;  // the path of two GPUs on one NUMA node
  int32_t ancestor_fails = -1;                 // the path query of every pair with this GPU fails
  int32_t remotes_fail = -1;                   // the NVLink query of this GPU fails
  std::atomic<bool> probe_ok{true};
  std::atomic<uint32_t> probe_fail_mask{0};  // bit i: GPU i fails its probe
  std::atomic<int> retire_pending{-2};  // GPU with a page pending retirement; -2: not supported
  StatusOr<XidRegistration> register_result = XidRegistration{};  // mu held while a watch runs
  uint32_t register_one_fail_mask = ~0u;  // bit i: registering GPU i again fails; mu held
  int register_one_calls = 0;             // mu held
  std::mutex mu;
  std::deque<StatusOr<std::optional<XidEvent>>> queue;
};

NvidiaOptions Options() {
  NvidiaOptions o;
  o.node = "gpu-node";
  o.recovery_quiet = std::chrono::milliseconds(50);
  o.event_wait = std::chrono::milliseconds(5);
  return o;
}

TEST(NvidiaDriverTest, MapsHgxH200IntoTheInventory) {
  auto lib = std::make_unique<FakeNvml>();
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  ASSERT_EQ(invs->size(), 1u);
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.node, "gpu-node");
  EXPECT_EQ(inv.topology.kind, "nvidia-hgx-8");
  ASSERT_EQ(inv.devices.size(), 8u);
  EXPECT_EQ(inv.devices[0].id, "GPU-1000-h200");
  EXPECT_EQ(inv.devices[0].model, "H200");
  EXPECT_EQ(inv.devices[5].memory_mib, 143771);
  EXPECT_EQ(inv.devices[5].numa, 1);
  EXPECT_EQ(inv.devices[5].pci_bus, "00000000:BB:00.0");
  EXPECT_EQ(inv.devices[5].max_shares, 10);
  ASSERT_EQ(inv.topology.links.size(), 64u);
  // Same NUMA: NODE (20) + 18 NVLinks; across sockets: SYS (10) + 18 NVLinks.
  EXPECT_EQ(inv.LinkScore(0, 1), 20 + 1800);
  EXPECT_EQ(inv.LinkScore(0, 4), 10 + 1800);
  EXPECT_EQ(inv.LinkScore(3, 3), 0);
}

// A link query that fails (some boards and VMs answer errors for the PCIe
// path or the NVLink remotes) costs only that measurement: the pair is scored
// by its NUMA nodes, the GPU as one without NVLinks, and every GPU is served.
TEST(NvidiaDriverTest, FailingLinkQueriesAreScoredFromWhatIsKnownNotFatal) {
  auto lib = std::make_unique<FakeNvml>();
  lib->same_numa_level = P2PLevel::kHostBridge;  // measured: PHB, told apart from NODE
  lib->ancestor_fails = 2;
  lib->remotes_fail = 6;
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  ASSERT_EQ(inv.devices.size(), 8u);
  EXPECT_EQ(inv.topology.kind, "nvidia-hgx-8") << "the other seven reach the NVSwitches";
  // Measured: PHB (30) + 18 NVLinks. GPU 2's path unread: NODE (20) beside
  // GPU 1 (same NUMA node), SYS (10) beside GPU 5; its NVLinks still count.
  EXPECT_EQ(inv.LinkScore(0, 1), 30 + 1800);
  EXPECT_EQ(inv.LinkScore(2, 1), 20 + 1800);
  EXPECT_EQ(inv.LinkScore(2, 5), 10 + 1800);
  // GPU 6's NVLinks unread: no NVLink to any other GPU, the PCIe path kept.
  EXPECT_EQ(inv.LinkScore(6, 7), 30);
  EXPECT_EQ(inv.LinkScore(4, 6), 30);
}

// The node's NVLink domain: only when every GPU registered with the fabric
// and all name the same one; a GPU whose query fails leaves the node without
// one (logged), never fails discovery.
TEST(NvidiaDriverTest, NvlinkDomainNeedsEveryGpuRegisteredInOneDomain) {
  auto lib = std::make_unique<FakeNvml>();
  FakeNvml* fake = lib.get();
  NvmlFabric f;
  f.state = NvmlFabric::State::kCompleted;
  f.ok = true;
  f.cluster_uuid = "0a0b0c0d-0000-1111-2222-333344445555";
  f.clique = 32766;
  for (int32_t i = 0; i < 8; ++i) fake->fabric.insert_or_assign(i, f);
  NvidiaDriver d(std::move(lib), Options());
  auto domain = [&]() -> std::string {
    auto invs = d.Discover();
    EXPECT_TRUE(invs.ok()) << invs.status().ToString();
    return invs.ok() ? invs->front().topology.super_node : "<none>";
  };
  EXPECT_EQ(domain(), "0a0b0c0d-0000-1111-2222-333344445555.32766");
  fake->fabric.insert_or_assign(
      5, UnavailableError("nvmlDeviceGetGpuFabricInfoV failed: Unknown Error"));
  EXPECT_EQ(domain(), "");
  fake->fabric.erase(5);  // the library has no such query for GPU 5: nothing to join
  EXPECT_EQ(domain(), "");
  NvmlFabric pending = f;
  pending.state = NvmlFabric::State::kInProgress;
  fake->fabric.insert_or_assign(5, pending);
  EXPECT_EQ(domain(), "");
  fake->fabric.insert_or_assign(5, f);
  EXPECT_EQ(domain(), "0a0b0c0d-0000-1111-2222-333344445555.32766");
}

TEST(NvidiaDriverTest, LinkScoreTable) {
  struct Case {
    P2PLevel level;
    int32_t nvlinks;
    int32_t want;
  };
  const std::vector<Case> cases = {{P2PLevel::kInternal, 0, 60}, {P2PLevel::kSingle, 0, 50},
                                   {P2PLevel::kMultiple, 0, 40}, {P2PLevel::kHostBridge, 0, 30},
                                   {P2PLevel::kNode, 0, 20},     {P2PLevel::kSystem, 0, 10},
                                   {P2PLevel::kSystem, 4, 410},  {P2PLevel::kNode, -1, 20}};
  for (const Case& c : cases) {
    EXPECT_EQ(NvidiaLinkScore(c.level, c.nvlinks), c.want);
  }
}

TEST(NvidiaDriverTest, BridgedPcieCardsScoreTheirPartner) {
  auto lib = std::make_unique<FakeNvml>();
  lib->devices.resize(4);
  lib->links = {{{"00000000:3B:00.0", NvLinkPeer::kGpu}},
                {{"00000000:19:00.0", NvLinkPeer::kUnknown}},
                {},
                {}};
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.LinkScore(0, 1), 20 + 100);
  EXPECT_EQ(inv.LinkScore(0, 2), 20);
}

// The profile's halves and pairs go by index; what NVML measures wins: a
// PCIe board whose NVLink bridges join GPUs 0-2, 1-3, 4-6 and 5-7, with
// GPUs alternating between two NUMA nodes, keeps those pairs together and
// prefers one NUMA node, and a request for two GPUs takes a bridged pair.
TEST(NvidiaDriverTest, GroupsAndBridgedPairsFollowWhatNvmlMeasured) {
  auto lib = std::make_unique<FakeNvml>();
  const int partner[] = {2, 3, 0, 1, 6, 7, 4, 5};
  for (int i = 0; i < 8; ++i) {
    lib->devices[i].numa = i % 2;
    lib->links[i] = {{lib->devices[partner[i]].pci_bus, NvLinkPeer::kGpu}};
  }
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.topology.kind, "nvidia-pcie-8");
  EXPECT_EQ(inv.topology.modules,
            (std::vector<std::vector<int32_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(inv.devices[5].module, 3);
  EXPECT_EQ(inv.topology.groups, (std::vector<std::vector<int32_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  core::NodeUsage usage = core::NodeUsage::Empty(inv);
  core::DeviceRequest two;
  two.container = "main";
  two.vendor = core::Vendor::kNvidia;
  two.count = 2;
  core::PodRequest pod;
  pod.containers = {two};
  core::FitResult r = core::Fit(pod, inv, usage);
  ASSERT_EQ(r.code, core::FitCode::kFits);
  std::vector<int32_t> got;
  for (const core::Grant& g : r.placement.containers[0].grants) got.push_back(g.device);
  std::sort(got.begin(), got.end());
  EXPECT_TRUE(got == (std::vector<int32_t>{0, 2}) || got == (std::vector<int32_t>{1, 3}) ||
              got == (std::vector<int32_t>{4, 6}) || got == (std::vector<int32_t>{5, 7}))
      << got[0] << "," << got[1];

  // On an HGX board (every pair through the NVSwitches) only the groups
  // change: no pairs.
  auto hgx = std::make_unique<FakeNvml>();
  for (int i = 0; i < 8; ++i) hgx->devices[i].numa = i % 2;
  NvidiaDriver h(std::move(hgx), Options());
  auto hinv = h.Discover();
  ASSERT_TRUE(hinv.ok()) << hinv.status().ToString();
  EXPECT_EQ((*hinv)[0].topology.kind, "nvidia-hgx-8");
  EXPECT_TRUE((*hinv)[0].topology.modules.empty());
  EXPECT_EQ((*hinv)[0].topology.groups,
            (std::vector<std::vector<int32_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

// Profile names from an instance's memory (close to what NVIDIA's MIG user
// guide lists per profile with nvidia-smi mig -lgip) and the GPU's total.
// A PCIe board of nine GPUs bridged in pairs (0-1, 2-3, 4-5, 6-7; 8 alone)
// whose GPU 1 cannot be read at start: the eight served keep the pairs the
// bridges make, by inventory index (never the profile's index pairs), and
// the bridge to the GPU left out makes its partner no NVSwitch GPU.
TEST(NvidiaDriverTest, BridgedPairsFollowTheServedGpusWhenOneIsLeftOut) {
  auto lib = std::make_unique<FakeNvml>();
  NvmlDeviceInfo ninth = lib->devices[7];
  ninth.uuid = "GPU-1008-h200";
  ninth.pci_bus = "00000000:E1:00.0";
  ninth.minor = 8;
  lib->devices.push_back(ninth);
  lib->links.resize(9);
  for (int i = 0; i < 9; ++i) {
    lib->devices[i].numa = 0;
    lib->links[i].clear();
    if (i < 8) lib->links[i] = {{lib->devices[i ^ 1].pci_bus, NvLinkPeer::kGpu}};
  }
  lib->fail_info_index = 1;
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.DiscoverPartial();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  ASSERT_EQ(inv.devices.size(), 8u);
  ASSERT_TRUE(core::ValidateInventory(inv).ok()) << core::ValidateInventory(inv).ToString();
  EXPECT_EQ(inv.topology.kind, "nvidia-pcie-8");
  // Served: GPUs 0, 2, 3, 4, 5, 6, 7, 8 at inventory indices 0..7.
  EXPECT_EQ(inv.topology.modules, (std::vector<std::vector<int32_t>>{{1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(inv.devices[0].module, -1);
  EXPECT_EQ(inv.devices[7].module, -1);
  EXPECT_EQ(inv.LinkScore(1, 2), inv.LinkScore(3, 4));
  EXPECT_GT(inv.LinkScore(1, 2), inv.LinkScore(0, 1));
  // GPU 0's bridge ends on the GPU left out: no NVLink to any served GPU.
  EXPECT_EQ(inv.LinkScore(0, 7), inv.LinkScore(0, 1));
}

TEST(NvidiaDriverTest, MigProfileNamesFollowNvidiasNaming) {
  struct Case {
    int32_t gi, ci;
    int64_t mib, gpu_mib;
    std::string want;
  };
  const std::vector<Case> cases = {
      // A100-SXM4-40GB: 40960 MiB.
      {1, 1, 4864, 40960, "1g.5gb"},
      {2, 2, 9984, 40960, "2g.10gb"},
      {3, 3, 20096, 40960, "3g.20gb"},
      {4, 4, 20096, 40960, "4g.20gb"},
      {7, 7, 40192, 40960, "7g.40gb"},
      // H100 80GB: 81559 MiB.
      {1, 1, 9984, 81559, "1g.10gb"},
      {1, 1, 19968, 81559, "1g.20gb"},
      {3, 3, 40448, 81559, "3g.40gb"},
      {7, 7, 80896, 81559, "7g.80gb"},
      // H200: 143771 MiB.
      {1, 1, 16384, 143771, "1g.18gb"},
      {1, 1, 33280, 143771, "1g.35gb"},
      {2, 2, 33280, 143771, "2g.35gb"},
      {3, 3, 71424, 143771, "3g.71gb"},
      {7, 7, 143360, 143771, "7g.141gb"},
      // A compute instance smaller than its GPU instance.
      {3, 1, 71424, 143771, "1c.3g.71gb"},
      {7, 2, 143360, 143771, "2c.7g.141gb"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MigProfileName(c.gi, c.ci, c.mib, c.gpu_mib), c.want) << c.want;
    EXPECT_TRUE(core::ValidMigProfile(c.want)) << c.want;
  }
  EXPECT_FALSE(core::ValidMigProfile(MigProfileName(0, 0, 0, 143771)));  // "0g.0gb"
}

// NVML's own profile name wins: it carries the attributes the sizes cannot
// tell, in NVIDIA's resource-name spelling. A name that is not a profile of
// the instance's slices is not trusted.
TEST(NvidiaDriverTest, MigProfileNamesFromNvmlKeepTheirAttributes) {
  struct Case {
    int32_t gi, ci;
    int64_t mib, gpu_mib;
    std::string nvml, want;
  };
  const std::vector<Case> cases = {
      {1, 1, 16384, 143771, "1g.18gb+me", "1g.18gb.me"},
      {1, 1, 16384, 143771, "1g.18gb", "1g.18gb"},
      // RTX PRO 6000 Blackwell (97887 MiB): the media and graphics variants.
      {1, 1, 24192, 97887, "1g.24gb-me", "1g.24gb-me"},
      {1, 1, 24192, 97887, "1g.24gb+me.all", "1g.24gb.me.all"},
      {2, 2, 48512, 97887, "2g.48gb+gfx", "2g.48gb.gfx"},
      {2, 1, 48512, 97887, "2g.48gb-me", "1c.2g.48gb-me"},
      // Not a profile of these slices, or not a profile name: the sizes decide.
      {1, 1, 16384, 143771, "2g.35gb", "1g.18gb"},
      {1, 1, 16384, 143771, "1g.18gb+ME", "1g.18gb"},
      {1, 1, 16384, 143771, "MIG 1g.18gb", "1g.18gb"},
      {1, 1, 16384, 143771, "garbage", "1g.18gb"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MigProfileName(c.gi, c.ci, c.mib, c.gpu_mib, c.nvml), c.want) << c.nvml;
    EXPECT_TRUE(core::ValidMigProfile(c.want)) << c.want;
  }
  // The name comes from the vendor library: whatever it holds, the result is
  // a valid profile of the instance's slices, or the name from the sizes.
  std::mt19937 rng(20261202);
  const std::string alphabet = "0123456789gbcmealfx.+- MIG";
  for (int round = 0; round < 5000; ++round) {
    std::string nvml(rng() % 20, ' ');
    for (char& ch : nvml) ch = alphabet[rng() % alphabet.size()];
    if (round % 3 == 0) nvml = "1g.18gb" + nvml.substr(0, rng() % 8);
    const std::string got = MigProfileName(1, 1, 16384, 143771, nvml);
    ASSERT_TRUE(core::ValidMigProfile(got)) << "\"" << nvml << "\" -> " << got;
    ASSERT_EQ(got.rfind("1g.", 0), 0u) << "\"" << nvml << "\" -> " << got;
  }
}

TEST(NvidiaDriverTest, MigMinorsTableSkipsLinesItCannotRead) {
  const auto caps = ParseMigMinors(
      "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
      "gpu0/gi2/access x\ngpu0/gi3/access 14 extra\n\ngpu0/gi4/access -3\n");
  EXPECT_EQ(caps.size(), 4u);
  EXPECT_EQ(caps.at("gpu0/gi1/ci0/access"), 13);
  EXPECT_EQ(caps.count("gpu0/gi2/access"), 0u);
  EXPECT_EQ(caps.count("gpu0/gi3/access"), 0u);
  EXPECT_EQ(caps.count("gpu0/gi4/access"), 0u);
}

// A GPU in MIG mode whose MIG devices cannot be read, or that has none, is
// not offered at all (never whole: its memory belongs to the instances); the
// other GPUs are.
TEST(NvidiaDriverTest, MigGpuWithoutReadableInstancesOffersNothing) {
  auto lib = std::make_unique<FakeNvml>();
  lib->devices.resize(3);
  lib->links = {{}, {}, {}};
  lib->devices[0].mig_enabled = true;  // no MIG devices created
  lib->devices[1].mig_enabled = true;
  lib->migs.insert_or_assign(1, StatusOr<std::vector<NvmlMigInfo>>(UnavailableError(
                                    "nvmlDeviceGetMaxMigDeviceCount failed: Unknown Error")));
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  ASSERT_EQ((*invs)[0].devices.size(), 1u);
  EXPECT_EQ((*invs)[0].devices[0].id, "GPU-1002-h200");
  EXPECT_EQ((*invs)[0].devices[0].index, 0);
}

// --mig-strategy=single: the same MIG devices, without their profile, so they
// are advertised as nvidia.com/gpu (one slot each, granted whole).
TEST(NvidiaDriverTest, SingleMigStrategyOffersMigDevicesAsGpus) {
  auto lib = std::make_unique<FakeNvml>();
  lib->devices.resize(2);
  lib->links = {{}, {}};
  for (auto& g : lib->devices) g.mig_enabled = true;
  lib->migs.insert_or_assign(
      0, StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{
             {"MIG-a", 1, 0, 1, 1, 16384, 16}, {"MIG-b", 2, 0, 1, 1, 16384, 16}}));
  lib->migs.insert_or_assign(1, StatusOr<std::vector<NvmlMigInfo>>(
                                    std::vector<NvmlMigInfo>{{"MIG-c", 1, 0, 1, 1, 16384, 16}}));
  NvidiaOptions o = Options();
  o.mig_single = true;
  NvidiaDriver d(std::move(lib), o);
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const auto& devs = (*invs)[0].devices;
  ASSERT_EQ(devs.size(), 3u);
  for (const core::Device& dev : devs) {
    EXPECT_EQ(dev.partition, "") << dev.id;
    EXPECT_EQ(dev.max_shares, 1) << dev.id;
    EXPECT_EQ(dev.memory_mib, 16384) << dev.id;
  }
  EXPECT_EQ(devs[2].id, "MIG-c");
}

// Every GPU in MIG mode and none with instances: no devices at all, which the
// plugin reports and retries (discovery again every 60 s), so instances made
// later are found without a restart.
TEST(NvidiaDriverTest, OnlyMigGpusWithoutInstancesAreNoDevices) {
  auto lib = std::make_unique<FakeNvml>();
  lib->devices.resize(2);
  lib->links = {{}, {}};
  lib->devices[0].mig_enabled = true;
  lib->devices[1].mig_enabled = true;
  NvidiaDriver d(std::move(lib), Options());
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(invs->empty());
}

TEST(NvidiaDriverTest, MigDevicesWithRepeatedIdsOrNoProfileAreRefused) {
  NvmlMigInfo a{"MIG-a", 1, 0, 1, 1, 16384, 16};
  {
    auto lib = std::make_unique<FakeNvml>();
    lib->devices.resize(2);
    lib->links = {{}, {}};
    lib->devices[1].mig_enabled = true;
    lib->migs.insert_or_assign(1,
                               StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{a, a}));
    NvidiaDriver d(std::move(lib), Options());
    EXPECT_EQ(d.Discover().status().code(), StatusCode::kInternal);
  }
  {
    auto lib = std::make_unique<FakeNvml>();
    lib->devices.resize(2);
    lib->links = {{}, {}};
    lib->devices[1].mig_enabled = true;
    NvmlMigInfo none{"MIG-b", 2, 0, 0, 0, 0, 0};  // reports no slices: no profile
    lib->migs.insert_or_assign(
        1, StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{a, none}));
    NvidiaDriver d(std::move(lib), Options());
    auto invs = d.Discover();
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    ASSERT_EQ((*invs)[0].devices.size(), 2u);
    EXPECT_EQ((*invs)[0].devices[1].id, "MIG-a");
    EXPECT_EQ((*invs)[0].devices[1].partition, "1g.18gb");
  }
}

TEST(NvidiaDriverTest, LibraryErrorsAreClearAndNeverCrash) {
  {
    auto lib = std::make_unique<FakeNvml>();
    lib->init_status = UnavailableError("nvmlInit_v2 failed: Driver Not Loaded (NVML code 9)");
    NvidiaDriver d(std::move(lib), Options());
    auto invs = d.Discover();
    EXPECT_EQ(invs.status().code(), StatusCode::kUnavailable);
  }
  {
    auto lib = std::make_unique<FakeNvml>();
    lib->fail_info_index = 3;  // errors mid-way through discovery
    NvidiaDriver d(std::move(lib), Options());
    auto invs = d.Discover();
    ASSERT_FALSE(invs.ok());
    EXPECT_NE(invs.status().message().find("GPU 3"), std::string::npos);
  }
  {
    auto lib = std::make_unique<FakeNvml>();
    lib->devices[2].uuid = lib->devices[1].uuid;
    NvidiaDriver d(std::move(lib), Options());
    EXPECT_EQ(d.Discover().status().code(), StatusCode::kInternal);
  }
}

// At the plugin's start (DiscoverPartial) a GPU that cannot be read is left
// out, with an error naming it and what to check, and the other 7 are served
// under their UUIDs. A later discovery that cannot read a GPU fails as a
// whole: the GPUs served keep their tables (Allocate, XID handling), and a
// discovery that reads every GPU offers the one left out.
TEST(NvidiaDriverTest, UnreadableGpuIsLeftOutAtStartOnly) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->fail_info_index = 3;
  NvidiaDriver d(std::move(owned), Options());
  // The capture ends before a health watch may log from its thread.
  auto log = std::make_unique<testing::LogCapture>();
  auto invs = d.DiscoverPartial();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(log->Has({"GPU 3", "nvidia-smi -q -i 3", "not offered"}));
  log.reset();
  std::vector<std::string> ids;
  for (const core::Device& dev : (*invs)[0].devices) ids.push_back(dev.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"GPU-1000-h200", "GPU-1001-h200", "GPU-1002-h200",
                                           "GPU-1004-h200", "GPU-1005-h200", "GPU-1006-h200",
                                           "GPU-1007-h200"}));
  const core::Device gpu4 = (*invs)[0].devices[3];

  lib->fail_info_index = 4;  // a served GPU that cannot be read now
  auto later = d.Discover();
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("GPU 4"), std::string::npos);
  auto spec = d.BuildContainerSpec({{gpu4, 0, 0, true}});
  // Still a device of this node (no device nodes here: the spec stops at
  // the missing /dev node, not at "not on this node").
  EXPECT_NE(spec.status().code(), StatusCode::kInvalidArgument) << spec.status().ToString();
  lib->probe_ok = false;
  lib->Push(std::optional<XidEvent>(XidEvent{3, 79}));  // the GPU not offered: nothing
  lib->Push(std::optional<XidEvent>(XidEvent{4, 79}));
  {
    testing::HealthRecorder health(d);
    ASSERT_TRUE(health.WaitFor(1));
    const std::vector<HealthEvent> events = health.Stop();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].device_id, "GPU-1004-h200");
    EXPECT_FALSE(events[0].healthy);
  }

  lib->fail_info_index = -1;
  auto all = d.Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ((*all)[0].devices.size(), 8u);
}

TEST(NvidiaDriverTest, XidHealthIsTwoWayAndIgnoresApplicationErrors) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  lib->probe_ok = false;
  lib->Push(std::optional<XidEvent>(XidEvent{2, 13}));  // application error: ignored
  lib->Push(UnavailableError("nvmlEventSetWait_v2 failed: Unknown Error"));  // mid-call error
  lib->Push(std::optional<XidEvent>(XidEvent{2, 79}));
  testing::HealthRecorder health(d);
  health.WaitFor(1, std::chrono::seconds(10));
  // Not recovered while the device does not answer.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(health.Count(), 1u);
  lib->probe_ok = true;
  health.WaitFor(2, std::chrono::seconds(10));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, "GPU-1002-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("XID 79"), std::string::npos);
  EXPECT_TRUE(events[1].healthy);
}

// NVML's event wait answers "GPU is lost" without naming the GPU, and may do
// so on every wait until the driver is reloaded: only the GPU that fails its
// health query is marked, the others stay in service, and the lost one comes
// back once it answers again, even while the wait still says "lost".
TEST(NvidiaDriverTest, ALostGpuDoesNotHoldBackGpusThatAnswer) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  lib->probe_fail_mask = 1u << 1;
  XidEvent lost;
  lost.gpu_lost = true;
  for (int i = 0; i < 400; ++i) {  // about 2 s of waits at 5 ms each
    lib->Push(std::optional<XidEvent>(lost));
  }
  testing::HealthRecorder health(d);
  health.WaitFor(1, std::chrono::seconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // four quiet periods
  ASSERT_EQ(health.Count(), 1u) << "only GPU 1 fails its health query";
  lib->probe_fail_mask = 0;
  health.WaitFor(2, std::chrono::seconds(10));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, "GPU-1001-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_EQ(events[1].device_id, "GPU-1001-h200");
  EXPECT_TRUE(events[1].healthy);
  std::lock_guard<std::mutex> lock(lib->mu);
  EXPECT_FALSE(lib->queue.empty()) << "it came back while the waits still said lost";
}

// The device plugin discovers again while the health watch runs (its device
// check): a new MIG layout on GPU 1 is read, and an XID on GPU 1 afterwards
// names the instances it has now.
TEST(NvidiaDriverTest, DiscoveringAgainReadsANewMigLayoutForTheRunningHealthWatch) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(2);
  lib->links = {{}, {}};
  lib->devices[1].mig_enabled = true;
  lib->migs.insert_or_assign(
      1, StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{
             {"MIG-a", 1, 0, 1, 1, 16384, 16}, {"MIG-b", 2, 0, 1, 1, 16384, 16}}));
  NvidiaDriver d(std::move(owned), Options());
  auto before = d.Discover();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ((*before)[0].devices.size(), 3u);
  testing::HealthRecorder health(d);
  // The operator replaces the two 1g instances with one 2g instance.
  lib->migs.insert_or_assign(
      1, StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{
             {"MIG-c", 3, 0, 2, 2, 33280, 32}}));
  auto after = d.Discover();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  const auto& devs = (*after)[0].devices;
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1].id, "MIG-c");
  EXPECT_EQ(devs[1].partition, "2g.35gb");
  lib->probe_ok = false;
  lib->Push(std::optional<XidEvent>(XidEvent{1, 79}));
  ASSERT_TRUE(health.WaitFor(1, std::chrono::seconds(10)));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device_id, "MIG-c");
  EXPECT_FALSE(events[0].healthy);
}

// The device plugin starts a watch again after a MIG layout change. A GPU
// that an earlier watch made unhealthy stays so through the change (its new
// MIG devices with it) until it recovers; one that left the node is
// forgotten.
TEST(NvidiaDriverTest, AnUnhealthyGpuStaysUnhealthyThroughANewDiscoveryAndWatch) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(3);
  lib->links = {{}, {}, {}};
  lib->devices[0].mig_enabled = true;
  lib->migs.insert_or_assign(0, StatusOr<std::vector<NvmlMigInfo>>(
                                    std::vector<NvmlMigInfo>{{"MIG-a", 1, 0, 1, 1, 16384, 16}}));
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  lib->probe_fail_mask = 0b101;  // GPUs 0 and 2 do not answer: no recovery yet
  {
    testing::HealthRecorder health(d);
    lib->Push(std::optional<XidEvent>(XidEvent{0, 48}));
    lib->Push(std::optional<XidEvent>(XidEvent{2, 79}));
    ASSERT_TRUE(health.WaitFor(2, std::chrono::seconds(10)));
    const std::vector<HealthEvent> events = health.Stop();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].device_id, "MIG-a");
    EXPECT_EQ(events[1].device_id, "GPU-1002-h200");
  }
  // GPU 0 gets a new layout; GPU 2 is taken out of the node.
  lib->migs.insert_or_assign(
      0, StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{
             {"MIG-b", 2, 0, 1, 1, 16384, 16}, {"MIG-c", 3, 0, 1, 1, 16384, 16}}));
  lib->devices.resize(2);
  lib->links = {{}, {}};
  lib->probe_fail_mask = 0b001;
  auto after = d.Discover();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  std::map<std::string, bool> healthy;
  for (const core::Device& dev : (*after)[0].devices) {
    healthy[dev.id] = dev.healthy;
  }
  EXPECT_EQ(healthy, (std::map<std::string, bool>{
                         {"MIG-b", false}, {"MIG-c", false}, {"GPU-1001-h200", true}}));
  // The new watch says so again at once, and recovers GPU 0 when it answers.
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(2, std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(health.Count(), 2u) << "recovered while the GPU does not answer";
  lib->probe_fail_mask = 0;
  ASSERT_TRUE(health.WaitFor(4, std::chrono::seconds(10)));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].device_id, "MIG-b");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("XID 48"), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].device_id, "MIG-c");
  EXPECT_FALSE(events[1].healthy);
  EXPECT_TRUE(events[2].healthy);
  EXPECT_TRUE(events[3].healthy);
  // Recovered for good: the next discovery offers the GPU's devices healthy.
  auto again = d.Discover();
  ASSERT_TRUE(again.ok());
  for (const core::Device& dev : (*again)[0].devices) {
    EXPECT_TRUE(dev.healthy) << dev.id;
  }
}

// A GPU that fails its health query when discovered (a plugin started after
// the XID, or rows waiting for a reset) starts unhealthy, recovers when it
// answers, and one that starts failing is found by the next discovery while
// the watch runs.
TEST(NvidiaDriverTest, AGpuFailingItsProbeAtDiscoveryStartsUnhealthy) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(3);
  lib->links = {{}, {}, {}};
  lib->probe_fail_mask = 0b010;
  NvidiaDriver d(std::move(owned), Options());
  auto first = d.Discover();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const auto& devs = (*first)[0].devices;
  ASSERT_EQ(devs.size(), 3u);
  EXPECT_TRUE(devs[0].healthy);
  EXPECT_FALSE(devs[1].healthy);
  EXPECT_TRUE(devs[2].healthy);
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(health.Count(), 1u) << "recovered while the GPU fails its query";
  lib->probe_fail_mask = 0;
  ASSERT_TRUE(health.WaitFor(2));
  // GPU 2 starts failing; the next discovery (the plugin's device check)
  // finds it, and the running watch says so.
  lib->probe_fail_mask = 0b100;
  auto again = d.Discover();
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)[0].devices[2].healthy);
  ASSERT_TRUE(health.WaitFor(3));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].device_id, "GPU-1001-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("pending remapping"), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].device_id, "GPU-1001-h200");
  EXPECT_TRUE(events[1].healthy);
  EXPECT_EQ(events[2].device_id, "GPU-1002-h200");
  EXPECT_FALSE(events[2].healthy);
}

// A GPU that recovers between the discovery the device plugin serves and a
// watch started again (after a device-set change the plugin rebuilds its
// device state from that discovery, with the GPU unhealthy) is announced
// healthy by the new watch; it used to stay unhealthy until the plugin
// restarted, since a new watch only said which GPUs were unhealthy.
TEST(NvidiaDriverTest, AWatchStartedAgainAnnouncesGpusThatRecoveredSinceTheDiscovery) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(2);
  lib->links = {{}, {}};
  lib->probe_fail_mask = 0b01;
  NvidiaDriver d(std::move(owned), Options());
  auto kept = d.Discover();
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_FALSE((*kept)[0].devices[0].healthy);
  {
    testing::HealthRecorder health(d, *kept);
    ASSERT_TRUE(health.WaitFor(1));
    lib->probe_fail_mask = 0;
    ASSERT_TRUE(health.WaitFor(2));
    const std::vector<HealthEvent> events = health.Stop();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_TRUE(events[1].healthy);
  }
  // The plugin's device state is the kept discovery again: GPU 0 unhealthy.
  testing::HealthRecorder health(d, *kept);
  ASSERT_TRUE(health.WaitFor(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device_id, "GPU-1000-h200");
  EXPECT_TRUE(events[0].healthy);
}

// Without XID events the watch still runs: a GPU that failed its health
// query at discovery is announced and comes back when it answers.
TEST(NvidiaDriverTest, WithoutXidEventsTheWatchStillAnnouncesAndRecovers) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(2);
  lib->links = {{}, {}};
  lib->register_result = UnimplementedError("no GPU supports XID events");
  lib->probe_fail_mask = 0b01;
  NvidiaDriver d(std::move(owned), Options());
  auto first = d.Discover();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE((*first)[0].devices[0].healthy);
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(1));
  lib->probe_fail_mask = 0;
  ASSERT_TRUE(health.WaitFor(2));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, "GPU-1000-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_EQ(events[1].device_id, "GPU-1000-h200");
  EXPECT_TRUE(events[1].healthy);
}

// A GPU whose XID event registration fails with an error (not "not
// supported") cannot be monitored: the watch marks it unhealthy, keeps it so
// while its registration, tried again every quiet period, fails (it answers
// its health query, but no XID of it would be seen), and still handles the
// other GPUs' XIDs and recovery; once a registration succeeds it recovers.
TEST(NvidiaDriverTest, AGpuWhoseEventRegistrationFailsIsUnhealthyUntilItRegisters) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(3);
  lib->links = {{}, {}, {}};
  XidRegistration reg;
  reg.failed = {{1, "nvmlDeviceRegisterEvents failed: Unknown Error (code 999)"}};
  lib->register_result = reg;
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(1));
  lib->Push(std::optional<XidEvent>(XidEvent{2, 79}));
  ASSERT_TRUE(health.WaitFor(3));                               // GPU 2 unhealthy, then recovered
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // four quiet periods
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    EXPECT_GE(lib->register_one_calls, 1);  // tried again, and failed
    lib->register_one_fail_mask = 0;
  }
  ASSERT_TRUE(health.WaitFor(4));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].device_id, "GPU-1001-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("cannot be monitored"), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].device_id, "GPU-1002-h200");
  EXPECT_FALSE(events[1].healthy);
  EXPECT_EQ(events[2].device_id, "GPU-1002-h200");
  EXPECT_TRUE(events[2].healthy);
  EXPECT_EQ(events[3].device_id, "GPU-1001-h200");
  EXPECT_TRUE(events[3].healthy);
}

// A watch started again registers every GPU afresh: one whose registration
// failed in the last watch recovers as any other.
TEST(NvidiaDriverTest, AWatchStartedAgainRegistersAGpuThatFailedBefore) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(2);
  lib->links = {{}, {}};
  XidRegistration reg;
  reg.failed = {{1, "nvmlDeviceRegisterEvents failed: Unknown Error (code 999)"}};
  lib->register_result = reg;
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  {
    testing::HealthRecorder health(d);
    ASSERT_TRUE(health.WaitFor(1));
    EXPECT_FALSE(health.Stop()[0].healthy);
  }
  lib->register_result = XidRegistration{};
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(2));
  const std::vector<HealthEvent> events = health.Stop();
  EXPECT_EQ(events[0].device_id, "GPU-1001-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_EQ(events[1].device_id, "GPU-1001-h200");
  EXPECT_TRUE(events[1].healthy);
}

// When the event set cannot be made, the watch polls instead of ending:
// recovery still runs, and the registration is tried again; once it
// succeeds, XIDs are seen.
TEST(NvidiaDriverTest, WithoutAnEventSetTheWatchPollsAndRegistersLater) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(3);
  lib->links = {{}, {}, {}};
  lib->register_result = UnavailableError("nvmlEventSetCreate failed: Unknown Error (code 999)");
  lib->probe_fail_mask = 0b001;
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(1));
  lib->probe_fail_mask = 0;
  ASSERT_TRUE(health.WaitFor(2));
  lib->Push(std::optional<XidEvent>(XidEvent{2, 79}));  // waits for a registration
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(health.Count(), 2u);
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    lib->register_result = XidRegistration{};
  }
  ASSERT_TRUE(health.WaitFor(3));
  const std::vector<HealthEvent> events = health.Stop();
  EXPECT_EQ(events[0].device_id, "GPU-1000-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_EQ(events[1].device_id, "GPU-1000-h200");
  EXPECT_TRUE(events[1].healthy);
  EXPECT_EQ(events[2].device_id, "GPU-1002-h200");
  EXPECT_FALSE(events[2].healthy);
}

// A GPU before Ampere (no row remapping) retires the page of a double-bit
// ECC error (XID 48) only when the driver is loaded again: while the page is
// pending it stays unhealthy, though it answers its query. A pending page
// without a double-bit error (retired for repeated single-bit errors) holds
// nothing back: an XID 79 on such a GPU recovers as usual.
TEST(NvidiaDriverTest, AGpuWithAPagePendingRetirementAfterXid48StaysUnhealthy) {
  auto owned = std::make_unique<FakeNvml>();
  FakeNvml* lib = owned.get();
  lib->devices.resize(3);
  lib->links = {{}, {}, {}};
  lib->retire_pending = 1;
  NvidiaDriver d(std::move(owned), Options());
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  lib->Push(std::optional<XidEvent>(XidEvent{1, 48}));
  ASSERT_TRUE(health.WaitFor(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // five quiet periods
  EXPECT_EQ(health.Count(), 1u) << "recovered while a page is pending retirement";
  lib->retire_pending = -1;  // the driver was loaded again
  ASSERT_TRUE(health.WaitFor(2));
  lib->retire_pending = 2;  // GPU 2: a page pending, and an XID other than 48
  lib->Push(std::optional<XidEvent>(XidEvent{2, 79}));
  ASSERT_TRUE(health.WaitFor(4));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].device_id, "GPU-1001-h200");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_EQ(events[1].device_id, "GPU-1001-h200");
  EXPECT_TRUE(events[1].healthy);
  EXPECT_EQ(events[2].device_id, "GPU-1002-h200");
  EXPECT_FALSE(events[2].healthy);
  EXPECT_EQ(events[3].device_id, "GPU-1002-h200");
  EXPECT_TRUE(events[3].healthy);
}

TEST(NvidiaDriverTest, XidClassification) {
  for (uint64_t x : {13u, 31u, 43u, 45u, 68u, 109u}) {
    EXPECT_TRUE(IsIgnoredXid(x, {})) << x;
  }
  for (uint64_t x : {48u, 63u, 64u, 74u, 79u, 94u, 95u}) {
    EXPECT_FALSE(IsIgnoredXid(x, {})) << x;
  }
  EXPECT_TRUE(IsIgnoredXid(94, {94}));
  EXPECT_EQ(DescribeXid(79), "XID 79 (GPU has fallen off the bus)");
}

TEST(NvidiaDriverTest, ContainerSpecUsesMinorsAndUuids) {
  auto lib = std::make_unique<FakeNvml>();
  lib->devices[6].minor = 2;  // minors need not follow NVML order
  testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kNvidia, 8);
  dev.Remove("/dev/nvidia-modeset");  // not every host has it
  NvidiaOptions o = Options();
  o.device_root = dev.root();
  NvidiaDriver d(std::move(lib), o);
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok());
  const auto& devs = (*invs)[0].devices;
  auto spec = d.BuildContainerSpec({{devs[6], 4096, 250, false}, {devs[1], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-1006-h200,GPU-1001-h200");
  EXPECT_EQ(spec->env.at("CUDA_VISIBLE_DEVICES"), "GPU-1006-h200,GPU-1001-h200");
  std::vector<std::string> paths;
  for (const DeviceNode& n : spec->devices) {
    paths.push_back(n.host_path);
  }
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/nvidia2"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/nvidia1"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/nvidiactl"), paths.end());
  EXPECT_EQ(std::find(paths.begin(), paths.end(), "/dev/nvidia-modeset"), paths.end());
  ASSERT_EQ(spec->cdi_devices.size(), 2u);
  EXPECT_EQ(spec->cdi_devices[0], "nvidia.com/gpu=GPU-1006-h200");

  // A GPU whose node is gone cannot be handed to a container: Allocate fails.
  dev.Remove("/dev/nvidia2");
  auto gone = d.BuildContainerSpec({{devs[6], 0, 0, true}});
  EXPECT_EQ(gone.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gone.status().message().find("/dev/nvidia2"), std::string::npos)
      << gone.status().ToString();

  core::Device foreign = devs[0];
  foreign.id = "GPU-not-here";
  EXPECT_EQ(d.BuildContainerSpec({{foreign, 0, 0, true}}).status().code(),
            StatusCode::kInvalidArgument);
}

// --imex-channel: every container granted GPUs gets the channel's node where
// the node has it, and starts without it where it does not.
TEST(NvidiaDriverTest, ContainersGetTheImexChannelWhereTheNodeHasIt) {
  testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kNvidia, 8);
  NvidiaOptions o = Options();
  o.device_root = dev.root();
  o.imex_channel = 0;
  NvidiaDriver d(std::make_unique<FakeNvml>(), o);
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok());
  const auto& devs = (*invs)[0].devices;
  auto has_channel = [&](const std::vector<GrantedDevice>& grants) {
    auto spec = d.BuildContainerSpec(grants);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    bool found = false;
    for (const DeviceNode& n : spec->devices) {
      found = found || (n.host_path == "/dev/nvidia-caps-imex-channels/channel0" &&
                        n.container_path == n.host_path);
    }
    return found;
  };
  EXPECT_FALSE(has_channel({{devs[0], 0, 0, true}}));  // not created on this node
  dev.Add("/dev/nvidia-caps-imex-channels/channel0");
  EXPECT_TRUE(has_channel({{devs[0], 0, 0, true}}));
  EXPECT_TRUE(has_channel({{devs[1], 4096, 250, false}}));
  EXPECT_EQ(ImexChannelPath(7), "/dev/nvidia-caps-imex-channels/channel7");
  o.imex_channel = -1;  // off: never, also where the node has it
  NvidiaDriver off(std::make_unique<FakeNvml>(), o);
  ASSERT_TRUE(off.Discover().ok());
  auto spec = off.BuildContainerSpec({{devs[0], 0, 0, true}});
  ASSERT_TRUE(spec.ok());
  for (const DeviceNode& n : spec->devices) {
    EXPECT_EQ(n.host_path.find("imex"), std::string::npos) << n.host_path;
  }
}

// A whole GPU whose minor number NVML did not report has no known device
// node: it is refused, not given /dev/nvidia<its inventory index>, which MIG
// devices before it shift onto another GPU's node.
TEST(NvidiaDriverTest, AGpuWithoutAMinorNumberIsNotGivenAnotherGpusNode) {
  auto lib = std::make_unique<FakeNvml>();
  lib->devices[0].mig_enabled = true;
  lib->migs.insert_or_assign(
      0, StatusOr<std::vector<NvmlMigInfo>>(std::vector<NvmlMigInfo>{
             {"MIG-a", 1, 0, 1, 1, 16384, 16}, {"MIG-b", 2, 0, 1, 1, 16384, 16}}));
  lib->devices[1].minor = -1;
  testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kNvidia, 8);
  NvidiaOptions o = Options();
  o.device_root = dev.root();
  NvidiaDriver d(std::move(lib), o);
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const auto& devs = (*invs)[0].devices;
  ASSERT_EQ(devs[2].id, "GPU-1001-h200");
  auto spec = d.BuildContainerSpec({{devs[2], 0, 0, true}});
  ASSERT_FALSE(spec.ok()) << "given " << spec->devices.back().host_path;
  EXPECT_EQ(spec.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(spec.status().message().find("minor number"), std::string::npos);
  // The others keep their own nodes.
  auto other = d.BuildContainerSpec({{devs[3], 0, 0, true}});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->devices.back().host_path, "/dev/nvidia2");
}

TEST(DlLibraryTest, AbsentLibraryIsUnavailableWithAHint) {
  auto lib = DlLibrary::Open({"libaccelpool-does-not-exist.so.7"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("libaccelpool-does-not-exist.so.7"), std::string::npos);
  EXPECT_NE(lib.status().message().find("install the vendor driver"), std::string::npos);
}

TEST(DlLibraryTest, MissingSymbolIsUnimplemented) {
  auto lib = DlLibrary::Open({"libm.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  auto cosine = (*lib)->Symbol<double(double)>("cos");
  ASSERT_TRUE(cosine.ok());
  EXPECT_DOUBLE_EQ((*cosine)(0.0), 1.0);
  auto none = (*lib)->Symbol<void()>("nvmlInit_v2");
  EXPECT_EQ(none.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace accelpool::vendors::nvidia
