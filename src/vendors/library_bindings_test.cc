// The five DeviceLibrary dlopen bindings (XPU ML, MX-SML, MTML, CNDev, ROCm
// SMI), each run against a fake of its vendor library built in the test tree
// (testlibs/), through the shared LibraryDriver, the way the device plugin
// runs them. NVML and DCMI have their own tests (nvidia/, ascend/).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "vendors/cambricon/cndev_library.h"
#include "vendors/hygon/rocm_smi_library.h"
#include "vendors/kunlunxin/xpuml_library.h"
#include "vendors/library_driver.h"
#include "vendors/library_specs.h"
#include "vendors/library_util.h"
#include "vendors/metax/mxsml_library.h"
#include "vendors/mthreads/mtml_library.h"
#include "vendors/test_util.h"

namespace accelpool::vendors {
namespace {

using testing::ExpectDiscoveryFails;
using testing::FakeHandle;
using testing::FakeSysfs;
using testing::HealthRecorder;

using Factory =
    std::function<StatusOr<DeviceLibraryPtr>(const std::vector<std::string>&, const std::string&)>;

struct Binding {
  std::string name;
  std::string fake_path;
  Factory load;
  std::function<LibraryDriverSpec()> spec;
};

std::vector<Binding> Bindings() {
  return {
      {"XPU ML", ACCELPOOL_FAKE_XPUML,
       [](const auto& c, const auto& s) { return kunlunxin::NewXpumlLibrary(c, s); },
       KunlunxinSpec},
      {"MX-SML", ACCELPOOL_FAKE_MXSML,
       [](const auto& c, const auto& s) { return metax::NewMxsmlLibrary(c, s); }, MetaxSpec},
      {"MTML", ACCELPOOL_FAKE_MTML,
       [](const auto& c, const auto& s) { return mthreads::NewMtmlLibrary(c, s); }, MthreadsSpec},
      {"CNDev", ACCELPOOL_FAKE_CNDEV,
       [](const auto& c, const auto& s) { return cambricon::NewCndevLibrary(c, s); },
       CambriconSpec},
      {"ROCm SMI", ACCELPOOL_FAKE_ROCM_SMI,
       [](const auto& c, const auto& s) { return hygon::NewRocmSmiLibrary(c, s); }, HygonSpec},
  };
}

const Binding& Find(const std::string& name) {
  static const std::vector<Binding> kAll = Bindings();
  for (const Binding& b : kAll) {
    if (b.name == name) {
      return b;
    }
  }
  ADD_FAILURE() << "no binding " << name;
  return kAll.front();
}

StatusOr<std::unique_ptr<LibraryDriver>> Driver(
    const Binding& b, const std::string& sysfs,
    std::chrono::milliseconds poll = std::chrono::seconds(5), const std::string& device_root = "") {
  StatusOr<DeviceLibraryPtr> lib = b.load({b.fake_path}, sysfs);
  if (!lib.ok()) {
    return lib.status();
  }
  LibraryDriverSpec spec = b.spec();
  spec.health_poll = poll;
  spec.device_root = device_root;
  return std::make_unique<LibraryDriver>(std::move(lib).value(), std::move(spec), "node-a");
}

TEST(LibraryBindingsTest, MapsEachVendorsEightDeviceNode) {
  struct Case {
    std::string binding;
    core::Vendor vendor;
    std::string profile;
    std::string first_id;
    std::string model;
    int64_t memory_mib;
    std::string first_bus;
    int numa5;          // device 5's NUMA node
    int32_t near, far;  // LinkScore(0,1), LinkScore(0,4)
    std::string node3;  // device node of device 3
    int32_t compute_units;
  };
  // Kunlunxin reads NUMA from sysfs (set to 6 for device 5 below: never
  // derived from the index); the others from their library.
  const std::vector<Case> cases = {
      {"XPU ML", core::Vendor::kKunlunxin, "kunlunxin-p800-x8", "XPU-0000-1d-00.0", "P800", 98304,
       "0000:1d:00.0", 6, -1, -1, "/dev/xpu3", 0},
      {"MX-SML", core::Vendor::kMetax, "metax-c500-x8", "GPU-7c1a0000-51d2-4f0e-9a3b-000000000000",
       "C500", 65536, "0000:0f:00.0", 1, 100, 10, "/dev/dri/card4", 0},
      {"MTML", core::Vendor::kMthreads, "mthreads-s4000-x8", "a1b2c3d4-0000-4000-8000-000000000000",
       "MTT S4000", 49152, "0000:18:00.0", -1, 20, 10, "/dev/mtgpu.3", 128},
      {"CNDev", core::Vendor::kCambricon, "cambricon-mlu370-x8",
       "MLU-5f1e22a0-8c4d-11ee-b9d1-0242ac120000", "MLU370-X8", 24576, "0000:31:00.0", 1, -1, -1,
       "/dev/cambricon_dev3", 0},
      // Every pair PXB (two hops through switches), all on NUMA 0, as the K100-AI sample.
      // A DCU is used through /dev/kfd and its DRM render node, named by the
      // render minor ROCm SMI reports (128 + 3 here); /dev/dri/card<N> numbers
      // differ from it by the host's other DRM devices (a BMC's VGA is card0).
      {"ROCm SMI", core::Vendor::kHygon, "hygon-k100-x8", "DCU-3a7c91d2e45b6000", "K100-AI", 65536,
       "0000:13:00.0", 0, 50, 50, "/dev/dri/renderD131", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.binding);
    const Binding& b = Find(c.binding);
    FakeHandle fake(b.fake_path);
    ASSERT_TRUE(fake.ok()) << dlerror();
    fake.Configure(8, -1, -1, 0);
    FakeSysfs sysfs;
    sysfs.Numa("0000:9c:00.0", 6);  // the fifth XPU's bus
    testing::FakeDevRoot dev;
    dev.AddVendor(c.vendor, 8, c.vendor == core::Vendor::kHygon ? 128 : 0);
    auto driver = Driver(b, sysfs.root(), std::chrono::seconds(5), dev.root());
    ASSERT_TRUE(driver.ok()) << driver.status().ToString();
    auto invs = (*driver)->Discover();
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    ASSERT_EQ(invs->size(), 1u);
    if (c.vendor == core::Vendor::kMetax) {
      // A MetaX GPU's DRM nodes are only those sysfs lists (DrmNodesTest);
      // card0 is the BMC's here.
      sysfs.Drm(invs->front().devices[3].pci_bus, {"card4", "renderD131"});
      dev.Add("/dev/dri/renderD131");
      invs = (*driver)->Discover();
      ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    }
    const core::NodeInventory& inv = invs->front();
    EXPECT_EQ(inv.vendor, c.vendor);
    EXPECT_EQ(inv.topology.kind, c.profile);
    ASSERT_EQ(inv.devices.size(), 8u);
    EXPECT_EQ(inv.devices[0].id, c.first_id);
    EXPECT_EQ(inv.devices[0].model, c.model);
    EXPECT_EQ(inv.devices[0].memory_mib, c.memory_mib);
    EXPECT_EQ(inv.devices[0].pci_bus, c.first_bus);
    EXPECT_EQ(inv.devices[7].compute_units, c.compute_units);
    if (c.numa5 >= 0) {
      EXPECT_EQ(inv.devices[5].numa, c.numa5);
    }
    if (c.near >= 0) {  // measured links replace the profile's
      EXPECT_EQ(inv.LinkScore(0, 1), c.near);
      EXPECT_EQ(inv.LinkScore(0, 4), c.far);
    } else {  // no pairwise query: the profile's levels stay, same group first
      EXPECT_GE(inv.LinkScore(0, 1), inv.LinkScore(0, 4));
    }
    auto spec = (*driver)->BuildContainerSpec({{inv.devices[3], 0, 0, true}});
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    bool found = false;
    for (const DeviceNode& n : spec->devices) {
      found = found || n.host_path == c.node3;
    }
    EXPECT_TRUE(found) << c.node3;
  }
}

// The DRM nodes of a MetaX or Moore Threads GPU are the ones sysfs lists for
// its PCI function: on a server whose BMC VGA registered as card0, GPU n is
// card<n+1> (its render node has no such offset), so /dev/dri/card<n> would be
// another GPU's node.
struct DrmCase {
  std::string binding;
  core::Vendor vendor;
  std::string env;                   // the visible-devices variable; "": none
  std::vector<std::string> before3;  // device 3's DRM nodes without sysfs entries
  bool refused_without_sysfs = false;  // no entries: refused, not given a node by index
  std::vector<std::string> own3;     // its own non-DRM nodes, kept
};

class DrmNodesTest : public ::testing::TestWithParam<DrmCase> {};

TEST_P(DrmNodesTest, DeviceNodesComeFromSysfsNotTheIndex) {
  const DrmCase& c = GetParam();
  const Binding& b = Find(c.binding);
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok()) << dlerror();
  fake.Configure(8, -1, -1, 0);
  FakeSysfs sysfs;
  testing::FakeDevRoot dev;
  dev.AddVendor(c.vendor, 8);
  for (int i = 0; i < 9; ++i) dev.Add("/dev/dri/card" + std::to_string(i));  // card0: the BMC
  for (int i = 128; i < 136; ++i) dev.Add("/dev/dri/renderD" + std::to_string(i));
  auto driver = Driver(b, sysfs.root(), std::chrono::seconds(5), dev.root());
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::vector<core::Device> devices = invs->front().devices;
  ASSERT_EQ(devices.size(), 8u);
  auto nodes = [&](const core::Device& d) {
    auto spec = (*driver)->BuildContainerSpec({{d, 0, 0, true}});
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    std::vector<std::string> out;
    for (const DeviceNode& n : spec.ok() ? spec->devices : std::vector<DeviceNode>{}) {
      out.push_back(n.host_path);
    }
    return out;
  };
  auto drm = [](std::vector<std::string> v) {
    std::erase_if(v, [](const std::string& p) { return p.rfind("/dev/dri/", 0) != 0; });
    return v;
  };
  auto has_all = [](const std::vector<std::string>& have, const std::vector<std::string>& want) {
    for (const std::string& w : want) {
      if (std::find(have.begin(), have.end(), w) == have.end()) return false;
    }
    return true;
  };
  // Without sysfs entries: the index where the node is numbered by it, or a
  // refusal where that number would name another device's node.
  if (c.refused_without_sysfs) {
    auto refused = (*driver)->BuildContainerSpec({{devices[3], 0, 0, true}});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("/sys"), std::string::npos)
        << refused.status().message();
  } else {
    EXPECT_EQ(drm(nodes(devices[3])), c.before3);
    EXPECT_TRUE(has_all(nodes(devices[3]), c.own3));
  }

  for (size_t i = 0; i < devices.size(); ++i) {
    sysfs.Drm(devices[i].pci_bus,
              {"card" + std::to_string(i + 1), "renderD" + std::to_string(128 + i),
               "controlD" + std::to_string(64 + i)});
  }
  invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_EQ(drm(nodes(devices[3])),
            (std::vector<std::string>{"/dev/dri/card4", "/dev/dri/renderD131"}));
  EXPECT_EQ(drm(nodes(devices[0])),
            (std::vector<std::string>{"/dev/dri/card1", "/dev/dri/renderD128"}));
  EXPECT_TRUE(has_all(nodes(devices[3]), c.own3));
  auto spec = (*driver)->BuildContainerSpec({{devices[3], 0, 0, true}});
  ASSERT_TRUE(spec.ok());
  if (c.env.empty()) {
    EXPECT_TRUE(spec->env.empty());  // the mounted nodes select the GPU
  } else {
    EXPECT_EQ(spec->env.at(c.env), "3");  // the library's index, not the DRM number
  }
}

INSTANTIATE_TEST_SUITE_P(
    Vendors, DrmNodesTest,
    ::testing::Values(DrmCase{"MX-SML", core::Vendor::kMetax, "", {}, true, {}},
                      DrmCase{"MTML",
                              core::Vendor::kMthreads,
                              "MTHREADS_VISIBLE_DEVICES",
                              {},
                              false,
                              {"/dev/mtgpu.3"}}),
    [](const ::testing::TestParamInfo<DrmCase>& i) {
      return i.param.vendor == core::Vendor::kMetax ? std::string("Metax")
                                                    : std::string("Mthreads");
    });

// MTML allocates a device or memory object at every init call (until the
// library shuts down): the binding makes each once per device, so that the
// health poll and the memory queries, asked every few seconds for the life
// of the plugin, allocate nothing more.
TEST(LibraryBindingsTest, MtmlObjectsAreMadeOncePerDevice) {
  const Binding& b = Find("MTML");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto inits = reinterpret_cast<int (*)()>(fake.Symbol("accelpool_fake_mtml_inits"));
  ASSERT_NE(inits, nullptr);
  auto driver = Driver(b, "/nonexistent", std::chrono::milliseconds(1));
  ASSERT_TRUE(driver.ok());
  inits();
  ASSERT_TRUE((*driver)->Discover().ok());
  EXPECT_EQ(inits(), 16) << "one device and one memory object per GPU";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*driver)->MemoryInUse().ok());
  }
  {
    HealthRecorder health(**driver);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(health.Stop().empty());
  }
  ASSERT_TRUE((*driver)->Discover().ok());
  EXPECT_EQ(inits(), 0) << "queries after the first discovery made new objects";
}

// MxSml.h's ETH level (7) is the slowest path, not "unknown": scored as
// SYSTEM beside the measured pairs. UNDEFINED (8) or a newer level leaves the
// matrix unread, so the profile's scores stay, instead of pairs scored 0
// below cross-socket ones.
TEST(LibraryBindingsTest, MetaxEthLevelIsScoredAndAnUndefinedOneKeepsTheProfile) {
  const Binding& b = Find("MX-SML");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto far = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_mxsml_far_level"));
  ASSERT_NE(far, nullptr);
  auto driver = Driver(b, "/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto system = (*driver)->Discover();
  ASSERT_TRUE(system.ok()) << system.status().ToString();
  far(7);
  auto eth = (*driver)->Discover();
  far(8);
  auto undefined = (*driver)->Discover();
  far(6);
  ASSERT_TRUE(eth.ok()) << eth.status().ToString();
  ASSERT_TRUE(undefined.ok()) << undefined.status().ToString();
  EXPECT_EQ(eth->front().LinkScore(0, 4), system->front().LinkScore(0, 4));
  EXPECT_GT(eth->front().LinkScore(0, 4), 0);
  EXPECT_EQ(eth->front().LinkScore(0, 1), 100);
  // Not read: the profile's scores (the same as a library without the query).
  EXPECT_EQ(undefined->front().topology.kind, "metax-c500-x8");
  EXPECT_GT(undefined->front().LinkScore(0, 4), 0) << "not 0 beside measured pairs";
}

// With SR-IOV on, MX-SML counts each GPU's physical function (mode 1) beside
// its virtual functions (mode 2); workloads run only on VFs, so the PFs are
// not offered (one log line each), nor polled for health or memory.
TEST(LibraryBindingsTest, MetaxPhysicalFunctionsWithSriovOnAreNotOffered) {
  const Binding& b = Find("MX-SML");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto mode = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_mxsml_mode"));
  ASSERT_NE(mode, nullptr);
  mode(-1, 2);
  mode(0, 1);
  mode(4, 1);
  auto driver = Driver(b, "/nonexistent", std::chrono::milliseconds(10));
  ASSERT_TRUE(driver.ok());
  auto log = std::make_unique<testing::LogCapture>();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(log->Has({"MX-SML device 0 is not offered", "physical function 0000:0f:00.0"}));
  EXPECT_TRUE(log->Has({"MX-SML device 4 is not offered", "physical function"}));
  log.reset();
  const std::vector<core::Device>& devs = invs->front().devices;
  ASSERT_EQ(devs.size(), 6u);
  for (const core::Device& d : devs) {
    EXPECT_NE(d.pci_bus, "0000:0f:00.0");
    EXPECT_NE(d.pci_bus, "0000:4f:00.0");
  }
  EXPECT_EQ(devs[0].pci_bus, "0000:1f:00.0");
  auto used = (*driver)->MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  EXPECT_EQ(used->size(), 6u);
  {
    // A PF that stops answering is not one of the node's devices.
    HealthRecorder health(**driver);
    fake.Configure(8, -1, 4, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(health.Stop().empty());
    fake.Configure(8, -1, -1, 0);
  }
  // SR-IOV on but no VF listed (not created yet, or bound to another
  // driver; or a library that lists PFs apart): the PFs are offered, not
  // nothing at all.
  mode(-1, 1);
  auto pfs_only = (*driver)->Discover();
  ASSERT_TRUE(pfs_only.ok()) << pfs_only.status().ToString();
  EXPECT_EQ(pfs_only->front().devices.size(), 8u);
  // Bare metal (mode 0) again: every GPU is offered.
  mode(-1, 0);
  auto bare = (*driver)->Discover();
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->front().devices.size(), 8u);
}

// With MPC on, MTML counts the MPC instances and their parent (mpcType 1),
// a control point whose memory is the whole GPU's: the parent is not
// offered. A library that answers the property query with an error has no
// MPC (every GPU offered).
TEST(LibraryBindingsTest, MtmlMpcParentIsNotOffered) {
  const Binding& b = Find("MTML");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto mpc = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_mtml_mpc"));
  auto result = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_mtml_property_result"));
  ASSERT_NE(mpc, nullptr);
  ASSERT_NE(result, nullptr);
  mpc(-1, 2);
  mpc(7, 1);
  auto driver = Driver(b, "/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto log = std::make_unique<testing::LogCapture>();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(log->Has({"MTML device 7 is not offered", "MPC parent"}));
  log.reset();
  ASSERT_EQ(invs->front().devices.size(), 7u);
  for (const core::Device& d : invs->front().devices) {
    EXPECT_NE(d.id, "a1b2c3d4-0000-4000-8000-000000000007");
  }

  result(4);  // MTML_ERROR_NOT_SUPPORTED: no MPC
  auto unsupported = (*driver)->Discover();
  ASSERT_TRUE(unsupported.ok()) << unsupported.status().ToString();
  EXPECT_EQ(unsupported->front().devices.size(), 8u);

  // Any other error reads as "no MPC" too (a library and driver of different
  // versions): the optional probe takes no working GPU out of service.
  result(2);  // MTML_ERROR_DRIVER_FAILURE
  auto failed = (*driver)->Discover();
  result(0);
  mpc(-1, 0);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->front().devices.size(), 8u);
}

// A chip whose UUID CNDev does not give (the call fails, or answers an empty
// one) is named by its PCI bus, never by the card serial: the two chips of an
// MLU370-X8 board share it, and the backend would fail for want of unique ids.
TEST(LibraryBindingsTest, CambriconChipsWithoutUuidAreNamedByTheirBus) {
  const Binding& b = Find("CNDev");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto uuid = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_cndev_uuid"));
  ASSERT_NE(uuid, nullptr);
  for (int mode : {-3, -2}) {
    SCOPED_TRACE(mode == -3 ? "cndevGetUUID not supported" : "empty UUID");
    uuid(-1, mode);
    auto driver = Driver(b, "/nonexistent");
    ASSERT_TRUE(driver.ok());
    auto invs = (*driver)->Discover();
    uuid(-1, 0);
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    const std::vector<core::Device>& devs = invs->front().devices;
    ASSERT_EQ(devs.size(), 8u);
    EXPECT_EQ(devs[0].id, "MLU-0000-31-00.0");
    EXPECT_EQ(devs[1].id, "MLU-0000-41-00.0");  // the same board as chip 0
    EXPECT_EQ(invs->front().topology.kind, "cambricon-mlu370-x8");
  }
  // A query that fails for a chip has not told its id: the chip cannot be
  // read (left out at start, a later discovery fails), never renamed.
  auto driver = Driver(b, "/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto served = (*driver)->Discover();
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  uuid(2, -1);
  auto start = (*driver)->DiscoverPartial();
  auto later = (*driver)->Discover();
  uuid(-1, 0);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  ASSERT_EQ(start->front().devices.size(), 7u);
  for (const core::Device& d : start->front().devices) {
    EXPECT_EQ(d.id.rfind("MLU-0000-", 0), std::string::npos) << "a chip named by its bus";
  }
  EXPECT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("cndevGetUUID"), std::string::npos)
      << later.status().message();
}

// Two devices answering one id cannot be told apart (grants and health go by
// id). At the plugin's start only those two are left out, with an error line
// naming them; a later discovery, with devices served, fails as a whole.
TEST(LibraryBindingsTest, DevicesSharingAnIdAreLeftOutAtStartOnly) {
  const Binding& b = Find("CNDev");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto uuid = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_cndev_uuid"));
  ASSERT_NE(uuid, nullptr);
  auto driver = Driver(b, "/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto all = (*driver)->Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const std::string chip2 = all->front().devices[2].id;

  uuid(3, 3);  // chip 3 answers chip 2's UUID
  auto log = std::make_unique<testing::LogCapture>();
  auto start = (*driver)->DiscoverPartial();
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_TRUE(log->Has({"CNDev device 2 has no unique id", chip2, "not offered"}));
  EXPECT_TRUE(log->Has({"CNDev device 3 has no unique id", chip2, "not offered"}));
  log.reset();
  ASSERT_EQ(start->front().devices.size(), 6u);
  for (const core::Device& d : start->front().devices) {
    EXPECT_NE(d.id, chip2);
    EXPECT_NE(d.pci_bus, "0000:51:00.0");
    EXPECT_NE(d.pci_bus, "0000:61:00.0");
  }
  auto later = (*driver)->Discover();
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.status().code(), StatusCode::kInternal);
  EXPECT_NE(later.status().message().find("has no unique id"), std::string::npos)
      << later.status().message();

  uuid(-1, 0);
  auto again = (*driver)->Discover();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->front().devices.size(), 8u);
}

// librocm_smi64.so is AMD's library: it lists AMD GPUs too, which must not be
// offered as hygon.com/dcu. Only PCI vendor 0x1d94 is kept: the vendor from
// rsmi_dev_vendor_id_get, else from sysfs; a device neither says is offered.
TEST(LibraryBindingsTest, RocmSmiOffersOnlyHygonDevices) {
  const Binding& b = Find("ROCm SMI");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto vendor = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_rsmi_vendor"));
  ASSERT_NE(vendor, nullptr);
  FakeSysfs sysfs;
  auto driver = Driver(b, sysfs.root());
  ASSERT_TRUE(driver.ok());

  vendor(6, 0x1002);  // two AMD Instinct GPUs beside six DCUs
  vendor(7, 0x1002);
  auto log = std::make_unique<testing::LogCapture>();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_TRUE(log->Has({"ROCm SMI device 6 is not offered", "0x1002", "0000:d3:00.0"}));
  EXPECT_TRUE(log->Has({"ROCm SMI device 7 is not offered", "0x1002"}));
  log.reset();
  ASSERT_EQ(invs->front().devices.size(), 6u);
  for (const core::Device& d : invs->front().devices) {
    EXPECT_NE(d.pci_bus, "0000:d3:00.0");
    EXPECT_NE(d.pci_bus, "0000:f3:00.0");
  }

  // A ROCm SMI without the answer: sysfs says which is AMD's.
  vendor(-1, 0);
  for (const char* bus : {"0000:13:00.0", "0000:f3:00.0"}) {
    const std::filesystem::path dir = std::filesystem::path(sysfs.root()) / "bus/pci/devices" / bus;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "vendor") << (std::string(bus) == "0000:13:00.0" ? "0x1d94\n" : "0x1002\n");
  }
  auto by_sysfs = (*driver)->Discover();
  ASSERT_TRUE(by_sysfs.ok()) << by_sysfs.status().ToString();
  ASSERT_EQ(by_sysfs->front().devices.size(), 7u);
  EXPECT_EQ(by_sysfs->front().devices.front().pci_bus, "0000:13:00.0");
  for (const core::Device& d : by_sysfs->front().devices) {
    EXPECT_NE(d.pci_bus, "0000:f3:00.0");
  }
  vendor(-1, 0x1d94);
  auto all = (*driver)->Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->front().devices.size(), 8u);
}

// The /dev/mtgpu node of a Moore Threads GPU is the one mtmlDeviceGetGpuPath
// names, whose number need not be the MTML index: that node is mounted and
// its number is MTHREADS_VISIBLE_DEVICES' host number. A library that does
// not say (here "not supported") keeps the index.
TEST(LibraryBindingsTest, MtmlGpuNodeIsThePathMtmlNames) {
  const Binding& b = Find("MTML");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto paths = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_mtml_gpu_paths"));
  ASSERT_NE(paths, nullptr);
  FakeSysfs sysfs;
  testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kMthreads, 8);
  auto driver = Driver(b, sysfs.root(), std::chrono::seconds(5), dev.root());
  ASSERT_TRUE(driver.ok());
  auto spec_of = [&](bool with_drm) -> StatusOr<ContainerSpec> {
    auto invs = (*driver)->Discover();
    if (!invs.ok()) return invs.status();
    const core::Device d3 = invs->front().devices[3];
    if (with_drm) {
      sysfs.Drm(d3.pci_bus, {"card4", "renderD131"});
      dev.Add("/dev/dri/card4");
      dev.Add("/dev/dri/renderD131");
      invs = (*driver)->Discover();
      if (!invs.ok()) return invs.status();
    }
    return (*driver)->BuildContainerSpec({{d3, 0, 0, true}});
  };
  auto mounts = [](const ContainerSpec& spec, const std::string& path) {
    return std::any_of(spec.devices.begin(), spec.devices.end(),
                       [&](const DeviceNode& n) { return n.host_path == path; });
  };

  paths(1);  // GPU i is /dev/mtgpu.<7 - i>
  for (bool with_drm : {false, true}) {
    SCOPED_TRACE(with_drm ? "with DRM nodes" : "without DRM nodes");
    auto spec = spec_of(with_drm);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_TRUE(mounts(*spec, "/dev/mtgpu.4"));
    EXPECT_FALSE(mounts(*spec, "/dev/mtgpu.3"));
    EXPECT_EQ(spec->env.at("MTHREADS_VISIBLE_DEVICES"), "3")
        << "the MTML index, not confirmed as the node's number";
    EXPECT_EQ(spec->env.at("MUSA_VISIBLE_DEVICES"), "0");
  }
  paths(2);  // not supported: the index
  auto by_index = spec_of(true);
  paths(0);
  ASSERT_TRUE(by_index.ok()) << by_index.status().ToString();
  EXPECT_TRUE(mounts(*by_index, "/dev/mtgpu.3"));
  EXPECT_TRUE(mounts(*by_index, "/dev/dri/renderD131"));
  EXPECT_EQ(by_index->env.at("MTHREADS_VISIBLE_DEVICES"), "3");
}

TEST(LibraryBindingsTest, MtLinkPairsBeatThePcieLevel) {
  const Binding& b = Find("MTML");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto pairs = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_mtlink_pairs"));
  ASSERT_NE(pairs, nullptr);
  pairs(1);
  auto driver = Driver(b, "/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  pairs(0);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = invs->front();
  EXPECT_EQ(inv.LinkScore(0, 1), 100);  // MtLink
  EXPECT_EQ(inv.LinkScore(1, 0), 100);
  EXPECT_EQ(inv.LinkScore(6, 7), 100);
  EXPECT_EQ(inv.LinkScore(0, 2), 20);  // same NUMA node, no MtLink
  EXPECT_EQ(inv.LinkScore(0, 4), 10);
}

TEST(LibraryBindingsTest, HealthIsPolledBothWays) {
  for (const Binding& b : Bindings()) {
    SCOPED_TRACE(b.name);
    FakeHandle fake(b.fake_path);
    ASSERT_TRUE(fake.ok());
    fake.Configure(8, -1, -1, 0);
    auto driver = Driver(b, "/nonexistent", std::chrono::milliseconds(10));
    ASSERT_TRUE(driver.ok());
    auto invs = (*driver)->Discover();
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    const std::string faulty = invs->front().devices[2].id;
    HealthRecorder health(**driver);
    // Device 2 faults (or stops answering), then recovers.
    fake.Configure(8, -1, 2, 0);
    health.WaitFor(1);
    fake.Configure(8, -1, -1, 0);
    health.WaitFor(2);
    const std::vector<HealthEvent> events = health.Stop();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].device_id, faulty);
    EXPECT_FALSE(events[0].healthy);
    EXPECT_FALSE(events[0].reason.empty());
    EXPECT_EQ(events[1].device_id, faulty);
    EXPECT_TRUE(events[1].healthy);
  }
}

// Memory in use per device (the foreign memory check's input), as each
// library reports it: the fakes' idle figures (what their drivers hold by
// themselves), a figure set on device 3, and a device whose query fails left
// out while the others answer. Before discovery: an error, not zeros.
// ROCm SMI is measured by its processes instead (the test below).
TEST(LibraryBindingsTest, MemoryInUseIsTheLibrarysFigurePerDevice) {
  const std::map<std::string, int64_t> idle = {
      {"XPU ML", 512}, {"MX-SML", 880}, {"MTML", 1}, {"CNDev", 311}};
  for (const Binding& b : Bindings()) {
    if (b.name == "ROCm SMI") continue;
    SCOPED_TRACE(b.name);
    FakeHandle fake(b.fake_path);
    ASSERT_TRUE(fake.ok());
    fake.Configure(8, -1, -1, 0);
    auto set_used = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_used"));
    ASSERT_NE(set_used, nullptr);
    auto driver = Driver(b, "/nonexistent");
    ASSERT_TRUE(driver.ok());
    EXPECT_EQ((*driver)->MemoryInUse().status().code(), StatusCode::kFailedPrecondition);
    auto invs = (*driver)->Discover();
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    set_used(3, 20480);
    auto used = (*driver)->MemoryInUse();
    set_used(3, -1);
    ASSERT_TRUE(used.ok()) << used.status().ToString();
    ASSERT_EQ(used->size(), 8u);
    EXPECT_EQ(used->at(invs->front().devices[3].id), 20480);
    EXPECT_EQ(used->at(invs->front().devices[0].id), idle.at(b.name));
    fake.Configure(8, 5, -1, 0);
    used = (*driver)->MemoryInUse();
    ASSERT_TRUE(used.ok()) << used.status().ToString();
    EXPECT_EQ(used->count(invs->front().devices[5].id), 0u);
    EXPECT_EQ(used->size(), 7u);
  }
}

// When ROCm SMI does not answer a DCU's render minor, its render node is
// the one sysfs lists for its PCI function (here renderD129: the host has
// another render-capable DRM device), never 128 + index, which would hand
// the container another DCU; a DCU sysfs lists none for is refused.
TEST(LibraryBindingsTest, RocmSmiRenderNodeComesFromSysfsWhenTheLibraryDoesNotSay) {
  const Binding& b = Find("ROCm SMI");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto render_fails =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_rsmi_render_fails"));
  ASSERT_NE(render_fails, nullptr);
  render_fails(1);
  FakeSysfs sysfs;
  testing::FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kHygon, 8, 128);
  auto driver = Driver(b, sysfs.root(), std::chrono::seconds(5), dev.root());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  sysfs.Drm(invs->front().devices[0].pci_bus, {"card2", "renderD129"});
  invs = (*driver)->Discover();
  render_fails(0);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::vector<core::Device>& devs = invs->front().devices;
  auto spec = (*driver)->BuildContainerSpec({{devs[0], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::vector<std::string> paths;
  for (const DeviceNode& n : spec->devices) paths.push_back(n.host_path);
  EXPECT_NE(std::find(paths.begin(), paths.end(), "/dev/dri/renderD129"), paths.end());
  EXPECT_EQ(std::find(paths.begin(), paths.end(), "/dev/dri/renderD128"), paths.end());
  auto refused = (*driver)->BuildContainerSpec({{devs[1], 0, 0, true}});
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition)
      << refused.status().ToString();
}

// On Hygon, rsmi_dev_memory_usage_get counts the HBM the driver reserves
// (the fake: 94% of an idle DCU), so memory in use is the VRAM of the
// processes the kernel's KFD lists (sysfs class/kfd/kfd/proc/<pid>), each
// asked with rsmi_compute_process_info_by_device_get; they are also the
// device's holders. No KFD folder: no process, 0.
TEST(LibraryBindingsTest, RocmSmiMemoryInUseIsTheProcessesVramNotTheDriversReserve) {
  const Binding& b = Find("ROCm SMI");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto add =
      reinterpret_cast<void (*)(int, unsigned, int)>(fake.Symbol("accelpool_fake_rsmi_process"));
  ASSERT_NE(add, nullptr);
  add(-1, 0, 0);
  add(3, 4242, 20480);
  add(3, 4300, 1024);
  add(6, 5000, 8192);
  FakeSysfs sysfs;
  for (const char* entry : {"4242", "4300", "5000", "99", "not-a-pid", "12345678"}) {
    std::filesystem::create_directories(std::filesystem::path(sysfs.root()) / "class/kfd/kfd/proc" /
                                        entry);
  }
  auto driver = Driver(b, sysfs.root());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::vector<core::Device>& devs = invs->front().devices;
  auto used = (*driver)->MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  ASSERT_EQ(used->size(), 8u);
  EXPECT_EQ(used->at(devs[3].id), 21504);
  EXPECT_EQ(used->at(devs[6].id), 8192);
  EXPECT_EQ(used->at(devs[0].id), 0);  // not the driver's 61604 MiB
  auto held = (*driver)->MemoryHolders();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->at(devs[3].id), (std::vector<ProcessMemory>{{4242, 20480}, {4300, 1024}}));
  EXPECT_EQ(held->at(devs[6].id), (std::vector<ProcessMemory>{{5000, 8192}}));
  EXPECT_TRUE(held->at(devs[0].id).empty());
  // A DCU whose query fails for a process that is still there is not read.
  fake.Configure(8, 6, -1, 0);
  used = (*driver)->MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  EXPECT_EQ(used->count(devs[6].id), 0u);
  EXPECT_EQ(used->at(devs[3].id), 21504);
  fake.Configure(8, -1, -1, 0);
  // A process that exited (its KFD folder gone) is skipped, whatever the library said.
  std::filesystem::remove_all(std::filesystem::path(sysfs.root()) / "class/kfd/kfd/proc/4300");
  used = (*driver)->MemoryInUse();
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(used->at(devs[3].id), 20480);
  // Without the KFD driver's folder no compute process exists.
  auto bare = Driver(b, "/nonexistent");
  ASSERT_TRUE(bare.ok());
  ASSERT_TRUE((*bare)->Discover().ok());
  used = (*bare)->MemoryInUse();
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(used->at(devs[3].id), 0);
  add(-1, 0, 0);
}

// CNDev lists each MLU's processes (cndevGetProcessInfo, KiB): more than the
// first buffer holds is asked again with the count CNDev gave.
TEST(LibraryBindingsTest, CndevMemoryHoldersAreItsProcessRows) {
  const Binding& b = Find("CNDev");
  FakeHandle fake(b.fake_path);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto add =
      reinterpret_cast<void (*)(int, unsigned, int)>(fake.Symbol("accelpool_fake_cndev_process"));
  ASSERT_NE(add, nullptr);
  add(-1, 0, 0);
  for (unsigned k = 0; k < 20; ++k) add(2, 3000 + k, 512);
  add(5, 4242, 12288);
  auto driver = Driver(b, "/nonexistent");
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::vector<core::Device>& devs = invs->front().devices;
  auto held = (*driver)->MemoryHolders();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 8u);
  ASSERT_EQ(held->at(devs[2].id).size(), 20u);
  EXPECT_EQ(held->at(devs[2].id)[19], (ProcessMemory{3019, 512}));
  EXPECT_EQ(held->at(devs[5].id), (std::vector<ProcessMemory>{{4242, 12288}}));
  EXPECT_TRUE(held->at(devs[0].id).empty());
  fake.Configure(8, 5, -1, 0);
  held = (*driver)->MemoryHolders();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->count(devs[5].id), 0u);
  fake.Configure(8, -1, -1, 0);
  add(-1, 0, 0);
}

TEST(LibraryBindingsTest, ErrorsAreClearAndNeverCrash) {
  struct Case {
    std::string binding;
    int fail_device;
    int init_error;
    std::vector<std::string> want;  // substrings of the error
  };
  const std::vector<Case> cases = {
      {"XPU ML", 5, 0, {"XPU ML device 5", "xpumlDeviceGetMemoryInfo", "status 999", "xpu-smi"}},
      {"MX-SML", 3, 0, {"MX-SML device 3", "mxSmlGetMemoryInfo", "mx-smi"}},
      {"MTML", 6, 0, {"MTML device 6", "mtmlDeviceInitMemory", "mthreads-gmi"}},
      {"CNDev", 1, 0, {"CNDev device 1", "cndevGetMemoryUsage", "status 7", "cnmon"}},
      {"ROCm SMI", 4, 0, {"ROCm SMI device 4", "rsmi_dev_memory_total_get", "status 3", "hy-smi"}},
      {"XPU ML", -1, 9, {"xpumlInit", "status 9"}},
      {"MX-SML", -1, 26, {"mxSmlInit", "status 26"}},
      {"MTML", -1, 1, {"mtmlLibraryInit", "status 1"}},
      {"CNDev", -1, 1, {"cndevInit", "status 1"}},
      {"ROCm SMI", -1, 8, {"rsmi_init", "status 8"}},  // RSMI_STATUS_INIT_ERROR
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.binding + " fail " + std::to_string(c.fail_device));
    const Binding& b = Find(c.binding);
    FakeHandle fake(b.fake_path);
    ASSERT_TRUE(fake.ok());
    fake.Configure(8, c.fail_device, -1, c.init_error);
    auto driver = Driver(b, "/nonexistent");
    ASSERT_TRUE(driver.ok());
    ExpectDiscoveryFails(**driver, c.want);
  }
}

TEST(LibraryBindingsTest, AbsentOrForeignLibraryIsAClearError) {
  for (const Binding& b : Bindings()) {
    SCOPED_TRACE(b.name);
    auto absent = b.load({"/nonexistent/libvendor.so"}, "/sys");
    EXPECT_EQ(absent.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(absent.status().message().find("install the vendor driver"), std::string::npos);
    // Another vendor's library loads but lacks the entry points: Init says which.
    const std::string other =
        b.fake_path == ACCELPOOL_FAKE_XPUML ? ACCELPOOL_FAKE_CNDEV : ACCELPOOL_FAKE_XPUML;
    auto foreign = b.load({other}, "/sys");
    ASSERT_TRUE(foreign.ok());
    Status st = (*foreign)->Init();
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_NE(st.message().find("does not export"), std::string::npos) << st.ToString();
    // Calls before a successful Init are refused, not crashes.
    EXPECT_FALSE((*foreign)->Count().ok());
    EXPECT_FALSE((*foreign)->Device(0).ok());
    EXPECT_FALSE((*foreign)->Healthy(0).ok());
  }
}

TEST(LibraryUtilTest, PciBusSpellingsAndBitmasks) {
  struct Case {
    std::string in, want;
  };
  for (const Case& c : std::vector<Case>{{"00000000:3B:00.0", "0000:3b:00.0"},
                                         {"0000:3b:00.1", "0000:3b:00.1"},
                                         {"3b:1f.7", "0000:3b:1f.7"},
                                         {"0001:a0:00.0", "0001:a0:00.0"},
                                         {"", ""},
                                         {"garbage", ""},
                                         {"0000:3b:20.0", ""},
                                         {"0000:3b:00.0x", ""},
                                         {"100000:3b:00.0", ""}}) {
    EXPECT_EQ(NormalizePciBus(c.in), c.want) << c.in;
  }
  const uint32_t none[2] = {0, 0};
  const uint32_t second_word[2] = {0, 0x10};
  EXPECT_EQ(FirstSetBit(none, 2), -1);
  EXPECT_EQ(FirstSetBit(second_word, 2), 36);
  FakeSysfs sysfs;
  sysfs.Numa("0000:3b:00.0", 3);
  sysfs.Numa("0000:3c:00.0", -1);
  EXPECT_EQ(PciNumaNode("00000000:3B:00.0", sysfs.root()), 3);
  EXPECT_EQ(PciNumaNode("0000:3c:00.0", sysfs.root()), -1);
  EXPECT_EQ(PciNumaNode("0000:3d:00.0", sysfs.root()), -1);
  sysfs.Drm("0000:3b:00.0", {"renderD130", "card2", "controlD66", "cardx", "version"});
  EXPECT_EQ(PciDrmNodes("0000:3B:00.0", sysfs.root()),
            (std::vector<std::string>{"/dev/dri/card2", "/dev/dri/renderD130"}));
  EXPECT_TRUE(PciDrmNodes("0000:3c:00.0", sysfs.root()).empty());
  EXPECT_TRUE(PciDrmNodes("not a bus", sysfs.root()).empty());
  const char unterminated[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(FixedString(unterminated, sizeof(unterminated)), "abcd");
}

}  // namespace
}  // namespace accelpool::vendors
