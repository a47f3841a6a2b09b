// Internal to the core: legal device sets under a topology descriptor.
//
// GenerateSets proposes candidate sets of `count` devices drawn from `free`
// (indices of devices that can take the request), each with a topology rank
// (higher is better). It never enumerates all combinations: candidates are
// one per group, one per module run, one per anchor device grown greedily
// by affinity, so the work is O(N^2 * count) for N devices.
//
// Worked example (Ascend 910A x8, rings {0-3} {4-7}, request of 1):
// free = {0, 4, 5, 6}: ring A has 1 free, ring B has 3 free. Best fit takes
// the ring whose remainder is 0, then even remainders, then odd: ring A.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_CORE_SELECT_H_
#define ACCELPOOL_CORE_SELECT_H_

#include <vector>

#include "core/reasons.h"
#include "core/types.h"

namespace accelpool::core::internal {

struct CandidateSet {
  std::vector<int32_t> devices;  // ascending
  int64_t rank = 0;              // topology quality, higher is better
};

struct SetQuery {
  int32_t count = 0;
  bool numa_bind = false;
  bool fractional = false;
};

// `used_by_others[i]` is true when device i already hosts other pods (for the
// "prefer a die whose sibling is used" and packing tie-breaks).
// On failure returns no sets and sets *why.
std::vector<CandidateSet> GenerateSets(const NodeInventory& inv, const std::vector<int32_t>& free,
                                       const std::vector<bool>& used_by_others,
                                       const SetQuery& q, FitReason* why);

// True when `devices` (distinct indices) is a legal set for `q` on inv.
bool IsLegalSet(const NodeInventory& inv, const std::vector<int32_t>& devices, const SetQuery& q);

// Affinity between two devices: the link score when known, else 1 for the
// same NUMA node and 0 otherwise.
int32_t Affinity(const NodeInventory& inv, int32_t a, int32_t b);

}  // namespace accelpool::core::internal

#endif  // ACCELPOOL_CORE_SELECT_H_
