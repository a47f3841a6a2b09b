#include "ctl/volume_filters.h"

#include <algorithm>

namespace accelpool::ctl {
namespace {

using nlohmann::json;

const json& At(const json& j, const char* pointer) {
  static const json kNull;
  const json::json_pointer p(pointer);
  return j.contains(p) ? j.at(p) : kNull;
}

std::string Str(const json& j, const char* pointer) {
  const json& v = At(j, pointer);
  return v.is_string() ? v.get<std::string>() : "";
}

bool HasAnnotation(const json& obj, const std::string& key) {
  const json& a = At(obj, "/metadata/annotations");
  return a.is_object() && a.contains(key);
}

std::string Annotation(const json& obj, const std::string& key) {
  const json& a = At(obj, "/metadata/annotations");
  if (!a.is_object()) return "";
  auto it = a.find(key);
  return it != a.end() && it->is_string() ? it->get<std::string>() : "";
}

// The volume labels VolumeZone reads, and the node label a beta key falls
// back to.
constexpr const char* kZoneKeys[] = {
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region"};

std::string GaKey(const std::string& key) {
  if (key == "failure-domain.beta.kubernetes.io/zone") return "topology.kubernetes.io/zone";
  if (key == "failure-domain.beta.kubernetes.io/region") return "topology.kubernetes.io/region";
  return key;
}

// "a__b" -> {a, b}, as kube-scheduler reads a volume's zone label.
std::vector<std::string> ZoneSet(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t sep = value.find("__", start);
    std::string part = value.substr(start, sep == std::string::npos ? sep : sep - start);
    if (!part.empty()) out.push_back(std::move(part));
    if (sep == std::string::npos) break;
    start = sep + 2;
  }
  return out;
}

// Whether the claim was created for this pod (its controller owner).
bool OwnedBy(const json& claim, const std::string& pod_uid) {
  const json& owners = At(claim, "/metadata/ownerReferences");
  if (!owners.is_array()) return false;
  return !pod_uid.empty() && std::any_of(owners.begin(), owners.end(), [&](const json& o) {
    return o.is_object() && o.contains("controller") && o["controller"].is_boolean() &&
           o["controller"].get<bool>() && Str(o, "/uid") == pod_uid;
  });
}

}  // namespace

PodVolumes PodVolumes::Read(const json& pod, const ObjectGetter& get) {
  PodVolumes out;
  const std::string ns = Str(pod, "/metadata/namespace");
  const std::string pod_name = Str(pod, "/metadata/name");
  const json& volumes = At(pod, "/spec/volumes");
  if (!volumes.is_array()) return out;
  // What could not be read leaves every claim unjudged.
  auto unread = [](const std::string& what, const Status& st) {
    PodVolumes none;
    none.unjudged_ = "reading " + what + ": " + st.ToString();
    if (st.code() == StatusCode::kPermissionDenied) {
      none.unjudged_ +=
          "; grant get on persistentvolumeclaims, persistentvolumes and storageclasses (the "
          "chart's viewer role does)";
    }
    return none;
  };
  auto first = [&out](std::string reason) {
    if (out.every_node_.empty()) out.every_node_ = std::move(reason);
  };
  for (const json& v : volumes) {
    if (!v.is_object()) continue;
    std::string claim = Str(v, "/persistentVolumeClaim/claimName");
    const bool ephemeral = claim.empty() && v.contains("ephemeral") && v["ephemeral"].is_object();
    if (ephemeral) claim = pod_name + "-" + Str(v, "/name");
    if (claim.empty()) continue;
    const std::string quoted = "persistentvolumeclaim \"" + claim + "\"";
    StatusOr<json> pvc = get("persistentvolumeclaims", ns, claim);
    if (!pvc.ok() && pvc.status().code() == StatusCode::kNotFound) {
      first(ephemeral ? "waiting for the ephemeral volume controller to create " + quoted
                      : quoted + " not found");
      continue;
    }
    if (!pvc.ok()) return unread(quoted, pvc.status());
    if (!At(*pvc, "/metadata/deletionTimestamp").is_null()) {
      first(quoted + " is being deleted");
      continue;
    }
    if (ephemeral && !OwnedBy(*pvc, Str(pod, "/metadata/uid"))) {
      first(quoted + " was not created for this pod (the pod is not its owner)");
      continue;
    }
    const std::string volume = Str(*pvc, "/spec/volumeName");
    if (!volume.empty() && HasAnnotation(*pvc, "pv.kubernetes.io/bind-completed")) {
      StatusOr<json> pv = get("persistentvolumes", "", volume);
      if (!pv.ok() && pv.status().code() == StatusCode::kNotFound) {
        first(quoted + " is bound to persistentvolume \"" + volume + "\", which does not exist");
        continue;
      }
      if (!pv.ok()) return unread("persistentvolume \"" + volume + "\"", pv.status());
      Bound b;
      b.claim = claim;
      b.volume = volume;
      b.node_affinity = At(*pv, "/spec/nodeAffinity/required");
      const json& labels = At(*pv, "/metadata/labels");
      for (const char* key : kZoneKeys) {
        if (labels.is_object() && labels.contains(key) && labels[key].is_string()) {
          b.zone_labels[key] = labels[key].get<std::string>();
        }
      }
      out.bound_.push_back(std::move(b));
      continue;
    }
    // Unbound: the storage class says whether it binds now or waits for the
    // pod's node.
    std::string cls = Str(*pvc, "/spec/storageClassName");
    if (cls.empty()) cls = Annotation(*pvc, "volume.beta.kubernetes.io/storage-class");
    bool waits = false;
    if (!cls.empty()) {
      StatusOr<json> sc = get("storageclasses", "", cls);
      if (!sc.ok() && sc.status().code() == StatusCode::kNotFound) {
        first(quoted + ": storageclass.storage.k8s.io \"" + cls + "\" not found");
        continue;
      }
      if (!sc.ok()) return unread("storageclass \"" + cls + "\"", sc.status());
      waits = Str(*sc, "/volumeBindingMode") == "WaitForFirstConsumer";
    }
    if (waits) {
      ++out.waiting_;
    } else {
      first("pod has unbound immediate PersistentVolumeClaims (" + quoted +
            " is not bound yet and its storage class binds at once)");
    }
  }
  return out;
}

std::string PodVolumes::Rejects(const NodeFacts& node) const {
  if (!unjudged_.empty()) return "";
  if (!every_node_.empty()) return every_node_;
  for (const Bound& b : bound_) {
    if (!b.node_affinity.is_null() && !NodeSelectorMatches(b.node_affinity, node)) {
      return "PersistentVolume's node affinity: " + b.volume + " (claim " + b.claim +
             ") does not admit this node";
    }
  }
  for (const Bound& b : bound_) {
    for (const auto& [key, value] : b.zone_labels) {
      auto it = node.labels.find(key);
      if (it == node.labels.end()) it = node.labels.find(GaKey(key));
      const std::vector<std::string> allowed = ZoneSet(value);
      if (it == node.labels.end() ||
          std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
        return "no available volume zone: persistentvolume " + b.volume + " is in " + key + "=" +
               value + ", the node " +
               (it == node.labels.end() ? "has no such label" : "is in " + it->second);
      }
    }
  }
  return "";
}

}  // namespace accelpool::ctl
