#include "api/assignment_codec.h"

#include <algorithm>
#include <charconv>

#include "api/json_check.h"

namespace accelpool::api {

using nlohmann::json;
using namespace internal;

namespace {

constexpr int kVersion = 1;

Status CheckVersion(const json& doc, const char* what) {
  ACCELPOOL_RETURN_IF_ERROR(RequireObject(doc, ""));
  int64_t version = 0;
  ACCELPOOL_RETURN_IF_ERROR(ReadInt(doc, "version", "", true, 0, kMaxInt32, version));
  if (version != kVersion) {
    return UnimplementedError(std::string(what) + " version " + std::to_string(version) +
                              " is not supported (want 1); upgrade this component");
  }
  return Status::Ok();
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool Alnum(char c) { return LowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// For messages: the value quoted and cut, with control bytes escaped by the
// JSON dump so a hostile name cannot forge log lines.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string cut(s.substr(0, kMax));
  return Dump(json(cut)) + (s.size() > kMax ? "..." : "");
}

}  // namespace

Status CheckContainerName(std::string_view name) {
  constexpr size_t kMaxLabel = 63;
  bool ok = !name.empty() && name.size() <= kMaxLabel && LowerAlnum(name.front()) &&
            LowerAlnum(name.back());
  for (size_t i = 0; ok && i < name.size(); ++i) {
    ok = LowerAlnum(name[i]) || name[i] == '-';
  }
  if (ok) return Status::Ok();
  return InvalidArgumentError(Quote(name) +
                              " is not a Kubernetes container name (a DNS-1123 label: 1-63 "
                              "characters of a-z, 0-9 and '-', starting and ending with a "
                              "letter or digit)");
}

Status CheckPodUid(std::string_view uid) {
  constexpr size_t kMaxUid = 64;
  bool ok = !uid.empty() && uid.size() <= kMaxUid;
  for (size_t i = 0; ok && i < uid.size(); ++i) {
    ok = Alnum(uid[i]) || uid[i] == '-';
  }
  if (ok) return Status::Ok();
  return InvalidArgumentError("pod uid " + Quote(uid) +
                              " is not a Kubernetes uid (1-64 characters of A-Z, a-z, 0-9 and "
                              "'-')");
}

std::string_view ContainerKindName(core::ContainerKind k) {
  switch (k) {
    case core::ContainerKind::kRegular:
      return "regular";
    case core::ContainerKind::kInit:
      return "init";
    case core::ContainerKind::kSidecar:
      return "sidecar";
  }
  return "regular";
}

std::optional<core::ContainerKind> ParseContainerKind(std::string_view s) {
  if (s == "regular") return core::ContainerKind::kRegular;
  if (s == "init") return core::ContainerKind::kInit;
  if (s == "sidecar") return core::ContainerKind::kSidecar;
  return std::nullopt;
}

std::string SlotId(std::string_view device_id, int32_t slot) {
  return std::string(device_id) + "::" + std::to_string(slot);
}

StatusOr<std::pair<std::string, int32_t>> ParseSlotId(std::string_view slot_id) {
  const size_t sep = slot_id.rfind("::");
  if (sep == std::string_view::npos || sep == 0 || sep + 2 >= slot_id.size()) {
    return InvalidArgumentError("slot id \"" + std::string(slot_id) +
                                "\" is not <device-id>::<slot>");
  }
  const std::string_view num = slot_id.substr(sep + 2);
  int32_t slot = 0;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), slot);
  if (ec != std::errc() || end != num.data() + num.size() || slot < 0) {
    return InvalidArgumentError("slot id \"" + std::string(slot_id) +
                                "\": the slot after \"::\" must be a non-negative integer");
  }
  return std::make_pair(std::string(slot_id.substr(0, sep)), slot);
}

StatusOr<Assignment> AssignmentFromJson(const json& doc) {
  ACCELPOOL_RETURN_IF_ERROR(CheckVersion(doc, "assignment"));
  Assignment a;
  ACCELPOOL_RETURN_IF_ERROR(ReadString(doc, "node", "", true, a.node));
  ACCELPOOL_RETURN_IF_ERROR(ReadString(doc, "policy", "", false, a.policy));
  if (!doc.contains("containers"))
    return InvalidArgumentError("containers: required field is missing");
  const json& cs = doc.at("containers");
  if (!cs.is_array()) return InvalidArgumentError("containers: want an array, got " + Describe(cs));
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string path = Index("containers", i);
    const json& c = cs[i];
    ACCELPOOL_RETURN_IF_ERROR(RequireObject(c, path));
    AssignedContainer out;
    ACCELPOOL_RETURN_IF_ERROR(ReadString(c, "name", path, true, out.name));
    // The name becomes part of a host path in the device plugin
    // (<state-root>/<pod-uid>_<name>, mounted read-write): "../x" must never
    // get that far.
    if (Status st = CheckContainerName(out.name); !st.ok()) {
      return st.WithPrefix(Join(path, "name"));
    }
    std::string kind = "regular";
    ACCELPOOL_RETURN_IF_ERROR(ReadString(c, "kind", path, false, kind));
    auto k = ParseContainerKind(kind);
    if (!k) {
      return InvalidArgumentError(Join(path, "kind") + ": want regular|init|sidecar, got \"" +
                                  kind + "\"");
    }
    out.kind = *k;
    std::string vendor;
    ACCELPOOL_RETURN_IF_ERROR(ReadString(c, "vendor", path, true, vendor));
    auto v = core::ParseVendor(vendor);
    if (!v)
      return InvalidArgumentError(Join(path, "vendor") + ": unknown vendor \"" + vendor + "\"");
    out.vendor = *v;
    ACCELPOOL_RETURN_IF_ERROR(ReadString(c, "resource", path, false, out.resource));
    if (!c.contains("devices"))
      return InvalidArgumentError(Join(path, "devices") + ": required field is missing");
    const json& ds = c.at("devices");
    const std::string dpath = Join(path, "devices");
    if (!ds.is_array()) return InvalidArgumentError(dpath + ": want an array, got " + Describe(ds));
    for (size_t d = 0; d < ds.size(); ++d) {
      const std::string p = Index(dpath, d);
      ACCELPOOL_RETURN_IF_ERROR(RequireObject(ds[d], p));
      AssignedDevice dev;
      ACCELPOOL_RETURN_IF_ERROR(ReadString(ds[d], "id", p, true, dev.id));
      if (dev.id.empty()) return InvalidArgumentError(Join(p, "id") + ": must not be empty");
      ACCELPOOL_RETURN_IF_ERROR(ReadInt32(ds[d], "index", p, true, 0, kMaxInt32, dev.index));
      ACCELPOOL_RETURN_IF_ERROR(ReadString(ds[d], "slot", p, true, dev.slot));
      auto slot = ParseSlotId(dev.slot);
      if (!slot.ok()) return slot.status().WithPrefix(Join(p, "slot"));
      if (slot->first != dev.id) {
        return InvalidArgumentError(Join(p, "slot") + ": slot \"" + dev.slot +
                                    "\" does not belong to device \"" + dev.id + "\"");
      }
      // kubelet's ids are compared as text ("G::01" is no slot it knows)
      // and the extender reads the number: both must name the same slot.
      if (SlotId(slot->first, slot->second) != dev.slot) {
        return InvalidArgumentError(Join(p, "slot") + ": \"" + dev.slot +
                                    "\" is not written as \"" + SlotId(slot->first, slot->second) +
                                    "\"");
      }
      for (const AssignedDevice& earlier : out.devices) {
        if (earlier.id == dev.id) {
          return InvalidArgumentError(Join(p, "id") + ": device \"" + dev.id +
                                      "\" is given to this container twice");
        }
      }
      ACCELPOOL_RETURN_IF_ERROR(
          ReadInt(ds[d], "memory_mib", p, false, 0, kMaxMemoryMib, dev.memory_mib));
      ACCELPOOL_RETURN_IF_ERROR(
          ReadInt32(ds[d], "compute", p, false, 0, core::kComputeWhole, dev.compute));
      ACCELPOOL_RETURN_IF_ERROR(ReadBool(ds[d], "exclusive", p, false, dev.exclusive));
      out.devices.push_back(std::move(dev));
    }
    a.containers.push_back(std::move(out));
  }
  return a;
}

StatusOr<Assignment> ParseAssignment(std::string_view text) {
  auto j = ParseJson(text, std::string("annotation ") + kAssignmentAnnotation);
  if (!j.ok()) return j.status();
  auto a = AssignmentFromJson(*j);
  if (!a.ok()) return a.status().WithPrefix(kAssignmentAnnotation);
  return a;
}

json AssignmentToJson(const Assignment& a) {
  json cs = json::array();
  for (const AssignedContainer& c : a.containers) {
    json ds = json::array();
    for (const AssignedDevice& d : c.devices) {
      ds.push_back({{"id", d.id},
                    {"index", d.index},
                    {"slot", d.slot},
                    {"memory_mib", d.memory_mib},
                    {"compute", d.compute},
                    {"exclusive", d.exclusive}});
    }
    cs.push_back({{"name", c.name},
                  {"kind", ContainerKindName(c.kind)},
                  {"vendor", core::VendorName(c.vendor)},
                  {"resource", c.resource},
                  {"devices", ds}});
  }
  return {{"version", kVersion}, {"node", a.node}, {"policy", a.policy}, {"containers", cs}};
}

std::string SerializeAssignment(const Assignment& a) { return Dump(AssignmentToJson(a)); }

StatusOr<Allocation> ParseAllocation(std::string_view text) {
  auto j = ParseJson(text, std::string("annotation ") + kAllocationAnnotation);
  if (!j.ok()) return j.status();
  Status st = CheckVersion(*j, "allocation");
  if (!st.ok()) return st.WithPrefix(kAllocationAnnotation);
  Allocation a;
  std::string phase;
  st = ReadString(*j, "phase", "", true, phase);
  if (!st.ok()) return st.WithPrefix(kAllocationAnnotation);
  if (phase == "Allocated") {
    a.phase = AllocationPhase::kAllocated;
  } else if (phase == "Failed") {
    a.phase = AllocationPhase::kFailed;
  } else {
    return InvalidArgumentError(std::string(kAllocationAnnotation) +
                                ": phase: want Allocated|Failed, got \"" + phase + "\"");
  }
  std::vector<std::string> names;
  if (j->contains("containers")) {
    const json& cs = j->at("containers");
    if (!cs.is_array()) {
      return InvalidArgumentError(std::string(kAllocationAnnotation) +
                                  ": containers: want an array of strings, got " + Describe(cs));
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      if (!cs[i].is_string()) {
        return InvalidArgumentError(std::string(kAllocationAnnotation) + ": " +
                                    Index("containers", i) + ": want a string, got " +
                                    Describe(cs[i]));
      }
      names.push_back(cs[i].get<std::string>());
    }
  }
  if (j->contains("allocated")) {
    const json& as = j->at("allocated");
    if (!as.is_array()) {
      return InvalidArgumentError(std::string(kAllocationAnnotation) +
                                  ": allocated: want an array of objects, got " + Describe(as));
    }
    for (size_t i = 0; i < as.size(); ++i) {
      const std::string path = Index("allocated", i);
      AllocatedResource r;
      st = RequireObject(as[i], path);
      if (st.ok()) st = ReadString(as[i], "container", path, true, r.container);
      if (st.ok()) st = ReadString(as[i], "resource", path, false, r.resource);
      if (!st.ok()) return st.WithPrefix(kAllocationAnnotation);
      if (std::find(a.allocated.begin(), a.allocated.end(), r) == a.allocated.end()) {
        a.allocated.push_back(std::move(r));
      }
    }
  }
  // A name no entry names: an older plugin's record, for every resource.
  for (const std::string& name : names) {
    if (std::none_of(a.allocated.begin(), a.allocated.end(),
                     [&](const AllocatedResource& r) { return r.container == name; })) {
      a.allocated.push_back({name, ""});
    }
  }
  st = ReadString(*j, "message", "", false, a.message);
  if (!st.ok()) return st.WithPrefix(kAllocationAnnotation);
  return a;
}

Allocation MergeAllocation(const Allocation& on_pod, const Allocation& ours) {
  Allocation out = on_pod;
  for (const AllocatedResource& r : ours.allocated) {
    if (std::find(out.allocated.begin(), out.allocated.end(), r) == out.allocated.end()) {
      out.allocated.push_back(r);
    }
  }
  if (ours.phase == AllocationPhase::kFailed) {
    out.phase = AllocationPhase::kFailed;
    out.message = ours.message;
  }
  return out;
}

std::string SerializeAllocation(const Allocation& a) {
  // The names too, for readers that know only them (a plugin not upgraded
  // yet takes a listed name for every resource of the container).
  std::vector<std::string> names;
  json allocated = json::array();
  for (const AllocatedResource& r : a.allocated) {
    if (std::find(names.begin(), names.end(), r.container) == names.end()) {
      names.push_back(r.container);
    }
    json entry = {{"container", r.container}};
    if (!r.resource.empty()) entry["resource"] = r.resource;
    allocated.push_back(std::move(entry));
  }
  return Dump({{"version", kVersion},
               {"phase", a.phase == AllocationPhase::kAllocated ? "Allocated" : "Failed"},
               {"containers", names},
               {"allocated", allocated},
               {"message", a.message}});
}

StatusOr<core::Placement> ToPlacement(const Assignment& a, const core::NodeInventory& inv) {
  core::Placement p;
  for (const AssignedContainer& c : a.containers) {
    if (c.vendor != inv.vendor) continue;
    core::ContainerPlacement cp;
    cp.container = c.name;
    cp.kind = c.kind;
    for (const AssignedDevice& d : c.devices) {
      int32_t found = -1;
      for (const core::Device& dev : inv.devices) {
        if (dev.id == d.id) {
          found = dev.index;
          break;
        }
      }
      if (found < 0) {
        return FailedPreconditionError(
            "container \"" + c.name + "\": device " + d.id + " is not in the " +
            std::string(core::VendorName(inv.vendor)) + " inventory of node " + inv.node +
            "; the node's devices changed since the assignment");
      }
      if (found != d.index) {
        return FailedPreconditionError(
            "container \"" + c.name + "\": device " + d.id + " has index " + std::to_string(found) +
            " on node " + inv.node + " but the assignment says " + std::to_string(d.index) +
            "; the node's devices changed since the assignment");
      }
      cp.grants.push_back({found, d.memory_mib, d.compute, d.exclusive});
    }
    p.containers.push_back(std::move(cp));
  }
  return p;
}

Status AppendPlacement(Assignment& a, const core::Placement& placement,
                       const core::NodeInventory& inv,
                       const std::function<std::string(const std::string&)>& resource_of,
                       const std::function<int32_t(int32_t, const std::string&)>& slot_of) {
  std::vector<AssignedContainer> added;
  for (const core::ContainerPlacement& cp : placement.containers) {
    AssignedContainer c;
    c.name = cp.container;
    c.kind = cp.kind;
    c.vendor = inv.vendor;
    c.resource = resource_of ? resource_of(cp.container) : "";
    for (const core::Grant& g : cp.grants) {
      if (g.device < 0 || static_cast<size_t>(g.device) >= inv.devices.size()) {
        return InvalidArgumentError("container \"" + cp.container + "\": grant names device " +
                                    std::to_string(g.device) + " but node " + inv.node + " has " +
                                    std::to_string(inv.devices.size()) + " devices");
      }
      const core::Device& dev = inv.devices[static_cast<size_t>(g.device)];
      const int32_t slot = slot_of ? slot_of(g.device, cp.container) : 0;
      c.devices.push_back(
          {dev.id, dev.index, SlotId(dev.id, slot), g.memory_mib, g.compute, g.exclusive});
    }
    added.push_back(std::move(c));
  }
  for (auto& c : added) a.containers.push_back(std::move(c));
  return Status::Ok();
}

}  // namespace accelpool::api
