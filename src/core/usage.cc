#include "core/usage.h"

#include <algorithm>
#include <string>

namespace accelpool::core {

namespace {

void AddGrant(const Grant& g, int64_t slice_mib, bool fractional, DeviceUsage* u) {
  u->memory_mib += g.memory_mib;
  u->compute += g.compute;
  u->shares += 1;
  u->exclusive = u->exclusive || g.exclusive;
  if (fractional) {
    u->slices += 1;
    u->slice_mib = slice_mib;
  }
}

void MaxInto(const DeviceUsage& phase, DeviceUsage* acc) {
  acc->memory_mib = std::max(acc->memory_mib, phase.memory_mib);
  acc->compute = std::max(acc->compute, phase.compute);
  acc->shares = std::max(acc->shares, phase.shares);
  acc->slices = std::max(acc->slices, phase.slices);
  acc->exclusive = acc->exclusive || phase.exclusive;
  if (phase.slice_mib != 0) acc->slice_mib = phase.slice_mib;
}

// The slice size a fractional grant occupies: its memory when the inventory
// uses fixed slice sizes, else 0.
int64_t SliceOf(const Grant& g, const NodeInventory& inv) {
  if (g.exclusive || !inv.topology.slices.one_size_per_device) return 0;
  return g.memory_mib;
}

std::vector<DeviceUsage> PhaseUsage(const std::vector<const ContainerPlacement*>& members,
                                    const NodeInventory& inv) {
  std::vector<DeviceUsage> out(inv.devices.size());
  for (const ContainerPlacement* c : members) {
    for (const Grant& g : c->grants) {
      if (g.device < 0 || static_cast<size_t>(g.device) >= out.size()) continue;
      AddGrant(g, SliceOf(g, inv), !g.exclusive, &out[static_cast<size_t>(g.device)]);
    }
  }
  return out;
}

Status CheckIndices(const Placement& p, const NodeInventory& inv) {
  for (const auto& c : p.containers) {
    for (const Grant& g : c.grants) {
      if (g.device < 0 || static_cast<size_t>(g.device) >= inv.devices.size()) {
        return InvalidArgumentError("container " + c.container + ": device index " +
                                    std::to_string(g.device) + " is not on node " + inv.node);
      }
      if (g.memory_mib < 0 || g.compute < 0) {
        return InvalidArgumentError("container " + c.container + ": negative grant");
      }
    }
  }
  return Status::Ok();
}

bool DeviceWithin(const Device& d, const DeviceUsage& u, int32_t budget_unused) {
  if (u.memory_mib > d.memory_mib || u.compute > kComputeWhole) return false;
  if (u.shares > std::max(1, d.max_shares)) return false;
  if (u.exclusive && u.shares > 1) return false;
  return u.memory_mib >= 0 && u.compute >= 0 && u.shares >= 0;
}

}  // namespace

std::vector<DeviceUsage> Footprint(const Placement& p, const NodeInventory& inv) {
  std::vector<const ContainerPlacement*> steady;
  std::vector<const ContainerPlacement*> sidecars_so_far;
  std::vector<std::vector<const ContainerPlacement*>> init_phases;
  for (const auto& c : p.containers) {
    switch (c.kind) {
      case ContainerKind::kRegular:
        steady.push_back(&c);
        break;
      case ContainerKind::kSidecar:
        steady.push_back(&c);
        sidecars_so_far.push_back(&c);
        break;
      case ContainerKind::kInit: {
        std::vector<const ContainerPlacement*> phase = sidecars_so_far;
        phase.push_back(&c);
        init_phases.push_back(std::move(phase));
        break;
      }
    }
  }
  std::vector<DeviceUsage> acc = PhaseUsage(steady, inv);
  for (const auto& phase : init_phases) {
    const std::vector<DeviceUsage> u = PhaseUsage(phase, inv);
    for (size_t i = 0; i < acc.size(); ++i) MaxInto(u[i], &acc[i]);
  }
  return acc;
}

Status ApplyPlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage) {
  ACCELPOOL_RETURN_IF_ERROR(CheckIndices(p, inv));
  if (usage->devices.size() != inv.devices.size()) usage->devices.resize(inv.devices.size());
  const std::vector<DeviceUsage> fp = Footprint(p, inv);
  std::vector<DeviceUsage> next = usage->devices;
  for (size_t i = 0; i < fp.size(); ++i) {
    if (fp[i].shares == 0) continue;
    DeviceUsage& u = next[i];
    const Device& d = inv.devices[i];
    if (u.exclusive || (fp[i].exclusive && u.shares > 0)) {
      return FailedPreconditionError("device " + d.id + " on " + inv.node +
                                     " is held exclusively; re-plan the pod");
    }
    if (inv.topology.slices.one_size_per_device && fp[i].slice_mib != 0 && u.slice_mib != 0 &&
        u.slice_mib != fp[i].slice_mib) {
      return FailedPreconditionError("device " + d.id + " hosts slices of another size");
    }
    u.memory_mib += fp[i].memory_mib;
    u.compute += fp[i].compute;
    u.shares += fp[i].shares;
    u.slices += fp[i].slices;
    u.exclusive = u.exclusive || fp[i].exclusive;
    if (fp[i].slice_mib != 0) u.slice_mib = fp[i].slice_mib;
    if (!DeviceWithin(d, u, 0)) {
      return FailedPreconditionError("device " + d.id + " on " + inv.node +
                                     " would be overcommitted; re-plan the pod");
    }
  }
  const int32_t budget = inv.topology.slices.node_handle_budget;
  if (budget > 0) {
    int32_t slices = 0;
    for (const auto& u : next) slices += u.slices;
    if (static_cast<int32_t>(inv.devices.size()) + slices > budget) {
      return FailedPreconditionError("node " + inv.node + " slice budget exceeded");
    }
  }
  usage->devices = std::move(next);
  return Status::Ok();
}

Status ForcePlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage) {
  ACCELPOOL_RETURN_IF_ERROR(CheckIndices(p, inv));
  if (usage->devices.size() != inv.devices.size()) usage->devices.resize(inv.devices.size());
  const std::vector<DeviceUsage> fp = Footprint(p, inv);
  for (size_t i = 0; i < fp.size(); ++i) {
    if (fp[i].shares == 0) continue;
    DeviceUsage& u = usage->devices[i];
    u.memory_mib += fp[i].memory_mib;
    u.compute += fp[i].compute;
    u.shares += fp[i].shares;
    u.slices += fp[i].slices;
    u.exclusive = u.exclusive || fp[i].exclusive;
    if (fp[i].slice_mib != 0) u.slice_mib = fp[i].slice_mib;
  }
  return Status::Ok();
}

Status ReleasePlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage) {
  ACCELPOOL_RETURN_IF_ERROR(CheckIndices(p, inv));
  if (usage->devices.size() != inv.devices.size()) {
    return FailedPreconditionError("usage of node " + inv.node + " does not match its inventory");
  }
  const std::vector<DeviceUsage> fp = Footprint(p, inv);
  std::vector<DeviceUsage> next = usage->devices;
  for (size_t i = 0; i < fp.size(); ++i) {
    if (fp[i].shares == 0) continue;
    DeviceUsage& u = next[i];
    u.memory_mib -= fp[i].memory_mib;
    u.compute -= fp[i].compute;
    u.shares -= fp[i].shares;
    u.slices -= fp[i].slices;
    if (u.memory_mib < 0 || u.compute < 0 || u.shares < 0 || u.slices < 0) {
      return FailedPreconditionError("releasing from device " + inv.devices[i].id + " on " +
                                     inv.node + " would go below zero: not assigned here");
    }
    if (fp[i].exclusive) u.exclusive = false;
    if (u.slices == 0) u.slice_mib = 0;
  }
  usage->devices = std::move(next);
  return Status::Ok();
}

bool UsageWithinCapacity(const NodeInventory& inv, const NodeUsage& usage) {
  if (usage.devices.size() != inv.devices.size()) return false;
  int32_t slices = 0;
  for (size_t i = 0; i < inv.devices.size(); ++i) {
    if (!DeviceWithin(inv.devices[i], usage.devices[i], 0)) return false;
    slices += usage.devices[i].slices;
  }
  const int32_t budget = inv.topology.slices.node_handle_budget;
  return budget <= 0 || static_cast<int32_t>(inv.devices.size()) + slices <= budget;
}

int64_t FreeMemory(const Device& d, const DeviceUsage& u) {
  if (u.exclusive) return 0;
  return std::max<int64_t>(0, d.memory_mib - d.foreign_mib - u.memory_mib);
}

int32_t FreeCompute(const Device& d, const DeviceUsage& u) {
  if (u.exclusive) return 0;
  return std::max<int32_t>(0, kComputeWhole - u.compute);
}

}  // namespace accelpool::core
