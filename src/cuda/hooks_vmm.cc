// Virtual memory management hooks. Physical memory is charged once, at
// cuMemCreate, on the device named in the allocation properties; mapping it
// (cuMemMap) allocates nothing and is not charged again (charging both is
// the double count behind false OOMs seen with VMM elsewhere). The charge is
// returned when the handle has been released *and* its last mapping is gone,
// which is when the driver frees the memory. cuMemRetainAllocationHandle
// hands out one more reference to a mapped handle, which a cuMemRelease
// then drops: the handle counts as released only once every reference the
// application holds is. A handle mapped into a sparse array
// (cuMemMapArrayAsync) stays charged until the process ends. See shim.h.
#include "cuda/accounting.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

constexpr uint64_t kReleased = 1;
constexpr int kUnmapBatch = 64;

struct RangeCollector {
  uint64_t lo;
  uint64_t hi;
  uint64_t keys[kUnmapBatch];
  int count;
};

void CollectInRange(void* ctx, uint64_t key, const AllocRecord&) {
  auto* c = static_cast<RangeCollector*>(ctx);
  if (key >= c->lo && key < c->hi && c->count < kUnmapBatch) {
    c->keys[c->count++] = key;
  }
}

template <int S>
CUresult HookMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                       const CUmemAllocationProp* prop, unsigned long long flags) {  // NOLINT
  EnsureCuda();
  auto real = Real<cuMemCreateFn>(kHookMemCreate, S);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  int dev = s.mem_on && handle != nullptr && prop != nullptr ? LocationDevice(prop->location) : -1;
  if (dev < 0) {
    return real(handle, size, prop, flags);  // Host and NUMA locations never count.
  }
  uint64_t bytes = RoundToGranularity(size);
  Charge c = ChargeBytesAfterSync(dev, bytes);
  if (c == Charge::kOverLimit) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = real(handle, size, prop, flags);
  if (c != Charge::kCharged) {
    return rc;
  }
  if (rc != CUDA_SUCCESS) {
    UnchargeBytes(dev, bytes);
    return rc;
  }
  AllocRecord r;
  r.bytes = bytes;
  r.device = dev;
  AllocRecord dropped;
  bool freed_old = false;
  pthread_mutex_lock(&s.mem_mu);
  bool ok = s.vmm_handles->Put(*handle, r);
  if (!ok) {
    // A handle released while mapped into an array keeps its record (and
    // charge) for good; once the driver freed it, it may hand the value out
    // again. That record gives way; its bytes stay charged. So does the
    // record of a released handle with no mapping left that an unmap could
    // not take out (no memory for it: HookMemUnmap).
    // The same for a released handle whose last unmap is still in flight
    // (another thread released it meanwhile): the driver handing out its
    // value again says it is freed, so its bytes go with its record.
    AllocRecord* old = s.vmm_handles->Find(*handle);
    if (old != nullptr && old->link == kReleased &&
        (old->array_mapped ? old->refs == 1 : old->refs <= 0) &&
        s.vmm_handles->Take(*handle, &dropped)) {
      ok = s.vmm_handles->Put(*handle, r);
      freed_old = !dropped.array_mapped && dropped.unmapping > 0;
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  if (!ok) {
    UnchargeBytes(dev, bytes);
  }
  if (freed_old) {
    UnchargeBytes(dropped.device, dropped.bytes);
  }
  return rc;
}

template <int S>
CUresult HookMemRelease(CUmemGenericAllocationHandle handle) {
  EnsureCuda();
  auto real = Real<cuMemReleaseFn>(kHookMemRelease, S);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  if (!s.mem_on) {
    return real(handle);
  }
  // The record is settled before the real release, and put back if it fails:
  // once released, the driver may hand the same handle value to another
  // thread's cuMemCreate, whose record must not be mistaken for this one.
  AllocRecord freed;
  bool took = false;
  bool marked = false;
  bool unretained = false;
  uint64_t old_link = 0;
  pthread_mutex_lock(&s.mem_mu);
  if (AllocRecord* r = s.vmm_handles->Find(handle)) {
    if (r->retains > 0) {
      --r->retains;  // A retained reference: the creator's (or another) stays.
      unretained = true;
    } else if (r->refs <= 0 && r->unmapping <= 0) {
      took = s.vmm_handles->Take(handle, &freed);
    } else {
      old_link = r->link;
      r->link = kReleased;
      marked = true;
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  CUresult rc = real(handle);
  if (rc != CUDA_SUCCESS) {
    pthread_mutex_lock(&s.mem_mu);
    if (took) {
      s.vmm_handles->Put(handle, freed);
    } else if (unretained) {
      if (AllocRecord* r = s.vmm_handles->Find(handle)) {
        ++r->retains;
      }
    } else if (marked) {
      if (AllocRecord* r = s.vmm_handles->Find(handle)) {
        r->link = old_link;
      }
    }
    pthread_mutex_unlock(&s.mem_mu);
    return rc;
  }
  if (took) {
    UnchargeBytes(freed.device, freed.bytes);
  }
  return rc;
}

template <int S>
CUresult HookMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle, unsigned long long flags) {  // NOLINT
  EnsureCuda();
  auto real = Real<cuMemMapFn>(kHookMemMap, S);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  CUresult rc = real(ptr, size, offset, handle, flags);
  if (rc != CUDA_SUCCESS || !s.mem_on) {
    return rc;
  }
  pthread_mutex_lock(&s.mem_mu);
  if (AllocRecord* h = s.vmm_handles->Find(handle)) {
    AllocRecord m;
    m.bytes = size;
    m.device = h->device;
    m.link = handle;
    if (s.vmm_maps->Put(ptr, m)) {  // Count only mappings whose unmap will be seen.
      ++h->refs;
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  return rc;
}

// An unmap's mappings (by address, in [lo, hi)) and the handles it frees,
// settled before the real call and kept to be put back if it fails.
struct UnmapSettle {
  uint64_t lo;
  uint64_t hi;
  AllocTable* vmm_maps;
  AllocTable* vmm_handles;
  AllocTable* maps;   // Mapping records taken out of vmm_maps.
  AllocTable* freed;  // Handle records taken out of vmm_handles, by handle.
  bool late;          // Something left to settle after the call (no memory).
};

// TakeIf: takes out a mapping in range, kept in maps.
bool TakeMappingInRange(void* ctx, uint64_t key, const AllocRecord& m) {
  auto* u = static_cast<UnmapSettle*>(ctx);
  if (key < u->lo || key >= u->hi) {
    return false;
  }
  if (!u->maps->Put(key, m)) {
    u->late = true;  // Stays in vmm_maps, settled after the call.
    return false;
  }
  return true;
}

// REQUIRES: mem_mu. A mapping going: drops its handle's reference. A
// released handle that this frees (no mapping left) has its record taken out
// now, before the call: once the driver freed it, it may hand the value to
// another thread's cuMemCreate. A handle not released yet counts the unmap
// in flight (unmapping; the mapping is marked, refs = 1): a cuMemRelease
// meanwhile takes it as still mapped, or it would uncharge a handle that a
// failing unmap leaves mapped; SettleDeferred frees it after the call.
void DropMapping(void* ctx, uint64_t, AllocRecord* m) {
  auto* u = static_cast<UnmapSettle*>(ctx);
  AllocRecord* r = u->vmm_handles->Find(m->link);
  if (r == nullptr) {
    return;
  }
  --r->refs;
  if (r->link != kReleased) {
    ++r->unmapping;
    m->refs = 1;
    return;
  }
  if (r->refs <= 0 && r->unmapping <= 0) {
    AllocRecord taken = *r;
    if (u->freed->Put(m->link, taken)) {
      u->vmm_handles->Take(m->link, &taken);
    } else {
      u->late = true;  // Stays, settled after the call.
    }
  }
}

// REQUIRES: mem_mu. After a successful unmap: the unmaps DropMapping counted
// end; a handle released meanwhile with no mapping left is freed (into
// freed, uncharged by the caller; with no room it stays charged and gives
// way to a new handle of its value, HookMemCreate). A record without the
// count is such a new handle's (its value reused once the old one was
// freed): untouched.
void SettleDeferred(void* ctx, uint64_t, const AllocRecord& m) {
  auto* u = static_cast<UnmapSettle*>(ctx);
  if (m.refs != 1) {
    return;
  }
  AllocRecord* r = u->vmm_handles->Find(m.link);
  if (r == nullptr || r->unmapping <= 0) {
    return;
  }
  --r->unmapping;
  AllocRecord taken;
  if (r->refs <= 0 && r->unmapping <= 0 && r->link == kReleased && u->freed->Put(m.link, *r)) {
    u->vmm_handles->Take(m.link, &taken);
  }
}

// REQUIRES: mem_mu. Undoes DropMapping and TakeMappingInRange (failed unmap).
void RestoreMapping(void* ctx, uint64_t key, const AllocRecord& m) {
  auto* u = static_cast<UnmapSettle*>(ctx);
  AllocRecord taken;
  if (u->freed->Take(m.link, &taken)) {
    u->vmm_handles->Put(m.link, taken);
  }
  AllocRecord mapping = m;
  mapping.refs = 0;
  u->vmm_maps->Put(key, mapping);
  if (AllocRecord* r = u->vmm_handles->Find(m.link)) {
    ++r->refs;
    if (m.refs == 1 && r->unmapping > 0) {
      --r->unmapping;
    }
  }
}

void UnchargeFreed(void*, uint64_t, const AllocRecord& r) { UnchargeBytes(r.device, r.bytes); }

// REQUIRES: mem_mu. After a successful unmap, a handle DropMapping left
// (no memory to keep its record) is freed now; if there is still no room
// for it in freed, it stays charged (the safe side), and its record gives
// way to a new handle of the same value (HookMemCreate).
void TakeLateHandle(void* ctx, uint64_t, const AllocRecord& m) {
  auto* u = static_cast<UnmapSettle*>(ctx);
  AllocRecord* r = u->vmm_handles->Find(m.link);
  AllocRecord taken;
  if (r != nullptr && r->refs <= 0 && r->unmapping <= 0 && r->link == kReleased &&
      u->freed->Put(m.link, *r)) {
    u->vmm_handles->Take(m.link, &taken);
  }
}

// What the shim could not settle before a successful unmap (it ran out of
// memory for the records it keeps) is settled after it, as it always was
// before: in batches of mappings still in range, then the handles of those
// taken out that are free now (into u->freed, uncharged by the caller).
void SettleLate(ShimState& s, UnmapSettle* u) {
  for (;;) {
    RangeCollector c{u->lo, u->hi, {}, 0};
    AllocRecord freed[kUnmapBatch];
    int nfreed = 0;
    pthread_mutex_lock(&s.mem_mu);
    s.vmm_maps->ForEach(CollectInRange, &c);
    for (int i = 0; i < c.count; ++i) {
      AllocRecord m;
      if (!s.vmm_maps->Take(c.keys[i], &m)) {
        continue;
      }
      if (AllocRecord* h = s.vmm_handles->Find(m.link)) {
        --h->refs;
        if (h->refs <= 0 && h->unmapping <= 0 && h->link == kReleased) {
          s.vmm_handles->Take(m.link, &freed[nfreed++]);
        }
      }
    }
    pthread_mutex_unlock(&s.mem_mu);
    for (int i = 0; i < nfreed; ++i) {
      UnchargeBytes(freed[i].device, freed[i].bytes);
    }
    if (c.count < kUnmapBatch) {
      break;
    }
  }
  pthread_mutex_lock(&s.mem_mu);
  u->maps->ForEach(TakeLateHandle, u);
  pthread_mutex_unlock(&s.mem_mu);
}

// One unmap may cover several mappings; handles whose last mapping goes
// away after release are freed by the driver with it. As in cuMemRelease,
// the records are settled before the real call and put back if it fails:
// once the driver freed a handle, it may hand the same value to another
// thread's cuMemCreate before the unmap returns, and that handle's record
// must find the freed one's gone.
template <int S>
CUresult HookMemUnmap(CUdeviceptr ptr, size_t size) {
  EnsureCuda();
  auto real = Real<cuMemUnmapFn>(kHookMemUnmap, S);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  if (!s.mem_on) {
    return real(ptr, size);
  }
  AllocTable maps;
  AllocTable freed;
  UnmapSettle u{ptr, ptr + size, s.vmm_maps, s.vmm_handles, &maps, &freed, false};
  pthread_mutex_lock(&s.mem_mu);
  s.vmm_maps->TakeIf(TakeMappingInRange, &u);
  maps.ForEachMutable(DropMapping, &u);
  pthread_mutex_unlock(&s.mem_mu);
  CUresult rc = real(ptr, size);
  if (rc != CUDA_SUCCESS) {
    pthread_mutex_lock(&s.mem_mu);
    maps.ForEach(RestoreMapping, &u);
    pthread_mutex_unlock(&s.mem_mu);
    return rc;
  }
  pthread_mutex_lock(&s.mem_mu);
  maps.ForEach(SettleDeferred, &u);
  pthread_mutex_unlock(&s.mem_mu);
  if (u.late) {
    SettleLate(s, &u);
  }
  freed.ForEach(UnchargeFreed, nullptr);
  return rc;
}

// The handle backing a mapped address, with one more reference held by the
// application (the driver counts it; each reference takes a cuMemRelease).
// The retained handle is the one that was mapped, so its record is found by
// value. A retain of a handle whose creator already released it (it lives on
// through its mappings) makes it unreleased again; otherwise it adds to the
// record's retains, which cuMemRelease consumes first.
template <int S>
CUresult HookMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  EnsureCuda();
  auto real = Real<cuMemRetainAllocationHandleFn>(kHookMemRetainAllocationHandle, S);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  CUresult rc = real(handle, addr);
  if (rc != CUDA_SUCCESS || !s.mem_on || handle == nullptr) {
    return rc;
  }
  pthread_mutex_lock(&s.mem_mu);
  if (AllocRecord* r = s.vmm_handles->Find(*handle)) {
    if (r->link == kReleased) {
      r->link = 0;
    } else {
      ++r->retains;
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  return rc;
}

// Sparse and deferred-mapping arrays are backed by cuMemCreate handles
// mapped into them (tiles, a mip tail) here. Which handle an unmap takes
// out cannot be known: an unmap names no handle (its memHandle must be
// NULL), only a region of the array, and destroying an array drops its
// mappings unannounced. So a handle mapped into an array is pinned: it takes
// one mapping reference that is never dropped, and keeps its charge until
// the process ends, whatever releases and unmaps follow. That over-charges
// a handle whose array mappings are all gone, which is the safe side; not
// counting them let a released handle's memory, still mapped into an array,
// escape the cap. The pin is taken before the call, so a release racing the
// map never finds the handle unreferenced; a map that fails keeps it.
template <int S>
CUresult HookMemMapArrayAsync(CUarrayMapInfo* infos, unsigned int count, CUstream stream) {
  EnsureCuda();
  auto real = Real<cuMemMapArrayAsyncFn>(kHookMemMapArrayAsync, S);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  if (s.mem_on && infos != nullptr) {
    pthread_mutex_lock(&s.mem_mu);
    for (unsigned int i = 0; i < count; ++i) {
      const CUarrayMapInfo& m = infos[i];
      if (m.memOperationType != CU_MEM_OPERATION_TYPE_MAP ||
          m.memHandleType != CU_MEM_HANDLE_TYPE_GENERIC) {
        continue;
      }
      AllocRecord* r = s.vmm_handles->Find(m.memHandle.memHandle);
      if (r != nullptr && !r->array_mapped) {
        r->array_mapped = true;
        ++r->refs;
      }
    }
    pthread_mutex_unlock(&s.mem_mu);
  }
  return real(infos, count, stream);
}

}  // namespace

void* VmmHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {ACCELPOOL_HOOK_SLOTS(HookMemCreate),
                                         ACCELPOOL_HOOK_SLOTS(HookMemRelease),
                                         ACCELPOOL_HOOK_SLOTS(HookMemMap),
                                         ACCELPOOL_HOOK_SLOTS(HookMemUnmap),
                                         ACCELPOOL_HOOK_SLOTS(HookMemRetainAllocationHandle),
                                         ACCELPOOL_HOOK_SLOTS(HookMemMapArrayAsync)};
  if (id < kHookMemCreate || id > kHookMemMapArrayAsync || slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  return kTable[id - kHookMemCreate][slot];
}

}  // namespace accelpool::cuda

using namespace accelpool::cuda;  // NOLINT: exported C entry points below.

ACCELPOOL_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t n,
                                      const CUmemAllocationProp* p,
                                      unsigned long long f) {  // NOLINT
  return HookMemCreate<0>(h, n, p, f);
}
ACCELPOOL_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  return HookMemRelease<0>(h);
}
ACCELPOOL_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t o,
                                   CUmemGenericAllocationHandle h,
                                   unsigned long long f) {  // NOLINT
  return HookMemMap<0>(p, n, o, h, f);
}
ACCELPOOL_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n) { return HookMemUnmap<0>(p, n); }
ACCELPOOL_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* a) {
  return HookMemRetainAllocationHandle<0>(h, a);
}
ACCELPOOL_EXPORT CUresult cuMemMapArrayAsync(CUarrayMapInfo* m, unsigned int n, CUstream st) {
  return HookMemMapArrayAsync<0>(m, n, st);
}
ACCELPOOL_EXPORT CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo* m, unsigned int n, CUstream st) {
  return HookMemMapArrayAsync<1>(m, n, st);
}
