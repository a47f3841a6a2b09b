// kube-scheduler's volume filters, for `kubectl accelpool explain`: a pod
// whose claim is bound to a local volume on one node can only go there, and
// a pod whose claim does not exist goes nowhere, whatever the devices say.
//
// Judged, with kube-scheduler's rules:
//   VolumeBinding  each claim of the pod (spec.volumes[].persistentVolumeClaim,
//                  and `<pod>-<volume>` for a generic ephemeral volume): a
//                  missing or deleting claim, or an unbound one whose storage
//                  class binds at once (Immediate, or no class), rules out
//                  every node; a bound claim (spec.volumeName and the
//                  pv.kubernetes.io/bind-completed annotation) rules out the
//                  nodes its volume's spec.nodeAffinity does not match, and
//                  every node when the volume is missing.
//   VolumeZone     a bound volume's zone and region labels
//                  (topology.kubernetes.io/{zone,region} and their
//                  failure-domain.beta.kubernetes.io forms; "a__b" is a set):
//                  the node needs one of the values under the same key.
// Not judged: claims waiting for their first consumer (WaitForFirstConsumer:
// which volume or provisioner would serve them depends on the node),
// VolumeRestrictions (ReadWriteOncePod, inline disks) and NodeVolumeLimits
// (attach limits). The report says when claims were not judged.
//
// Thread-safety: plain values and pure functions.
#ifndef ACCELPOOL_CTL_VOLUME_FILTERS_H_
#define ACCELPOOL_CTL_VOLUME_FILTERS_H_

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "ctl/node_filters.h"

namespace accelpool::ctl {

// Reads one object: kind is "persistentvolumeclaims" (namespaced),
// "persistentvolumes" or "storageclasses"; kNotFound when there is none.
using ObjectGetter = std::function<StatusOr<nlohmann::json>(
    const std::string& kind, const std::string& ns, const std::string& name)>;

// What the pod's volumes allow, read once for a walk over many nodes.
class PodVolumes {
 public:
  // Reads the pod's claims and what they point at. An error other than
  // kNotFound (a refusal: kPermissionDenied) leaves the claims unjudged and
  // says why in unjudged_reason().
  static PodVolumes Read(const nlohmann::json& pod, const ObjectGetter& get);

  // "" when the node passes, else kube-scheduler's reason in words.
  std::string Rejects(const NodeFacts& node) const;
  // Claims whose node is not judged here (waiting for their first consumer).
  int waiting_claims() const { return waiting_; }
  // Why no claim was judged ("" when they were).
  const std::string& unjudged_reason() const { return unjudged_; }

 private:
  struct Bound {
    std::string claim, volume;
    nlohmann::json node_affinity;                    // spec.nodeAffinity.required
    std::map<std::string, std::string> zone_labels;  // zone and region labels
  };
  std::string every_node_;  // a reason that rules out every node
  std::vector<Bound> bound_;
  int waiting_ = 0;
  std::string unjudged_;
};

}  // namespace accelpool::ctl

#endif  // ACCELPOOL_CTL_VOLUME_FILTERS_H_
