// Accounting helpers shared by the memory hooks (hooks_memory.cc,
// hooks_info.cc, hooks_vmm.cc): charge the calling process's slot in the
// container's shared region, remember what was charged per handle, and give
// it back on free.
//
// Thread-safety: every function is safe from any thread; per-process tables
// are guarded by ShimState::mem_mu, the region by its own robust mutex.
#ifndef ACCELPOOL_CUDA_ACCOUNTING_H_
#define ACCELPOOL_CUDA_ACCOUNTING_H_

#include <cstdint>

#include "cuda/alloc_table.h"
#include "cuda/cuda_types.h"
#include "cuda/shim.h"

namespace accelpool::cuda {

enum class Charge {
  kCharged,     // Counted; the caller must Remember or Uncharge it.
  kNotLimited,  // This device has no cap (or accounting is unavailable).
  kOverLimit,   // Refuse: return CUDA_ERROR_OUT_OF_MEMORY.
};

// Charges `bytes` (already rounded) on `device` for this process, claiming
// the process's slot on first use. A process that cannot get a slot (all
// kMaxSlots held by live processes) is refused with an error log.
Charge ChargeBytes(int device, uint64_t bytes);
void UnchargeBytes(int device, uint64_t bytes);
// Records key -> (bytes, device); uncharges at once if it cannot be recorded.
void Remember(AllocTable* table, uint64_t key, uint64_t bytes, int device);
// Removes `key` from `table` and uncharges it; no-op for untracked keys.
void Forget(AllocTable* table, uint64_t key);

// Charges `bytes` on `device`, runs the real call, records key() on success.
template <typename Call, typename Key>
CUresult ChargeAndCall(AllocTable* table, int device, uint64_t bytes, Call call, Key key) {
  Charge c = ChargeBytes(device, bytes);
  if (c == Charge::kOverLimit) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = call();
  if (c == Charge::kCharged) {
    if (rc == CUDA_SUCCESS) {
      Remember(table, key(), bytes, device);
    } else {
      UnchargeBytes(device, bytes);
    }
  }
  return rc;
}

// Prologue of a hook instance for slot S: the real function or NOT_FOUND.
#define ACCELPOOL_REAL_OR_FAIL(type, id)      \
  EnsureCuda();                               \
  auto real = Real<type>(id, S);              \
  if (real == nullptr) {                      \
    return CUDA_ERROR_NOT_FOUND;              \
  }                                           \
  ShimState& s = State();                     \
  (void)s

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_ACCOUNTING_H_
