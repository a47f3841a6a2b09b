#include "extender/convert.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "api/host_request.h"
#include "api/inventory_codec.h"
#include "api/resources.h"
#include "extender/wire.h"

namespace accelpool::extender {
namespace {

// The value at `path` when every step is an object member; nullptr otherwise.
const nlohmann::json* ValueAt(const nlohmann::json& obj, std::initializer_list<const char*> path) {
  const nlohmann::json* cur = &obj;
  for (const char* key : path) {
    if (!cur->is_object()) {
      return nullptr;
    }
    auto it = cur->find(key);
    if (it == cur->end()) {
      return nullptr;
    }
    cur = &*it;
  }
  return cur;
}

std::string StringAt(const nlohmann::json& obj, std::initializer_list<const char*> path) {
  const nlohmann::json* v = ValueAt(obj, path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

// True when spec.affinity holds a non-empty preferred term of node affinity,
// pod affinity or pod anti-affinity (the preferences kube-scheduler scores).
bool HasSoftPreferences(const nlohmann::json& pod) {
  for (const char* kind : {"nodeAffinity", "podAffinity", "podAntiAffinity"}) {
    const nlohmann::json* preferred =
        ValueAt(pod, {"spec", "affinity", kind, "preferredDuringSchedulingIgnoredDuringExecution"});
    if (preferred != nullptr && preferred->is_array() && !preferred->empty()) {
      return true;
    }
  }
  return false;
}

bool HasPreferNoScheduleTaint(const nlohmann::json& node) {
  const nlohmann::json* taints = ValueAt(node, {"spec", "taints"});
  if (taints == nullptr || !taints->is_array()) {
    return false;
  }
  for (const nlohmann::json& t : *taints) {
    if (t.is_object() && StringAt(t, {"effect"}) == "PreferNoSchedule") {
      return true;
    }
  }
  return false;
}

// Marks the devices the cordon annotation names; reports the entries that
// name none.
void ApplyCordon(const std::string& text, NodeEntry& e) {
  std::map<std::string, core::Device*> by_id;
  for (core::NodeInventory& inv : e.inventories.value()) {
    for (core::Device& d : inv.devices) {
      by_id.emplace(d.id, &d);
    }
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    size_t b = pos;
    size_t f = end;
    while (b < f && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (f > b && std::isspace(static_cast<unsigned char>(text[f - 1]))) --f;
    if (f > b) {
      const std::string id = text.substr(b, f - b);
      auto it = by_id.find(id);
      if (it == by_id.end()) {
        if (std::find(e.cordon_unknown.begin(), e.cordon_unknown.end(), id) ==
            e.cordon_unknown.end()) {
          e.cordon_unknown.push_back(id);
        }
      } else if (!it->second->cordoned) {
        it->second->cordoned = true;
        e.cordoned.push_back(id);
      }
    }
    pos = end + 1;
  }
}

}  // namespace

StatusOr<PodInfo> PodInfoFromJson(const nlohmann::json& pod) {
  if (!pod.is_object()) {
    return InvalidArgumentError("the pod must be a v1.Pod object");
  }
  StatusOr<api::PodDeviceRequest> req = api::ParsePodRequest(pod);
  if (!req.ok()) {
    return req.status();
  }
  PodInfo info = MakePodInfo(PodRef{req->uid, req->ns, req->name, req->group},
                             std::move(req->request));
  for (const api::RequestOrigin& o : req->origins) {
    info.resources.push_back(o.resource);
  }
  info.policy = req->policy;
  info.node_policy = req->node_policy;
  info.policy_devices_only = req->policy_devices_only;
  info.soft_preferences = HasSoftPreferences(pod);
  info.nominated_node = StringAt(pod, {"status", "nominatedNodeName"});
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    if (auto p = spec->find("priority"); p != spec->end() && p->is_number_integer()) {
      const int64_t v = p->get<int64_t>();
      if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
        info.priority = static_cast<int32_t>(v);
      }
    }
  }
  return info;
}

// Reads metadata.name and what NodeInputs covers, nothing else.
StatusOr<NodeEntry> NodeEntryFromJson(const nlohmann::json& node) {
  NodeEntry e;
  e.name = StringAt(node, {"metadata", "name"});
  if (e.name.empty()) {
    return InvalidArgumentError("node object without metadata.name");
  }
  e.domains.super_node = StringAt(node, {"metadata", "labels", kSuperNodeLabel});
  if (e.domains.super_node.empty()) {
    e.domains.super_node = StringAt(node, {"metadata", "labels", kNvidiaCliqueLabel});
  }
  e.domains.rack = StringAt(node, {"metadata", "labels", kRackLabel});
  e.domains.block = StringAt(node, {"metadata", "labels", kBlockLabel});
  e.domains.prefer_no_schedule = HasPreferNoScheduleTaint(node);
  StatusOr<core::HostResources> allocatable = api::ParseNodeAllocatable(node);
  if (allocatable.ok()) {
    e.allocatable = *allocatable;
  } else {
    e.allocatable_error = allocatable.status().message();
  }
  const std::string text = StringAt(node, {"metadata", "annotations", api::kInventoryAnnotation});
  if (text.empty()) {
    return e;
  }
  e.has_inventory = true;
  StatusOr<api::InventoryDocument> doc = api::ParseInventory(text, e.name);
  if (!doc.ok()) {
    e.inventories = doc.status().WithPrefix(std::string("annotation ") + api::kInventoryAnnotation);
    return e;
  }
  e.generation = doc->generation;
  for (const core::NodeInventory& inv : doc->inventories) {
    const core::Topology& t = inv.topology;
    if (!t.super_node.empty()) e.domains.super_node = t.super_node;
    if (!t.rack.empty()) e.domains.rack = t.rack;
    if (!t.block.empty()) e.domains.block = t.block;
  }
  e.inventories = std::move(doc->inventories);
  ApplyCordon(StringAt(node, {"metadata", "annotations", kCordonedDevicesAnnotation}), e);
  return e;
}

std::string NodeInputs(const nlohmann::json& node) {
  // Whole sections, not the fields read from them, so that a field read
  // later cannot be missed here.
  nlohmann::json in = nlohmann::json::array();
  for (const auto& path : {std::initializer_list<const char*>{"metadata", "labels"},
                           std::initializer_list<const char*>{"metadata", "annotations"},
                           std::initializer_list<const char*>{"spec", "taints"},
                           std::initializer_list<const char*>{"status", "allocatable"}}) {
    const nlohmann::json* v = ValueAt(node, path);
    in.push_back(v == nullptr ? nlohmann::json() : *v);
  }
  return in.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StatusOr<api::Assignment> ToApiAssignment(const PodAssignment& a, const NodeSnapshot& snap,
                                          const PodInfo& pod) {
  api::Assignment out;
  out.node = a.node;
  out.policy = a.policy;
  for (const AssignmentPart& planned : a.parts) {
    const InventoryState* st = snap.Find(planned.vendor);
    if (st == nullptr) {
      return FailedPreconditionError("node " + snap.name + " no longer has " +
                                     std::string(core::VendorName(planned.vendor)) + " devices");
    }
    // The devices the part was planned on, wherever the node lists them now.
    StatusOr<AssignmentPart> reindexed = ReindexPart(planned, *st->inventory);
    if (!reindexed.ok()) {
      return reindexed.status();
    }
    const AssignmentPart& part = *reindexed;
    auto resource_of = [&](const std::string& container) -> std::string {
      for (size_t i = 0; i < pod.request.containers.size(); ++i) {
        const core::DeviceRequest& r = pod.request.containers[i];
        if (r.container == container && r.vendor == part.vendor && i < pod.resources.size() &&
            !pod.resources[i].empty()) {
          return pod.resources[i];
        }
      }
      return std::string(api::DefaultCountResource(part.vendor));
    };
    auto slot_of = [&](int32_t device, const std::string& container) -> int32_t {
      for (size_t c = 0; c < part.placement.containers.size(); ++c) {
        const auto& cp = part.placement.containers[c];
        if (cp.container != container) continue;
        for (size_t g = 0; g < cp.grants.size(); ++g) {
          if (cp.grants[g].device == device && c < part.slots.size() &&
              g < part.slots[c].size()) {
            return part.slots[c][g];
          }
        }
      }
      return 0;
    };
    ACCELPOOL_RETURN_IF_ERROR(
        api::AppendPlacement(out, part.placement, *st->inventory, resource_of, slot_of));
  }
  return out;
}

StatusOr<PodAssignment> FromApiAssignment(const api::Assignment& a) {
  PodAssignment out;
  out.node = a.node;
  out.policy = a.policy;
  std::map<core::Vendor, size_t> part_of;
  for (const api::AssignedContainer& c : a.containers) {
    if (c.vendor == core::Vendor::kUnknown) {
      return InvalidArgumentError("assignment container " + c.name + " has no known vendor");
    }
    auto [it, added] = part_of.emplace(c.vendor, out.parts.size());
    if (added) {
      out.parts.push_back(AssignmentPart{c.vendor, {}, {}, {}});
    }
    AssignmentPart& part = out.parts[it->second];
    core::ContainerPlacement cp{c.name, c.kind, {}};
    std::vector<int32_t> slots;
    for (const api::AssignedDevice& d : c.devices) {
      StatusOr<std::pair<std::string, int32_t>> slot = api::ParseSlotId(d.slot);
      if (!slot.ok()) {
        return slot.status().WithPrefix("assignment container " + c.name);
      }
      auto [known, fresh] = part.device_ids.emplace(d.index, d.id);
      if (!fresh && known->second != d.id) {
        return InvalidArgumentError("assignment container " + c.name + ": device index " +
                                    std::to_string(d.index) + " names both " + known->second +
                                    " and " + d.id);
      }
      cp.grants.push_back(core::Grant{d.index, d.memory_mib, d.compute, d.exclusive});
      slots.push_back(slot->second);
    }
    part.placement.containers.push_back(std::move(cp));
    part.slots.push_back(std::move(slots));
  }
  return out;
}

std::vector<std::string> AssignmentDeviceIds(std::string_view text) {
  std::vector<std::string> ids;
  const nlohmann::json doc =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return ids;
  const auto containers = doc.find("containers");
  if (containers == doc.end() || !containers->is_array()) return ids;
  for (const nlohmann::json& c : *containers) {
    if (!c.is_object()) continue;
    const auto devices = c.find("devices");
    if (devices == c.end() || !devices->is_array()) continue;
    for (const nlohmann::json& d : *devices) {
      if (!d.is_object()) continue;
      if (auto id = d.find("id"); id != d.end() && id->is_string()) {
        const std::string& s = id->get_ref<const std::string&>();
        if (!s.empty()) ids.push_back(s);
      }
      if (auto slot = d.find("slot"); slot != d.end() && slot->is_string()) {
        const std::string& s = slot->get_ref<const std::string&>();
        if (const size_t at = s.rfind("::"); at != std::string::npos && at > 0) {
          ids.push_back(s.substr(0, at));
        }
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

ObservedPod ObservePodJson(const nlohmann::json& pod) {
  ObservedPod o;
  o.ref.uid = StringAt(pod, {"metadata", "uid"});
  o.ref.ns = StringAt(pod, {"metadata", "namespace"});
  o.ref.name = StringAt(pod, {"metadata", "name"});
  o.node_name = StringAt(pod, {"spec", "nodeName"});
  const std::string phase = StringAt(pod, {"status", "phase"});
  o.finished = phase == "Succeeded" || phase == "Failed";
  StatusOr<api::PodDeviceRequest> req = api::ParsePodRequest(pod);
  if (req.ok()) {
    o.ref.job = req->group;
  }
  const std::string text =
      StringAt(pod, {"metadata", "annotations", api::kAssignmentAnnotation});
  if (text.empty()) {
    return o;
  }
  StatusOr<api::Assignment> doc = api::ParseAssignment(text);
  if (!doc.ok()) {
    o.problem = doc.status().ToString();
    o.unreadable_ids = AssignmentDeviceIds(text);
    return o;
  }
  StatusOr<PodAssignment> a = FromApiAssignment(*doc);
  if (!a.ok()) {
    o.problem = a.status().ToString();
    o.unreadable_ids = AssignmentDeviceIds(text);
    return o;
  }
  o.assignment = std::move(a).value();
  return o;
}

}  // namespace accelpool::extender
