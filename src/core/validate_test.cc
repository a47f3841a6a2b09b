// Bad requests and inventories: a clear error, never a crash.
#include <gtest/gtest.h>

#include "core/fit.h"
#include "core/policy.h"
#include "core/reasons.h"
#include "core/test_util.h"

namespace accelpool::core {
namespace {

using testing::MakeNode;
using testing::Share;
using testing::Whole;

struct BadRequest {
  const char* name;
  DeviceRequest req;
  const char* want_in_message;
};

DeviceRequest With(DeviceRequest r, void (*f)(DeviceRequest&)) {
  f(r);
  return r;
}

class BadRequests : public ::testing::TestWithParam<BadRequest> {};

TEST_P(BadRequests, AreRejectedWithAReason) {
  const BadRequest& c = GetParam();
  const Status s = ValidateRequest(c.req);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(c.want_in_message), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("main"), std::string::npos) << "names the container: " << s.message();
}

const BadRequest kBad[] = {
    {"negative_count", Whole(Vendor::kNvidia, -1), "at least 1"},
    {"zero_count", Whole(Vendor::kNvidia, 0), "at least 1"},
    {"negative_memory", Share(Vendor::kNvidia, 1, -5, 0), "negative"},
    {"memory_past_any_device", Share(Vendor::kNvidia, 1, (int64_t{1} << 40) + 1, 0),
     "at most 2^40 MiB"},
    {"memory_near_int64_max", Share(Vendor::kNvidia, 1, INT64_MAX - 10, 0), "more than any device"},
    {"percent_over_100",
     With(Whole(Vendor::kNvidia, 1), [](DeviceRequest& r) { r.memory_percent = 120; }), "1-100"},
    {"compute_over_100", Share(Vendor::kNvidia, 1, 0, 1500), "1-100%"},
    {"memory_twice",
     With(Share(Vendor::kNvidia, 1, 1024, 0), [](DeviceRequest& r) { r.memory_percent = 10; }),
     "not both"},
    {"model_in_and_out",
     With(Whole(Vendor::kNvidia, 1),
          [](DeviceRequest& r) {
            r.model_include = {"A100"};
            r.model_exclude = {"a100"};
          }),
     "both included and excluded"},
    {"id_in_and_out",
     With(Whole(Vendor::kNvidia, 1),
          [](DeviceRequest& r) {
            r.id_include = {"GPU-1"};
            r.id_exclude = {"GPU-1"};
          }),
     "both included and excluded"},
    {"too_few_ids",
     With(Whole(Vendor::kNvidia, 2), [](DeviceRequest& r) { r.id_include = {"GPU-1"}; }),
     "allows only 1"},
    {"unknown_vendor", Whole(Vendor::kUnknown, 1), "unknown accelerator vendor"},
};

INSTANTIATE_TEST_SUITE_P(Core, BadRequests, ::testing::ValuesIn(kBad),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Validate, DuplicateContainerIsRejected) {
  const PodRequest pod{{Whole(Vendor::kNvidia, 1), Whole(Vendor::kNvidia, 1)}, {}};
  EXPECT_EQ(ValidatePodRequest(pod).code(), StatusCode::kInvalidArgument);
}

TEST(Validate, BrokenInventories) {
  NodeInventory inv = MakeNode("ascend-910c-x16");
  EXPECT_TRUE(ValidateInventory(inv).ok());
  NodeInventory a = inv;
  a.devices[3].index = 7;
  EXPECT_NE(ValidateInventory(a).message().find("index"), std::string::npos);
  NodeInventory b = inv;
  b.topology.modules[0] = {0, 99};
  EXPECT_FALSE(ValidateInventory(b).ok());
  NodeInventory c = inv;
  c.topology.links.resize(3);
  EXPECT_NE(ValidateInventory(c).message().find("N x N"), std::string::npos);
  NodeInventory d = inv;
  d.devices[1].id = d.devices[0].id;
  EXPECT_NE(ValidateInventory(d).message().find("duplicate"), std::string::npos);
  // Negative foreign memory would be room Fit hands out and ApplyPlacement refuses.
  NodeInventory g = inv;
  g.devices[2].foreign_mib = -8192;
  EXPECT_NE(ValidateInventory(g).message().find("foreign memory"), std::string::npos);
  g.devices[2].foreign_mib = (int64_t{1} << 40) + 1;
  EXPECT_NE(ValidateInventory(g).message().find("foreign memory"), std::string::npos);
  NodeInventory e = inv;
  e.topology.groups = {{0, 1}, {1, 2}};
  EXPECT_NE(ValidateInventory(e).message().find("two group"), std::string::npos);
  // Die pairs taken whole: a lone die as a module of its own would let an
  // even request take 3 dies.
  NodeInventory f = inv;
  f.topology.modules.back() = {14};
  f.topology.modules.push_back({15});
  f.devices[15].module = static_cast<int32_t>(f.topology.modules.size()) - 1;
  EXPECT_NE(ValidateInventory(f).message().find("of one size"), std::string::npos);
}

TEST(Validate, ReleaseOfUnknownPlacementChangesNothing) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  NodeUsage usage = NodeUsage::Empty(inv);
  Placement p;
  p.containers.push_back({"main", ContainerKind::kRegular, {{2, 1024, 10, false}}});
  EXPECT_EQ(ReleasePlacement(p, inv, &usage).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(usage, NodeUsage::Empty(inv));
  p.containers[0].grants[0].device = 42;
  EXPECT_EQ(ApplyPlacement(p, inv, &usage).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(usage, NodeUsage::Empty(inv));
}

TEST(Policies, UnknownNameIsAnError) {
  for (const auto& name : PolicyNames()) {
    StatusOr<PolicyPtr> p = MakePolicy(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ((*p)->Name(), name);
  }
  StatusOr<PolicyPtr> bad = MakePolicy("best-effort-ish");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("binpack"), std::string::npos);
}

TEST(Policies, BinpackAndSpreadDisagree) {
  const NodeInventory inv = MakeNode("nvidia-hgx-8");
  NodeUsage usage = NodeUsage::Empty(inv);
  usage.devices[5].memory_mib = 4096;
  usage.devices[5].compute = 100;
  usage.devices[5].shares = 1;
  usage.devices[5].slices = 1;
  const PodRequest pod{{Share(Vendor::kNvidia, 1, 1024, 10)}, {}};
  auto binpack = MakePolicy("binpack");
  auto spread = MakePolicy("spread");
  const FitResult a = Fit(pod, inv, usage, binpack->get());
  const FitResult b = Fit(pod, inv, usage, spread->get());
  ASSERT_TRUE(a.fits() && b.fits());
  EXPECT_EQ(a.placement.containers[0].grants[0].device, 5);
  EXPECT_NE(b.placement.containers[0].grants[0].device, 5);
  EXPECT_GT((*binpack)->NodeScore(inv, usage, a.placement),
            (*binpack)->NodeScore(inv, NodeUsage::Empty(inv), a.placement));
}

TEST(Reasons, AggregateAcrossNodes) {
  ReasonAggregator agg;
  for (int i = 0; i < 12; ++i) agg.Add("a", {{Reason::kNoWholeModule, 1, 0}});
  for (int i = 0; i < 3; ++i) agg.Add("b", {{Reason::kInsufficientMemory, 4096, 2048 - i}});
  const std::string s = agg.Summarize();
  EXPECT_EQ(agg.nodes(), 15u);
  EXPECT_EQ(s.find("12 nodes: not enough free whole modules"), 0u) << s;
  EXPECT_NE(s.find("3 nodes: insufficient memory (need 4096 MiB per device, best free 2048 MiB)"),
            std::string::npos)
      << s;
  for (int r = 0; r <= static_cast<int>(Reason::kLast); ++r) {
    EXPECT_FALSE(DescribeReason({static_cast<Reason>(r), 1, 1}).empty());
    EXPECT_NE(ReasonName(static_cast<Reason>(r)), "Unknown");
  }
}

}  // namespace
}  // namespace accelpool::core
