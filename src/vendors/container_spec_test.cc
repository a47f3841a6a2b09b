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

}  // namespace
}  // namespace accelpool::vendors
