// kube-scheduler's volume filters as `kubectl accelpool explain` applies them.
#include "ctl/volume_filters.h"

#include <gtest/gtest.h>

namespace accelpool::ctl {
namespace {

using nlohmann::json;

// The apiserver's objects by "kind/ns/name"; a getter that answers from
// them, kNotFound otherwise, and refuses everything when `refuse` is set.
struct Objects {
  std::map<std::string, json> by_key;
  bool refuse = false;
  int reads = 0;
  void Put(const std::string& kind, const std::string& ns, const json& obj) {
    by_key[kind + "/" + ns + "/" + obj["metadata"]["name"].get<std::string>()] = obj;
  }
  ObjectGetter Getter() {
    return [this](const std::string& kind, const std::string& ns,
                  const std::string& name) -> StatusOr<json> {
      ++reads;
      if (refuse) return Status(StatusCode::kPermissionDenied, "forbidden");
      auto it = by_key.find(kind + "/" + ns + "/" + name);
      if (it == by_key.end()) return Status(StatusCode::kNotFound, kind + " " + name);
      return it->second;
    };
  }
};

NodeFacts Node(const std::string& name, const std::string& zone = "") {
  json labels = {{"kubernetes.io/hostname", name}};
  if (!zone.empty()) labels["topology.kubernetes.io/zone"] = zone;
  return NodeFactsFromJson({{"metadata", {{"name", name}, {"labels", labels}}}});
}

json Pod(const std::vector<json>& volumes) {
  json pod = {{"metadata", {{"name", "train-0"}, {"namespace", "ml"}, {"uid", "u-1"}}}};
  pod["spec"]["volumes"] = json::array();
  for (const json& v : volumes) pod["spec"]["volumes"].push_back(v);
  return pod;
}

json ClaimVolume(const std::string& claim) {
  return {{"name", "data"}, {"persistentVolumeClaim", {{"claimName", claim}}}};
}

json BoundClaim(const std::string& name, const std::string& volume) {
  return {{"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}}}},
          {"spec", {{"volumeName", volume}, {"storageClassName", "local"}}}};
}

json LocalVolume(const std::string& name, const std::string& node) {
  const json requirement = {
      {"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", json::array({node})}};
  const json term = {{"matchExpressions", json::array({requirement})}};
  json pv = {{"metadata", {{"name", name}}}};
  pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] = json::array({term});
  return pv;
}

// A claim bound to a local volume on hgx-1: every other node is out.
TEST(VolumeFiltersTest, ABoundLocalVolumePinsThePodToItsNode) {
  Objects api;
  api.Put("persistentvolumeclaims", "ml", BoundClaim("data", "local-pv-1"));
  api.Put("persistentvolumes", "", LocalVolume("local-pv-1", "hgx-1"));
  PodVolumes v = PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter());
  EXPECT_EQ(v.unjudged_reason(), "");
  EXPECT_EQ(v.Rejects(Node("hgx-1")), "");
  EXPECT_EQ(v.Rejects(Node("hgx-2")),
            "PersistentVolume's node affinity: local-pv-1 (claim data) does not admit this node");
  // A volume without node affinity goes anywhere.
  json anywhere = LocalVolume("local-pv-1", "hgx-1");
  anywhere["spec"].erase("nodeAffinity");
  api.Put("persistentvolumes", "", anywhere);
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter()).Rejects(Node("hgx-2")), "");
  // The volume gone: no node.
  api.by_key.erase("persistentvolumes//local-pv-1");
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter()).Rejects(Node("hgx-1")),
            "persistentvolumeclaim \"data\" is bound to persistentvolume \"local-pv-1\", which "
            "does not exist");
}

// Claims that rule out every node, as kube-scheduler's PreFilter does.
TEST(VolumeFiltersTest, MissingDeletingAndUnboundImmediateClaimsRuleOutEveryNode) {
  Objects api;
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("gone")}), api.Getter()).Rejects(Node("a")),
            "persistentvolumeclaim \"gone\" not found");
  json deleting = BoundClaim("old", "pv-old");
  deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  api.Put("persistentvolumeclaims", "ml", deleting);
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("old")}), api.Getter()).Rejects(Node("a")),
            "persistentvolumeclaim \"old\" is being deleted");
  // Volume name set but the binding not completed: not bound yet. Its class
  // binds at once (Immediate is the default mode), so no node will do.
  json half = BoundClaim("half", "pv-half");
  half["metadata"].erase("annotations");
  half["spec"]["storageClassName"] = "fast";
  api.Put("persistentvolumeclaims", "ml", half);
  api.Put("storageclasses", "", {{"metadata", {{"name", "fast"}}}});
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter()).Rejects(Node("a")),
            "pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim \"half\" is "
            "not bound yet and its storage class binds at once)");
  // A class that waits for the first consumer: not judged, and counted.
  api.Put("storageclasses", "",
          {{"metadata", {{"name", "fast"}}}, {"volumeBindingMode", "WaitForFirstConsumer"}});
  PodVolumes waits = PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter());
  EXPECT_EQ(waits.Rejects(Node("a")), "");
  EXPECT_EQ(waits.waiting_claims(), 1);
  // A class that does not exist.
  half["spec"]["storageClassName"] = "nope";
  api.Put("persistentvolumeclaims", "ml", half);
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter()).Rejects(Node("a")),
            "persistentvolumeclaim \"half\": storageclass.storage.k8s.io \"nope\" not found");
  // The first claim's reason is given, as kube-scheduler stops at it.
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("gone"), ClaimVolume("old")}), api.Getter())
                .Rejects(Node("a")),
            "persistentvolumeclaim \"gone\" not found");
}

// A generic ephemeral volume's claim is <pod>-<volume>, made for the pod.
TEST(VolumeFiltersTest, EphemeralVolumesNeedTheirOwnClaim) {
  Objects api;
  const json eph = {{"name", "scratch"}, {"ephemeral", {{"volumeClaimTemplate", json::object()}}}};
  EXPECT_EQ(PodVolumes::Read(Pod({eph}), api.Getter()).Rejects(Node("a")),
            "waiting for the ephemeral volume controller to create persistentvolumeclaim "
            "\"train-0-scratch\"");
  json claim = BoundClaim("train-0-scratch", "pv-s");
  api.Put("persistentvolumeclaims", "ml", claim);
  api.Put("persistentvolumes", "", LocalVolume("pv-s", "a"));
  EXPECT_EQ(PodVolumes::Read(Pod({eph}), api.Getter()).Rejects(Node("a")),
            "persistentvolumeclaim \"train-0-scratch\" was not created for this pod (the pod is "
            "not its owner)");
  claim["metadata"]["ownerReferences"] = {
      {{"kind", "Pod"}, {"name", "train-0"}, {"uid", "u-1"}, {"controller", true}}};
  api.Put("persistentvolumeclaims", "ml", claim);
  PodVolumes v = PodVolumes::Read(Pod({eph}), api.Getter());
  EXPECT_EQ(v.Rejects(Node("a")), "");
  EXPECT_NE(v.Rejects(Node("b")), "");
}

// VolumeZone: the node must be in one of the volume's zones ("a__b" is a
// set); a beta label on the volume is matched against the node's GA label.
TEST(VolumeFiltersTest, AZonedVolumeNeedsANodeInOneOfItsZones) {
  Objects api;
  api.Put("persistentvolumeclaims", "ml", BoundClaim("data", "disk-1"));
  api.Put(
      "persistentvolumes", "",
      {{"metadata",
        {{"name", "disk-1"}, {"labels", {{"failure-domain.beta.kubernetes.io/zone", "z1__z2"}}}}}});
  PodVolumes v = PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter());
  EXPECT_EQ(v.Rejects(Node("a", "z1")), "");
  EXPECT_EQ(v.Rejects(Node("b", "z2")), "");
  EXPECT_EQ(v.Rejects(Node("c", "z3")),
            "no available volume zone: persistentvolume disk-1 is in "
            "failure-domain.beta.kubernetes.io/zone=z1__z2, the node is in z3");
  EXPECT_EQ(v.Rejects(Node("d")),
            "no available volume zone: persistentvolume disk-1 is in "
            "failure-domain.beta.kubernetes.io/zone=z1__z2, the node has no such label");
}

// No right to read claims: nothing judged, the reason says what to grant;
// volumes that are not claims read nothing.
TEST(VolumeFiltersTest, UnreadableClaimsAreNotJudgedAndOtherVolumesReadNothing) {
  Objects api;
  api.refuse = true;
  PodVolumes v = PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter());
  EXPECT_EQ(v.Rejects(Node("a")), "");
  EXPECT_NE(v.unjudged_reason().find("grant get on persistentvolumeclaims"), std::string::npos)
      << v.unjudged_reason();
  // Another failure (the apiserver unavailable) is said as it is.
  ObjectGetter unavailable = [](const std::string&, const std::string&,
                                const std::string&) -> StatusOr<json> {
    return Status(StatusCode::kUnavailable, "connection refused");
  };
  PodVolumes down = PodVolumes::Read(Pod({ClaimVolume("data")}), unavailable);
  EXPECT_EQ(down.Rejects(Node("a")), "");
  EXPECT_NE(down.unjudged_reason().find("connection refused"), std::string::npos);
  EXPECT_EQ(down.unjudged_reason().find("grant"), std::string::npos) << down.unjudged_reason();
  api.reads = 0;
  const std::vector<json> others = {{{"name", "cfg"}, {"configMap", {{"name", "cfg"}}}},
                                    {{"name", "tmp"}, {"emptyDir", json::object()}},
                                    "not an object"};
  PodVolumes none = PodVolumes::Read(Pod(others), api.Getter());
  EXPECT_EQ(api.reads, 0);
  EXPECT_EQ(none.Rejects(Node("a")), "");
  EXPECT_EQ(none.unjudged_reason(), "");
  EXPECT_EQ(PodVolumes::Read(json::object(), api.Getter()).Rejects(Node("a")), "");
}

}  // namespace
}  // namespace accelpool::ctl

namespace accelpool::ctl {
namespace {

// Every JSON pointer of a document, leaves and subtrees.
void Pointers(const json& j, const std::string& at, std::vector<std::string>& out) {
  out.push_back(at);
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) Pointers(v, at + "/" + k, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) Pointers(j[i], at + "/" + std::to_string(i), out);
  }
}

// The apiserver validates what it stores, but explain reads whatever it is
// handed: each part of a pod, node, claim or volume replaced by a value of
// every JSON type must give an answer, never a crash or an exception.
TEST(FiltersRobustnessTest, EveryFieldOfEveryTypeIsAnsweredWithoutACrash) {
  const json term = {
      {"labelSelector",
       {{"matchLabels", {{"app", "web"}}},
        {"matchExpressions", {{{"key", "tier"}, {"operator", "In"}, {"values", {"a"}}}}}}},
      {"namespaces", {"ml"}},
      {"namespaceSelector", {{"matchLabels", {{"team", "x"}}}}},
      {"topologyKey", "rack"}};
  json pod = {
      {"metadata",
       {{"name", "p"}, {"namespace", "ml"}, {"uid", "u"}, {"labels", {{"app", "web"}}}}},
      {"spec",
       {{"nodeSelector", {{"rack", "r1"}}},
        {"tolerations", {{{"key", "k"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}},
        {"affinity",
         {{"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution",
             {{"nodeSelectorTerms",
               {{{"matchExpressions", {{{"key", "n"}, {"operator", "Gt"}, {"values", {"3"}}}}},
                 {"matchFields",
                  {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"a"}}}}}}}}}}}},
          {"podAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", {term}}}},
          {"podAntiAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", {term}}}}}},
        {"topologySpreadConstraints",
         {{{"maxSkew", 1},
           {"topologyKey", "rack"},
           {"whenUnsatisfiable", "DoNotSchedule"},
           {"minDomains", 2},
           {"matchLabelKeys", {"app"}},
           {"labelSelector", {{"matchLabels", {{"app", "web"}}}}}}}},
        {"overhead", {{"cpu", "100m"}}},
        {"initContainers",
         {{{"name", "i"},
           {"restartPolicy", "Always"},
           {"resources", {{"requests", {{"cpu", "1"}}}}}}}},
        {"containers",
         {{{"name", "c"},
           {"ports", {{{"hostPort", 80}, {"protocol", "TCP"}, {"hostIP", "1.2.3.4"}}}},
           {"resources", {{"limits", {{"cpu", "2"}, {"memory", "1Gi"}}}}}}}},
        {"volumes",
         {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "d"}}}},
          {{"name", "e"}, {"ephemeral", {{"volumeClaimTemplate", json::object()}}}}}}}}};
  const json node = {
      {"metadata", {{"name", "a"}, {"labels", {{"rack", "r1"}, {"n", "5"}}}}},
      {"spec", {{"unschedulable", false}, {"taints", {{{"key", "k"}, {"effect", "NoSchedule"}}}}}},
      {"status", {{"allocatable", {{"cpu", "8"}, {"memory", "64Gi"}, {"pods", "110"}}}}}};
  const json pvc = {{"metadata",
                     {{"name", "d"},
                      {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}},
                      {"ownerReferences", {{{"uid", "u"}, {"controller", true}}}}}},
                    {"spec", {{"volumeName", "v"}, {"storageClassName", "s"}}}};
  json pv = {{"metadata", {{"name", "v"}, {"labels", {{"topology.kubernetes.io/zone", "z"}}}}}};
  pv["spec"]["nodeAffinity"]["required"] =
      pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  const std::vector<json> kinds = {json(),
                                   json(7),
                                   json(-1.5),
                                   json(true),
                                   json("x"),
                                   json::array({1, "y"}),
                                   json::object({{"z", nullptr}})};
  const NamespaceLabels namespaces = {{"ml", {{"team", "x"}}}};

  auto run = [&](const json& p, const json& n, const json& claim, const json& volume) {
    NodeFacts facts = NodeFactsFromJson(n);
    std::map<std::string, NodeFacts> all = {{facts.name, facts}};
    std::map<std::string, NodeUse> use;
    NodeUse& u = use[facts.name];
    u.pods = 1;
    u.requested = PodRequests(p);
    u.host_ports = PodHostPorts(p);
    u.pod_labels = {PodLabelsFromJson(p)};
    std::string out = SchedulerRejects(p, facts, &u);
    out += TopologySpread(p, all, use).Rejects(facts);
    out += InterPodAffinity(p, all, use, &namespaces).Rejects(facts);
    out += InterPodAffinity(p, all, use, nullptr).Rejects(facts);
    PodVolumes v = PodVolumes::Read(
        p, [&](const std::string& kind, const std::string&, const std::string&) -> StatusOr<json> {
          if (kind == "persistentvolumeclaims") return claim;
          if (kind == "persistentvolumes") return volume;
          return json{{"volumeBindingMode", "WaitForFirstConsumer"}};
        });
    out += v.Rejects(facts);
    return out;
  };
  int runs = 0;
  for (const json* doc : std::vector<const json*>{&pod, &node, &pvc, &pv}) {
    std::vector<std::string> pointers;
    Pointers(*doc, "", pointers);
    for (const std::string& ptr : pointers) {
      for (const json& k : kinds) {
        json mutated = *doc;
        if (ptr.empty()) {
          mutated = k;
        } else {
          mutated[json::json_pointer(ptr)] = k;
        }
        SCOPED_TRACE(ptr + " = " + k.dump());
        EXPECT_NO_THROW(run(doc == &pod ? mutated : pod, doc == &node ? mutated : node,
                            doc == &pvc ? mutated : pvc, doc == &pv ? mutated : pv));
        ++runs;
      }
    }
  }
  EXPECT_GT(runs, 1000);
  std::printf("%d mutated documents judged\n", runs);
}

}  // namespace
}  // namespace accelpool::ctl
