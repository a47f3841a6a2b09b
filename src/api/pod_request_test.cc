#include "api/pod_request.h"

#include <gtest/gtest.h>

namespace accelpool::api {
namespace {

using core::Vendor;
using nlohmann::json;

json PodWithLimits(const json& limits, const json& annotations = json::object(),
                   const json& requests = json::object()) {
  return {{"metadata",
           {{"name", "p"}, {"namespace", "ns"}, {"uid", "u"}, {"annotations", annotations}}},
          {"spec",
           {{"containers",
             json::array({{{"name", "main"},
                           {"resources", {{"limits", limits}, {"requests", requests}}}}})}}}};
}

// An explicit zero asks for nothing: a chart's default nvidia.com/gpu: 0 beside
// the count the container really asks through (a MIG profile's name, an
// Ascend chip's) neither clashes with it nor names a family or partition.
TEST(PodRequestTest, AZeroCountOfAnotherNameDoesNotBlockTheRealOne) {
  struct Case {
    json limits;
    Vendor vendor;
    std::string family, partition, resource;
  };
  const std::vector<Case> cases = {
      {{{"nvidia.com/gpu", "0"}, {"nvidia.com/mig-2g.35gb", "1"}},
       Vendor::kNvidia,
       "",
       "2g.35gb",
       "nvidia.com/mig-2g.35gb"},
      {{{"nvidia.com/mig-1g.18gb", "0"}, {"nvidia.com/mig-2g.35gb", "1"}},
       Vendor::kNvidia,
       "",
       "2g.35gb",
       "nvidia.com/mig-2g.35gb"},
      {{{"huawei.com/Ascend310P", "0"}, {"huawei.com/Ascend910B3", "1"}},
       Vendor::kAscend,
       "Ascend910B3",
       "",
       "huawei.com/Ascend910B3"},
      {{{"nvidia.com/mig-1g.18gb", "0"}, {"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}},
       Vendor::kNvidia,
       "",
       "",
       "nvidia.com/gpu"},
  };
  for (const Case& c : cases) {
    auto r = ParsePodRequest(PodWithLimits(c.limits));
    ASSERT_TRUE(r.ok()) << c.limits.dump() << ": " << r.status().ToString();
    ASSERT_EQ(r->request.containers.size(), 1u) << c.limits.dump();
    const core::DeviceRequest& d = r->request.containers[0];
    EXPECT_EQ(d.vendor, c.vendor);
    EXPECT_EQ(d.count, 1);
    EXPECT_EQ(d.partition, c.partition) << c.limits.dump();
    EXPECT_EQ(r->origins[0].resource, c.resource) << c.limits.dump();
    EXPECT_EQ(r->origins[0].model_family, c.family) << c.limits.dump();
  }
  // Zero alone still asks for nothing.
  auto none =
      ParsePodRequest(PodWithLimits({{"nvidia.com/gpu", "0"}, {"nvidia.com/mig-1g.18gb", 0}}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->request.containers.empty());
}

TEST(PodRequestTest, EveryResourceNameMapsToUnits) {
  struct Case {
    json limits;
    Vendor vendor;
    int32_t count;
    int64_t memory_mib;
    int32_t memory_percent;
    int32_t compute;
    std::string resource, family;
  };
  const std::vector<Case> cases = {
      {{{"nvidia.com/gpu", "2"}}, Vendor::kNvidia, 2, 0, 0, 0, "nvidia.com/gpu", ""},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}, {"nvidia.com/gpucores", "25"}},
       Vendor::kNvidia,
       1,
       4096,
       0,
       250,
       "nvidia.com/gpu",
       ""},
      {{{"nvidia.com/gpu", 1},
        {"nvidia.com/gpumem-percentage", "50"},
        {"nvidia.com/priority", "1"}},
       Vendor::kNvidia,
       1,
       0,
       50,
       0,
       "nvidia.com/gpu",
       ""},
      {{{"nvidia.com/gpumem", "1024"}}, Vendor::kNvidia, 1, 1024, 0, 0, "nvidia.com/gpumem", ""},
      {{{"huawei.com/Ascend910B", "1"},
        {"huawei.com/Ascend910B-memory", "16384"},
        {"huawei.com/Ascend910B-core", "20"}},
       Vendor::kAscend,
       1,
       16384,
       0,
       200,
       "huawei.com/Ascend910B",
       "Ascend910B"},
      {{{"huawei.com/Ascend910C", "2"}},
       Vendor::kAscend,
       2,
       0,
       0,
       0,
       "huawei.com/Ascend910C",
       "Ascend910C"},
      {{{"huawei.com/npu", "8"}}, Vendor::kAscend, 8, 0, 0, 0, "huawei.com/npu", ""},
      {{{"kunlunxin.com/xpu", "4"}}, Vendor::kKunlunxin, 4, 0, 0, 0, "kunlunxin.com/xpu", ""},
      {{{"kunlunxin.com/vxpu", "1"}, {"kunlunxin.com/vxpu-memory", "24576"}},
       Vendor::kKunlunxin,
       1,
       24576,
       0,
       0,
       "kunlunxin.com/vxpu",
       ""},
      {{{"metax-tech.com/gpu", "1"}}, Vendor::kMetax, 1, 0, 0, 0, "metax-tech.com/gpu", ""},
      {{{"metax-tech.com/sgpu", "1"},
        {"metax-tech.com/vmemory", "4"},
        {"metax-tech.com/vcore", "30"}},
       Vendor::kMetax,
       1,
       4096,
       0,
       300,
       "metax-tech.com/sgpu",
       ""},
      {{{"metax-tech.com/sgpu", "1"}, {"metax-tech.com/vmemory", "2Gi"}},
       Vendor::kMetax,
       1,
       2048,
       0,
       0,
       "metax-tech.com/sgpu",
       ""},
      {{{"mthreads.com/vgpu", "1"},
        {"mthreads.com/sgpu-memory", "8"},
        {"mthreads.com/sgpu-core", "4"}},
       Vendor::kMthreads,
       1,
       4096,
       0,
       250,
       "mthreads.com/vgpu",
       ""},
      {{{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-core", "1"}},
       Vendor::kMthreads,
       1,
       0,
       0,
       62,
       "mthreads.com/vgpu",
       ""},  // 1/16 = 62.5 thousandths, rounded down
      {{{"alibabacloud.com/ppu", "8"}}, Vendor::kThead, 8, 0, 0, 0, "alibabacloud.com/ppu", ""},
      {{{"cambricon.com/vmlu", "1"},
        {"cambricon.com/mlu.smlu.vmemory", "4"},
        {"cambricon.com/mlu.smlu.vcore", "10"}},
       Vendor::kCambricon,
       1,
       1024,
       0,
       100,
       "cambricon.com/vmlu",
       ""},
      {{{"cambricon.com/mlu", "2"}}, Vendor::kCambricon, 2, 0, 0, 0, "cambricon.com/mlu", ""},
      {{{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "2000"}, {"hygon.com/dcucores", "60"}},
       Vendor::kHygon,
       1,
       2000,
       0,
       600,
       "hygon.com/dcunum",
       ""},
      {{{"iluvatar.ai/BI-V150-vgpu", "1"},
        {"iluvatar.ai/BI-V150.vMem", "64"},
        {"iluvatar.ai/BI-V150.vCore", "50"}},
       Vendor::kIluvatar,
       1,
       16384,
       0,
       500,
       "iluvatar.ai/BI-V150-vgpu",
       "BI-V150"},
      {{{"enflame.com/gcu", "1"},
        {"enflame.com/gcu-memory", "8192"},
        {"enflame.com/gcu-core", "25"}},
       Vendor::kEnflame,
       1,
       8192,
       0,
       250,
       "enflame.com/gcu",
       ""},
      {{{"enflame.com/vgcu", "1"}, {"enflame.com/vgcu-percentage", "25"}},
       Vendor::kEnflame,
       1,
       0,
       25,
       0,
       "enflame.com/vgcu",
       ""},
  };
  for (const Case& c : cases) {
    auto r = ParsePodRequest(PodWithLimits(c.limits));
    ASSERT_TRUE(r.ok()) << c.limits.dump() << ": " << r.status().ToString();
    ASSERT_EQ(r->request.containers.size(), 1u) << c.limits.dump();
    const core::DeviceRequest& d = r->request.containers[0];
    EXPECT_EQ(d.container, "main");
    EXPECT_EQ(d.vendor, c.vendor) << c.limits.dump();
    EXPECT_EQ(d.count, c.count) << c.limits.dump();
    EXPECT_EQ(d.memory_mib, c.memory_mib) << c.limits.dump();
    EXPECT_EQ(d.memory_percent, c.memory_percent) << c.limits.dump();
    EXPECT_EQ(d.compute, c.compute) << c.limits.dump();
    EXPECT_EQ(r->origins[0].resource, c.resource) << c.limits.dump();
    EXPECT_EQ(r->origins[0].model_family, c.family) << c.limits.dump();
  }
}

// A memory or compute amount of 0 is not given, as in HAMi (gpucores: 0 is
// "no compute limit" there): the rest of the container's resources decide.
TEST(PodRequestTest, ZeroAmountsAreNotGiven) {
  struct Case {
    json limits;
    size_t containers;
    int64_t memory_mib;
    int32_t compute;
  };
  const std::vector<Case> cases = {
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}, {"nvidia.com/gpucores", "0"}},
       1,
       4096,
       0},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "0"}, {"nvidia.com/gpucores", "30"}},
       1,
       0,
       300},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", 0}}, 1, 0, 0},  // a whole GPU
      {{{"nvidia.com/gpumem", "0"}}, 0, 0, 0},                         // asks for nothing
      {{{"nvidia.com/gpumem-percentage", "0"}, {"nvidia.com/gpucores", "0"}}, 0, 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.limits.dump());
    auto r = ParsePodRequest(PodWithLimits(c.limits));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->request.containers.size(), c.containers);
    if (c.containers == 0) continue;
    const core::DeviceRequest& d = r->request.containers[0];
    EXPECT_EQ(d.count, 1);
    EXPECT_EQ(d.memory_mib, c.memory_mib);
    EXPECT_EQ(d.memory_percent, 0);
    EXPECT_EQ(d.compute, c.compute);
    EXPECT_EQ(d.Fractional(), c.memory_mib > 0 || c.compute > 0);
  }
}

TEST(PodRequestTest, MigNamesAskForInstancesOfOneProfile) {
  auto r = ParsePodRequest(PodWithLimits({{"nvidia.com/mig-1g.18gb", "2"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->request.containers.size(), 1u);
  const core::DeviceRequest& c = r->request.containers[0];
  EXPECT_EQ(c.vendor, Vendor::kNvidia);
  EXPECT_EQ(c.count, 2);
  EXPECT_EQ(c.partition, "1g.18gb");
  EXPECT_FALSE(c.Fractional());
  EXPECT_EQ(r->origins[0].resource, "nvidia.com/mig-1g.18gb");
  EXPECT_EQ(
      ParsePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}}))->request.containers[0].partition,
      "");
  // A MIG instance is whole; one count name per container.
  auto shared = ParsePodRequest(
      PodWithLimits({{"nvidia.com/mig-1g.18gb", "1"}, {"nvidia.com/gpumem", "4096"}}));
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("granted whole"), std::string::npos)
      << shared.status().ToString();
  auto two = ParsePodRequest(
      PodWithLimits({{"nvidia.com/mig-1g.18gb", "1"}, {"nvidia.com/mig-2g.35gb", "1"}}));
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("one count resource per vendor"), std::string::npos)
      << two.status().ToString();
}

TEST(PodRequestTest, BadValuesSayWhatIsWrong) {
  struct Case {
    json limits;
    json annotations;
    std::string want;
  };
  const json none = json::object();
  const std::vector<Case> cases = {
      {{{"nvidia.com/gpu", "1.5"}},
       none,
       "container \"main\": nvidia.com/gpu: want a whole number, got \"1.5\" (fractions"},
      {{{"nvidia.com/gpu", "-1"}}, none, "negative values are not allowed"},
      {{{"nvidia.com/gpu", -2}}, none, "negative"},
      {{{"nvidia.com/gpu", "100Mi"}}, none, "a plain count is needed here"},
      {{{"nvidia.com/gpu", "1e-3"}}, none, "negative exponents"},
      {{{"nvidia.com/gpu", "500m"}}, none, "milli-units are not allowed"},
      {{{"nvidia.com/gpumem", "4Gi"}}, none, "a plain count is needed here"},
      {{{"nvidia.com/gpumem", "2T"}}, none, "2T is too large (memory is in MiB"},
      {{{"nvidia.com/gpu", 1.5}}, none, "nvidia.com/gpu: want a whole number, got number 1.5"},
      {{{"nvidia.com/gpu", ""}}, none, "empty"},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "150"}},
       none,
       "nvidia.com/gpucores: 150 is out of range; use 1..100"},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "101"}},
       none,
       "101% is out of range"},
      {{{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-core", "17"}}, none, "use 1..16"},
      {{{"nvidia.com/gpu", "1"},
        {"nvidia.com/gpumem", "1024"},
        {"nvidia.com/gpumem-percentage", "10"}},
       none,
       "give memory one way"},
      {{{"nvidia.com/gpu", "0"}, {"nvidia.com/gpumem", "1024"}},
       none,
       "is 0 but memory or compute"},
      {{{"huawei.com/Ascend910B", "1"}, {"huawei.com/npu", "1"}},
       none,
       "use one count resource per vendor"},
      {{{"huawei.com/Ascend910B", "1"}, {"huawei.com/Ascend910C-memory", "1"}},
       none,
       "one family per container"},
      {{{"metax-tech.com/sgpu", "1"}, {"metax-tech.com/vmemory", "4Zi"}}, none, "unknown unit"},
      {{{"nvidia.com/gpu", "1"}},
       {{"accelpool.io/model-include", "H100, A100"}, {"accelpool.io/model-exclude", "a100"}},
       "device model \"A100\" is both included and excluded"},
      {{{"nvidia.com/gpu", "1"}},
       {{"nvidia.com/use-gpuuuid", "GPU-1"}, {"nvidia.com/nouse-gpuuuid", "GPU-1"}},
       "device UUID \"GPU-1\" is both included and excluded"},
      {{{"nvidia.com/gpu", "1"}},
       {{"accelpool.io/numa-bind", "sometimes"}},
       "want \"true\" or \"false\""},
      {{{"nvidia.com/gpu", "1"}},
       {{"accelpool.io/policy", 3}},
       "metadata.annotations.accelpool.io/policy: want a string"},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "2"}},
       none,
       "nvidia.com/priority: want 0 (high priority) or 1 (low priority), got string \"2\""},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "high"}}, none, "want 0 (high"},
      // A share name through a count name it does not go with: a whole device,
      // handed over uncapped, would be booked as a share.
      {{{"kunlunxin.com/xpu", "1"}, {"kunlunxin.com/vxpu-memory", "1024"}},
       none,
       "kunlunxin.com/vxpu-memory does not go with kunlunxin.com/xpu; ask through "
       "kunlunxin.com/vxpu for a share of a device, or drop kunlunxin.com/vxpu-memory"},
      {{{"metax-tech.com/gpu", "1"}, {"metax-tech.com/vmemory", "8"}},
       none,
       "ask through metax-tech.com/sgpu"},
      {{{"mthreads.com/gpu", "1"}, {"mthreads.com/sgpu-core", "4"}},
       none,
       "mthreads.com/sgpu-core does not go with mthreads.com/gpu"},
      {{{"huawei.com/npu", "1"}, {"huawei.com/Ascend910B3-memory", "16384"}},
       none,
       "huawei.com/Ascend910B3-memory does not go with huawei.com/npu; ask through "
       "huawei.com/Ascend910B3"},
      {{{"nvidia.com/gpu", "0"}, {"nvidia.com/mig-1g.18gb", "0"}, {"nvidia.com/gpucores", "10"}},
       none,
       "is 0 but memory or compute"},
  };
  for (const Case& c : cases) {
    auto r = ParsePodRequest(PodWithLimits(c.limits, c.annotations));
    ASSERT_FALSE(r.ok()) << c.limits.dump() << c.annotations.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.limits.dump() << ": " << r.status().message();
  }
}

// HAMi's nvidia.com/priority: 0 high, 1 (or none) low; limits win over
// requests as for every resource.
TEST(PodRequestTest, TaskPriorityOfAContainer) {
  EXPECT_TRUE(HighTaskPriority({{"resources", {{"limits", {{"nvidia.com/priority", "0"}}}}}}));
  EXPECT_TRUE(HighTaskPriority({{"resources", {{"limits", {{"nvidia.com/priority", 0}}}}}}));
  EXPECT_FALSE(HighTaskPriority({{"resources", {{"limits", {{"nvidia.com/priority", "1"}}}}}}));
  EXPECT_FALSE(HighTaskPriority({{"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}));
  EXPECT_FALSE(HighTaskPriority({{"resources", {{"limits", {{"nvidia.com/priority", "7"}}}}}}));
  EXPECT_FALSE(HighTaskPriority(json::array()));
  EXPECT_FALSE(HighTaskPriority({{"resources", "none"}}));
  EXPECT_TRUE(HighTaskPriority({{"resources", {{"requests", {{"nvidia.com/priority", "0"}}}}}}));
  EXPECT_FALSE(HighTaskPriority({{"resources",
                                  {{"requests", {{"nvidia.com/priority", "0"}}},
                                   {"limits", {{"nvidia.com/priority", "1"}}}}}}));
  // Accepted at admission (a whole-number request, not an allocation).
  EXPECT_TRUE(
      ParsePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "0"}})).ok());
}

// The apiserver serialises a quantity in canonical form (largest suffix, no
// fraction): "nvidia.com/gpumem: 4000" reaches the webhook and the extender
// as "4k". It is 4000 MiB, as kubelet and kube-scheduler read it.
TEST(PodRequestTest, CanonicalSpellingsOfWholeNumbersAreRead) {
  auto r = ParsePodRequest(PodWithLimits(
      {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4k"}, {"nvidia.com/gpucores", "25"}}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->request.containers.size(), 1u);
  EXPECT_EQ(r->request.containers[0].memory_mib, 4000);
  r = ParsePodRequest(
      PodWithLimits({{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", "2e1"}}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->request.containers[0].memory_mib, 20 * 512);
}

// MetaX vmemory is GiB as a number and bytes with a binary unit. A decimal
// suffix or an exponent only writes the number: a plain 2000 reaches the
// webhook as "2k", and is 2000 GiB (which no device has), not 2000 bytes.
TEST(PodRequestTest, MetaxVmemoryIsBytesOnlyWithABinaryUnit) {
  auto mib = [](const char* v) -> StatusOr<int64_t> {
    auto r = ParsePodRequest(
        PodWithLimits({{"metax-tech.com/sgpu", "1"}, {"metax-tech.com/vmemory", v}}));
    if (!r.ok()) return r.status();
    return r->request.containers.at(0).memory_mib;
  };
  for (const auto& [v, want] : std::vector<std::pair<const char*, int64_t>>{
           {"64", 64 * 1024},
           {"2k", 2000 * 1024},
           {"1e3", 1000 * 1024},
           {"2e1", 20 * 1024},
           {"2Gi", 2048},
           {"2048Mi", 2048},
           {"1025Ki", 2},  // rounded up to MiB
       }) {
    SCOPED_TRACE(v);
    StatusOr<int64_t> got = mib(v);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, want);
  }
  // Read as GiB, a byte count written with a decimal suffix is too large,
  // and the message says how to write bytes.
  for (const char* v : {"8G", "8e9", "4000M"}) {
    SCOPED_TRACE(v);
    StatusOr<int64_t> got = mib(v);
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find(std::string(v) + " is too large (memory is in units "
                                                           "of 1024 MiB per device; bytes take a "
                                                           "binary unit such as 8Gi)"),
              std::string::npos)
        << got.status().message();
  }
}

// sgpu-core is in sixteenths of a card, rounded down to thousandths (at
// least 1), so sixteen 1/16 shares fit one card as the profile's 16 share
// slots allow.
TEST(PodRequestTest, MthreadsSgpuCoreSixteenthsFitOneCard) {
  for (int64_t units = 1; units <= 16; ++units) {
    SCOPED_TRACE(units);
    auto r = ParsePodRequest(PodWithLimits(
        {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-core", std::to_string(units)}}));
    ASSERT_TRUE(r.ok()) << r.status().message();
    const int32_t compute = r->request.containers.at(0).compute;
    EXPECT_EQ(compute, units * 1000 / 16);
    EXPECT_LE(compute * (16 / units), 1000);
  }
}

// Bytes near the int64 limit must not wrap when rounded up to MiB, and no
// memory beyond 2^40 MiB passes (the bound the MiB-unit names already have).
TEST(PodRequestTest, HugeByteQuantitiesAreTooLarge) {
  for (const char* v : {"9223372036854775k", "9223372036854775807", "8E", "7Ei"}) {
    SCOPED_TRACE(v);
    auto r = ParsePodRequest(
        PodWithLimits({{"metax-tech.com/sgpu", "1"}, {"metax-tech.com/vmemory", v}}));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("too large"), std::string::npos) << r.status().message();
  }
}

TEST(PodRequestTest, LimitsWinOverRequestsAndRequestsFillGaps) {
  auto r = ParsePodRequest(PodWithLimits({{"nvidia.com/gpu", "2"}}, json::object(),
                                         {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "2048"}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->request.containers[0].count, 2);
  EXPECT_EQ(r->request.containers[0].memory_mib, 2048);
}

TEST(PodRequestTest, ContainerKindsOrderAndVendors) {
  json pod = {
      {"metadata", {{"name", "p"}, {"namespace", "ns"}}},
      {"spec",
       {{"initContainers",
         {{{"name", "warm"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}},
          {{"name", "side"},
           {"restartPolicy", "Always"},
           {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}},
          {{"name", "plain"}}}},
        {"containers",
         {{{"name", "main"},
           {"resources",
            {{"limits", {{"nvidia.com/gpu", "1"}, {"huawei.com/Ascend910B", "2"}, {"cpu", "4"}}}}}},
          {{"name", "zero"}, {"resources", {{"limits", {{"nvidia.com/gpu", "0"}}}}}}}}}}};
  auto r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->request.containers.size(), 4u);
  EXPECT_EQ(r->request.containers[0].kind, core::ContainerKind::kInit);
  EXPECT_EQ(r->request.containers[1].kind, core::ContainerKind::kSidecar);
  EXPECT_EQ(r->request.containers[2].container, "main");
  EXPECT_EQ(r->request.containers[3].container, "main");
  EXPECT_NE(r->request.containers[2].vendor, r->request.containers[3].vendor);
  EXPECT_TRUE(RequestsAccelerators(pod));
  json plain = {
      {"spec", {{"containers", {{{"name", "c"}, {"resources", {{"limits", {{"cpu", "1"}}}}}}}}}}};
  EXPECT_FALSE(RequestsAccelerators(plain));
  auto none = ParsePodRequest(plain);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->request.containers.empty());
}

TEST(PodRequestTest, AnnotationsSelectorsPolicyAndVendorScope) {
  const json ann = {
      {"nvidia.com/use-gputype", "H100,H200"},    {"nvidia.com/nouse-gpuuuid", "GPU-bad"},
      {"nvidia.com/numa-bind", "true"},           {"accelpool.io/uuid-include", "GPU-a, GPU-b"},
      {"hami.io/gpu-scheduler-policy", "spread"}, {"accelpool.io/exclusive", "true"}};
  json pod = PodWithLimits({{"nvidia.com/gpu", "1"}, {"kunlunxin.com/xpu", "1"}}, ann);
  auto r = ParsePodRequest(pod);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const core::DeviceRequest* nv = nullptr;
  const core::DeviceRequest* kx = nullptr;
  for (const auto& c : r->request.containers) {
    (c.vendor == Vendor::kNvidia ? nv : kx) = &c;
  }
  ASSERT_TRUE(nv && kx);
  EXPECT_EQ(nv->model_include, (std::vector<std::string>{"H100", "H200"}));
  EXPECT_EQ(nv->id_exclude, (std::vector<std::string>{"GPU-bad"}));
  EXPECT_EQ(nv->id_include, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_TRUE(nv->numa_bind);
  EXPECT_TRUE(nv->exclusive);
  // nvidia.com/* spellings do not leak onto other vendors; accelpool.io/* does.
  EXPECT_TRUE(kx->model_include.empty());
  EXPECT_FALSE(kx->numa_bind);
  EXPECT_EQ(kx->id_include, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(r->policy, "spread");
  json both = PodWithLimits({{"nvidia.com/gpu", "1"}}, {{"hami.io/gpu-scheduler-policy", "spread"},
                                                        {"accelpool.io/policy", "binpack"}});
  EXPECT_EQ(ParsePodRequest(both)->policy, "binpack");
  EXPECT_FALSE(ParsePodRequest(both)->policy_devices_only);
  // HAMi's gpu-scheduler-policy picks devices only; the node policy is its own.
  EXPECT_TRUE(r->policy_devices_only);
  EXPECT_EQ(r->node_policy, "");
  // HAMi 2.10's values and lists of them.
  struct HamiCase {
    const char* value;
    const char* policy;
    bool exclusive;
  };
  const HamiCase hami_cases[] = {
      {"topology-aware", "topology", false},
      {"Spread, NUMA", "spread", false},
      {"numa", "", false},
      {"mutex", "", true},
      {"mutex,binpack", "binpack", true},
      {"spread,topology-aware", "topology", false},
      {"binpack,fastest", "binpack,fastest", false},
  };
  for (const HamiCase& c : hami_cases) {
    SCOPED_TRACE(c.value);
    auto h = ParsePodRequest(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1024"}},
                                           {{"hami.io/gpu-scheduler-policy", c.value}}));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->policy, c.policy);
    EXPECT_TRUE(h->policy_devices_only);
    EXPECT_EQ(h->request.containers.at(0).exclusive, c.exclusive);
  }
  // accelpool.io/exclusive, when given, wins over mutex.
  auto kept = ParsePodRequest(PodWithLimits(
      {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1024"}},
      {{"hami.io/gpu-scheduler-policy", "mutex"}, {"accelpool.io/exclusive", "false"}}));
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->request.containers.at(0).exclusive);
  json nodes =
      PodWithLimits({{"nvidia.com/gpu", "1"}}, {{"hami.io/node-scheduler-policy", "spread"}});
  EXPECT_EQ(ParsePodRequest(nodes)->node_policy, "spread");
  EXPECT_EQ(ParsePodRequest(nodes)->policy, "");
  nodes["metadata"]["annotations"]["accelpool.io/node-policy"] = "binpack";
  EXPECT_EQ(ParsePodRequest(nodes)->node_policy, "binpack");
}

TEST(PodRequestTest, JobIdentityForGangLocality) {
  struct Case {
    json labels, annotations;
    std::string group, source;
  };
  const std::vector<Case> cases = {
      {json::object(),
       {{"accelpool.io/pod-group", "g1"}, {"kueue.x-k8s.io/workload", "w"}},
       "ns/g1",
       "accelpool.io/pod-group"},
      {{{"scheduling.k8s.io/group-name", "vc"}},
       json::object(),
       "ns/vc",
       "scheduling.k8s.io/group-name"},
      {{{"pod-group.scheduling.sigs.k8s.io", "pg"}},
       json::object(),
       "ns/pg",
       "pod-group.scheduling.sigs.k8s.io"},
      {json::object(),
       {{"kueue.x-k8s.io/workload", "job-x-1"}},
       "ns/job-x-1",
       "kueue.x-k8s.io/workload"},
      {{{"jobset.sigs.k8s.io/jobset-name", "js"}},
       json::object(),
       "ns/js",
       "jobset.sigs.k8s.io/jobset-name"},
      {{{"kueue.x-k8s.io/workload", "label-only"}}, json::object(), "", ""},
  };
  for (const Case& c : cases) {
    json pod = PodWithLimits({{"nvidia.com/gpu", "1"}}, c.annotations);
    pod["metadata"]["labels"] = c.labels;
    auto r = ParsePodRequest(pod);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->group, c.group) << c.labels.dump() << c.annotations.dump();
    EXPECT_EQ(r->group_source, c.source);
  }
}

TEST(PodRequestTest, MalformedPods) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "pod: want an object"},
      {json::object(), "spec: required"},
      {{{"spec", {{"containers", json::object()}}}}, "spec.containers: want an array"},
      {{{"spec", {{"containers", {{{"image", "x"}}}}}}}, "spec.containers[0].name: required"},
      {{{"spec", {{"containers", {{{"name", "c"}, {"resources", {{"limits", "x"}}}}}}}}},
       "resources.limits: want an object"},
      {{{"metadata", {{"labels", {{"a", 1}}}}}, {"spec", json::object()}},
       "metadata.labels.a: want a string"},
  };
  for (const auto& [pod, want] : cases) {
    auto r = ParsePodRequest(pod);
    ASSERT_FALSE(r.ok()) << pod.dump();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

TEST(PodRequestTest, WholeQuantity) {
  struct Case {
    std::string in;
    bool suffix;
    bool ok;
    int64_t want;
  };
  const std::vector<Case> cases = {
      {"4", false, true, 4},
      {"+4", false, true, 4},
      {"0", false, true, 0},
      {"4Ki", true, true, 4096},
      {"2Gi", true, true, 2147483648},
      {"3k", true, true, 3000},
      {"4Ki", false, false, 0},
      {"1.0", false, false, 0},
      {"-0", false, false, 0},
      {"99999999999999999999", false, false, 0},
      {"9223372036854775807Ki", true, false, 0},
      {"e", false, false, 0},
      // kube-apiserver sends quantities in canonical form: a plain 4000 arrives
      // as "4k", 3000000 as "3M", a value written "3e3" stays "3e3". All are
      // whole numbers and mean what kubelet and kube-scheduler read.
      {"4k", false, true, 4000},
      {"20k", false, true, 20000},
      {"3M", false, true, 3000000},
      {"1E", false, true, 1000000000000000000},
      {"3e3", false, true, 3000},
      {"3E3", false, true, 3000},
      {"3e+3", false, true, 3000},
      {"0e99", false, true, 0},
      {"1e0", false, true, 1},
      {"10E", false, false, 0},
      {"1e19", false, false, 0},
      {"1e", false, false, 0},
      {"1e-3", false, false, 0},
      {"1e3x", false, false, 0},
      {"500m", false, false, 0},
      {"2000m", false, false, 0},
      {"8e9", true, true, 8000000000},
      {"1Ei", true, true, int64_t{1} << 60},
  };
  for (const Case& c : cases) {
    auto r = ParseWholeQuantity(c.in, c.suffix);
    EXPECT_EQ(r.ok(), c.ok) << c.in;
    if (r.ok()) {
      EXPECT_EQ(*r, c.want) << c.in;
    }
  }
}

}  // namespace
}  // namespace accelpool::api
