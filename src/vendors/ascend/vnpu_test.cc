#include "vendors/ascend/vnpu.h"

#include <gtest/gtest.h>

#include <set>

#include "core/fit.h"

namespace accelpool::vendors::ascend {
namespace {

std::vector<std::string> Names(const std::vector<VnpuTemplate>& t) {
  std::vector<std::string> out;
  for (const VnpuTemplate& v : t) out.push_back(v.name);
  return out;
}

GrantedDevice Share(const std::string& model, int32_t aicores, int64_t chip_mib, int64_t mib,
                    int32_t compute = 0) {
  GrantedDevice g;
  g.device.id = "NPU-0000-c1-00.0";
  g.device.vendor = core::Vendor::kAscend;
  g.device.model = model;
  g.device.compute_units = aicores;
  g.device.memory_mib = chip_mib;
  g.device.max_shares = 4;
  g.memory_mib = mib;
  g.compute = compute;
  g.exclusive = false;
  return g;
}

TEST(VnpuTemplates, EachChipGetsTheTemplatesOfItsCoresAndMemory) {
  struct Case {
    std::string model;
    int32_t aicores;
    int64_t memory;
    std::vector<std::string> want;
  };
  const Case cases[] = {
      {"Ascend910B3", 20, 65536, {"vir05_1c_16g", "vir10_3c_32g"}},
      {"Ascend910B4-1", 20, 65536, {"vir05_1c_16g", "vir10_3c_32g"}},
      {"Ascend910B4", 20, 32768, {"vir05_1c_8g", "vir10_3c_16g"}},
      {"Ascend910B2", 24, 65536, {"vir06_1c_16g", "vir12_3c_32g"}},
      // DCMI did not give the cores: the model's usual count.
      {"Ascend910B2", 0, 65536, {"vir06_1c_16g", "vir12_3c_32g"}},
      {"Ascend910B3", 0, 65536, {"vir05_1c_16g", "vir10_3c_32g"}},
      // A little less memory than nominal is still that chip.
      {"Ascend910B3", 20, 62000, {"vir05_1c_16g", "vir10_3c_32g"}},
      {"Ascend910C", 20, 65536, {"vir05_1c_16g", "vir10_3c_32g"}},
      {"Ascend910C", 24, 65536, {"vir06_1c_16g", "vir12_3c_32g"}},
      {"Ascend910A", 32, 32768, {"vir02", "vir04", "vir08", "vir16"}},
      {"Ascend310P3", 8, 21527, {"vir01", "vir02", "vir04"}},
      // No templates: unknown chip, unknown cores, too little memory.
      {"Ascend950", 32, 131072, {}},
      {"Ascend910C", 0, 65536, {}},
      {"Ascend910B4", 20, 16384, {}},
      {"Ascend310P3", 8, 8192, {}},
      {"H200", 132, 143771, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + std::to_string(c.aicores) + " " + std::to_string(c.memory));
    EXPECT_EQ(Names(VnpuTemplates(c.model, c.aicores, c.memory)), c.want);
  }
}

// The names the Ascend Docker Runtime accepts in ASCEND_VNPU_SPECS (it refuses
// the container for any other), and the shape every table must have.
TEST(VnpuTemplates, AreNamesTheRuntimeAcceptsAndGrowWithTheirCores) {
  const std::set<std::string> runtime = {
      "vir01",        "vir02",          "vir04",          "vir08",          "vir16",
      "vir04_3c",     "vir02_1c",       "vir04_4c_dvpp",  "vir04_3c_ndvpp", "vir12_3c_32g",
      "vir06_1c_16g", "vir03_hc_8g",    "vir10_3c_16g",   "vir05_1c_8g",    "vir10_3c_32g",
      "vir05_1c_16g", "vir12_3c_32g_m", "vir10_3c_16g_m", "vir10_3c_32g_m"};
  const std::pair<std::string, int32_t> chips[] = {{"Ascend910B3", 20}, {"Ascend910B4", 20},
                                                   {"Ascend910B2", 24}, {"Ascend910A", 32},
                                                   {"Ascend310P3", 8},  {"Ascend910C", 24}};
  for (const auto& [model, cores] : chips) {
    for (int64_t mib : {int64_t{21527}, int64_t{32768}, int64_t{65536}}) {
      const std::vector<VnpuTemplate> t = VnpuTemplates(model, cores, mib);
      for (size_t i = 0; i < t.size(); ++i) {
        SCOPED_TRACE(model + " " + t[i].name);
        EXPECT_TRUE(runtime.count(t[i].name)) << "not a template the runtime accepts";
        // The number after "vir" is the template's AI cores.
        EXPECT_EQ(std::stoi(t[i].name.substr(3, 2)), t[i].aicores);
        if (i > 0) {
          EXPECT_GT(t[i].memory_mib, t[i - 1].memory_mib);
          EXPECT_GT(t[i].aicores, t[i - 1].aicores);
          // Memory and cores grow together: compute follows memory.
          EXPECT_EQ(t[i].memory_mib * t[0].aicores / t[i].aicores / 8, t[0].memory_mib / 8);
        }
      }
    }
  }
}

TEST(VnpuSlots, AsManyOfTheSmallestTemplateAsTheMemoryHolds) {
  EXPECT_EQ(VnpuSlots(VnpuTemplates("Ascend910B3", 20, 65536), 65536), 4);
  EXPECT_EQ(VnpuSlots(VnpuTemplates("Ascend910B4", 20, 32768), 32768), 4);
  EXPECT_EQ(VnpuSlots(VnpuTemplates("Ascend310P3", 8, 21527), 21527), 7);
  EXPECT_EQ(VnpuSlots(VnpuTemplates("Ascend910A", 32, 32768), 32768), 15);
  EXPECT_EQ(VnpuSlots(VnpuTemplates("Ascend950", 32, 131072), 131072), 0);
}

// What the scheduler books for a request on a vNPU chip is a whole template:
// its memory, and its cores' share as compute.
TEST(VnpuSliceRule, RoundsARequestToTheTemplateThatHoldsItsMemoryAndCompute) {
  const std::vector<VnpuTemplate> t = VnpuTemplates("Ascend910B3", 20, 65536);
  const core::SliceRule rule = VnpuSliceRule(t);
  EXPECT_EQ(rule.memory_sizes, (std::vector<int64_t>{16384, 32768}));
  EXPECT_TRUE(rule.compute_follows_memory);
  EXPECT_TRUE(rule.fraction_single_device);
  core::Device chip;
  chip.memory_mib = 65536;
  chip.vendor = core::Vendor::kAscend;
  struct Case {
    int64_t memory;
    int32_t compute;  // thousandths
    int64_t want_mib;
    int32_t want_compute;
  };
  const Case cases[] = {
      {10000, 0, 16384, 250},   // memory only: vir05_1c_16g
      {16384, 0, 16384, 250},   // exactly a template
      {20000, 0, 32768, 500},   // rounds up: vir10_3c_32g
      {0, 400, 32768, 500},     // 40 % of the cores: vir10
      {4096, 400, 32768, 500},  // little memory, but 40 % of the cores
      {0, 250, 16384, 250},     // a quarter: vir05
      {40000, 0, 65536, 1000},  // above every template: the chip
  };
  for (const Case& c : cases) {
    core::DeviceRequest r;
    r.vendor = core::Vendor::kAscend;
    r.count = 1;
    r.memory_mib = c.memory;
    r.compute = c.compute;
    SCOPED_TRACE(std::to_string(c.memory) + " MiB, " + std::to_string(c.compute));
    EXPECT_EQ(core::EffectiveMemory(r, chip, rule), c.want_mib);
    EXPECT_EQ(core::EffectiveCompute(r, chip, rule), c.want_compute);
  }
}

TEST(IsVnpuGrant, ASharePartOfTheChipOnly) {
  EXPECT_TRUE(IsVnpuGrant(Share("Ascend910B3", 20, 65536, 16384)));
  EXPECT_TRUE(IsVnpuGrant(Share("Ascend910B3", 20, 65536, 0, 250)));
  EXPECT_FALSE(IsVnpuGrant(Share("Ascend910B3", 20, 65536, 65536)));  // the chip's memory
  EXPECT_FALSE(IsVnpuGrant(Share("Ascend910B3", 20, 65536, 0, 1000)));
  GrantedDevice whole = Share("Ascend910B3", 20, 65536, 16384);
  whole.exclusive = true;
  EXPECT_FALSE(IsVnpuGrant(whole));
  GrantedDevice one_slot = Share("Ascend910B3", 20, 65536, 16384);
  one_slot.device.max_shares = 1;
  EXPECT_FALSE(IsVnpuGrant(one_slot)) << "a share of a one-slot chip holds it whole";
}

TEST(VnpuContainerSpec, HandsTheRuntimeThePhysicalChipAndTheTemplateAndNoDeviceNode) {
  StatusOr<ContainerSpec> spec = VnpuContainerSpec({Share("Ascend910B3", 20, 65536, 16384)}, 103);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env, (std::map<std::string, std::string>{{"ASCEND_VISIBLE_DEVICES", "103"},
                                                           {"ASCEND_VNPU_SPECS", "vir05_1c_16g"},
                                                           {"ASCEND_RT_VISIBLE_DEVICES", "0"}}));
  EXPECT_TRUE(spec->devices.empty()) << "the runtime mounts the vNPU it makes; the physical "
                                        "chip's node would hand the container all of it";
  EXPECT_TRUE(spec->mounts.empty());

  // The grant's memory picks the template (it carries the template's size);
  // a grant without memory goes by its compute share.
  for (const auto& [g, want] : {std::pair{Share("Ascend910B3", 20, 65536, 32768), "vir10_3c_32g"},
                                std::pair{Share("Ascend910B3", 20, 65536, 20000), "vir10_3c_32g"},
                                std::pair{Share("Ascend910B3", 20, 65536, 0, 500), "vir10_3c_32g"},
                                std::pair{Share("Ascend310P3", 8, 21527, 3072, 143), "vir01"},
                                std::pair{Share("Ascend910A", 32, 32768, 8738), "vir08"},
                                std::pair{Share("Ascend910B4", 20, 32768, 8192), "vir05_1c_8g"}}) {
    StatusOr<ContainerSpec> s = VnpuContainerSpec({g}, 0);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->env.at("ASCEND_VNPU_SPECS"), want) << g.device.model << " " << g.memory_mib;
  }
}

TEST(VnpuContainerSpec, RefusesWhatNoTemplateServesWithAReason) {
  StatusOr<ContainerSpec> two = VnpuContainerSpec(
      {Share("Ascend910B3", 20, 65536, 16384), Share("Ascend910B3", 20, 65536, 16384)}, 0);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("ask for whole NPUs"), std::string::npos);

  StatusOr<ContainerSpec> none = VnpuContainerSpec({Share("Ascend950", 32, 131072, 16384)}, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no vNPU templates"), std::string::npos);

  StatusOr<ContainerSpec> big = VnpuContainerSpec({Share("Ascend910B3", 20, 65536, 40000)}, 0);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(big.status().message().find("vir10_3c_32g"), std::string::npos);

  EXPECT_FALSE(VnpuContainerSpec({}, 0).ok());
}

}  // namespace
}  // namespace accelpool::vendors::ascend
