#include "api/resources.h"

#include <gtest/gtest.h>

namespace accelpool::api {
namespace {

using core::Vendor;

TEST(ResourcesTest, EveryNameHasItsRoleAndUnit) {
  struct Case {
    std::string name;
    Vendor vendor;
    ResourceRole role;
    int64_t unit;
    std::string family;
  };
  const std::vector<Case> cases = {
      {"nvidia.com/gpu", Vendor::kNvidia, ResourceRole::kCount, 1, ""},
      {"nvidia.com/gpumem", Vendor::kNvidia, ResourceRole::kMemory, 1, ""},
      {"nvidia.com/gpumem-percentage", Vendor::kNvidia, ResourceRole::kMemoryPercent, 1, ""},
      {"nvidia.com/gpucores", Vendor::kNvidia, ResourceRole::kCompute, 100, ""},
      {"nvidia.com/priority", Vendor::kNvidia, ResourceRole::kIgnored, 1, ""},
      {"huawei.com/npu", Vendor::kAscend, ResourceRole::kCount, 1, ""},
      {"huawei.com/Ascend910B", Vendor::kAscend, ResourceRole::kCount, 1, "Ascend910B"},
      {"huawei.com/Ascend910B-memory", Vendor::kAscend, ResourceRole::kMemory, 1, "Ascend910B"},
      {"huawei.com/Ascend910B-core", Vendor::kAscend, ResourceRole::kCompute, 100, "Ascend910B"},
      {"huawei.com/Ascend910C", Vendor::kAscend, ResourceRole::kCount, 1, "Ascend910C"},
      {"huawei.com/Ascend910B4-1", Vendor::kAscend, ResourceRole::kCount, 1, "Ascend910B4-1"},
      {"huawei.com/Ascend310P-memory", Vendor::kAscend, ResourceRole::kMemory, 1, "Ascend310P"},
      {"huawei.com/Ascend950", Vendor::kAscend, ResourceRole::kCount, 1, "Ascend950"},  // pattern
      {"huawei.com/Ascend950-core", Vendor::kAscend, ResourceRole::kCompute, 100, "Ascend950"},
      {"kunlunxin.com/xpu", Vendor::kKunlunxin, ResourceRole::kCount, 1, ""},
      {"kunlunxin.com/vxpu", Vendor::kKunlunxin, ResourceRole::kCount, 1, ""},
      {"kunlunxin.com/vxpu-memory", Vendor::kKunlunxin, ResourceRole::kMemory, 1, ""},
      {"metax-tech.com/gpu", Vendor::kMetax, ResourceRole::kCount, 1, ""},
      {"metax-tech.com/sgpu", Vendor::kMetax, ResourceRole::kCount, 1, ""},
      {"metax-tech.com/vcore", Vendor::kMetax, ResourceRole::kCompute, 100, ""},
      {"metax-tech.com/vmemory", Vendor::kMetax, ResourceRole::kMemory, 1024, ""},
      {"mthreads.com/gpu", Vendor::kMthreads, ResourceRole::kCount, 1, ""},
      {"mthreads.com/vgpu", Vendor::kMthreads, ResourceRole::kCount, 1, ""},
      {"mthreads.com/sgpu-memory", Vendor::kMthreads, ResourceRole::kMemory, 512, ""},
      {"mthreads.com/sgpu-core", Vendor::kMthreads, ResourceRole::kCompute, 16, ""},
      {"alibabacloud.com/ppu", Vendor::kThead, ResourceRole::kCount, 1, ""},
      {"cambricon.com/mlu", Vendor::kCambricon, ResourceRole::kCount, 1, ""},
      {"cambricon.com/vmlu", Vendor::kCambricon, ResourceRole::kCount, 1, ""},
      {"cambricon.com/mlu.smlu.vmemory", Vendor::kCambricon, ResourceRole::kMemory, 256, ""},
      {"cambricon.com/mlu.smlu.vcore", Vendor::kCambricon, ResourceRole::kCompute, 100, ""},
      {"hygon.com/dcu", Vendor::kHygon, ResourceRole::kCount, 1, ""},
      {"hygon.com/dcunum", Vendor::kHygon, ResourceRole::kCount, 1, ""},
      {"hygon.com/dcumem", Vendor::kHygon, ResourceRole::kMemory, 1, ""},
      {"hygon.com/dcucores", Vendor::kHygon, ResourceRole::kCompute, 100, ""},
      {"iluvatar.ai/gpu", Vendor::kIluvatar, ResourceRole::kCount, 1, ""},
      {"iluvatar.ai/BI-V150-vgpu", Vendor::kIluvatar, ResourceRole::kCount, 1, "BI-V150"},
      {"iluvatar.ai/BI-V150.vMem", Vendor::kIluvatar, ResourceRole::kMemory, 256, "BI-V150"},
      {"iluvatar.ai/BI-V150.vCore", Vendor::kIluvatar, ResourceRole::kCompute, 100, "BI-V150"},
      {"iluvatar.ai/MR-V200-vgpu", Vendor::kIluvatar, ResourceRole::kCount, 1,
       "MR-V200"},  // pattern
      {"enflame.com/gcu", Vendor::kEnflame, ResourceRole::kCount, 1, ""},
      {"enflame.com/gcu-memory", Vendor::kEnflame, ResourceRole::kMemory, 1, ""},
      {"enflame.com/gcu-core", Vendor::kEnflame, ResourceRole::kCompute, 100, ""},
      {"enflame.com/vgcu", Vendor::kEnflame, ResourceRole::kCount, 1, ""},
      {"enflame.com/vgcu-percentage", Vendor::kEnflame, ResourceRole::kMemoryPercent, 1, ""},
      {"enflame.com/shared-gcu", Vendor::kEnflame, ResourceRole::kCount, 1, ""},
  };
  for (const Case& c : cases) {
    auto r = LookupResource(c.name);
    ASSERT_TRUE(r.has_value()) << c.name;
    EXPECT_EQ(r->name, c.name);
    EXPECT_EQ(r->vendor, c.vendor) << c.name;
    EXPECT_EQ(r->role, c.role) << c.name;
    EXPECT_EQ(r->unit, c.unit) << c.name;
    EXPECT_EQ(r->model_family, c.family) << c.name;
    EXPECT_TRUE(IsAcceleratorResource(c.name)) << c.name;
  }
}

TEST(ResourcesTest, CountNamesPointAtTheirSiblings) {
  for (const ResourceInfo& r : KnownResources()) {
    if (r.role != ResourceRole::kCount) continue;
    for (const std::string& sib : {r.memory_name, r.memory_percent_name, r.compute_name}) {
      if (sib.empty()) continue;
      auto s = LookupResource(sib);
      ASSERT_TRUE(s.has_value()) << r.name << " -> " << sib;
      EXPECT_EQ(s->vendor, r.vendor) << sib;
      EXPECT_NE(s->role, ResourceRole::kCount) << sib;
    }
  }
}

TEST(ResourcesTest, OtherNamesAreNotOurs) {
  for (const std::string name :
       {"cpu", "memory", "example.com/foo", "nvidia.com/gpu2", "huawei.com/Ascend910-2c",
        "huawei.com/npu-core", "huawei.com/Ascend", "iluvatar.ai/-vgpu", "iluvatar.ai/x y-vgpu",
        "huawei.com/Ascend910B-memory-core"}) {
    EXPECT_FALSE(LookupResource(name).has_value()) << name;
  }
}

TEST(ResourcesTest, DefaultCountResourceIsKnown) {
  for (Vendor v : core::AllVendors()) {
    auto r = LookupResource(DefaultCountResource(v));
    ASSERT_TRUE(r.has_value()) << core::VendorName(v);
    EXPECT_EQ(r->vendor, v);
    EXPECT_EQ(r->role, ResourceRole::kCount);
  }
}

TEST(ResourcesTest, MigProfileNamesAreCountsOfThatPartition) {
  for (const char* profile :
       {"1g.18gb", "3g.71gb", "1c.3g.71gb", "7g.141gb", "1g.18gb.me", "1g.24gb-me"}) {
    const std::string name = std::string("nvidia.com/mig-") + profile;
    auto r = LookupResource(name);
    ASSERT_TRUE(r.has_value()) << name;
    EXPECT_EQ(r->vendor, Vendor::kNvidia);
    EXPECT_EQ(r->role, ResourceRole::kCount);
    EXPECT_EQ(r->partition, profile);
    EXPECT_EQ(r->name, name);
    EXPECT_TRUE(r->memory_name.empty() && r->compute_name.empty());
    EXPECT_EQ(DeviceResource(Vendor::kNvidia, "H200", profile), name);
  }
  for (const char* bad : {"nvidia.com/mig-", "nvidia.com/mig-1g", "nvidia.com/mig-0g.5gb",
                          "nvidia.com/mig-1g.18gb-memory1", "nvidia.com/mig-x",
                          "nvidia.com/mig-1g.18gb+me", "nvidia.com/mig-1g.18gb.me."}) {
    EXPECT_FALSE(LookupResource(bad).has_value()) << bad;
  }
  EXPECT_EQ(LookupResource("nvidia.com/gpu")->partition, "");
}

// Every name DeviceResource gives is advertised; the count names it never
// gives get a hint of what to ask for instead.
TEST(ResourcesTest, UnadvertisedCountNamesSayWhatToAskFor) {
  for (const char* model :
       {"Ascend910A", "Ascend910B3", "Ascend910C", "Ascend310P3", "Ascend310", "Ascend950"}) {
    EXPECT_FALSE(UnadvertisedCountHint(DeviceResource(Vendor::kAscend, model)).has_value())
        << model;
  }
  for (Vendor v : core::AllVendors()) {
    // Ascend devices are advertised by chip; huawei.com/npu only names one
    // whose model is no chip name (a fake inventory's), which real chips
    // never are.
    if (v == Vendor::kAscend) continue;
    EXPECT_FALSE(UnadvertisedCountHint(DeviceResource(v, "")).has_value()) << core::VendorName(v);
  }
  EXPECT_FALSE(UnadvertisedCountHint("nvidia.com/mig-3g.71gb").has_value());
  EXPECT_FALSE(UnadvertisedCountHint("nvidia.com/gpumem").has_value());  // no count name
  EXPECT_FALSE(UnadvertisedCountHint("example.com/foo").has_value());
  EXPECT_EQ(UnadvertisedCountHint("huawei.com/Ascend310P3"), "huawei.com/Ascend310P");
  for (const char* family : {"huawei.com/Ascend910", "huawei.com/Ascend910B", "huawei.com/npu"}) {
    std::optional<std::string> hint = UnadvertisedCountHint(family);
    ASSERT_TRUE(hint.has_value()) << family;
    EXPECT_NE(hint->find("chip's own name"), std::string::npos) << *hint;
  }
  std::optional<std::string> hint = UnadvertisedCountHint("cambricon.com/vmlu");
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->rfind("cambricon.com/mlu (whole devices", 0), 0u) << *hint;
}

TEST(ResourcesTest, DeviceResourceIsTheWholeDeviceCountName) {
  struct Case {
    Vendor vendor;
    std::string model;
    std::string want;
  };
  const std::vector<Case> cases = {
      {Vendor::kNvidia, "H200", "nvidia.com/gpu"},
      {Vendor::kAscend, "Ascend910B3", "huawei.com/Ascend910B3"},
      {Vendor::kAscend, "Ascend910C", "huawei.com/Ascend910C"},
      {Vendor::kAscend, "Ascend950", "huawei.com/Ascend950"},  // pattern, not in the fixed list
      // 310P chips go by the family's name, the one pods ask (HAMi, Huawei).
      {Vendor::kAscend, "Ascend310P3", "huawei.com/Ascend310P"},
      {Vendor::kAscend, "Ascend310P1", "huawei.com/Ascend310P"},
      {Vendor::kAscend, "Ascend310P", "huawei.com/Ascend310P"},
      {Vendor::kAscend, "Ascend310", "huawei.com/Ascend310"},
      {Vendor::kAscend, "Ascend910B-bad/name", "huawei.com/npu"},
      {Vendor::kAscend, "", "huawei.com/npu"},
      {Vendor::kKunlunxin, "P800", "kunlunxin.com/xpu"},
      {Vendor::kMetax, "C500", "metax-tech.com/gpu"},
      {Vendor::kMthreads, "MTT S4000", "mthreads.com/gpu"},
      {Vendor::kThead, "PPU-ZW810E", "alibabacloud.com/ppu"},
      {Vendor::kCambricon, "MLU370-X8", "cambricon.com/mlu"},
      {Vendor::kHygon, "K100-AI", "hygon.com/dcu"},
      {Vendor::kUnknown, "x", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DeviceResource(c.vendor, c.model), c.want) << c.model;
  }
  for (Vendor v : core::AllVendors()) {
    auto r = LookupResource(DeviceResource(v, ""));
    ASSERT_TRUE(r.has_value()) << core::VendorName(v);
    EXPECT_EQ(r->vendor, v);
    EXPECT_EQ(r->role, ResourceRole::kCount);
  }
}

}  // namespace
}  // namespace accelpool::api
