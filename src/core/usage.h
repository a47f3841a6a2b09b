// Usage accounting: the footprint of a placement and applying it to a node.
//
// A pod's footprint on a device is the most it holds there at any moment,
// counting containers the way kubelet runs them: each non-restartable init
// container runs alone beside the sidecars declared before it; then all
// regular containers run beside all sidecars. Example: init 8 GiB on gpu0,
// regular 4 GiB + 2 GiB on gpu0 -> footprint 8 GiB on gpu0, not 14. A device
// held whole in one phase and shared in another is held whole by the pod (one
// holder). Where a device hosts one slice size only, the pod's phases keep to
// one size on it (ApplyPlacement refuses a placement that mixes them).
//
// Thread-safety: pure functions over values.
#ifndef ACCELPOOL_CORE_USAGE_H_
#define ACCELPOOL_CORE_USAGE_H_

#include "common/status.h"
#include "core/types.h"

namespace accelpool::core {

// Per-device footprint of a placement, sized like inv.devices.
// REQUIRES: every grant's device index is < inv.devices.size().
std::vector<DeviceUsage> Footprint(const Placement& p, const NodeInventory& inv);

// Adds (or removes) a placement's footprint. Returns kFailedPrecondition and
// changes nothing when adding would overcommit a device or removing would go
// below zero; kInvalidArgument for an index outside the inventory.
Status ApplyPlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage);
Status ReleasePlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage);
// Adds a placement's footprint as it is, even past a device's capacity or
// onto one held exclusively: for placements that already run (a bound pod's
// assignment that overlaps another's), so that the device shows no room
// rather than room that is not there. ReleasePlacement takes exactly that
// back. kInvalidArgument (nothing changed) for an index outside the inventory.
Status ForcePlacement(const Placement& p, const NodeInventory& inv, NodeUsage* usage);

// True when usage holds no device beyond its capacity or share cap.
bool UsageWithinCapacity(const NodeInventory& inv, const NodeUsage& usage);

// Free memory / compute of one device given usage (0 when exclusive).
int64_t FreeMemory(const Device& d, const DeviceUsage& u);
int32_t FreeCompute(const Device& d, const DeviceUsage& u);

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_USAGE_H_
