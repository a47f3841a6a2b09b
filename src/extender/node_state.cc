#include "extender/node_state.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "core/usage.h"

namespace accelpool::extender {

void NodeSnapshot::SetHostFree(bool track) {
  std::optional<core::HostResources> free;
  if (track && host_allocatable.has_value()) {
    free = core::HostResources{
        std::max<int64_t>(0, host_allocatable->cpu_milli - host_requested.cpu_milli),
        std::max<int64_t>(0, host_allocatable->memory_mib - host_requested.memory_mib)};
  }
  for (InventoryState& st : inventories) st.usage.host_free = free;
}

InventoryState InventoryState::Empty(std::shared_ptr<const core::NodeInventory> inv) {
  InventoryState s;
  s.usage = core::NodeUsage::Empty(*inv);
  s.slots.resize(inv->devices.size());
  for (size_t i = 0; i < inv->devices.size(); ++i) {
    s.slots[i].assign(static_cast<size_t>(std::max(1, inv->devices[i].max_shares)), false);
  }
  s.inventory = std::move(inv);
  return s;
}

const InventoryState* NodeSnapshot::Find(core::Vendor v) const {
  for (const InventoryState& s : inventories) {
    if (s.inventory->vendor == v) {
      return &s;
    }
  }
  return nullptr;
}

InventoryState* NodeSnapshot::Find(core::Vendor v) {
  for (InventoryState& s : inventories) {
    if (s.inventory->vendor == v) {
      return &s;
    }
  }
  return nullptr;
}

std::shared_ptr<const NodePlan> PlanMemo::Find(const std::string& shape) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [s, plan] : plans_) {
    if (s == shape) {
      return plan;
    }
  }
  return nullptr;
}

void PlanMemo::Put(const std::string& shape, std::shared_ptr<const NodePlan> plan) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [s, p] : plans_) {
    if (s == shape) {
      p = std::move(plan);
      return;
    }
  }
  if (plans_.size() >= kMaxShapes) {
    plans_.erase(plans_.begin());
  }
  plans_.emplace_back(shape, std::move(plan));
}

bool NodeSnapshot::Idle() const {
  // `pods` counts every assignment applied here, so it answers without
  // walking the devices (ranking asks this for thousands of nodes per call).
  return pods == 0;
}

int32_t NodeSnapshot::FreeWholeDevices() const {
  int32_t n = 0;
  for (const InventoryState& s : inventories) {
    for (size_t i = 0; i < s.usage.devices.size(); ++i) {
      const core::DeviceUsage& u = s.usage.devices[i];
      if (s.inventory->devices[i].Schedulable() && u.shares == 0 && !u.exclusive &&
          u.memory_mib == 0 && u.compute == 0) {
        ++n;
      }
    }
  }
  return n;
}

bool SameAssignment(const PodAssignment& a, const PodAssignment& b) {
  if (a.node != b.node || a.policy != b.policy || a.parts.size() != b.parts.size()) {
    return false;
  }
  for (size_t p = 0; p < a.parts.size(); ++p) {
    const AssignmentPart& pa = a.parts[p];
    const AssignmentPart& pb = b.parts[p];
    if (pa.vendor != pb.vendor || pa.slots != pb.slots ||
        pa.placement.containers.size() != pb.placement.containers.size()) {
      return false;
    }
    auto same_device = [&](int32_t da, int32_t db) {
      auto ia = pa.device_ids.find(da);
      auto ib = pb.device_ids.find(db);
      if (ia != pa.device_ids.end() && ib != pb.device_ids.end()) return ia->second == ib->second;
      return da == db;
    };
    for (size_t c = 0; c < pa.placement.containers.size(); ++c) {
      const core::ContainerPlacement& ca = pa.placement.containers[c];
      const core::ContainerPlacement& cb = pb.placement.containers[c];
      if (ca.container != cb.container || ca.kind != cb.kind ||
          ca.grants.size() != cb.grants.size()) {
        return false;
      }
      for (size_t g = 0; g < ca.grants.size(); ++g) {
        const core::Grant& ga = ca.grants[g];
        const core::Grant& gb = cb.grants[g];
        if (ga.memory_mib != gb.memory_mib || ga.compute != gb.compute ||
            ga.exclusive != gb.exclusive || !same_device(ga.device, gb.device)) {
          return false;
        }
      }
    }
  }
  return true;
}

StatusOr<AssignmentPart> ReindexPart(const AssignmentPart& part, const core::NodeInventory& inv) {
  AssignmentPart out = part;
  if (part.device_ids.empty()) {
    return out;
  }
  std::map<std::string_view, int32_t> index_of;
  for (size_t i = 0; i < inv.devices.size(); ++i) {
    index_of.emplace(inv.devices[i].id, static_cast<int32_t>(i));
  }
  out.device_ids.clear();
  for (core::ContainerPlacement& cp : out.placement.containers) {
    for (core::Grant& g : cp.grants) {
      auto id = part.device_ids.find(g.device);
      if (id == part.device_ids.end()) {
        continue;
      }
      auto now = index_of.find(id->second);
      if (now == index_of.end()) {
        return FailedPreconditionError("device " + id->second + " is no longer in node " +
                                       inv.node + "'s inventory");
      }
      g.device = now->second;
      out.device_ids[now->second] = id->second;
    }
  }
  return out;
}

void RecordDeviceIds(AssignmentPart& part, const core::NodeInventory& inv) {
  for (const core::ContainerPlacement& cp : part.placement.containers) {
    for (const core::Grant& g : cp.grants) {
      if (g.device >= 0 && static_cast<size_t>(g.device) < inv.devices.size()) {
        part.device_ids[g.device] = inv.devices[static_cast<size_t>(g.device)].id;
      }
    }
  }
}

std::string SlotId(const core::Device& d, int32_t slot) {
  return d.id + "::" + std::to_string(slot);
}

StatusOr<std::vector<std::vector<int32_t>>> AssignSlots(const InventoryState& state,
                                                        const core::Placement& placement) {
  const core::NodeInventory& inv = *state.inventory;
  std::vector<std::vector<int32_t>> out(placement.containers.size());
  // Per device: the slots this pod holds, and which of them a regular or
  // sidecar container already uses.
  std::map<int32_t, std::vector<int32_t>> held;
  std::map<int32_t, std::set<int32_t>> held_by_long_running;
  std::map<int32_t, std::set<int32_t>> taken_now;  // new slots taken by this pod
  auto take_new = [&](int32_t dev) -> int32_t {
    const std::vector<bool>& slots = state.slots[static_cast<size_t>(dev)];
    for (size_t k = 0; k < slots.size(); ++k) {
      if (!slots[k] && !taken_now[dev].count(static_cast<int32_t>(k))) {
        taken_now[dev].insert(static_cast<int32_t>(k));
        held[dev].push_back(static_cast<int32_t>(k));
        return static_cast<int32_t>(k);
      }
    }
    return -1;
  };
  for (size_t c = 0; c < placement.containers.size(); ++c) {
    const core::ContainerPlacement& cp = placement.containers[c];
    for (const core::Grant& g : cp.grants) {
      if (g.device < 0 || static_cast<size_t>(g.device) >= inv.devices.size()) {
        return InvalidArgumentError("placement names device index " + std::to_string(g.device) +
                                    " outside the inventory of node " + inv.node);
      }
      // Every container reuses a slot of an earlier plain init container,
      // as kubelet reuses their devices; never one a sidecar or a regular
      // container keeps (kubelet does not hand those out again: an init
      // container after a sidecar runs beside it).
      int32_t slot = -1;
      for (int32_t k : held[g.device]) {
        if (!held_by_long_running[g.device].count(k)) {
          slot = k;
          break;
        }
      }
      if (slot < 0) {
        slot = take_new(g.device);
      }
      if (slot < 0) {
        return FailedPreconditionError("device " + inv.devices[static_cast<size_t>(g.device)].id +
                                       " on node " + inv.node + " has no free slot");
      }
      if (cp.kind != core::ContainerKind::kInit) {
        held_by_long_running[g.device].insert(slot);
      }
      out[c].push_back(slot);
    }
  }
  return out;
}

namespace {

// The distinct (device, slot) pairs of a part.
std::set<std::pair<int32_t, int32_t>> PartSlots(const AssignmentPart& part) {
  std::set<std::pair<int32_t, int32_t>> out;
  for (size_t c = 0; c < part.placement.containers.size() && c < part.slots.size(); ++c) {
    const auto& grants = part.placement.containers[c].grants;
    for (size_t g = 0; g < grants.size() && g < part.slots[c].size(); ++g) {
      out.emplace(grants[g].device, part.slots[c][g]);
    }
  }
  return out;
}

}  // namespace

Status ApplyPart(const AssignmentPart& part, InventoryState* state) {
  const core::NodeInventory& inv = *state->inventory;
  const auto slots = PartSlots(part);
  for (const auto& [dev, slot] : slots) {
    if (dev < 0 || static_cast<size_t>(dev) >= state->slots.size() || slot < 0 ||
        static_cast<size_t>(slot) >= state->slots[static_cast<size_t>(dev)].size()) {
      return InvalidArgumentError("slot " + std::to_string(slot) + " of device index " +
                                  std::to_string(dev) + " does not exist on node " + inv.node);
    }
    if (state->slots[static_cast<size_t>(dev)][static_cast<size_t>(slot)]) {
      return FailedPreconditionError("slot " +
                                     SlotId(inv.devices[static_cast<size_t>(dev)], slot) +
                                     " is already assigned");
    }
  }
  ACCELPOOL_RETURN_IF_ERROR(core::ApplyPlacement(part.placement, inv, &state->usage));
  for (const auto& [dev, slot] : slots) {
    state->slots[static_cast<size_t>(dev)][static_cast<size_t>(slot)] = true;
  }
  return Status::Ok();
}

StatusOr<AssignmentPart> ForcePart(const AssignmentPart& part, InventoryState* state) {
  ACCELPOOL_RETURN_IF_ERROR(core::ForcePlacement(part.placement, *state->inventory, &state->usage));
  AssignmentPart added = part;
  for (size_t c = 0; c < added.placement.containers.size() && c < added.slots.size(); ++c) {
    const auto& grants = added.placement.containers[c].grants;
    for (size_t g = 0; g < grants.size() && g < added.slots[c].size(); ++g) {
      const int32_t dev = grants[g].device;
      int32_t& slot = added.slots[c][g];
      const bool exists = dev >= 0 && static_cast<size_t>(dev) < state->slots.size() && slot >= 0 &&
                          static_cast<size_t>(slot) < state->slots[static_cast<size_t>(dev)].size();
      if (!exists || state->slots[static_cast<size_t>(dev)][static_cast<size_t>(slot)]) {
        slot = -1;
        continue;
      }
      state->slots[static_cast<size_t>(dev)][static_cast<size_t>(slot)] = true;
    }
  }
  return added;
}

Status ReleasePart(const AssignmentPart& part, InventoryState* state) {
  ACCELPOOL_RETURN_IF_ERROR(
      core::ReleasePlacement(part.placement, *state->inventory, &state->usage));
  for (const auto& [dev, slot] : PartSlots(part)) {
    if (dev >= 0 && static_cast<size_t>(dev) < state->slots.size() && slot >= 0 &&
        static_cast<size_t>(slot) < state->slots[static_cast<size_t>(dev)].size()) {
      state->slots[static_cast<size_t>(dev)][static_cast<size_t>(slot)] = false;
    }
  }
  return Status::Ok();
}

// Adds every part of `a` to `s`, all or nothing.
Status ApplyAssignment(const PodAssignment& a, NodeSnapshot* s) {
  for (size_t i = 0; i < a.parts.size(); ++i) {
    InventoryState* st = s->Find(a.parts[i].vendor);
    Status result = st == nullptr
                        ? FailedPreconditionError("node " + s->name + " has no " +
                                                  std::string(core::VendorName(a.parts[i].vendor)) +
                                                  " devices")
                        : ApplyPart(a.parts[i], st);
    if (!result.ok()) {
      for (size_t j = 0; j < i; ++j) {
        (void)ReleasePart(a.parts[j], s->Find(a.parts[j].vendor));
      }
      return result;
    }
  }
  ++s->pods;
  return Status::Ok();
}

void ReleaseAssignment(const PodAssignment& a, NodeSnapshot* s) {
  for (const AssignmentPart& p : a.parts) {
    if (InventoryState* st = s->Find(p.vendor); st != nullptr) {
      (void)ReleasePart(p, st);
    }
  }
  if (s->pods > 0) {
    --s->pods;
  }
}

}  // namespace accelpool::extender
