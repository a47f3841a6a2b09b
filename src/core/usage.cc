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

// Merges one phase's use of a device into the pod's footprint so far. A
// device held whole in some phase is held whole by the pod, by one holder:
// the shares of another phase run while the whole grant does not, so they
// count as that one holder (an exclusive phase keeps its own shares, so a
// whole grant beside another grant in one phase still shows). The slice size
// of the phases before wins; a phase of another size makes *mixed true.
void MaxInto(const DeviceUsage& phase, DeviceUsage* acc, bool* mixed) {
  if (phase.shares == 0) return;
  if (acc->shares == 0) {
    *acc = phase;
    return;
  }
  if (acc->exclusive || phase.exclusive) {
    acc->shares = std::max(acc->exclusive ? acc->shares : 1, phase.exclusive ? phase.shares : 1);
  } else {
    acc->shares = std::max(acc->shares, phase.shares);
  }
  acc->memory_mib = std::max(acc->memory_mib, phase.memory_mib);
  acc->compute = std::max(acc->compute, phase.compute);
  acc->slices = std::max(acc->slices, phase.slices);
  acc->exclusive = acc->exclusive || phase.exclusive;
  if (acc->slice_mib == 0) {
    acc->slice_mib = phase.slice_mib;
  } else if (phase.slice_mib != 0 && phase.slice_mib != acc->slice_mib) {
    *mixed = true;
  }
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

// The footprint, and whether some device would host slices of two sizes
// over the pod's phases (the steady phases' size is the one kept). When
// `over` is given, it names a device that one phase alone overcommits (its
// own shares past the device's cap, say, which the merge hides where
// another phase holds the device whole), or stays empty.
std::vector<DeviceUsage> MergedFootprint(const Placement& p, const NodeInventory& inv, bool* mixed,
                                         std::string* over = nullptr) {
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
  *mixed = false;
  auto check = [&](const std::vector<DeviceUsage>& phase) {
    for (size_t i = 0; over != nullptr && over->empty() && i < phase.size(); ++i) {
      if (phase[i].shares > 0 && !DeviceWithin(inv.devices[i], phase[i], 0)) {
        *over = inv.devices[i].id;
      }
    }
  };
  std::vector<DeviceUsage> acc = PhaseUsage(steady, inv);
  check(acc);
  for (const auto& phase : init_phases) {
    const std::vector<DeviceUsage> u = PhaseUsage(phase, inv);
    check(u);
    for (size_t i = 0; i < acc.size(); ++i) MaxInto(u[i], &acc[i], mixed);
  }
  return acc;
}

// One device's footprint added to its usage (ReleasePlacement subtracts it).
void AddFootprint(const DeviceUsage& fp, DeviceUsage* u) {
  u->memory_mib += fp.memory_mib;
  u->compute += fp.compute;
  u->shares += fp.shares;
  u->slices += fp.slices;
  u->exclusive = u->exclusive || fp.exclusive;
  if (fp.slice_mib != 0) u->slice_mib = fp.slice_mib;
}

}  // namespace

std::vector<DeviceUsage> Footprint(const Placement& p, const NodeInventory& inv) {
  bool mixed = false;
  return MergedFootprint(p, inv, &mixed);
}

Status ApplyPlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage) {
  ACCELPOOL_RETURN_IF_ERROR(CheckIndices(p, inv));
  if (usage->devices.size() != inv.devices.size()) usage->devices.resize(inv.devices.size());
  bool mixed = false;
  std::string over;
  const std::vector<DeviceUsage> fp = MergedFootprint(p, inv, &mixed, &over);
  if (mixed) {
    return FailedPreconditionError("a device on " + inv.node +
                                   " would host slices of two sizes over the pod's containers");
  }
  if (!over.empty()) {
    return FailedPreconditionError("device " + over + " on " + inv.node +
                                   " would be overcommitted by the pod's own containers while "
                                   "they run together; re-plan the pod");
  }
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
    AddFootprint(fp[i], &u);
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
    AddFootprint(fp[i], &usage->devices[i]);
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
