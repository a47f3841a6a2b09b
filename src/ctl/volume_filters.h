// kube-scheduler's volume filters, for `kubectl accelpool explain`: a pod
// whose claim is bound to a local volume on one node can only go there, and
// a pod whose claim does not exist goes nowhere, whatever the devices say.
//
// Judged, with kube-scheduler's rules and in its order:
//   PreFilter (every node gets the same reason), the first that applies:
//     - a persistentVolumeClaim volume's claim is missing (VolumeRestrictions);
//     - a claim of the pod (persistentVolumeClaim volumes, and `<pod>-<volume>`
//       for a generic ephemeral volume) is missing, Lost, being deleted, or
//       an ephemeral one the pod does not own (VolumeBinding);
//     - a claim is unbound and its storage class binds at once (Immediate,
//       no class, a class that does not exist), or it names a volume the
//       binding of which is not complete (VolumeBinding: "pod has unbound
//       immediate PersistentVolumeClaims").
//   VolumeRestrictions  an inline GCE PD, AWS EBS, iSCSI or RBD disk that a
//                  pod on the node mounts too (unless both read-only, where
//                  that is allowed); a ReadWriteOncePod claim that a pod bound
//                  anywhere mounts already.
//   VolumeBinding  a bound claim (spec.volumeName and the
//                  pv.kubernetes.io/bind-completed annotation) rules out the
//                  nodes its volume's spec.nodeAffinity does not match, and
//                  every node when the volume is missing. A claim waiting for
//                  its first consumer (WaitForFirstConsumer) needs, on the
//                  node, an Available volume of its class that fits it (size,
//                  access modes, volume mode, attributes class, selector, the
//                  volume's node affinity; one volume per claim, smallest
//                  claims first; a volume pre-bound to the claim wins), or
//                  else a class that provisions (a provisioner other than
//                  kubernetes.io/no-provisioner) in the node's topology
//                  (allowedTopologies) with room: for a CSI driver that
//                  tracks capacity, a CSIStorageCapacity of the class that the
//                  node reaches and that holds the claim's request. A claim
//                  already given a node (volume.kubernetes.io/selected-node)
//                  is provisioned there only.
//   VolumeZone     a bound volume's zone and region labels
//                  (topology.kubernetes.io/{zone,region} and their
//                  failure-domain.beta.kubernetes.io forms; "a__b" is a set):
//                  the node needs one of the values under the same key.
//   NodeVolumeLimits  the CSI volumes of the pod's claims (a bound claim's
//                  volume by driver and handle; an unbound one as a new volume
//                  of its class's provisioner) that are not attached to the
//                  node already, added to those that are, within the node's
//                  CSINode limit per driver (ReadVolumeLimits).
// Not judged: in-tree volumes that kube-scheduler translates to CSI (for
// their topology and attach limits). What could not be read (a refusal) leaves claims
// unjudged, and the report says which right to grant.
//
// Thread-safety: plain values and pure functions.
#ifndef ACCELPOOL_CTL_VOLUME_FILTERS_H_
#define ACCELPOOL_CTL_VOLUME_FILTERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "ctl/node_filters.h"

namespace accelpool::ctl {

// Reads one object: kind is "persistentvolumeclaims" (namespaced),
// "persistentvolumes", "storageclasses" or "csidrivers"; kNotFound when there
// is none.
using ObjectGetter = std::function<StatusOr<nlohmann::json>(
    const std::string& kind, const std::string& ns, const std::string& name)>;
// Lists every object of a kind: "persistentvolumes", "csinodes",
// "volumeattachments", or (all namespaces) "persistentvolumeclaims" and
// "csistoragecapacities".
using ObjectLister = std::function<StatusOr<std::vector<nlohmann::json>>(const std::string& kind)>;

// The inline disks of a pod's volumes, and the claims its
// persistentVolumeClaim volumes name ("ns/claim").
std::vector<InlineDisk> PodInlineDisks(const nlohmann::json& pod);
std::vector<std::string> PodClaimKeys(const nlohmann::json& pod);
// Every claim of the pod's volumes ("ns/claim"), `<pod>-<volume>` for a
// generic ephemeral volume too.
std::vector<std::string> PodVolumeClaimKeys(const nlohmann::json& pod);

// What the pod's volumes allow, read once for a walk over many nodes.
class PodVolumes {
 public:
  // Reads the pod's claims and what they point at. An error other than
  // kNotFound (a refusal: kPermissionDenied) leaves the claims unjudged and
  // says why in unjudged_reason(); one while reading what could serve the
  // claims waiting for their first consumer leaves those unjudged
  // (waiting_unjudged_reason()). Without `list`, they are not judged.
  static PodVolumes Read(const nlohmann::json& pod, const ObjectGetter& get,
                         const ObjectLister& list = nullptr);

  // Notes the claims mounted by pods bound to nodes (their NodeUse), for the
  // ReadWriteOncePod rule. Call once, before Rejects.
  void NoteClaimsInUse(const std::map<std::string, NodeUse>& uses);
  bool claims_noted() const { return claims_noted_; }

  // NodeVolumeLimits: when the pod's claims use CSI drivers, reads the nodes'
  // attach limits for them (CSINode spec.drivers[].allocatable.count) and,
  // on nodes that have one, the CSI volumes attached there: those of the
  // claims the node's pods mount (`uses`) and the VolumeAttachments. Lists
  // nothing when no claim of the pod uses a CSI driver. A refusal leaves the
  // limits unjudged (limits_unjudged_reason()).
  void ReadVolumeLimits(const std::map<std::string, NodeUse>& uses, const ObjectGetter& get,
                        const ObjectLister& list);
  const std::string& limits_unjudged_reason() const { return limits_unjudged_; }

  // The reason every node gets (kube-scheduler's PreFilter), "" if none.
  const std::string& every_node() const { return every_node_; }
  // "" when the node passes, else kube-scheduler's reason in words. `use`
  // holds what the node's pods mount.
  std::string Rejects(const NodeFacts& node, const NodeUse& use) const;
  // Claims waiting for their first consumer.
  int waiting_claims() const { return static_cast<int>(waiting_.size()); }
  // Why no claim was judged ("" when they were).
  const std::string& unjudged_reason() const { return unjudged_; }
  // Why the waiting claims were not judged ("" when they were).
  const std::string& waiting_unjudged_reason() const { return waiting_unjudged_; }

 private:
  struct Bound {
    std::string claim, volume;
    bool missing = false;                            // the volume does not exist
    nlohmann::json node_affinity;                    // spec.nodeAffinity.required
    std::map<std::string, std::string> zone_labels;  // zone and region labels
  };
  // A volume that a waiting claim could be bound to.
  struct Candidate {
    std::string name;
    nlohmann::json claim_ref;  // spec.claimRef, null when none
    int64_t capacity = 0;      // thousandths of a byte
    std::string volume_mode, attributes_class, phase;
    bool deleting = false;
    std::map<std::string, std::string> labels;
    nlohmann::json node_affinity;  // spec.nodeAffinity.required
    std::vector<std::string> access_modes;
  };
  struct Capacity {
    int64_t limit = -1;            // thousandths of a byte; -1 when it says none
    nlohmann::json node_topology;  // a label selector over nodes
  };
  struct Waiting {
    std::string name, ns, uid, storage_class;
    bool has_selected_node = false;
    std::string selected_node;
    int64_t request = 0;      // thousandths of a byte
    nlohmann::json selector;  // spec.selector, null when none
    std::vector<std::string> access_modes;
    std::string volume_mode, attributes_class;
    // The class: who provisions, where, and how much room is left.
    std::string provisioner;
    nlohmann::json allowed_topologies;
    bool capacity_tracked = false;
    std::vector<Capacity> capacities;
    // The volumes of its class it could take, found once for every node:
    // the one reserved for it (an index into candidates_, -1 when none), or
    // else those Available that fit it, by the one host their node affinity
    // names (the local volume form; "" for any other affinity).
    int reserved = -1;
    std::map<std::string, std::vector<int>> fitting;
  };

  std::string WaitingRejects(const NodeFacts& node) const;
  std::string LimitsReject(const NodeFacts& node) const;
  // The checks an Available volume not reserved for the claim must pass too.
  static bool FitsUnclaimed(const Waiting& w, const Candidate& c);
  std::string ProvisionRejects(const Waiting& w, const NodeFacts& node) const;

  std::string every_node_;  // a reason that rules out every node
  std::vector<Bound> bound_;
  std::vector<Waiting> waiting_;
  std::map<std::string, std::vector<Candidate>> candidates_;  // by storage class
  std::string unjudged_, waiting_unjudged_;
  std::string ns_;
  std::vector<std::string> rwop_claims_;  // ReadWriteOncePod claims of the pod
  std::string rwop_in_use_;               // "claim x is mounted by pod ns/p" when one is
  bool claims_noted_ = false;
  std::vector<InlineDisk> disks_;
  // NodeVolumeLimits: the pod's CSI volumes ("driver/handle" -> driver), the
  // limits of nodes that have one for their drivers, and the CSI volumes
  // attached to those nodes.
  std::map<std::string, std::string> csi_volumes_;
  std::map<std::string, std::map<std::string, int64_t>> limits_;
  std::map<std::string, std::map<std::string, std::string>> attached_;
  std::string limits_unjudged_;
};

}  // namespace accelpool::ctl

#endif  // ACCELPOOL_CTL_VOLUME_FILTERS_H_
