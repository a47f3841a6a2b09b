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

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "core/reasons.h"
#include "core/types.h"

namespace accelpool::core::internal {

// The devices of one candidate. Up to kInline of them live inside the object,
// so proposing a candidate costs no heap allocation on nodes of up to 16
// devices (fit of one pod against thousands of nodes makes millions of them).
class DeviceSet {
 public:
  static constexpr size_t kInline = 16;

  DeviceSet() = default;
  DeviceSet(std::initializer_list<int32_t> devices) {
    for (int32_t d : devices) push_back(d);
  }
  explicit DeviceSet(std::span<const int32_t> devices) {
    for (int32_t d : devices) push_back(d);
  }

  void push_back(int32_t d) {
    if (heap_.empty() && size_ < kInline) {
      inline_[size_++] = d;
      return;
    }
    if (heap_.empty()) heap_.assign(inline_.begin(), inline_.begin() + static_cast<ptrdiff_t>(size_));
    heap_.push_back(d);
    ++size_;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t* data() { return heap_.empty() ? inline_.data() : heap_.data(); }
  const int32_t* data() const { return heap_.empty() ? inline_.data() : heap_.data(); }
  int32_t* begin() { return data(); }
  int32_t* end() { return data() + size_; }
  const int32_t* begin() const { return data(); }
  const int32_t* end() const { return data() + size_; }
  int32_t operator[](size_t i) const { return data()[i]; }
  operator std::span<const int32_t>() const { return {data(), size_}; }  // NOLINT: by design

  friend bool operator==(const DeviceSet& a, const DeviceSet& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator<(const DeviceSet& a, const DeviceSet& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  std::array<int32_t, kInline> inline_{};
  size_t size_ = 0;
  std::vector<int32_t> heap_;  // used instead of inline_ past kInline devices
};

struct CandidateSet {
  DeviceSet devices;  // ascending
  int64_t rank = 0;   // topology quality, higher is better
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
bool IsLegalSet(const NodeInventory& inv, std::span<const int32_t> devices, const SetQuery& q);

// Affinity between two devices: the link score when known, else 1 for the
// same NUMA node and 0 otherwise.
int32_t Affinity(const NodeInventory& inv, int32_t a, int32_t b);

}  // namespace accelpool::core::internal

#endif  // ACCELPOOL_CORE_SELECT_H_
