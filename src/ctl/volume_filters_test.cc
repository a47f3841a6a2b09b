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

const NodeUse kNoUse;

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
  EXPECT_EQ(v.Rejects(Node("hgx-1"), kNoUse), "");
  EXPECT_EQ(v.Rejects(Node("hgx-2"), kNoUse),
            "PersistentVolume's node affinity: local-pv-1 (claim data) does not admit this node");
  // A volume without node affinity goes anywhere.
  json anywhere = LocalVolume("local-pv-1", "hgx-1");
  anywhere["spec"].erase("nodeAffinity");
  api.Put("persistentvolumes", "", anywhere);
  EXPECT_EQ(
      PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter()).Rejects(Node("hgx-2"), kNoUse),
      "");
  // The volume gone: no node.
  api.by_key.erase("persistentvolumes//local-pv-1");
  EXPECT_EQ(
      PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter()).Rejects(Node("hgx-1"), kNoUse),
      "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s): "
      "persistentvolumeclaim \"data\" is bound to persistentvolume \"local-pv-1\", which "
      "does not exist");
}

// Claims that rule out every node, as kube-scheduler's PreFilter does.
TEST(VolumeFiltersTest, MissingDeletingAndUnboundImmediateClaimsRuleOutEveryNode) {
  Objects api;
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("gone")}), api.Getter()).Rejects(Node("a"), kNoUse),
            "persistentvolumeclaim \"gone\" not found");
  json deleting = BoundClaim("old", "pv-old");
  deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  api.Put("persistentvolumeclaims", "ml", deleting);
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("old")}), api.Getter()).Rejects(Node("a"), kNoUse),
            "persistentvolumeclaim \"old\" is being deleted");
  // Volume name set but the binding not completed: not bound yet. Its class
  // binds at once (Immediate is the default mode), so no node will do.
  json half = BoundClaim("half", "pv-half");
  half["metadata"].erase("annotations");
  half["spec"]["storageClassName"] = "fast";
  api.Put("persistentvolumeclaims", "ml", half);
  api.Put("storageclasses", "", {{"metadata", {{"name", "fast"}}}});
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter()).Rejects(Node("a"), kNoUse),
            "pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim \"half\" is "
            "not bound, and its storage class binds at once)");
  // A class that waits for the first consumer, but the claim names its
  // volume: the volume controller binds it, as for Immediate.
  api.Put("storageclasses", "",
          {{"metadata", {{"name", "fast"}}}, {"volumeBindingMode", "WaitForFirstConsumer"}});
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter()).Rejects(Node("a"), kNoUse),
            "pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim \"half\" "
            "names persistentvolume \"pv-half\", but the binding is not complete)");
  // Without a volume name it waits for its first consumer: counted, and not
  // judged when what could serve it is not read.
  half["spec"].erase("volumeName");
  api.Put("persistentvolumeclaims", "ml", half);
  PodVolumes waits = PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter());
  EXPECT_EQ(waits.Rejects(Node("a"), kNoUse), "");
  EXPECT_EQ(waits.waiting_claims(), 1);
  EXPECT_EQ(waits.waiting_unjudged_reason(), "the volumes that could serve them were not read");
  // A class that does not exist.
  half["spec"]["storageClassName"] = "nope";
  api.Put("persistentvolumeclaims", "ml", half);
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("half")}), api.Getter()).Rejects(Node("a"), kNoUse),
            "pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim \"half\" is "
            "not bound and names storageclass \"nope\", which does not exist)");
  // The first claim's reason is given, as kube-scheduler stops at it.
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("gone"), ClaimVolume("old")}), api.Getter())
                .Rejects(Node("a"), kNoUse),
            "persistentvolumeclaim \"gone\" not found");
}

// A generic ephemeral volume's claim is <pod>-<volume>, made for the pod.
TEST(VolumeFiltersTest, EphemeralVolumesNeedTheirOwnClaim) {
  Objects api;
  const json eph = {{"name", "scratch"}, {"ephemeral", {{"volumeClaimTemplate", json::object()}}}};
  EXPECT_EQ(PodVolumes::Read(Pod({eph}), api.Getter()).Rejects(Node("a"), kNoUse),
            "waiting for ephemeral volume controller to create the persistentvolumeclaim "
            "\"train-0-scratch\"");
  json claim = BoundClaim("train-0-scratch", "pv-s");
  api.Put("persistentvolumeclaims", "ml", claim);
  api.Put("persistentvolumes", "", LocalVolume("pv-s", "a"));
  EXPECT_EQ(PodVolumes::Read(Pod({eph}), api.Getter()).Rejects(Node("a"), kNoUse),
            "persistentvolumeclaim \"train-0-scratch\" was not created for this pod (the pod is "
            "not its owner)");
  claim["metadata"]["ownerReferences"] = {
      {{"kind", "Pod"}, {"name", "train-0"}, {"uid", "u-1"}, {"controller", true}}};
  api.Put("persistentvolumeclaims", "ml", claim);
  PodVolumes v = PodVolumes::Read(Pod({eph}), api.Getter());
  EXPECT_EQ(v.Rejects(Node("a"), kNoUse), "");
  EXPECT_NE(v.Rejects(Node("b"), kNoUse), "");
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
  EXPECT_EQ(v.Rejects(Node("a", "z1"), kNoUse), "");
  EXPECT_EQ(v.Rejects(Node("b", "z2"), kNoUse), "");
  EXPECT_EQ(v.Rejects(Node("c", "z3"), kNoUse),
            "no available volume zone: persistentvolume disk-1 is in "
            "failure-domain.beta.kubernetes.io/zone=z1__z2, the node is in z3");
  EXPECT_EQ(v.Rejects(Node("d"), kNoUse),
            "no available volume zone: persistentvolume disk-1 is in "
            "failure-domain.beta.kubernetes.io/zone=z1__z2, the node has no such label");
}

// No right to read claims: nothing judged, the reason says what to grant;
// volumes that are not claims read nothing.
TEST(VolumeFiltersTest, UnreadableClaimsAreNotJudgedAndOtherVolumesReadNothing) {
  Objects api;
  api.refuse = true;
  PodVolumes v = PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter());
  EXPECT_EQ(v.Rejects(Node("a"), kNoUse), "");
  EXPECT_NE(v.unjudged_reason().find("grant get on persistentvolumeclaims"), std::string::npos)
      << v.unjudged_reason();
  // Another failure (the apiserver unavailable) is said as it is.
  ObjectGetter unavailable = [](const std::string&, const std::string&,
                                const std::string&) -> StatusOr<json> {
    return Status(StatusCode::kUnavailable, "connection refused");
  };
  PodVolumes down = PodVolumes::Read(Pod({ClaimVolume("data")}), unavailable);
  EXPECT_EQ(down.Rejects(Node("a"), kNoUse), "");
  EXPECT_NE(down.unjudged_reason().find("connection refused"), std::string::npos);
  EXPECT_EQ(down.unjudged_reason().find("grant"), std::string::npos) << down.unjudged_reason();
  api.reads = 0;
  const std::vector<json> others = {{{"name", "cfg"}, {"configMap", {{"name", "cfg"}}}},
                                    {{"name", "tmp"}, {"emptyDir", json::object()}},
                                    "not an object"};
  PodVolumes none = PodVolumes::Read(Pod(others), api.Getter());
  EXPECT_EQ(api.reads, 0);
  EXPECT_EQ(none.Rejects(Node("a"), kNoUse), "");
  EXPECT_EQ(none.unjudged_reason(), "");
  EXPECT_EQ(PodVolumes::Read(json::object(), api.Getter()).Rejects(Node("a"), kNoUse), "");
}

// PreFilter's order: VolumeRestrictions looks for persistentVolumeClaim
// claims before VolumeBinding judges any claim, and a Lost claim is refused.
TEST(VolumeFiltersTest, PreFilterReasonsComeInKubeSchedulersOrder) {
  Objects api;
  const json eph = {{"name", "scratch"}, {"ephemeral", {{"volumeClaimTemplate", json::object()}}}};
  PodVolumes both = PodVolumes::Read(Pod({eph, ClaimVolume("gone")}), api.Getter());
  EXPECT_EQ(both.every_node(), "persistentvolumeclaim \"gone\" not found");
  EXPECT_EQ(both.Rejects(Node("a"), kNoUse), both.every_node());
  json lost = BoundClaim("lost", "pv-lost");
  lost["status"]["phase"] = "Lost";
  api.Put("persistentvolumeclaims", "ml", lost);
  json immediate = BoundClaim("now", "");
  immediate["metadata"].erase("annotations");
  api.Put("persistentvolumeclaims", "ml", immediate);
  api.Put("storageclasses", "", {{"metadata", {{"name", "local"}}}});
  // The unbound immediate claim comes first, but a broken claim wins.
  EXPECT_EQ(
      PodVolumes::Read(Pod({ClaimVolume("now"), ClaimVolume("lost")}), api.Getter()).every_node(),
      "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"pv-lost\"");
  // The beta annotation names the class before the field does.
  immediate["metadata"]["annotations"] = {{"volume.beta.kubernetes.io/storage-class", "none"}};
  api.Put("persistentvolumeclaims", "ml", immediate);
  EXPECT_EQ(PodVolumes::Read(Pod({ClaimVolume("now")}), api.Getter()).every_node(),
            "pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim \"now\" is "
            "not bound and names storageclass \"none\", which does not exist)");
}

// A claim whose class waits for the first consumer, and the apiserver's
// volumes, classes, CSI drivers and capacities to judge it with.
struct WaitingSetup {
  Objects api;
  std::vector<json> volumes, capacities;
  bool refuse_lists = false;
  int lists = 0;

  WaitingSetup() {
    json claim = {{"metadata", {{"name", "data"}, {"namespace", "ml"}, {"uid", "c-1"}}},
                  {"spec",
                   {{"storageClassName", "local"},
                    {"accessModes", {"ReadWriteOnce"}},
                    {"resources", {{"requests", {{"storage", "50Gi"}}}}}}}};
    api.Put("persistentvolumeclaims", "ml", claim);
    api.Put("storageclasses", "",
            {{"metadata", {{"name", "local"}}},
             {"provisioner", "kubernetes.io/no-provisioner"},
             {"volumeBindingMode", "WaitForFirstConsumer"}});
  }
  // An Available local volume of class `cls` on `node`.
  json& AddVolume(const std::string& name, const std::string& node, const std::string& size,
                  const std::string& cls = "local") {
    json pv = LocalVolume(name, node);
    pv["spec"]["storageClassName"] = cls;
    pv["spec"]["capacity"]["storage"] = size;
    pv["spec"]["accessModes"] = {"ReadWriteOnce"};
    pv["status"]["phase"] = "Available";
    volumes.push_back(pv);
    return volumes.back();
  }
  ObjectLister Lister() {
    return [this](const std::string& kind) -> StatusOr<std::vector<json>> {
      ++lists;
      if (refuse_lists) return Status(StatusCode::kPermissionDenied, "forbidden");
      return kind == "persistentvolumes" ? volumes : capacities;
    };
  }
  PodVolumes Read(const std::vector<json>& pod_volumes = {ClaimVolume("data")}) {
    return PodVolumes::Read(Pod(pod_volumes), api.Getter(), Lister());
  }
};

// Static volumes: the node needs an Available one of the class that fits the
// claim (size, access modes, volume mode, selector, its node affinity).
TEST(VolumeFiltersTest, AWaitingClaimNeedsAVolumeThatFitsItOnTheNode) {
  WaitingSetup s;
  s.AddVolume("pv-a", "a", "100Gi");
  s.AddVolume("pv-b", "b", "20Gi");  // too small
  s.AddVolume("pv-c", "c", "100Gi")["spec"]["accessModes"] = {"ReadOnlyMany"};
  s.AddVolume("pv-d", "d", "100Gi")["spec"]["volumeMode"] = "Block";
  s.AddVolume("pv-e", "e", "100Gi")["status"]["phase"] = "Released";
  s.AddVolume("pv-f", "f", "100Gi", "other");
  s.AddVolume("pv-g", "g", "100Gi")["spec"]["claimRef"] = {{"name", "else"}, {"namespace", "ml"}};
  PodVolumes v = s.Read();
  EXPECT_EQ(v.waiting_claims(), 1);
  EXPECT_EQ(v.waiting_unjudged_reason(), "");
  EXPECT_EQ(v.Rejects(Node("a"), kNoUse), "");
  for (const char* n : {"b", "c", "d", "e", "f", "g", "h"}) {
    EXPECT_EQ(v.Rejects(Node(n), kNoUse),
              "node(s) didn't find available persistent volumes to bind: claim data (class local) "
              "has no volume here that fits it, and its class provisions none")
        << n;
  }
  // A selector on the claim: only volumes with those labels.
  json claim = s.api.by_key["persistentvolumeclaims/ml/data"];
  claim["spec"]["selector"] = {{"matchLabels", {{"disk", "nvme"}}}};
  s.api.Put("persistentvolumeclaims", "ml", claim);
  EXPECT_NE(s.Read().Rejects(Node("a"), kNoUse), "");
  s.volumes[0]["metadata"]["labels"] = {{"disk", "nvme"}};
  EXPECT_EQ(s.Read().Rejects(Node("a"), kNoUse), "");
  // Two claims of the pod cannot share one volume.
  json second = claim;
  second["metadata"]["name"] = "more";
  second["metadata"]["uid"] = "c-2";
  s.api.Put("persistentvolumeclaims", "ml", second);
  PodVolumes two = s.Read({ClaimVolume("data"), ClaimVolume("more")});
  EXPECT_EQ(two.waiting_claims(), 2);
  EXPECT_NE(two.Rejects(Node("a"), kNoUse), "");
  json& extra = s.AddVolume("pv-a2", "a", "60Gi");
  extra["metadata"]["labels"] = {{"disk", "nvme"}};
  EXPECT_EQ(s.Read({ClaimVolume("data"), ClaimVolume("more")}).Rejects(Node("a"), kNoUse), "");
}

// Volumes whose node affinity is not the one-host form local volumes carry
// (a zone, several hosts) are judged on every node; one without any fits all.
TEST(VolumeFiltersTest, AWaitingClaimFindsZonalAndUnpinnedVolumesToo) {
  WaitingSetup s;
  json& zonal = s.AddVolume("pv-zone", "x", "100Gi");
  zonal["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0] = {
      {"key", "topology.kubernetes.io/zone"}, {"operator", "In"}, {"values", {"z1"}}};
  json& pair = s.AddVolume("pv-pair", "x", "100Gi");
  pair["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
      ["values"] = {"p", "q"};
  PodVolumes v = s.Read();
  EXPECT_EQ(v.Rejects(Node("a", "z1"), kNoUse), "");
  EXPECT_EQ(v.Rejects(Node("q", "z2"), kNoUse), "");
  EXPECT_NE(v.Rejects(Node("x", "z2"), kNoUse), "") << "x is named only in a zonal volume's term";
  s.volumes.push_back({{"metadata", {{"name", "pv-any"}}},
                       {"spec",
                        {{"storageClassName", "local"},
                         {"capacity", {{"storage", "60Gi"}}},
                         {"accessModes", {"ReadWriteOnce"}}}},
                       {"status", {{"phase", "Available"}}}});
  EXPECT_EQ(s.Read().Rejects(Node("x", "z2"), kNoUse), "");
}

// A volume reserved for the claim (its claimRef names it) is the only one
// it takes: on another node there is no match, even with a free volume.
TEST(VolumeFiltersTest, AVolumeReservedForTheClaimIsTheOnlyOneItTakes) {
  WaitingSetup s;
  s.AddVolume("pv-a", "a", "100Gi");
  s.AddVolume("pv-b", "b", "60Gi")["spec"]["claimRef"] = {
      {"name", "data"}, {"namespace", "ml"}, {"uid", "c-1"}};
  s.volumes.back()["status"]["phase"] = "Bound";  // reserved volumes need no Available phase
  PodVolumes v = s.Read();
  EXPECT_EQ(v.Rejects(Node("b"), kNoUse), "");
  EXPECT_NE(v.Rejects(Node("a"), kNoUse), "");
  // Reserved for an earlier claim of the same name (another uid): not this one's.
  s.volumes.back()["spec"]["claimRef"]["uid"] = "c-0";
  EXPECT_EQ(s.Read().Rejects(Node("a"), kNoUse), "");
  EXPECT_NE(s.Read().Rejects(Node("b"), kNoUse), "");
}

// Dynamic provisioning: the class's allowedTopologies, and for a CSI driver
// that tracks capacity, a CSIStorageCapacity the node reaches with room.
TEST(VolumeFiltersTest, AProvisioningClassNeedsTheNodesTopologyAndRoom) {
  WaitingSetup s;
  s.api.Put("storageclasses", "",
            {{"metadata", {{"name", "local"}}},
             {"provisioner", "lvm.csi.example"},
             {"volumeBindingMode", "WaitForFirstConsumer"},
             {"allowedTopologies",
              {{{"matchLabelExpressions",
                 {{{"key", "topology.kubernetes.io/zone"}, {"values", {"z1", "z2"}}}}}}}}});
  PodVolumes v = s.Read();
  EXPECT_EQ(v.Rejects(Node("a", "z1"), kNoUse), "");
  EXPECT_EQ(v.Rejects(Node("b", "z3"), kNoUse),
            "node(s) didn't find available persistent volumes to bind: claim data (class local) "
            "has no volume here that fits it, and its class provisions only where "
            "topology.kubernetes.io/zone in (z1,z2)");
  EXPECT_EQ(s.lists, 1) << "no CSIDriver tracks capacity: capacities are not listed";
  // The driver tracks capacity: z1 has 40Gi, z2 1Ti but at most 30Gi per volume.
  s.api.Put("csidrivers", "",
            {{"metadata", {{"name", "lvm.csi.example"}}}, {"spec", {{"storageCapacity", true}}}});
  auto capacity = [](const std::string& zone, const std::string& cap, const std::string& max) {
    json c = {{"metadata", {{"name", "cap-" + zone}, {"namespace", "kube-system"}}},
              {"storageClassName", "local"},
              {"capacity", cap},
              {"nodeTopology", {{"matchLabels", {{"topology.kubernetes.io/zone", zone}}}}}};
    if (!max.empty()) c["maximumVolumeSize"] = max;
    return c;
  };
  s.capacities = {capacity("z1", "40Gi", ""), capacity("z2", "1Ti", "30Gi")};
  v = s.Read();
  EXPECT_EQ(s.lists, 3);
  const std::string no_room =
      "node(s) did not have enough free storage: claim data asks 50 GiB of class local, and no "
      "CSIStorageCapacity of that class that this node reaches has room for it";
  EXPECT_EQ(v.Rejects(Node("a", "z1"), kNoUse), no_room);
  EXPECT_EQ(v.Rejects(Node("c", "z2"), kNoUse), no_room);
  s.capacities.push_back(capacity("z2", "60Gi", ""));
  EXPECT_EQ(s.Read().Rejects(Node("c", "z2"), kNoUse), "");
  // A free volume on the node comes before provisioning.
  s.AddVolume("pv-a", "a", "100Gi");
  EXPECT_EQ(s.Read().Rejects(Node("a", "z1"), kNoUse), "");
  // A claim already given a node is provisioned there only.
  json claim = s.api.by_key["persistentvolumeclaims/ml/data"];
  claim["metadata"]["annotations"] = {{"volume.kubernetes.io/selected-node", "c"}};
  s.api.Put("persistentvolumeclaims", "ml", claim);
  v = s.Read();
  EXPECT_EQ(v.Rejects(Node("c", "z2"), kNoUse), "");
  EXPECT_EQ(v.Rejects(Node("a", "z1"), kNoUse),
            "node(s) didn't find available persistent volumes to bind: claim data is being "
            "provisioned for node c (volume.kubernetes.io/selected-node)");
}

// Without the right to list volumes, waiting claims are not judged and the
// reason names the right; other claims still are.
TEST(VolumeFiltersTest, WaitingClaimsAreNotJudgedWhenTheirVolumesCannotBeListed) {
  WaitingSetup s;
  s.refuse_lists = true;
  PodVolumes v = s.Read();
  EXPECT_EQ(v.Rejects(Node("a"), kNoUse), "");
  EXPECT_EQ(v.unjudged_reason(), "");
  EXPECT_NE(v.waiting_unjudged_reason().find("grant list on persistentvolumes"), std::string::npos)
      << v.waiting_unjudged_reason();
  // Nothing is listed for a pod without waiting claims.
  s.lists = 0;
  s.api.Put("persistentvolumeclaims", "ml", BoundClaim("bound", "pv-x"));
  s.api.Put("persistentvolumes", "", LocalVolume("pv-x", "a"));
  EXPECT_EQ(s.Read({ClaimVolume("bound")}).Rejects(Node("b"), kNoUse),
            "PersistentVolume's node affinity: pv-x (claim bound) does not admit this node");
  EXPECT_EQ(s.lists, 0);
}

// NodeVolumeLimits: a node's CSINode limit per driver against the CSI
// volumes attached there (its pods' claims, VolumeAttachments) plus those of
// the pod that are not attached there yet.
TEST(VolumeFiltersTest, CsiVolumesBeyondTheNodesAttachLimitRuleItOut) {
  Objects api;
  std::map<std::string, std::vector<json>> lists;
  int list_calls = 0;
  bool refuse = false;
  ObjectLister lister = [&](const std::string& kind) -> StatusOr<std::vector<json>> {
    ++list_calls;
    if (refuse) return Status(StatusCode::kPermissionDenied, "forbidden");
    return lists[kind];
  };
  auto csi_volume = [](const std::string& name, const std::string& handle) {
    return json{{"metadata", {{"name", name}}},
                {"spec", {{"csi", {{"driver", "ebs.csi"}, {"volumeHandle", handle}}}}}};
  };
  auto bound = [](const std::string& name, const std::string& volume) {
    json c = BoundClaim(name, volume);
    c["spec"]["storageClassName"] = "gp3";
    return c;
  };
  api.Put("persistentvolumeclaims", "ml", bound("data", "pv-new"));
  api.Put("persistentvolumes", "", csi_volume("pv-new", "vol-new"));
  api.Put("storageclasses", "", {{"metadata", {{"name", "gp3"}}}, {"provisioner", "ebs.csi"}});
  lists["persistentvolumes"] = {
      csi_volume("pv-new", "vol-new"),
      csi_volume("pv-x", "vol-x"),
      csi_volume("pv-y", "vol-y"),
      {{"metadata", {{"name", "pv-nfs"}}}, {"spec", {{"nfs", json::object()}}}}};
  json unbound = bound("later", "");
  unbound["spec"].erase("volumeName");
  lists["persistentvolumeclaims"] = {bound("data", "pv-new"), bound("x", "pv-x"),
                                     bound("y", "pv-y"), bound("nfs", "pv-nfs"), unbound};
  for (json& c : lists["persistentvolumeclaims"]) c["metadata"]["namespace"] = "ml";
  auto csi_node = [](const std::string& node, int count) {
    return json{{"metadata", {{"name", node}}},
                {"spec",
                 {{"drivers",
                   {{{"name", "other.csi"}, {"allocatable", {{"count", 0}}}},
                    {{"name", "ebs.csi"}, {"allocatable", {{"count", count}}}}}}}}};
  };
  lists["csinodes"] = {csi_node("a", 2), csi_node("b", 2), csi_node("d", 1), csi_node("e", 1),
                       csi_node("f", 2)};
  lists["volumeattachments"] = {{{"spec",
                                  {{"nodeName", "d"},
                                   {"attacher", "ebs.csi"},
                                   {"source", {{"persistentVolumeName", "pv-y"}}}}}}};
  std::map<std::string, NodeUse> uses;
  uses["a"].volume_claims = {"ml/x", "ml/y"};               // 2 of 2: no room
  uses["b"].volume_claims = {"ml/data", "ml/x"};            // the pod's volume is attached already
  uses["e"].volume_claims = {"ml/later"};                   // a volume to come counts
  uses["f"].volume_claims = {"ml/nfs", "ml/x", "ml/gone"};  // not CSI, or no claim: not counted
  PodVolumes v = PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter(), lister);
  v.ReadVolumeLimits(uses, api.Getter(), lister);
  EXPECT_EQ(v.limits_unjudged_reason(), "");
  EXPECT_EQ(v.Rejects(Node("a"), uses["a"]),
            "node(s) exceed max volume count: ebs.csi has 2 of 2 volumes attached here, the pod "
            "adds 1");
  EXPECT_EQ(v.Rejects(Node("b"), uses["b"]), "");
  EXPECT_EQ(v.Rejects(Node("c"), kNoUse), "") << "no CSINode: no limit";
  EXPECT_EQ(v.Rejects(Node("d"), kNoUse),
            "node(s) exceed max volume count: ebs.csi has 1 of 1 volumes attached here, the pod "
            "adds 1");
  EXPECT_NE(v.Rejects(Node("e"), uses["e"]), "");
  EXPECT_EQ(v.Rejects(Node("f"), uses["f"]), "");

  // Refused: not judged, and the rights are named.
  refuse = true;
  PodVolumes denied = PodVolumes::Read(Pod({ClaimVolume("data")}), api.Getter());
  denied.ReadVolumeLimits(uses, api.Getter(), lister);
  EXPECT_EQ(denied.Rejects(Node("a"), uses["a"]), "");
  EXPECT_NE(denied.limits_unjudged_reason().find("grant list on csinodes"), std::string::npos)
      << denied.limits_unjudged_reason();
  // A pod without CSI volumes lists nothing.
  refuse = false;
  list_calls = 0;
  PodVolumes none = PodVolumes::Read(Pod({}), api.Getter(), lister);
  none.ReadVolumeLimits(uses, api.Getter(), lister);
  EXPECT_EQ(list_calls, 0);
}

// VolumeRestrictions: a ReadWriteOncePod claim mounted by a bound pod rules
// out every node; an inline disk mounted on the node rules out that node
// unless both mount it read-only (never for EBS; RBD needs a shared monitor).
TEST(VolumeFiltersTest, ReadWriteOncePodClaimsAndInlineDisksAreNotMountedTwice) {
  Objects api;
  json claim = BoundClaim("solo", "pv-solo");
  claim["spec"]["accessModes"] = {"ReadWriteOncePod"};
  api.Put("persistentvolumeclaims", "ml", claim);
  api.Put("persistentvolumes", "", {{"metadata", {{"name", "pv-solo"}}}});
  PodVolumes v = PodVolumes::Read(Pod({ClaimVolume("solo")}), api.Getter());
  std::map<std::string, NodeUse> uses;
  uses["b"].claims["ml/other"] = "ml/x";
  uses["b"].claims["team/solo"] = "team/y";  // same name, another namespace
  v.NoteClaimsInUse(uses);
  EXPECT_EQ(v.Rejects(Node("a"), kNoUse), "");
  uses["c"].claims["ml/solo"] = "ml/writer-0";
  v.NoteClaimsInUse(uses);
  EXPECT_EQ(v.Rejects(Node("a"), kNoUse),
            "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
            "already in-use by another pod: claim solo is mounted by pod ml/writer-0 on c");

  api.reads = 0;
  auto disk = [](const std::string& kind, const json& spec) {
    return json{{"name", "d-" + kind}, {kind, spec}};
  };
  const json pd_ro = disk("gcePersistentDisk", {{"pdName", "pd-1"}, {"readOnly", true}});
  const json pd_rw = disk("gcePersistentDisk", {{"pdName", "pd-1"}});
  const json ebs_ro = disk("awsElasticBlockStore", {{"volumeID", "vol-1"}, {"readOnly", true}});
  const json rbd_a = disk("rbd", {{"monitors", {"m1", "m2"}}, {"image", "img"}});
  const json rbd_b = disk("rbd", {{"monitors", {"m2"}}, {"pool", "rbd"}, {"image", "img"}});
  const json rbd_c = disk("rbd", {{"monitors", {"m3"}}, {"image", "img"}});
  auto on = [&](const json& mine, const json& theirs) {
    NodeUse use;
    use.disks = PodInlineDisks(Pod({theirs}));
    return PodVolumes::Read(Pod({mine}), api.Getter()).Rejects(Node("a"), use);
  };
  EXPECT_EQ(on(pd_ro, pd_ro), "");
  EXPECT_EQ(on(pd_ro, pd_rw),
            "node(s) had no available disk: gcePersistentDisk pd-1 is mounted by a pod on this "
            "node");
  EXPECT_NE(on(ebs_ro, ebs_ro), "");
  EXPECT_NE(on(rbd_a, rbd_b), "");
  EXPECT_EQ(on(rbd_a, rbd_c), "");
  EXPECT_EQ(api.reads, 0) << "inline disks read nothing";
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
          {{"name", "e"}, {"ephemeral", {{"volumeClaimTemplate", json::object()}}}},
          {{"name", "g"}, {"gcePersistentDisk", {{"pdName", "pd"}, {"readOnly", true}}}},
          {{"name", "r"},
           {"rbd", {{"monitors", {"m1", "m2"}}, {"image", "i"}, {"readOnly", false}}}}}}}}};
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
  pv["spec"]["csi"] = {{"driver", "csi.example"}, {"volumeHandle", "h"}};
  // The claim of the ephemeral volume waits for its first consumer: the
  // volumes of its class, the class, its CSI driver and capacities are read.
  const json waiting = {{"metadata",
                         {{"name", "p-e"},
                          {"uid", "c"},
                          {"annotations", {{"volume.kubernetes.io/selected-node", "a"}}},
                          {"ownerReferences", {{{"uid", "u"}, {"controller", true}}}}}},
                        {"spec",
                         {{"storageClassName", "w"},
                          {"accessModes", {"ReadWriteOncePod"}},
                          {"volumeMode", "Block"},
                          {"selector", {{"matchLabels", {{"disk", "nvme"}}}}},
                          {"resources", {{"requests", {{"storage", "10Gi"}}}}}}}};
  json free_pv = {{"metadata", {{"name", "f"}, {"labels", {{"disk", "nvme"}}}}},
                  {"spec",
                   {{"storageClassName", "w"},
                    {"capacity", {{"storage", "20Gi"}}},
                    {"accessModes", {"ReadWriteOncePod"}},
                    {"volumeMode", "Block"},
                    {"claimRef", {{"name", "p-e"}, {"namespace", "ml"}, {"uid", "c"}}}}},
                  {"status", {{"phase", "Available"}}}};
  free_pv["spec"]["nodeAffinity"] = pv["spec"]["nodeAffinity"];
  const json cls = {{"metadata", {{"name", "w"}}},
                    {"provisioner", "csi.example"},
                    {"volumeBindingMode", "WaitForFirstConsumer"},
                    {"allowedTopologies",
                     {{{"matchLabelExpressions", {{{"key", "rack"}, {"values", {"r1", "r2"}}}}}}}}};
  const json driver = {{"metadata", {{"name", "csi.example"}}},
                       {"spec", {{"storageCapacity", true}}}};
  const json capacity = {{"metadata", {{"name", "cap"}, {"namespace", "csi"}}},
                         {"storageClassName", "w"},
                         {"capacity", "1Ti"},
                         {"maximumVolumeSize", "100Gi"},
                         {"nodeTopology", {{"matchLabels", {{"rack", "r1"}}}}}};
  const std::vector<json> kinds = {json(),
                                   json(7),
                                   json(-1.5),
                                   json(true),
                                   json("x"),
                                   json::array({1, "y"}),
                                   json::object({{"z", nullptr}})};
  const NamespaceLabels namespaces = {{"ml", {{"team", "x"}}}};

  // docs: pod, node, claim, volume, waiting claim, free volume, class,
  // driver, capacity, CSINode, VolumeAttachment.
  auto run = [&](const std::vector<json>& d) {
    const json& p = d[0];
    NodeFacts facts = NodeFactsFromJson(d[1]);
    std::map<std::string, NodeFacts> all = {{facts.name, facts}};
    std::map<std::string, NodeUse> use;
    NodeUse& u = use[facts.name];
    u.pods = 1;
    u.requested = PodRequests(p);
    u.host_ports = PodHostPorts(p);
    u.pod_labels = {PodLabelsFromJson(p)};
    for (const std::string& c : PodClaimKeys(p)) u.claims[c] = "ml/other";
    u.disks = PodInlineDisks(p);
    std::string out = SchedulerRejects(p, facts, &u);
    out += TopologySpread(p, all, use).Rejects(facts);
    out += InterPodAffinity(p, all, use, &namespaces).Rejects(facts);
    out += InterPodAffinity(p, all, use, nullptr).Rejects(facts);
    PodVolumes v = PodVolumes::Read(
        p,
        [&](const std::string& kind, const std::string&,
            const std::string& name) -> StatusOr<json> {
          if (kind == "persistentvolumeclaims") return name == "d" ? d[2] : d[4];
          if (kind == "persistentvolumes") return d[3];
          if (kind == "csidrivers") return d[7];
          return d[6];
        },
        [&](const std::string& kind) -> StatusOr<std::vector<json>> {
          if (kind == "persistentvolumes") return std::vector<json>{d[3], d[5]};
          return std::vector<json>{d[8], d[8]};
        });
    v.NoteClaimsInUse(use);
    u.volume_claims = PodVolumeClaimKeys(p);
    v.ReadVolumeLimits(
        use,
        [&](const std::string&, const std::string&, const std::string&) -> StatusOr<json> {
          return d[6];
        },
        [&](const std::string& kind) -> StatusOr<std::vector<json>> {
          if (kind == "persistentvolumes") return std::vector<json>{d[3], d[5]};
          if (kind == "persistentvolumeclaims") return std::vector<json>{d[2], d[4]};
          if (kind == "csinodes") return std::vector<json>{d[9]};
          return std::vector<json>{d[10]};
        });
    out += v.Rejects(facts, u);
    return out;
  };
  const json csi_node = {
      {"metadata", {{"name", "a"}}},
      {"spec", {{"drivers", {{{"name", "csi.example"}, {"allocatable", {{"count", 1}}}}}}}}};
  const json attachment = {{"spec",
                            {{"nodeName", "a"},
                             {"attacher", "csi.example"},
                             {"source", {{"persistentVolumeName", "f"}}}}}};
  const std::vector<json> base = {pod, node,   pvc,      pv,       waiting,   free_pv,
                                  cls, driver, capacity, csi_node, attachment};
  // Unmutated, the documents reach the deepest check (the node's CSI
  // attach limit, full with the attachment): the mutations below start
  // from paths that are walked, not from an early return.
  const std::string unmutated = run(base);
  for (const char* reached : {"host port TCP 1.2.3.4:80", "topology spread: rack=r1",
                              "pod affinity: no pod matching", "rbd rbd/i is mounted"}) {
    EXPECT_NE(unmutated.find(reached), std::string::npos) << reached << " in " << unmutated;
  }
  int runs = 0;
  int changed = 0;  // mutations that change the answer: they reach the checks
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<std::string> pointers;
    Pointers(base[i], "", pointers);
    for (const std::string& ptr : pointers) {
      for (const json& k : kinds) {
        std::vector<json> docs = base;
        if (ptr.empty()) {
          docs[i] = k;
        } else {
          docs[i][json::json_pointer(ptr)] = k;
        }
        SCOPED_TRACE(std::to_string(i) + ptr + " = " + k.dump());
        std::string got;
        EXPECT_NO_THROW(got = run(docs));
        changed += got != unmutated;
        // The same with the bound claim's binding undone: its own class is
        // the waiting one's.
        if (i != 2) {
          docs[2]["metadata"].erase("annotations");
          docs[2]["spec"]["storageClassName"] = "w";
          EXPECT_NO_THROW(run(docs));
        }
        ++runs;
      }
    }
  }
  EXPECT_GT(runs, 1000);
  EXPECT_GT(changed, runs / 10) << "the mutations hardly reach the checks";
  std::printf("%d mutated documents judged, %d answered otherwise\n", runs, changed);
}

}  // namespace
}  // namespace accelpool::ctl
