#include "api/host_request.h"

#include <gtest/gtest.h>

#include <string>

namespace accelpool::api {
namespace {

using json = nlohmann::json;

TEST(QuantityTest, CpuRoundsUpToThousandths) {
  struct Case {
    const char* in;
    int64_t want;
  } cases[] = {{"500m", 500}, {"2", 2000},   {"0.1", 100},   {"1.5", 1500}, {"100u", 1},
               {"1k", 1000000}, {"+3", 3000}, {"2E1", 20000}, {"0", 0},
               {"0.0001", 1},  {"250000u", 250}, {"1e-3", 1}, {"007", 7000}, {".5", 500}};
  for (const Case& c : cases) {
    StatusOr<int64_t> v = ParseCpuMilli(c.in);
    ASSERT_TRUE(v.ok()) << c.in << ": " << v.status().ToString();
    EXPECT_EQ(*v, c.want) << c.in;
  }
}

TEST(QuantityTest, MemoryRoundsUpToMiB) {
  struct Case {
    const char* in;
    int64_t want;
  } cases[] = {{"1Gi", 1024},
               {"512Mi", 512},
               {"1G", 954},
               {"100", 1},
               {"1048576", 1},
               {"1048577", 2},
               {"1.5Gi", 1536},
               {"64Ti", 64 << 20},
               {"129e6", 124},
               {"0", 0},
               {"4096Ki", 4},
               {"1Ei", int64_t{1} << 40},
               // Long fractions of a binary unit: the powers of two and ten cancel
               // before either is applied (0.01 Ei is 10995116277.76 MiB).
               {"0.01Ei", 10995116278},
               {"0.0099999999999999999999Ei", 10995116278},
               {"0.00999999999999999999Ei", 10995116278},
               {"1e-30", 1},
               {"0.5Ki", 1},
               {"1.0000000000000000001Mi", 2},
               {"0.000000000000000000001Gi", 1}};
  for (const Case& c : cases) {
    StatusOr<int64_t> v = ParseMemoryMiB(c.in);
    ASSERT_TRUE(v.ok()) << c.in << ": " << v.status().ToString();
    EXPECT_EQ(*v, c.want) << c.in;
  }
}

TEST(QuantityTest, MalformedQuantitiesAreRejectedWithTheReason) {
  for (const char* in : {"", "-1", "abc", "1x", "1.2.3", "1e", "1eX", "1Qi", "m", "1 Gi",
                         "123456789012345678901234", "1e3m"}) {
    StatusOr<int64_t> v = ParseCpuMilli(in);
    EXPECT_FALSE(v.ok()) << in;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << in;
    EXPECT_NE(v.status().message().find("want a quantity"), std::string::npos) << in;
  }
  EXPECT_NE(ParseMemoryMiB("8Zi").status().message().find("unknown unit \"Zi\""),
            std::string::npos);
  EXPECT_NE(ParseCpuMilli("9e30").status().message().find("too large"), std::string::npos);
}

json Container(const char* name, const char* cpu, const char* mem) {
  json c = {{"name", name}};
  if (cpu != nullptr) c["resources"]["requests"]["cpu"] = cpu;
  if (mem != nullptr) c["resources"]["requests"]["memory"] = mem;
  return c;
}

TEST(HostRequestTest, TheLargerOfRunningAndEachInitPhasePlusOverhead) {
  // The worked example of host_request.h.
  json pod = {{"spec",
               {{"containers", {Container("a", "500m", "1Gi"), Container("b", "1", "512Mi")}},
                {"initContainers", {Container("init", "2", nullptr)}},
                {"overhead", {{"cpu", "100m"}}}}}};
  StatusOr<core::HostResources> h = ParseHostRequest(pod);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->cpu_milli, 2100);
  EXPECT_EQ(h->memory_mib, 1536);
}

TEST(HostRequestTest, SidecarsRunBesideLaterInitContainersAndTheMainOnes) {
  json sidecar = Container("proxy", "1", "1Gi");
  sidecar["restartPolicy"] = "Always";
  json pod = {{"spec",
               {{"initContainers", {sidecar, Container("migrate", "2", "1Gi")}},
                {"containers", {Container("main", "500m", "256Mi")}}}}};
  StatusOr<core::HostResources> h = ParseHostRequest(pod);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->cpu_milli, 3000);     // migrate beside the proxy: 2 + 1
  EXPECT_EQ(h->memory_mib, 2048);    // the same phase: 1 Gi + 1 Gi
}

TEST(HostRequestTest, LimitsStandInForMissingRequestsAndPodLevelResourcesWin) {
  json c = {{"name", "main"}, {"resources", {{"limits", {{"cpu", "4"}, {"memory", "8Gi"}}},
                                             {"requests", {{"cpu", "3"}}}}}};
  json pod = {{"spec", {{"containers", {c}}}}};
  StatusOr<core::HostResources> h = ParseHostRequest(pod);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->cpu_milli, 3000);
  EXPECT_EQ(h->memory_mib, 8192);
  pod["spec"]["resources"] = {{"requests", {{"cpu", "6"}}}};
  h = ParseHostRequest(pod);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->cpu_milli, 6000);
  EXPECT_EQ(h->memory_mib, 8192);
}

TEST(HostRequestTest, AContainerWithoutResourcesAsksForNothing) {
  StatusOr<core::HostResources> h =
      ParseHostRequest(json{{"spec", {{"containers", {{{"name", "main"}}}}}}});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, core::HostResources{});
}

TEST(HostRequestTest, MalformedRequestsNameTheContainerAndTheResource) {
  json pod = {{"spec", {{"containers", {Container("main", "lots", nullptr)}}}}};
  StatusOr<core::HostResources> h = ParseHostRequest(pod);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("container \"main\": requests.cpu"), std::string::npos)
      << h.status().message();
  pod["spec"]["containers"] = "none";
  EXPECT_FALSE(ParseHostRequest(pod).ok());
  pod["spec"]["containers"] = json::array({{{"name", "x"}, {"resources", {{"requests", 5}}}}});
  EXPECT_FALSE(ParseHostRequest(pod).ok());
  pod["spec"]["containers"] =
      json::array({{{"name", "x"}, {"resources", {{"requests", {{"memory", 5}}}}}}});
  EXPECT_FALSE(ParseHostRequest(pod).ok());
  EXPECT_FALSE(ParseHostRequest(json::array()).ok());
}

// Each quantity is bounded, their sum is too: three containers each asking
// for 4e15 cores would wrap a 64-bit sum negative and make a full node look
// free.
TEST(HostRequestTest, ASumPastTheLimitIsRefused) {
  const json three = {{"spec",
                       {{"containers",
                         {Container("a", "4e15", nullptr), Container("b", "4e15", nullptr),
                          Container("c", "4e15", nullptr)}}}}};
  StatusOr<core::HostResources> r = ParseHostRequest(three);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("CPU"), std::string::npos) << r.status().message();
  const json overhead = {
      {"spec",
       {{"containers", {Container("a", nullptr, "4e24")}}, {"overhead", {{"memory", "4e24"}}}}}};
  EXPECT_FALSE(ParseHostRequest(overhead).ok());
  // One of them alone is a (large) request like any other.
  const json one = {{"spec", {{"containers", {Container("a", "4e15", nullptr)}}}}};
  ASSERT_TRUE(ParseHostRequest(one).ok());
  EXPECT_EQ(ParseHostRequest(one)->cpu_milli, int64_t{4'000'000'000'000'000'000});
}

TEST(NodeAllocatableTest, ReadsCpuAndMemory) {
  json node = {{"status", {{"allocatable", {{"cpu", "95500m"}, {"memory", "1056768Ki"}}}}}};
  StatusOr<core::HostResources> a = ParseNodeAllocatable(node);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->cpu_milli, 95500);
  EXPECT_EQ(a->memory_mib, 1032);
  EXPECT_EQ(ParseNodeAllocatable(json{{"status", json::object()}}).status().code(),
            StatusCode::kNotFound);
  node["status"]["allocatable"]["cpu"] = "-2";
  EXPECT_EQ(ParseNodeAllocatable(node).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace accelpool::api
