#include "ctl/volume_filters.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>

namespace accelpool::ctl {
namespace {

using nlohmann::json;

// The value at a JSON pointer of object keys ("/spec/csi/driver"), null when
// a step is missing or not an object. Walked by hand: parsing a json_pointer
// on every read was most of the cost of reading thousands of volumes.
const json kNull;

const json& At(const json& j, std::string_view pointer) {
  const json* at = &j;
  while (!pointer.empty() && pointer.front() == '/') {
    pointer.remove_prefix(1);
    const size_t end = pointer.find('/');
    const std::string_view key = pointer.substr(0, end);
    if (!at->is_object()) return kNull;
    auto it = at->find(key);
    if (it == at->end()) return kNull;
    at = &*it;
    pointer = end == std::string_view::npos ? std::string_view() : pointer.substr(end);
  }
  return *at;
}

// Moves the value at `pointer` out of `j` (null when there is none).
json Take(json& j, std::string_view pointer) {
  const json& at = At(j, pointer);
  if (&at == &kNull) return json();
  return std::move(const_cast<json&>(at));  // `at` lies inside `j`, which is not const
}

std::string Str(const json& j, const char* pointer) {
  const json& v = At(j, pointer);
  return v.is_string() ? v.get<std::string>() : "";
}

bool Bool(const json& j, const char* pointer) {
  const json& v = At(j, pointer);
  return v.is_boolean() && v.get<bool>();
}

std::vector<std::string> Strings(const json& arr) { return JsonStrings(arr); }

std::map<std::string, std::string> StringMap(const json& obj) {
  std::map<std::string, std::string> out;
  if (!obj.is_object()) return out;
  for (const auto& [k, v] : obj.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
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

// A storage quantity in thousandths of a byte; 0 when absent or unreadable
// (the apiserver validates them, so that only happens to hand-made input).
int64_t Bytes(const json& j, const char* pointer) {
  const json& v = At(j, pointer);
  if (!v.is_string()) return 0;
  return ParseMilliQuantity(v.get<std::string>()).value_or(0);
}

// The class of a claim or volume: the beta annotation wins over the field,
// as kube-scheduler reads it.
constexpr char kBetaClass[] = "volume.beta.kubernetes.io/storage-class";
std::string ClassOf(const json& obj) {
  if (HasAnnotation(obj, kBetaClass)) return Annotation(obj, kBetaClass);
  return Str(obj, "/spec/storageClassName");
}

std::string VolumeMode(const json& obj) {
  const std::string mode = Str(obj, "/spec/volumeMode");
  return mode.empty() ? "Filesystem" : mode;
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
    return o.is_object() && Bool(o, "/controller") && Str(o, "/uid") == pod_uid;
  });
}

// A StorageClass's allowedTopologies: no terms allow every node; else some
// term whose every expression finds the node's label among its values.
bool TopologyAllows(const json& terms, const NodeFacts& node) {
  if (!terms.is_array() || terms.empty()) return true;
  return std::any_of(terms.begin(), terms.end(), [&](const json& term) {
    const json& exprs = At(term, "/matchLabelExpressions");
    if (!exprs.is_array()) return true;
    return std::all_of(exprs.begin(), exprs.end(), [&](const json& e) {
      auto it = node.labels.find(Str(e, "/key"));
      const std::vector<std::string> values = Strings(At(e, "/values"));
      return it != node.labels.end() &&
             std::find(values.begin(), values.end(), it->second) != values.end();
    });
  });
}

std::string DescribeTopology(const json& terms) {
  std::string out;
  for (const json& term : terms) {
    std::string t;
    const json& exprs = At(term, "/matchLabelExpressions");
    if (!exprs.is_array()) continue;
    for (const json& e : exprs) {
      std::string values;
      for (const std::string& v : Strings(At(e, "/values")))
        values += (values.empty() ? "" : ",") + v;
      t += (t.empty() ? "" : " and ") + Str(e, "/key") + " in (" + values + ")";
    }
    out += (out.empty() ? "" : " or ") + t;
  }
  return out;
}

constexpr char kBindConflict[] = "node(s) didn't find available persistent volumes to bind";
constexpr char kHostnameKey[] = "kubernetes.io/hostname";

// The one host a volume's node affinity admits when it has the form local
// volumes carry (one term: kubernetes.io/hostname In [host]), else "".
std::string OnlyHost(const json& affinity) {
  const json& terms = At(affinity, "/nodeSelectorTerms");
  if (!terms.is_array() || terms.size() != 1 || !terms[0].is_object()) return "";
  const json& term = terms[0];
  const json& exprs = At(term, "/matchExpressions");
  if (term.size() != 1 || !exprs.is_array() || exprs.size() != 1) return "";
  const json& e = exprs[0];
  const json& values = At(e, "/values");
  if (Str(e, "/key") != kHostnameKey || Str(e, "/operator") != "In" || !values.is_array() ||
      values.size() != 1 || !values[0].is_string()) {
    return "";
  }
  return values[0].get<std::string>();
}
constexpr char kNoProvisioner[] = "kubernetes.io/no-provisioner";

std::string Gib(int64_t milli_bytes) {
  const double gib = static_cast<double>(milli_bytes) / 1000.0 / (1024.0 * 1024.0 * 1024.0);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g GiB", gib);
  return buf;
}

}  // namespace

std::vector<InlineDisk> PodInlineDisks(const json& pod) {
  std::vector<InlineDisk> out;
  const json& volumes = At(pod, "/spec/volumes");
  if (!volumes.is_array()) return out;
  for (const json& v : volumes) {
    if (!v.is_object()) continue;
    InlineDisk d;
    if (const json& g = At(v, "/gcePersistentDisk"); g.is_object()) {
      d = {"gcePersistentDisk", Str(g, "/pdName"), {}, Bool(g, "/readOnly")};
    } else if (const json& a = At(v, "/awsElasticBlockStore"); a.is_object()) {
      d = {"awsElasticBlockStore", Str(a, "/volumeID"), {}, Bool(a, "/readOnly")};
    } else if (const json& i = At(v, "/iscsi"); i.is_object()) {
      d = {"iscsi", Str(i, "/iqn"), {}, Bool(i, "/readOnly")};
    } else if (const json& r = At(v, "/rbd"); r.is_object()) {
      std::string pool = Str(r, "/pool");
      if (pool.empty()) pool = "rbd";  // the API's default
      d = {"rbd", pool + "/" + Str(r, "/image"), Strings(At(r, "/monitors")), Bool(r, "/readOnly")};
    } else {
      continue;
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

// "ns/claim" of each claim of the pod's volumes; `ephemeral` adds the
// generic ephemeral volumes' `<pod>-<volume>`.
std::vector<std::string> ClaimKeys(const json& pod, bool ephemeral) {
  std::vector<std::string> out;
  const json& volumes = At(pod, "/spec/volumes");
  if (!volumes.is_array()) return out;
  const std::string ns = Str(pod, "/metadata/namespace");
  for (const json& v : volumes) {
    if (!v.is_object()) continue;
    std::string claim = Str(v, "/persistentVolumeClaim/claimName");
    if (ephemeral && claim.empty() && At(v, "/ephemeral").is_object()) {
      claim = Str(pod, "/metadata/name") + "-" + Str(v, "/name");
    }
    if (!claim.empty()) out.push_back(ns + "/" + claim);
  }
  return out;
}

}  // namespace

std::vector<std::string> PodVolumeClaimKeys(const json& pod) { return ClaimKeys(pod, true); }

std::vector<std::string> PodClaimKeys(const json& pod) { return ClaimKeys(pod, false); }

PodVolumes PodVolumes::Read(const json& pod, const ObjectGetter& get, const ObjectLister& list) {
  PodVolumes out;
  out.ns_ = Str(pod, "/metadata/namespace");
  out.disks_ = PodInlineDisks(pod);
  const std::string pod_name = Str(pod, "/metadata/name");
  const json& volumes = At(pod, "/spec/volumes");
  if (!volumes.is_array()) return out;
  // What could not be read leaves every claim unjudged.
  auto unread = [&out](const std::string& what, const Status& st) {
    PodVolumes none;
    none.disks_ = std::move(out.disks_);
    none.unjudged_ = "reading " + what + ": " + st.ToString();
    if (st.code() == StatusCode::kPermissionDenied) {
      none.unjudged_ +=
          "; grant get on persistentvolumeclaims, persistentvolumes and storageclasses (the "
          "chart's viewer role does)";
    }
    return none;
  };
  // kube-scheduler's PreFilter stops at the first plugin that fails, and
  // each plugin at the first claim: VolumeRestrictions looks for the
  // persistentVolumeClaim volumes' claims, then VolumeBinding checks every
  // claim, then whether any binds at once and is not bound.
  std::string missing, broken, immediate;
  auto first = [](std::string& slot, std::string reason) {
    if (slot.empty()) slot = std::move(reason);
  };
  for (const json& v : volumes) {
    if (!v.is_object()) continue;
    std::string claim = Str(v, "/persistentVolumeClaim/claimName");
    const bool ephemeral = claim.empty() && At(v, "/ephemeral").is_object();
    if (ephemeral) claim = pod_name + "-" + Str(v, "/name");
    if (claim.empty()) continue;
    const std::string quoted = "persistentvolumeclaim \"" + claim + "\"";
    StatusOr<json> pvc = get("persistentvolumeclaims", out.ns_, claim);
    if (!pvc.ok() && pvc.status().code() == StatusCode::kNotFound) {
      if (ephemeral) {
        first(broken, "waiting for ephemeral volume controller to create the " + quoted);
      } else {
        first(missing, quoted + " not found");
      }
      continue;
    }
    if (!pvc.ok()) return unread(quoted, pvc.status());
    const std::string volume = Str(*pvc, "/spec/volumeName");
    const std::vector<std::string> modes = Strings(At(*pvc, "/spec/accessModes"));
    if (!ephemeral && std::find(modes.begin(), modes.end(), "ReadWriteOncePod") != modes.end()) {
      out.rwop_claims_.push_back(claim);
    }
    if (Str(*pvc, "/status/phase") == "Lost") {
      first(broken, quoted + " bound to non-existent persistentvolume \"" + volume + "\"");
      continue;
    }
    if (!At(*pvc, "/metadata/deletionTimestamp").is_null()) {
      first(broken, quoted + " is being deleted");
      continue;
    }
    if (ephemeral && !OwnedBy(*pvc, Str(pod, "/metadata/uid"))) {
      first(broken, quoted + " was not created for this pod (the pod is not its owner)");
      continue;
    }
    if (!volume.empty() && HasAnnotation(*pvc, "pv.kubernetes.io/bind-completed")) {
      StatusOr<json> pv = get("persistentvolumes", "", volume);
      if (!pv.ok() && pv.status().code() == StatusCode::kNotFound) {
        // Filter's reason, for every node.
        Bound b;
        b.claim = claim;
        b.volume = volume;
        b.missing = true;
        out.bound_.push_back(std::move(b));
        continue;
      }
      if (!pv.ok()) return unread("persistentvolume \"" + volume + "\"", pv.status());
      if (const std::string driver = Str(*pv, "/spec/csi/driver"); !driver.empty()) {
        out.csi_volumes_[driver + "/" + Str(*pv, "/spec/csi/volumeHandle")] = driver;
      }
      Bound b;
      b.claim = claim;
      b.volume = volume;
      b.node_affinity = At(*pv, "/spec/nodeAffinity/required");
      const std::map<std::string, std::string> labels = StringMap(At(*pv, "/metadata/labels"));
      for (const char* key : kZoneKeys) {
        if (auto it = labels.find(key); it != labels.end()) b.zone_labels[key] = it->second;
      }
      out.bound_.push_back(std::move(b));
      continue;
    }
    // Unbound: the storage class says whether it binds now or waits for the
    // pod's node. A claim naming its volume is bound by the volume
    // controller, not the scheduler.
    const std::string cls = ClassOf(*pvc);
    json sc;
    std::string why_now;
    if (cls.empty()) {
      why_now = "is not bound and has no storage class";
    } else {
      StatusOr<json> got = get("storageclasses", "", cls);
      if (!got.ok() && got.status().code() == StatusCode::kNotFound) {
        why_now = "is not bound and names storageclass \"" + cls + "\", which does not exist";
      } else if (!got.ok()) {
        return unread("storageclass \"" + cls + "\"", got.status());
      } else {
        sc = std::move(*got);
        if (Str(sc, "/volumeBindingMode") != "WaitForFirstConsumer") {
          why_now = "is not bound, and its storage class binds at once";
        } else if (!volume.empty()) {
          why_now = "names persistentvolume \"" + volume + "\", but the binding is not complete";
        }
      }
    }
    if (!why_now.empty()) {
      first(immediate,
            "pod has unbound immediate PersistentVolumeClaims (" + quoted + " " + why_now + ")");
      continue;
    }
    Waiting w;
    w.name = claim;
    w.ns = out.ns_;
    w.uid = Str(*pvc, "/metadata/uid");
    w.storage_class = cls;
    w.has_selected_node = HasAnnotation(*pvc, "volume.kubernetes.io/selected-node");
    w.selected_node = Annotation(*pvc, "volume.kubernetes.io/selected-node");
    w.request = Bytes(*pvc, "/spec/resources/requests/storage");
    w.selector = At(*pvc, "/spec/selector");
    w.access_modes = Strings(At(*pvc, "/spec/accessModes"));
    w.volume_mode = VolumeMode(*pvc);
    w.attributes_class = Str(*pvc, "/spec/volumeAttributesClassName");
    w.provisioner = Str(sc, "/provisioner");
    w.allowed_topologies = At(sc, "/allowedTopologies");
    // A volume still to come counts as one more of its provisioner's.
    if (!w.provisioner.empty()) {
      out.csi_volumes_[w.provisioner + "/~" + out.ns_ + "/" + claim] = w.provisioner;
    }
    out.waiting_.push_back(std::move(w));
  }
  out.every_node_ = !missing.empty() ? missing : !broken.empty() ? broken : immediate;
  if (!out.every_node_.empty() || out.waiting_.empty()) return out;

  // What could serve the waiting claims: the volumes of their classes, and
  // for drivers that track capacity, what each topology segment has left.
  auto waiting_unread = [&out](const std::string& what, const Status& st, const char* right) {
    out.waiting_unjudged_ = what + ": " + st.ToString();
    if (st.code() == StatusCode::kPermissionDenied) {
      out.waiting_unjudged_ += std::string("; grant ") + right + " (the chart's viewer role does)";
    }
  };
  if (!list) {
    out.waiting_unjudged_ = "the volumes that could serve them were not read";
    return out;
  }
  StatusOr<std::vector<json>> pvs = list("persistentvolumes");
  if (!pvs.ok()) {
    waiting_unread("listing persistentvolumes", pvs.status(), "list on persistentvolumes");
    return out;
  }
  std::set<std::string> classes;
  for (const Waiting& w : out.waiting_) classes.insert(w.storage_class);
  for (json& pv : *pvs) {
    const std::string cls = ClassOf(pv);
    if (classes.count(cls) == 0) continue;
    Candidate c;
    c.name = Str(pv, "/metadata/name");
    c.claim_ref = Take(pv, "/spec/claimRef");
    c.capacity = Bytes(pv, "/spec/capacity/storage");
    c.volume_mode = VolumeMode(pv);
    c.attributes_class = Str(pv, "/spec/volumeAttributesClassName");
    c.phase = Str(pv, "/status/phase");
    c.deleting = !At(pv, "/metadata/deletionTimestamp").is_null();
    c.labels = StringMap(At(pv, "/metadata/labels"));
    c.node_affinity = Take(pv, "/spec/nodeAffinity/required");
    c.access_modes = Strings(At(pv, "/spec/accessModes"));
    out.candidates_[cls].push_back(std::move(c));
  }
  // What each claim could take, found once rather than on every node.
  for (Waiting& w : out.waiting_) {
    if (w.has_selected_node) continue;
    auto it = out.candidates_.find(w.storage_class);
    if (it == out.candidates_.end()) continue;
    for (size_t i = 0; i < it->second.size(); ++i) {
      const Candidate& c = it->second[i];
      const bool has_ref = c.claim_ref.is_object();
      const bool ref_is_this =
          has_ref && Str(c.claim_ref, "/name") == w.name &&
          Str(c.claim_ref, "/namespace") == w.ns &&
          (Str(c.claim_ref, "/uid").empty() || Str(c.claim_ref, "/uid") == w.uid);
      if (has_ref && !ref_is_this) continue;
      if (c.capacity < w.request || c.volume_mode != w.volume_mode ||
          c.attributes_class != w.attributes_class || c.deleting) {
        continue;
      }
      if (ref_is_this) {
        // The first one reserved for the claim is the only one it takes.
        w.reserved = static_cast<int>(i);
        w.fitting.clear();
        break;
      }
      if (FitsUnclaimed(w, c)) w.fitting[OnlyHost(c.node_affinity)].push_back(static_cast<int>(i));
    }
  }
  std::map<std::string, std::optional<bool>> tracked;  // by provisioner
  std::optional<std::vector<json>> capacities;
  for (Waiting& w : out.waiting_) {
    if (w.provisioner.empty() || w.provisioner == kNoProvisioner || w.request == 0) continue;
    std::optional<bool>& t = tracked[w.provisioner];
    if (!t) {
      StatusOr<json> driver = get("csidrivers", "", w.provisioner);
      if (!driver.ok() && driver.status().code() != StatusCode::kNotFound) {
        waiting_unread("reading csidriver \"" + w.provisioner + "\"", driver.status(),
                       "get on csidrivers");
        return out;
      }
      t = driver.ok() && Bool(*driver, "/spec/storageCapacity");
    }
    if (!*t) continue;
    if (!capacities) {
      StatusOr<std::vector<json>> got = list("csistoragecapacities");
      if (!got.ok()) {
        waiting_unread("listing csistoragecapacities", got.status(),
                       "list on csistoragecapacities");
        return out;
      }
      capacities = std::move(*got);
    }
    w.capacity_tracked = true;
    for (const json& c : *capacities) {
      if (Str(c, "/storageClassName") != w.storage_class) continue;
      Capacity cap;
      const char* field = At(c, "/maximumVolumeSize").is_string() ? "/maximumVolumeSize"
                          : At(c, "/capacity").is_string()        ? "/capacity"
                                                                  : nullptr;
      if (field != nullptr) cap.limit = Bytes(c, field);
      cap.node_topology = At(c, "/nodeTopology");
      w.capacities.push_back(std::move(cap));
    }
  }
  return out;
}

void PodVolumes::NoteClaimsInUse(const std::map<std::string, NodeUse>& uses) {
  claims_noted_ = true;
  rwop_in_use_.clear();
  for (const std::string& claim : rwop_claims_) {
    const std::string key = ns_ + "/" + claim;
    for (const auto& [node, use] : uses) {
      auto it = use.claims.find(key);
      if (it == use.claims.end()) continue;
      rwop_in_use_ = "claim " + claim + " is mounted by pod " + it->second + " on " + node;
      return;
    }
  }
}

void PodVolumes::ReadVolumeLimits(const std::map<std::string, NodeUse>& uses,
                                  const ObjectGetter& get, const ObjectLister& list) {
  if (!unjudged_.empty() || !every_node_.empty() || csi_volumes_.empty() || !list) return;
  auto refused = [this](const std::string& what, const Status& st) {
    limits_.clear();
    attached_.clear();
    limits_unjudged_ = what + ": " + st.ToString();
    if (st.code() == StatusCode::kPermissionDenied) {
      limits_unjudged_ +=
          "; grant list on csinodes, persistentvolumeclaims, persistentvolumes and "
          "volumeattachments (the chart's viewer role does)";
    }
  };
  std::set<std::string> drivers;
  for (const auto& [volume, driver] : csi_volumes_) drivers.insert(driver);
  StatusOr<std::vector<json>> csi_nodes = list("csinodes");
  if (!csi_nodes.ok()) return refused("listing csinodes", csi_nodes.status());
  for (const json& n : *csi_nodes) {
    const json& entries = At(n, "/spec/drivers");
    if (!entries.is_array()) continue;
    for (const json& d : entries) {
      const json& count = At(d, "/allocatable/count");
      if (drivers.count(Str(d, "/name")) > 0 && count.is_number_integer()) {
        limits_[Str(n, "/metadata/name")][Str(d, "/name")] = count.get<int64_t>();
      }
    }
  }
  if (limits_.empty()) return;
  // What is attached to those nodes: the CSI volumes of their pods' claims
  // (a claim not bound yet as a volume to come from its class's
  // provisioner), then the VolumeAttachments.
  StatusOr<std::vector<json>> claims = list("persistentvolumeclaims");
  if (!claims.ok()) return refused("listing persistentvolumeclaims", claims.status());
  StatusOr<std::vector<json>> volumes = list("persistentvolumes");
  if (!volumes.ok()) return refused("listing persistentvolumes", volumes.status());
  std::map<std::string, const json*> claim_by_key;
  for (const json& c : *claims) {
    claim_by_key[Str(c, "/metadata/namespace") + "/" + Str(c, "/metadata/name")] = &c;
  }
  std::map<std::string, std::pair<std::string, std::string>> csi_by_volume;  // driver, handle
  std::set<std::string> volume_names;
  for (const json& v : *volumes) {
    volume_names.insert(Str(v, "/metadata/name"));
    const std::string driver = Str(v, "/spec/csi/driver");
    if (!driver.empty()) {
      csi_by_volume[Str(v, "/metadata/name")] = {driver, Str(v, "/spec/csi/volumeHandle")};
    }
  }
  std::map<std::string, std::string> provisioners;  // by class
  auto provisioner_of = [&](const std::string& cls) -> std::string {
    auto [it, added] = provisioners.emplace(cls, "");
    if (added && !cls.empty()) {
      StatusOr<json> sc = get("storageclasses", "", cls);
      if (sc.ok()) it->second = Str(*sc, "/provisioner");
    }
    return it->second;
  };
  for (const auto& [node, limits] : limits_) {
    std::map<std::string, std::string>& here = attached_[node];
    auto use = uses.find(node);
    if (use == uses.end()) continue;
    for (const std::string& key : use->second.volume_claims) {
      auto c = claim_by_key.find(key);
      if (c == claim_by_key.end()) continue;  // not counted, as kube-scheduler does
      const std::string volume = Str(*c->second, "/spec/volumeName");
      if (!volume.empty()) {
        if (auto v = csi_by_volume.find(volume); v != csi_by_volume.end()) {
          here[v->second.first + "/" + v->second.second] = v->second.first;
          continue;
        }
        if (volume_names.count(volume) > 0) continue;  // not a CSI volume
      }
      // Unbound, or its volume gone: one to come from its class's provisioner.
      const std::string p = provisioner_of(ClassOf(*c->second));
      if (!p.empty()) here[p + "/~" + key] = p;
    }
  }
  StatusOr<std::vector<json>> attachments = list("volumeattachments");
  if (!attachments.ok()) return refused("listing volumeattachments", attachments.status());
  for (const json& va : *attachments) {
    auto node = attached_.find(Str(va, "/spec/nodeName"));
    const std::string attacher = Str(va, "/spec/attacher");
    auto v = csi_by_volume.find(Str(va, "/spec/source/persistentVolumeName"));
    if (node == attached_.end() || attacher.empty() || v == csi_by_volume.end()) continue;
    node->second.emplace(attacher + "/" + v->second.second, attacher);
  }
}

std::string PodVolumes::LimitsReject(const NodeFacts& node) const {
  auto limits = limits_.find(node.name);
  if (limits == limits_.end()) return "";
  static const std::map<std::string, std::string> kNone;
  auto found = attached_.find(node.name);
  const std::map<std::string, std::string>& here = found == attached_.end() ? kNone : found->second;
  std::map<std::string, int64_t> attached, adds;
  for (const auto& [volume, driver] : here) ++attached[driver];
  for (const auto& [volume, driver] : csi_volumes_) {
    if (here.count(volume) == 0) ++adds[driver];
  }
  for (const auto& [driver, count] : adds) {
    auto limit = limits->second.find(driver);
    if (limit == limits->second.end() || attached[driver] + count <= limit->second) continue;
    return "node(s) exceed max volume count: " + driver + " has " +
           std::to_string(attached[driver]) + " of " + std::to_string(limit->second) +
           " volumes attached here, the pod adds " + std::to_string(count);
  }
  return "";
}

bool PodVolumes::FitsUnclaimed(const Waiting& w, const Candidate& c) {
  if (c.phase != "Available") return false;
  if (!w.selector.is_null() && !LabelSelectorMatches(w.selector, c.labels)) return false;
  return std::all_of(w.access_modes.begin(), w.access_modes.end(), [&](const std::string& m) {
    return std::find(c.access_modes.begin(), c.access_modes.end(), m) != c.access_modes.end();
  });
}

std::string PodVolumes::ProvisionRejects(const Waiting& w, const NodeFacts& node) const {
  const std::string head =
      std::string(kBindConflict) + ": claim " + w.name + " (class " + w.storage_class + ")";
  if (w.provisioner.empty() || w.provisioner == kNoProvisioner) {
    return head + " has no volume here that fits it, and its class provisions none";
  }
  if (!TopologyAllows(w.allowed_topologies, node)) {
    return head + " has no volume here that fits it, and its class provisions only where " +
           DescribeTopology(w.allowed_topologies);
  }
  if (w.capacity_tracked) {
    const bool room = std::any_of(w.capacities.begin(), w.capacities.end(), [&](const Capacity& c) {
      return c.limit >= 0 && c.limit >= w.request && !c.node_topology.is_null() &&
             LabelSelectorMatches(c.node_topology, node.labels);
    });
    if (!room) {
      return "node(s) did not have enough free storage: claim " + w.name + " asks " +
             Gib(w.request) + " of class " + w.storage_class +
             ", and no CSIStorageCapacity of that class that this node reaches has room for it";
    }
  }
  return "";
}

std::string PodVolumes::WaitingRejects(const NodeFacts& node) const {
  if (waiting_.empty() || !waiting_unjudged_.empty()) return "";
  std::vector<const Waiting*> to_match, to_provision;
  for (const Waiting& w : waiting_) {
    if (w.has_selected_node) {
      if (w.selected_node != node.name) {
        return std::string(kBindConflict) + ": claim " + w.name +
               " is being provisioned for node " + w.selected_node +
               " (volume.kubernetes.io/selected-node)";
      }
      to_provision.push_back(&w);
    } else {
      to_match.push_back(&w);
    }
  }
  // Smallest claims first, each to the smallest volume that fits it.
  std::stable_sort(to_match.begin(), to_match.end(),
                   [](const Waiting* a, const Waiting* b) { return a->request < b->request; });
  std::set<std::string> chosen;
  const auto host = node.labels.find(kHostnameKey);
  for (const Waiting* w : to_match) {
    auto it = candidates_.find(w->storage_class);
    const Candidate* best = nullptr;
    if (it != candidates_.end() && w->reserved >= 0) {
      // A volume made or reserved for this claim: that one or none.
      const Candidate& c = it->second[w->reserved];
      if (c.node_affinity.is_null() || NodeSelectorMatches(c.node_affinity, node)) best = &c;
    } else if (it != candidates_.end()) {
      // The smallest, the first listed of equals, as kube-scheduler picks.
      int best_index = -1;
      auto consider = [&](const std::vector<int>& indices, bool check_node) {
        for (int i : indices) {
          const Candidate& c = it->second[i];
          if (chosen.count(c.name) > 0) continue;
          if (best != nullptr &&
              (c.capacity > best->capacity || (c.capacity == best->capacity && i > best_index))) {
            continue;
          }
          if (check_node && !c.node_affinity.is_null() &&
              !NodeSelectorMatches(c.node_affinity, node)) {
            continue;
          }
          best = &c;
          best_index = i;
        }
      };
      if (auto any = w->fitting.find(""); any != w->fitting.end()) consider(any->second, true);
      if (host != node.labels.end() && !host->second.empty()) {
        if (auto on = w->fitting.find(host->second); on != w->fitting.end()) {
          consider(on->second, false);
        }
      }
    }
    if (best == nullptr) {
      to_provision.push_back(w);
      continue;
    }
    chosen.insert(best->name);
  }
  for (const Waiting* w : to_provision) {
    std::string no = ProvisionRejects(*w, node);
    if (!no.empty()) return no;
  }
  return "";
}

std::string PodVolumes::Rejects(const NodeFacts& node, const NodeUse& use) const {
  if (!unjudged_.empty()) return "";
  if (!every_node_.empty()) return every_node_;
  // VolumeRestrictions: inline disks, then ReadWriteOncePod claims.
  for (const InlineDisk& d : disks_) {
    for (const InlineDisk& e : use.disks) {
      if (d.kind != e.kind || d.id != e.id) continue;
      bool same = true;
      if (d.kind == "rbd") {
        same = std::any_of(d.monitors.begin(), d.monitors.end(), [&](const std::string& m) {
          return std::find(e.monitors.begin(), e.monitors.end(), m) != e.monitors.end();
        });
      }
      const bool both_read_only = d.read_only && e.read_only && d.kind != "awsElasticBlockStore";
      if (same && !both_read_only) {
        return "node(s) had no available disk: " + d.kind + " " + d.id +
               " is mounted by a pod on this node";
      }
    }
  }
  if (!rwop_in_use_.empty()) {
    return "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
           "already in-use by another pod: " +
           rwop_in_use_;
  }
  if (std::string no = LimitsReject(node); !no.empty()) return no;
  // VolumeBinding: bound claims, then the waiting ones.
  for (const Bound& b : bound_) {
    if (b.missing) {
      return "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s): "
             "persistentvolumeclaim \"" +
             b.claim + "\" is bound to persistentvolume \"" + b.volume + "\", which does not exist";
    }
    if (!b.node_affinity.is_null() && !NodeSelectorMatches(b.node_affinity, node)) {
      return "PersistentVolume's node affinity: " + b.volume + " (claim " + b.claim +
             ") does not admit this node";
    }
  }
  if (std::string no = WaitingRejects(node); !no.empty()) return no;
  // VolumeZone.
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
