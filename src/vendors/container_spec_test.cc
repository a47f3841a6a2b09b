#include <gtest/gtest.h>

#include <algorithm>

#include "vendors/driver.h"
#include "vendors/test_util.h"

namespace accelpool::vendors {
namespace {

using testing::FakeDevRoot;

std::vector<std::string> Paths(const ContainerSpec& spec) {
  std::vector<std::string> out;
  for (const DeviceNode& n : spec.devices) {
    out.push_back(n.host_path);
  }
  return out;
}

GrantedDevice Grant(core::Vendor vendor, const std::string& id, int32_t index) {
  GrantedDevice g;
  g.device.id = id;
  g.device.index = index;
  g.device.vendor = vendor;
  return g;
}

TEST(GenericContainerSpecTest, ListsOnlyTheControlNodesThatExist) {
  struct Case {
    std::string name;
    core::Vendor vendor;
    std::vector<std::string> present;  // besides the granted devices' own nodes
    std::vector<std::string> want;     // in order
  };
  const std::vector<Case> cases = {
      {"nvidia without modeset and uvm-tools",
       core::Vendor::kNvidia,
       {"/dev/nvidiactl", "/dev/nvidia-uvm"},
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1", "/dev/nvidia3"}},
      {"nvidia with every control node",
       core::Vendor::kNvidia,
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
        "/dev/nvidia1", "/dev/nvidia3"}},
      {"ascend without dvpp_cmdlist (an older driver)",
       core::Vendor::kAscend,
       {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"},
       {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/davinci1",
        "/dev/davinci3"}},
      {"hygon without mkfd",
       core::Vendor::kHygon,
       {"/dev/kfd"},
       {"/dev/kfd", "/dev/dri/renderD1", "/dev/dri/renderD3"}},
      {"moore threads (no control node)",
       core::Vendor::kMthreads,
       {},
       {"/dev/mtgpu.1", "/dev/mtgpu.3"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeDevRoot dev;
    for (const std::string& p : c.present) {
      dev.Add(p);
    }
    const VendorTraits& traits = TraitsFor(c.vendor);
    for (int32_t minor : {1, 3}) {
      std::string node = traits.device_nodes.front();
      node.replace(node.find("{minor}"), 7, std::to_string(minor));
      dev.Add(node);
    }
    auto spec = GenericContainerSpec(traits, {Grant(c.vendor, "D-a", 1), Grant(c.vendor, "D-b", 3)},
                                     nullptr, dev.root());
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(Paths(*spec), c.want);
    EXPECT_EQ(spec->env.size(), traits.visible_env.size());
  }
}

TEST(GenericContainerSpecTest, AMissingDeviceNodeIsAClearError) {
  FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kNvidia, 8);
  dev.Remove("/dev/nvidia5");
  const std::vector<GrantedDevice> grants = {Grant(core::Vendor::kNvidia, "GPU-aaaa", 0),
                                             Grant(core::Vendor::kNvidia, "GPU-bbbb", 1)};
  // Minors need not follow the index: GPU-bbbb is /dev/nvidia5.
  auto minor_of = [](const core::Device& d) { return d.id == "GPU-bbbb" ? 5 : 0; };
  auto spec = GenericContainerSpec(TraitsFor(core::Vendor::kNvidia), grants, minor_of, dev.root());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kFailedPrecondition);
  for (const char* want : {"/dev/nvidia5", "GPU-bbbb", "driver", "/dev"}) {
    EXPECT_NE(spec.status().message().find(want), std::string::npos)
        << want << " not in: " << spec.status().message();
  }
  dev.Add("/dev/nvidia5");
  spec = GenericContainerSpec(TraitsFor(core::Vendor::kNvidia), grants, minor_of, dev.root());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->devices.size(), 6u);  // four control nodes, two GPUs
}

TEST(GenericContainerSpecTest, NoNodesOnAnEmptyHost) {
  FakeDevRoot dev;
  auto spec = GenericContainerSpec(TraitsFor(core::Vendor::kNvidia), {}, nullptr, dev.root());
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->devices.empty());
  auto one = GenericContainerSpec(TraitsFor(core::Vendor::kNvidia),
                                  {Grant(core::Vendor::kNvidia, "GPU-a", 0)}, nullptr, dev.root());
  EXPECT_EQ(one.status().code(), StatusCode::kFailedPrecondition);
}

// Kunlunxin's own plugin answers with /dev/xpuctrl and /dev/xpu<N> and no
// variable; XPU_VISIBLE_DEVICES and MACA_VISIBLE_DEVICES are read by the
// runtime inside the container. A host number there (5) could name no
// device among the mounted ones and hide the only GPU the pod was granted:
// the nodes alone select the devices.
TEST(GenericContainerSpecTest, NoHostNumberReachesAnInContainerSelector) {
  for (core::Vendor v : {core::Vendor::kKunlunxin, core::Vendor::kMetax}) {
    SCOPED_TRACE(core::VendorName(v));
    FakeDevRoot dev;
    dev.AddVendor(v, 1, 5);
    auto spec = GenericContainerSpec(
        TraitsFor(v), {Grant(v, "D-5", 0)}, [](const core::Device&) { return 5; }, dev.root());
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_TRUE(spec->env.empty()) << spec->env.begin()->first << "=" << spec->env.begin()->second;
    std::string node = TraitsFor(v).device_nodes.front();
    node.replace(node.find("{minor}"), 7, "5");
    const std::vector<std::string> paths = Paths(*spec);
    EXPECT_NE(std::find(paths.begin(), paths.end(), node), paths.end()) << node;
  }
}

// Cambricon's plugin hands each MLU's IPC and MLULink communication nodes
// (and GPUDirect RDMA's) over with it where the driver created them; a board
// or driver without them still gets its MLU.
TEST(GenericContainerSpecTest, CambriconCompanionNodesGoWithTheirMluWhereTheyExist) {
  FakeDevRoot dev;
  dev.Add("/dev/cambricon_ctl");
  dev.Add("/dev/cambricon_gdr");
  for (const char* p : {"/dev/cambricon_dev1", "/dev/cambricon_dev3", "/dev/cambricon_ipcm3",
                        "/dev/commu3", "/dev/cmsg_ctrl3", "/dev/cambricon_ipcm2"}) {
    dev.Add(p);
  }
  const core::Vendor v = core::Vendor::kCambricon;
  auto spec = GenericContainerSpec(TraitsFor(v), {Grant(v, "MLU-a", 1), Grant(v, "MLU-b", 3)},
                                   nullptr, dev.root());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(Paths(*spec),
            (std::vector<std::string>{"/dev/cambricon_ctl", "/dev/cambricon_gdr",
                                      "/dev/cambricon_dev1", "/dev/cambricon_dev3",
                                      "/dev/cambricon_ipcm3", "/dev/commu3", "/dev/cmsg_ctrl3"}));
  EXPECT_EQ(spec->env.at("CAMBRICON_VISIBLE_DEVICES"), "1,3");  // the runtime hook's: host slots
  EXPECT_EQ(spec->env.at("MLU_VISIBLE_DEVICES"), "0,1");
}

}  // namespace
}  // namespace accelpool::vendors
