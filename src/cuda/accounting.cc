// Charging and uncharging the container's shared region on behalf of the
// hooks. See accounting.h.
#include "cuda/accounting.h"

#include <unistd.h>

#include "cuda/log.h"

namespace accelpool::cuda {
namespace {

// REQUIRES: s.mem_mu held.
bool EnsureSlotLocked(ShimState& s) {
  if (s.slot >= 0) {
    return true;
  }
  int32_t pid = static_cast<int32_t>(getpid());
  s.slot = s.region->ClaimSlot(pid, ProcessStartTime(pid));
  if (s.slot < 0) {
    Logf(LogLevel::kError,
         "all %d accounting slots of this container are held by live processes; "
         "refusing device allocations (run fewer CUDA processes per container)",
         kMaxSlots);
  }
  return s.slot >= 0;
}

}  // namespace

Charge ChargeBytes(int device, uint64_t bytes) {
  ShimState& s = State();
  if (!s.config.MemoryLimited(device)) {
    return Charge::kNotLimited;
  }
  pthread_mutex_lock(&s.mem_mu);
  bool have_slot = EnsureSlotLocked(s);
  int slot = s.slot;
  pthread_mutex_unlock(&s.mem_mu);
  if (!have_slot) {
    return Charge::kOverLimit;
  }
  switch (s.region->TryCharge(slot, device, bytes, s.config.memory_limit_bytes[device],
                              s.config.context_reserve_bytes)) {
    case ChargeResult::kOk:
      return Charge::kCharged;
    case ChargeResult::kOverLimit:
      Logf(LogLevel::kDebug, "device %d: %llu bytes refused at the cap", device,
           static_cast<unsigned long long>(bytes));
      return Charge::kOverLimit;
    case ChargeResult::kUnavailable:
      break;
  }
  if (!s.warned_unaccounted) {
    s.warned_unaccounted = true;
    Logf(LogLevel::kWarn, "accounting region unavailable; allocations are not being counted");
  }
  return Charge::kNotLimited;
}

void UnchargeBytes(int device, uint64_t bytes) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  int slot = s.slot;
  pthread_mutex_unlock(&s.mem_mu);
  s.region->Uncharge(slot, device, bytes);
}

void Remember(AllocTable* table, uint64_t key, uint64_t bytes, int device) {
  ShimState& s = State();
  AllocRecord r;
  r.bytes = bytes;
  r.device = device;
  pthread_mutex_lock(&s.mem_mu);
  bool ok = table->Put(key, r);
  pthread_mutex_unlock(&s.mem_mu);
  if (!ok) {
    UnchargeBytes(device, bytes);  // Cannot track it: never charge what we cannot free.
  }
}

// Removes `key` from `table` and uncharges it; no-op for untracked keys.
void Forget(AllocTable* table, uint64_t key) {
  ShimState& s = State();
  AllocRecord r;
  pthread_mutex_lock(&s.mem_mu);
  bool found = table->Take(key, &r);
  pthread_mutex_unlock(&s.mem_mu);
  if (found) {
    UnchargeBytes(r.device, r.bytes);
  }
}

uint64_t RoundToGranularity(uint64_t bytes) {
  if (bytes == 0) {
    return kAllocGranularity;  // The driver still hands out a page.
  }
  if (bytes > UINT64_MAX - kAllocGranularity) {
    return UINT64_MAX;
  }
  return (bytes + kAllocGranularity - 1) / kAllocGranularity * kAllocGranularity;
}

bool CurrentDevice(int* device) {
  ShimState& s = State();
  CUdevice d = 0;
  if (s.ctx_get_device == nullptr || s.ctx_get_device(&d) != CUDA_SUCCESS) {
    return false;
  }
  *device = d;
  return true;
}

uint64_t ContainerUsed(int device) {
  ShimState& s = State();
  return s.region == nullptr ? 0 : s.region->Used(device);
}

}  // namespace accelpool::cuda
