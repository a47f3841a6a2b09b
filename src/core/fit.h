// Fit: choose devices for a pod on one node inventory.
//
// One generic loop for every vendor: the topology descriptor (groups,
// modules, valid counts, link scores, slice rules) decides which device sets
// are legal; the policy decides which legal set is best. Multi-device
// requests are planned without enumerating all combinations: candidates are
// built per group / per module / per anchor device greedily by link score.
//
// Thread-safety: pure functions; no clock, threads, logging or globals.
#ifndef ACCELPOOL_CORE_FIT_H_
#define ACCELPOOL_CORE_FIT_H_

#include <vector>

#include "common/status.h"
#include "core/reasons.h"
#include "core/types.h"

namespace accelpool::core {

class Policy;

// The most memory a request or a device may name, MiB (1 EiB): sums of
// grants stay far inside int64_t.
inline constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;

struct FitResult {
  FitCode code = FitCode::kUnschedulable;
  std::vector<FitReason> reasons;  // empty when code == kFits
  Placement placement;             // set when code == kFits
  bool fits() const { return code == FitCode::kFits; }
};

// Validates one request as a user wrote it: negative or zero counts,
// percentages over 100, memory and memory_percent both set, contradictory
// include/exclude lists, an unknown vendor. kInvalidArgument with a message
// that says what to change.
Status ValidateRequest(const DeviceRequest& r);
Status ValidatePodRequest(const PodRequest& p);

// Validates an inventory: indices match positions, modules/groups/links refer
// to existing devices, memory and shares are positive.
Status ValidateInventory(const NodeInventory& inv);

// The memory one device must give to a request after vendor rounding
// (memory_percent resolved, memory step and fixed slice sizes applied).
// Returns the device's whole memory when the request is exclusive or count-only,
// or when rounding passes the largest slice.
int64_t EffectiveMemory(const DeviceRequest& r, const Device& d, const SliceRule& s);
// The compute one device must give (thousandths), after slice rules.
int32_t EffectiveCompute(const DeviceRequest& r, const Device& d, const SliceRule& s);

// Plans every container of `pod` that asks for inv.vendor on `inv` given
// `usage`. Containers of other vendors are ignored. `policy` picks among the
// legal candidates (nullptr: binpack). The placement never breaks a topology
// rule and, applied to usage, never overcommits a device.
// REQUIRES: ValidatePodRequest(pod).ok() and ValidateInventory(inv).ok().
FitResult Fit(const PodRequest& pod, const NodeInventory& inv, const NodeUsage& usage,
              const Policy* policy = nullptr);

// Checks that a placement is legal on inv (devices exist, counts valid,
// topology respected, amounts match the request, each container once and of
// its request's kind) and fits usage as Fit would plan it (no whole grant on
// a device with foreign memory, shares within the memory left beside it).
// Used by the simulator to count violations and by the tests.
Status CheckPlacement(const PodRequest& pod, const NodeInventory& inv, const NodeUsage& usage,
                      const Placement& placement);

// The foreign-memory part of CheckPlacement, for callers that count the
// placement themselves (the extender's cache, under its lock): on every device
// the placement uses that holds memory no grant accounts for
// (Device::foreign_mib), no whole grant, and `counted` (usage with the
// placement applied) within the memory left beside the foreign memory.
Status CheckForeignRoom(const Placement& placement, const NodeInventory& inv,
                        const NodeUsage& counted);

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_FIT_H_
