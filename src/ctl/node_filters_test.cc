// kube-scheduler's node filters as `kubectl accelpool explain` applies them.
#include "ctl/node_filters.h"

#include <gtest/gtest.h>

namespace accelpool::ctl {
namespace {

using nlohmann::json;

NodeFacts Facts(const json& node) { return NodeFactsFromJson(node); }

const json kNode = {
    {"metadata",
     {{"name", "hgx-3"},
      {"labels",
       {{"kubernetes.io/hostname", "hgx-3"},
        {"accelpool.io/pool", "train"},
        {"accelpool.io/generation", "9"}}}}},
    {"spec",
     {{"taints",
       {{{"key", "accelpool.io/reserved"}, {"value", "train"}, {"effect", "NoSchedule"}},
        {{"key", "soft"}, {"effect", "PreferNoSchedule"}}}}}}};

json PodSpec(const json& spec) { return {{"spec", spec}}; }

const json kTolerateReserved = {{{"key", "accelpool.io/reserved"},
                                 {"operator", "Equal"},
                                 {"value", "train"},
                                 {"effect", "NoSchedule"}}};

TEST(NodeFiltersTest, NodeFactsReadLabelsTaintsAndCordon) {
  json n = kNode;
  n["spec"]["unschedulable"] = true;
  const NodeFacts f = Facts(n);
  EXPECT_EQ(f.name, "hgx-3");
  EXPECT_EQ(f.labels.at("accelpool.io/pool"), "train");
  ASSERT_EQ(f.taints.size(), 2u);
  EXPECT_EQ(f.taints[0].value, "train");
  EXPECT_TRUE(f.unschedulable);
  EXPECT_FALSE(Facts(json::object()).unschedulable);  // nothing there: nothing read
}

TEST(NodeFiltersTest, TaintsNeedATolerationOfTheirEffect) {
  const NodeFacts f = Facts(kNode);
  EXPECT_EQ(SchedulerRejects(PodSpec(json::object()), f),
            "taint accelpool.io/reserved=train:NoSchedule is not tolerated");
  struct Case {
    const char* name;
    json tolerations;
    bool passes;
  };
  const std::vector<Case> cases = {
      {"equal", kTolerateReserved, true},
      {"operator defaults to Equal",
       {{{"key", "accelpool.io/reserved"}, {"value", "train"}}},
       true},
      {"other value", {{{"key", "accelpool.io/reserved"}, {"value", "infer"}}}, false},
      {"exists", {{{"key", "accelpool.io/reserved"}, {"operator", "Exists"}}}, true},
      {"exists, every key", {{{"operator", "Exists"}}}, true},
      {"other effect",
       {{{"key", "accelpool.io/reserved"}, {"operator", "Exists"}, {"effect", "NoExecute"}}},
       false},
      {"empty key with Equal", {{{"operator", "Equal"}, {"value", "train"}}}, false},
      {"not a list", {{"key", "accelpool.io/reserved"}}, false},
  };
  for (const Case& c : cases) {
    const std::string got = SchedulerRejects(PodSpec({{"tolerations", c.tolerations}}), f);
    EXPECT_EQ(got.empty(), c.passes) << c.name << ": " << got;
  }
}

TEST(NodeFiltersTest, ACordonedNodeTakesOnlyPodsThatTolerateIt) {
  json n = kNode;
  n["spec"]["unschedulable"] = true;
  const std::string got = SchedulerRejects(PodSpec({{"tolerations", kTolerateReserved}}), Facts(n));
  EXPECT_NE(got.find("cordoned"), std::string::npos) << got;
  json tol = kTolerateReserved;
  tol.push_back({{"key", "node.kubernetes.io/unschedulable"},
                 {"operator", "Exists"},
                 {"effect", "NoSchedule"}});
  EXPECT_EQ(SchedulerRejects(PodSpec({{"tolerations", tol}}), Facts(n)), "");
}

TEST(NodeFiltersTest, NodeSelectorNeedsEveryLabel) {
  const NodeFacts f = Facts(kNode);
  auto pod = [](const json& sel) {
    return PodSpec({{"nodeSelector", sel}, {"tolerations", kTolerateReserved}});
  };
  EXPECT_EQ(SchedulerRejects(pod({{"accelpool.io/pool", "train"}}), f), "");
  EXPECT_EQ(SchedulerRejects(pod({{"accelpool.io/pool", "infer"}}), f),
            "nodeSelector accelpool.io/pool=infer: the node's label is accelpool.io/pool=train");
  EXPECT_EQ(SchedulerRejects(pod({{"accelpool.io/pool", "train"}, {"zone", "a"}}), f),
            "nodeSelector zone=a: the node has no zone label");
}

TEST(NodeFiltersTest, RequiredNodeAffinityOrsTermsAndAndsRequirements) {
  const NodeFacts f = Facts(kNode);
  auto pod = [](const json& terms) {
    return PodSpec({{"tolerations", kTolerateReserved},
                    {"affinity",
                     {{"nodeAffinity",
                       {{"requiredDuringSchedulingIgnoredDuringExecution",
                         {{"nodeSelectorTerms", terms}}}}}}}});
  };
  auto expr = [](const char* key, const char* op, const json& values) {
    json e = {{"key", key}, {"operator", op}};
    if (!values.is_null()) e["values"] = values;
    return e;
  };
  struct Case {
    const char* name;
    json terms;
    bool passes;
  };
  const std::vector<Case> cases = {
      {"In", {{{"matchExpressions", {expr("accelpool.io/pool", "In", {"a", "train"})}}}}, true},
      {"In, other values",
       {{{"matchExpressions", {expr("accelpool.io/pool", "In", {"a"})}}}},
       false},
      {"NotIn", {{{"matchExpressions", {expr("accelpool.io/pool", "NotIn", {"a"})}}}}, true},
      {"NotIn, no such label", {{{"matchExpressions", {expr("zone", "NotIn", {"a"})}}}}, true},
      {"Exists", {{{"matchExpressions", {expr("accelpool.io/pool", "Exists", nullptr)}}}}, true},
      {"DoesNotExist", {{{"matchExpressions", {expr("zone", "DoesNotExist", nullptr)}}}}, true},
      {"Gt", {{{"matchExpressions", {expr("accelpool.io/generation", "Gt", {"8"})}}}}, true},
      {"Lt", {{{"matchExpressions", {expr("accelpool.io/generation", "Lt", {"8"})}}}}, false},
      {"Gt, not a number",
       {{{"matchExpressions", {expr("accelpool.io/pool", "Gt", {"8"})}}}},
       false},
      {"requirements of a term are ANDed",
       {{{"matchExpressions",
          {expr("accelpool.io/pool", "In", {"train"}), expr("zone", "Exists", nullptr)}}}},
       false},
      {"terms are ORed",
       {{{"matchExpressions", {expr("zone", "Exists", nullptr)}}},
        {{"matchExpressions", {expr("accelpool.io/pool", "In", {"train"})}}}},
       true},
      {"matchFields on the name",
       {{{"matchFields", {expr("metadata.name", "In", {"hgx-3"})}}}},
       true},
      {"matchFields, other name",
       {{{"matchFields", {expr("metadata.name", "In", {"hgx-4"})}}}},
       false},
      {"matchFields takes no Exists",
       {{{"matchFields", {expr("metadata.name", "Exists", nullptr)}}}},
       false},
      {"an empty term matches nothing", {json::object()}, false},
      {"no terms match nothing", json::array(), false},
  };
  for (const Case& c : cases) {
    const std::string got = SchedulerRejects(pod(c.terms), f);
    EXPECT_EQ(got.empty(), c.passes) << c.name << ": " << got;
    if (!c.passes) {
      EXPECT_NE(got.find("required node affinity: none of its"), std::string::npos) << got;
    }
  }
  // Preferred terms never turn a node away.
  json preferred = PodSpec(
      {{"tolerations", kTolerateReserved},
       {"affinity",
        {{"nodeAffinity",
          {{"preferredDuringSchedulingIgnoredDuringExecution",
            {{{"weight", 1},
              {"preference", {{"matchExpressions", {expr("zone", "Exists", nullptr)}}}}}}}}}}}});
  EXPECT_EQ(SchedulerRejects(preferred, f), "");
}

}  // namespace
}  // namespace accelpool::ctl
