// kube-scheduler's node filters as `kubectl accelpool explain` applies them.
#include "ctl/node_filters.h"

#include <gtest/gtest.h>

#include <random>

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

TEST(NodeFiltersTest, QuantitiesInThousandths) {
  const std::vector<std::pair<std::string, int64_t>> good = {
      {"2", 2000},     {"500m", 500},    {"0.5", 500},     {"1.5Gi", (int64_t{3} << 29) * 1000},
      {"4k", 4000000}, {"1e3", 1000000}, {"1E3", 1000000}, {"128Mi", (int64_t{128} << 20) * 1000},
      {"1n", 1},                                                              // rounded up
      {"100u", 1},     {"+7", 7000},     {"0", 0},         {"2.0001", 2001},  // rounded up
  };
  for (const auto& [text, want] : good) {
    std::optional<int64_t> got = ParseMilliQuantity(text);
    ASSERT_TRUE(got.has_value()) << text;
    EXPECT_EQ(*got, want) << text;
  }
  for (const std::string bad :
       {"", "-1", "abc", "1Xi", "1.2.3", "1e", "1e999", "99999999999999999999Ei",
        "123456789012345678901234567890123456789Ei", "9223372036854775807", "m", "1 Gi"}) {
    EXPECT_FALSE(ParseMilliQuantity(bad).has_value()) << bad;
  }
}

// Random strings over the quantity alphabet: a value is never negative, and
// a parsed value survives being written back in thousandths ("<n>m").
TEST(NodeFiltersTest, RandomQuantitiesParseOrAreRefused) {
  std::mt19937 rng(20261202);
  const std::string alphabet = "0123456789.eE+-kMGTPEimnuK ";
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 12, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    std::optional<int64_t> v = ParseMilliQuantity(s);
    if (!v) continue;
    ++parsed;
    ASSERT_GE(*v, 0) << s;
    EXPECT_EQ(ParseMilliQuantity(std::to_string(*v) + "m"), v) << s;
  }
  EXPECT_GT(parsed, 100);
}

TEST(NodeFiltersTest, PodRequestsCountInitContainersAtTheirPeakAndSidecarsBeside) {
  auto ctr = [](const char* name, const json& requests, const json& limits = json::object()) {
    return json{{"name", name}, {"resources", {{"requests", requests}, {"limits", limits}}}};
  };
  json pod = {{"spec",
               {{"containers",
                 {ctr("a", {{"cpu", "1"}, {"memory", "1Gi"}}),
                  ctr("b", {{"cpu", "500m"}}, {{"nvidia.com/gpu", "2"}})}},
                {"initContainers",
                 {ctr("setup", {{"cpu", "3"}}),
                  json{{"name", "proxy"},
                       {"restartPolicy", "Always"},
                       {"resources", {{"requests", {{"cpu", "250m"}, {"memory", "64Mi"}}}}}},
                  ctr("late-init", {{"cpu", "2"}})}},
                {"overhead", {{"cpu", "100m"}}}}}};
  const Resources r = PodRequests(pod);
  // Containers 1.5 cpu + the sidecar 0.25 = 1.75; the peak of the init phase
  // is setup's 3 (the sidecar starts after it; late-init's 2 + 0.25 is less);
  // then the overhead.
  EXPECT_EQ(r.at("cpu"), 3100);
  EXPECT_EQ(r.at("memory"), ((int64_t{1} << 30) + (int64_t{64} << 20)) * 1000);
  EXPECT_EQ(r.at("nvidia.com/gpu"), 2000);  // a limit stands for the missing request
  EXPECT_TRUE(PodRequests(json::object()).empty());
}

TEST(NodeFiltersTest, ResourceFitAgainstAllocatableLessTheNodesPods) {
  json n = kNode;
  n["status"]["allocatable"] = {
      {"cpu", "8"}, {"memory", "64Gi"}, {"pods", "110"}, {"nvidia.com/gpu", "8"}};
  const NodeFacts f = Facts(n);
  NodeUse use;
  use.pods = 3;
  use.requested = {{"cpu", 6000}, {"nvidia.com/gpu", 7000}};
  auto pod = [](const json& limits) {
    return PodSpec({{"tolerations", kTolerateReserved},
                    {"containers", {{{"name", "main"}, {"resources", {{"limits", limits}}}}}}});
  };
  EXPECT_EQ(SchedulerRejects(pod({{"cpu", "2"}, {"nvidia.com/gpu", "1"}}), f, &use), "");
  EXPECT_EQ(SchedulerRejects(pod({{"cpu", "2500m"}}), f, &use),
            "Insufficient cpu: asks 2500m, 2 of 8 free");
  EXPECT_EQ(SchedulerRejects(pod({{"nvidia.com/gpu", "2"}}), f, &use),
            "Insufficient nvidia.com/gpu: asks 2, 1 of 8 free");
  EXPECT_EQ(SchedulerRejects(pod({{"memory", "65Gi"}}), f, &use),
            "Insufficient memory: asks 65.0 GiB, 64.0 GiB of 64.0 GiB free");
  EXPECT_EQ(SchedulerRejects(pod({{"huawei.com/Ascend910C", "1"}}), f, &use),
            "Insufficient huawei.com/Ascend910C: asks 1, the node advertises none");
  // accelpool's memory and compute names are the extender's to check.
  EXPECT_EQ(SchedulerRejects(pod({{"nvidia.com/gpu", "1"},
                                  {"nvidia.com/gpumem", "999999"},
                                  {"nvidia.com/gpucores", "100"}}),
                             f, &use),
            "");
  use.pods = 110;
  EXPECT_EQ(SchedulerRejects(pod({{"cpu", "1"}}), f, &use),
            "Too many pods: 110 of the node's 110 run there");
  // No allocatable reported, or no use given: no resource check.
  EXPECT_EQ(SchedulerRejects(pod({{"cpu", "100"}}), Facts(kNode), &use), "");
  EXPECT_EQ(SchedulerRejects(pod({{"cpu", "100"}}), f), "");
}

TEST(NodeFiltersTest, HostPortsConflictOnProtocolPortAndAddress) {
  auto pod = [](const json& ports, const char* where = "containers") {
    return PodSpec({{"tolerations", kTolerateReserved},
                    {where, {{{"name", "main"}, {"restartPolicy", "Always"}, {"ports", ports}}}}});
  };
  NodeUse use;
  use.host_ports = PodHostPorts(
      pod({{{"containerPort", 80}, {"hostPort", 8080}},
           {{"containerPort", 53}, {"hostPort", 53}, {"protocol", "UDP"}, {"hostIP", "10.0.0.5"}},
           {{"containerPort", 9000}}}));  // no host port
  ASSERT_EQ(use.host_ports.size(), 2u);
  EXPECT_EQ(use.host_ports[0].ip, "0.0.0.0");
  EXPECT_EQ(use.host_ports[0].protocol, "TCP");
  const NodeFacts f = Facts(kNode);
  EXPECT_EQ(SchedulerRejects(pod({{{"hostPort", 8080}}}), f, &use),
            "host port TCP 8080 is held by a pod on the node");
  EXPECT_EQ(SchedulerRejects(pod({{{"hostPort", 8080}, {"hostIP", "10.0.0.9"}}}), f, &use),
            "host port TCP 10.0.0.9:8080 is held by a pod on the node");  // 0.0.0.0 holds all
  EXPECT_EQ(SchedulerRejects(pod({{{"hostPort", 8080}, {"protocol", "UDP"}}}), f, &use), "");
  EXPECT_EQ(SchedulerRejects(pod({{{"hostPort", 53}, {"protocol", "UDP"}}}), f, &use),
            "host port UDP 53 is held by a pod on the node");
  EXPECT_EQ(SchedulerRejects(pod({{{"hostPort", 53}, {"protocol", "UDP"}, {"hostIP", "10.0.0.6"}}}),
                             f, &use),
            "");  // another address
  // A sidecar's host port counts; a plain init container's does not (it has
  // exited by the time the pod runs).
  EXPECT_EQ(PodHostPorts(pod({{{"hostPort", 1}}}, "initContainers")).size(), 1u);
  json init = PodSpec({{"initContainers", {{{"name", "i"}, {"ports", {{{"hostPort", 1}}}}}}}});
  EXPECT_TRUE(PodHostPorts(init).empty());
}

// Required pod affinity and anti-affinity over topology domains: two racks,
// a worker of job "a" on node r1-a, an inference pod in another namespace.
TEST(NodeFiltersTest, InterPodAffinityJudgesEachTermPerTopologyDomain) {
  auto node = [](const char* name, const char* rack) {
    return Facts(
        {{"metadata",
          {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}, {"rack", rack}}}}}});
  };
  std::map<std::string, NodeFacts> facts = {
      {"r1-a", node("r1-a", "r1")}, {"r1-b", node("r1-b", "r1")}, {"r2-a", node("r2-a", "r2")}};
  facts["bare"] = Facts({{"metadata", {{"name", "bare"}}}});  // no rack label
  std::map<std::string, NodeUse> use;
  use["r1-a"].pod_labels = {PodLabels{"ml", {{"job", "a"}, {"role", "worker"}}}};
  use["r2-a"].pod_labels = {PodLabels{"serving", {{"job", "a"}}}};
  auto pod = [](const char* kind, const json& term, const json& labels = json::object()) {
    return json{
        {"metadata", {{"namespace", "ml"}, {"labels", labels}}},
        {"spec",
         {{"affinity", {{kind, {{"requiredDuringSchedulingIgnoredDuringExecution", {term}}}}}}}}};
  };
  const json job_a = {{"labelSelector", {{"matchLabels", {{"job", "a"}}}}},
                      {"topologyKey", "rack"}};

  // Affinity to job a in the pod's own namespace: rack r1 only.
  InterPodAffinity near(pod("podAffinity", job_a), facts, use);
  EXPECT_EQ(near.Rejects(facts["r1-b"]), "");
  EXPECT_EQ(near.Rejects(facts["r2-a"]), "pod affinity: no pod matching job=a in rack=r2");
  EXPECT_EQ(near.Rejects(facts["bare"]), "pod affinity (job=a): the node has no rack label");
  // Anti-affinity to the same: everywhere but rack r1 (and the bare node).
  InterPodAffinity apart(pod("podAntiAffinity", job_a), facts, use);
  EXPECT_EQ(apart.Rejects(facts["r1-b"]), "pod anti-affinity: 1 pod matching job=a in rack=r1");
  EXPECT_EQ(apart.Rejects(facts["r2-a"]), "");
  EXPECT_EQ(apart.Rejects(facts["bare"]), "");
  // Namespaces named, or all of them with an empty namespaceSelector.
  json all = job_a;
  all["namespaceSelector"] = json::object();
  EXPECT_NE(InterPodAffinity(pod("podAntiAffinity", all), facts, use).Rejects(facts["r2-a"]), "");
  json serving = job_a;
  serving["namespaces"] = {"serving"};
  EXPECT_EQ(InterPodAffinity(pod("podAffinity", serving), facts, use).Rejects(facts["r1-b"]),
            "pod affinity: no pod matching job=a in rack=r1");
  // A namespaceSelector with labels is not judged, and counted as such.
  json labelled = job_a;
  labelled["namespaceSelector"] = {{"matchLabels", {{"team", "ml"}}}};
  InterPodAffinity skipped(pod("podAffinity", labelled), facts, use);
  EXPECT_EQ(skipped.skipped(), 1);
  EXPECT_EQ(skipped.Rejects(facts["r2-a"]), "");
  // The first pod of a group: nothing matches anywhere, but the pod matches
  // its own term, so any node with the key will do.
  const json job_b = {
      {"labelSelector",
       {{"matchExpressions", {{{"key", "job"}, {"operator", "In"}, {"values", {"b"}}}}}}},
      {"topologyKey", "rack"}};
  EXPECT_EQ(InterPodAffinity(pod("podAffinity", job_b, {{"job", "b"}}), facts, use)
                .Rejects(facts["r2-a"]),
            "");
  EXPECT_EQ(InterPodAffinity(pod("podAffinity", job_b), facts, use).Rejects(facts["r2-a"]),
            "pod affinity: no pod matching job In (b) in rack=r2");
  // A null labelSelector matches no pod.
  json none = {{"topologyKey", "rack"}};
  EXPECT_EQ(InterPodAffinity(pod("podAntiAffinity", none), facts, use).Rejects(facts["r1-a"]), "");
}

// Several affinity terms: only a pod matching all of them counts, in each
// term's domain; a namespaceSelector is judged on the namespaces' labels.
TEST(NodeFiltersTest, AffinityTermsAreMetTogetherAndNamespacesSelectedByLabel) {
  auto node = [](const char* name, const char* rack, const char* zone) {
    return Facts({{"metadata", {{"name", name}, {"labels", {{"rack", rack}, {"zone", zone}}}}}});
  };
  std::map<std::string, NodeFacts> facts = {{"r1", node("r1", "r1", "z1")},
                                            {"r2", node("r2", "r2", "z1")},
                                            {"r3", node("r3", "r3", "z2")}};
  std::map<std::string, NodeUse> use;
  // r1: a cache pod; r2: a cache pod of job a; r3: a job-a pod that is no cache.
  use["r1"].pod_labels = {PodLabels{"ml", {{"role", "cache"}}}};
  use["r2"].pod_labels = {PodLabels{"ml", {{"role", "cache"}, {"job", "a"}}}};
  use["r3"].pod_labels = {PodLabels{"research", {{"job", "a"}}}};
  const json cache_in_zone = {{"labelSelector", {{"matchLabels", {{"role", "cache"}}}}},
                              {"topologyKey", "zone"}};
  const json job_a_in_rack = {{"labelSelector", {{"matchLabels", {{"job", "a"}}}}},
                              {"topologyKey", "rack"}};
  auto pod = [](const json& terms, const json& labels = json::object()) {
    return json{
        {"metadata", {{"namespace", "ml"}, {"labels", labels}}},
        {"spec",
         {{"affinity",
           {{"podAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", terms}}}}}}}};
  };
  // Only r2's pod matches both terms: rack r2 (zone z1) passes; r1 is in
  // zone z1 but its rack holds no pod of job a.
  InterPodAffinity both(pod({cache_in_zone, job_a_in_rack}), facts, use);
  EXPECT_EQ(both.Rejects(facts["r2"]), "");
  EXPECT_EQ(both.Rejects(facts["r1"]), "pod affinity: no pod matching job=a in rack=r1");
  EXPECT_EQ(both.Rejects(facts["r3"]), "pod affinity: no pod matching role=cache in zone=z2");
  // The first of a group needs no pod anywhere to match all its terms: with
  // r2's pod gone, the pod matching both itself may go anywhere.
  std::map<std::string, NodeUse> no_r2 = use;
  no_r2.erase("r2");
  EXPECT_EQ(InterPodAffinity(pod({cache_in_zone, job_a_in_rack}, {{"role", "cache"}, {"job", "a"}}),
                             facts, no_r2)
                .Rejects(facts["r3"]),
            "");
  EXPECT_NE(
      InterPodAffinity(pod({cache_in_zone, job_a_in_rack}), facts, no_r2).Rejects(facts["r3"]), "");

  // namespaceSelector team=ml: with the namespaces' labels, job a's pod in
  // "research" (team=ml) counts; without them the term is skipped.
  json labelled = job_a_in_rack;
  labelled["namespaceSelector"] = {{"matchLabels", {{"team", "ml"}}}};
  const NamespaceLabels namespaces = {{"ml", {}}, {"research", {{"team", "ml"}}}};
  InterPodAffinity selected(pod(json::array({labelled})), facts, use, &namespaces);
  EXPECT_EQ(selected.skipped(), 0);
  EXPECT_EQ(selected.Rejects(facts["r3"]), "");
  EXPECT_EQ(selected.Rejects(facts["r2"]), "pod affinity: no pod matching job=a in rack=r2")
      << "r2's pod is in ml, which has no team label";
  // Listed namespaces and the selector are both in scope.
  labelled["namespaces"] = {"ml"};
  EXPECT_EQ(
      InterPodAffinity(pod(json::array({labelled})), facts, use, &namespaces).Rejects(facts["r2"]),
      "");
  const NamespaceLabels other_team = {{"research", {{"team", "hpc"}}}};
  labelled.erase("namespaces");
  EXPECT_NE(
      InterPodAffinity(pod(json::array({labelled})), facts, use, &other_team).Rejects(facts["r3"]),
      "");
}

// kube-scheduler also keeps a pod out of the domain of any bound pod whose
// required anti-affinity matches it: a web server on r1-a that wants no other
// web server in its rack.
TEST(NodeFiltersTest, BoundPodsAntiAffinityKeepsMatchingPodsOutOfTheirDomain) {
  auto node = [](const char* name, const char* rack) {
    return Facts({{"metadata", {{"name", name}, {"labels", {{"rack", rack}}}}}});
  };
  std::map<std::string, NodeFacts> facts = {
      {"r1-a", node("r1-a", "r1")}, {"r1-b", node("r1-b", "r1")}, {"r2-a", node("r2-a", "r2")}};
  facts["bare"] = Facts({{"metadata", {{"name", "bare"}}}});
  auto bound = [](const char* ns, const json& term) {
    return PodLabelsFromJson(
        {{"metadata", {{"namespace", ns}, {"labels", {{"app", "web"}}}}},
         {"spec",
          {{"affinity",
            {{"podAntiAffinity",
              {{"requiredDuringSchedulingIgnoredDuringExecution", {term}}}}}}}}});
  };
  const json no_web = {{"labelSelector", {{"matchLabels", {{"app", "web"}}}}},
                       {"topologyKey", "rack"}};
  std::map<std::string, NodeUse> use;
  use["r1-a"].pod_labels = {bound("ml", no_web)};
  ASSERT_EQ(use["r1-a"].pod_labels[0].anti_affinity.size(), 1u);
  auto pending = [](const char* ns, const char* app) {
    return json{{"metadata", {{"namespace", ns}, {"labels", {{"app", app}}}}}, {"spec", {}}};
  };
  InterPodAffinity web(pending("ml", "web"), facts, use);
  EXPECT_EQ(web.Rejects(facts["r1-b"]),
            "anti-affinity of pods already there: 1 pod in rack=r1 keeps out pods matching "
            "app=web");
  EXPECT_EQ(web.Rejects(facts["r1-a"]), web.Rejects(facts["r1-b"]));
  EXPECT_EQ(web.Rejects(facts["r2-a"]), "");
  EXPECT_EQ(web.Rejects(facts["bare"]), "");
  // Another app, or a web server in another namespace (the term looks in
  // its own pod's namespace), is not kept out.
  EXPECT_EQ(InterPodAffinity(pending("ml", "db"), facts, use).Rejects(facts["r1-b"]), "");
  EXPECT_EQ(InterPodAffinity(pending("shop", "web"), facts, use).Rejects(facts["r1-b"]), "");
  // A term over every namespace keeps it out too; two such pods are counted.
  json everywhere = no_web;
  everywhere["namespaceSelector"] = json::object();
  use["r1-b"].pod_labels = {bound("ml", everywhere)};
  EXPECT_EQ(InterPodAffinity(pending("shop", "web"), facts, use).Rejects(facts["r1-a"]),
            "anti-affinity of pods already there: 1 pod in rack=r1 keeps out pods matching "
            "app=web");
  use["r1-a"].pod_labels = {bound("ml", everywhere)};
  EXPECT_EQ(InterPodAffinity(pending("shop", "web"), facts, use).Rejects(facts["r1-a"]),
            "anti-affinity of pods already there: 2 pods in rack=r1 keep out pods matching "
            "app=web");
  // A namespaceSelector with labels needs the namespaces' labels.
  json by_team = no_web;
  by_team["namespaceSelector"] = {{"matchLabels", {{"team", "shop"}}}};
  use["r1-a"].pod_labels = {bound("ml", by_team)};
  use.erase("r1-b");
  InterPodAffinity unknown(pending("shop", "web"), facts, use);
  EXPECT_EQ(unknown.skipped(), 1);
  EXPECT_EQ(unknown.Rejects(facts["r1-b"]), "");
  const NamespaceLabels namespaces = {{"shop", {{"team", "shop"}}}};
  EXPECT_NE(
      InterPodAffinity(pending("shop", "web"), facts, use, &namespaces).Rejects(facts["r1-b"]), "");
  EXPECT_EQ(InterPodAffinity(pending("ml", "web"), facts, use, &namespaces).Rejects(facts["r1-b"]),
            "");
}

// DoNotSchedule topology spread over three zones holding 2, 1 and 0
// replicas of app=infer: with maxSkew 1 only the empty zone takes the next.
TEST(NodeFiltersTest, TopologySpreadKeepsEachDomainWithinMaxSkew) {
  auto node = [](const char* name, const char* zone, const char* pool = "gpu") {
    return Facts({{"metadata", {{"name", name}, {"labels", {{"zone", zone}, {"pool", pool}}}}}});
  };
  std::map<std::string, NodeFacts> facts = {{"a1", node("a1", "a")},
                                            {"b1", node("b1", "b")},
                                            {"c1", node("c1", "c")},
                                            {"d1", node("d1", "d", "cpu")}};
  facts["bare"] = Facts({{"metadata", {{"name", "bare"}, {"labels", {{"pool", "gpu"}}}}}});
  std::map<std::string, NodeUse> use;
  const PodLabels replica{"ml", {{"app", "infer"}, {"rev", "7"}}};
  use["a1"].pod_labels = {replica, replica};
  use["b1"].pod_labels = {replica, PodLabels{"other", {{"app", "infer"}}}};  // other namespace
  auto pod = [](const json& constraint, const json& extra = json::object()) {
    json p = {{"metadata", {{"namespace", "ml"}, {"labels", {{"app", "infer"}, {"rev", "7"}}}}},
              {"spec", {{"topologySpreadConstraints", {constraint}}}}};
    p["spec"].update(extra);
    return p;
  };
  json c = {{"maxSkew", 1},
            {"topologyKey", "zone"},
            {"whenUnsatisfiable", "DoNotSchedule"},
            {"labelSelector", {{"matchLabels", {{"app", "infer"}}}}}};
  // Zone d's node is in another pool: with the pod's nodeSelector on pool=gpu
  // it is not a domain (nodeAffinityPolicy Honor), so the emptiest is c (0).
  const json gpu_only = {{"nodeSelector", {{"pool", "gpu"}}}};
  TopologySpread spread(pod(c, gpu_only), facts, use);
  EXPECT_EQ(spread.Rejects(facts["c1"]), "");
  EXPECT_EQ(spread.Rejects(facts["b1"]),
            "topology spread: zone=b would hold 2 pods matching app=infer, the emptiest domain 0 "
            "(maxSkew 1)");
  EXPECT_NE(spread.Rejects(facts["a1"]), "");
  EXPECT_EQ(spread.Rejects(facts["bare"]),
            "topology spread (app=infer): the node has no zone label");
  // maxSkew 2 lets zone b take one more.
  c["maxSkew"] = 2;
  EXPECT_EQ(TopologySpread(pod(c, gpu_only), facts, use).Rejects(facts["b1"]), "");
  c["maxSkew"] = 1;
  // ScheduleAnyway only scores: nothing refused.
  json soft = c;
  soft["whenUnsatisfiable"] = "ScheduleAnyway";
  EXPECT_EQ(TopologySpread(pod(soft, gpu_only), facts, use).Rejects(facts["a1"]), "");
  // matchLabelKeys narrows the selector to this pod's revision: rev=8 has no
  // replicas anywhere, so every zone is even.
  json by_rev = c;
  by_rev["matchLabelKeys"] = {"rev"};
  json rev8 = pod(by_rev, gpu_only);
  rev8["metadata"]["labels"]["rev"] = "8";
  EXPECT_EQ(TopologySpread(rev8, facts, use).Rejects(facts["a1"]), "");
  // minDomains 5 with four domains: the emptiest counts as 0 even where all
  // have replicas.
  std::map<std::string, NodeUse> busy = use;
  busy["c1"].pod_labels = {replica};
  busy["d1"].pod_labels = {replica};
  json min5 = c;
  EXPECT_EQ(TopologySpread(pod(min5), facts, busy).Rejects(facts["b1"]), "");
  min5["minDomains"] = 5;
  EXPECT_NE(TopologySpread(pod(min5), facts, busy).Rejects(facts["b1"]), "");
}

}  // namespace
}  // namespace accelpool::ctl
