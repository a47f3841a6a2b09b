// Memory hooks: every device allocation path is charged to the container's
// shared region at the driver's granularity before (or, where the size is
// only known afterwards, right after) the real call; the matching free
// uncharges exactly what was charged. Past the cap a call returns
// CUDA_ERROR_OUT_OF_MEMORY. Memory queries report the cap. See shim.h.
#include <unistd.h>

#include "cuda/log.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

enum class Charge { kCharged, kNotLimited, kOverLimit };

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

uint64_t ElementBytes(int format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit and unknown (packed, compressed) formats: charge 4.
  }
}

uint64_t ArrayBytes(size_t w, size_t h, size_t d, int format, unsigned channels) {
  uint64_t bytes = static_cast<uint64_t>(w) * ElementBytes(format) * (channels == 0 ? 1 : channels);
  bytes *= h == 0 ? 1 : h;
  bytes *= d == 0 ? 1 : d;
  return RoundToGranularity(bytes);
}

#define ACCELPOOL_REAL_OR_FAIL(type, id)      \
  EnsureCuda();                               \
  auto real = Real<type>(id, S);              \
  if (real == nullptr) {                      \
    return CUDA_ERROR_NOT_FOUND;              \
  }                                           \
  ShimState& s = State();                     \
  (void)s

template <int S>
CUresult HookMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocFn, kHookMemAlloc);
  int dev = 0;
  if (!s.mem_on || dptr == nullptr || !CurrentDevice(&dev)) {
    return real(dptr, bytes);
  }
  return ChargeAndCall(
      s.pointers, dev, RoundToGranularity(bytes), [&] { return real(dptr, bytes); },
      [&] { return *dptr; });
}

template <int S>
CUresult HookMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocManagedFn, kHookMemAllocManaged);
  int dev = 0;
  if (!s.mem_on || dptr == nullptr || !CurrentDevice(&dev)) {
    return real(dptr, bytes, flags);
  }
  return ChargeAndCall(
      s.pointers, dev, RoundToGranularity(bytes), [&] { return real(dptr, bytes, flags); },
      [&] { return *dptr; });
}

template <int S>
CUresult HookMemAllocPitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                           unsigned int element) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocPitchFn, kHookMemAllocPitch);
  int dev = 0;
  CUresult rc = real(dptr, pitch, width, height, element);
  if (rc != CUDA_SUCCESS || !s.mem_on || dptr == nullptr || pitch == nullptr ||
      !CurrentDevice(&dev)) {
    return rc;
  }
  // The pitch is chosen by the driver, so the size is known only now.
  uint64_t bytes = RoundToGranularity(static_cast<uint64_t>(*pitch) * height);
  Charge c = ChargeBytes(dev, bytes);
  if (c == Charge::kOverLimit) {
    if (auto free_fn = Real<cuMemFreeFn>(kHookMemFree, 0)) {
      free_fn(*dptr);
    }
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (c == Charge::kCharged) {
    Remember(s.pointers, *dptr, bytes, dev);
  }
  return rc;
}

template <int S>
CUresult HookMemFree(CUdeviceptr ptr) {
  ACCELPOOL_REAL_OR_FAIL(cuMemFreeFn, kHookMemFree);
  CUresult rc = real(ptr);
  if (rc == CUDA_SUCCESS && s.mem_on) {
    Forget(s.pointers, ptr);
  }
  return rc;
}

template <int S>
CUresult HookMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocAsyncFn, kHookMemAllocAsync);
  int dev = 0;
  if (!s.mem_on || dptr == nullptr || !CurrentDevice(&dev)) {
    return real(dptr, bytes, stream);
  }
  return ChargeAndCall(
      s.pointers, dev, RoundToGranularity(bytes), [&] { return real(dptr, bytes, stream); },
      [&] { return *dptr; });
}

template <int S>
CUresult HookMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                   CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocFromPoolAsyncFn, kHookMemAllocFromPoolAsync);
  int dev = 0;
  if (!s.mem_on || dptr == nullptr || !CurrentDevice(&dev)) {
    return real(dptr, bytes, pool, stream);
  }
  return ChargeAndCall(
      s.pointers, dev, RoundToGranularity(bytes),
      [&] { return real(dptr, bytes, pool, stream); }, [&] { return *dptr; });
}

template <int S>
CUresult HookMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuMemFreeAsyncFn, kHookMemFreeAsync);
  CUresult rc = real(ptr, stream);
  if (rc == CUDA_SUCCESS && s.mem_on) {
    Forget(s.pointers, ptr);
  }
  return rc;
}

template <int S>
CUresult HookArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  ACCELPOOL_REAL_OR_FAIL(cuArrayCreateFn, kHookArrayCreate);
  int dev = 0;
  if (!s.mem_on || array == nullptr || desc == nullptr || !CurrentDevice(&dev)) {
    return real(array, desc);
  }
  uint64_t bytes = ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return ChargeAndCall(
      s.arrays, dev, bytes, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

template <int S>
CUresult HookArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  ACCELPOOL_REAL_OR_FAIL(cuArray3DCreateFn, kHookArray3DCreate);
  int dev = 0;
  if (!s.mem_on || array == nullptr || desc == nullptr || !CurrentDevice(&dev)) {
    return real(array, desc);
  }
  uint64_t bytes =
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return ChargeAndCall(
      s.arrays, dev, bytes, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

template <int S>
CUresult HookArrayDestroy(CUarray array) {
  ACCELPOOL_REAL_OR_FAIL(cuArrayDestroyFn, kHookArrayDestroy);
  CUresult rc = real(array);
  if (rc == CUDA_SUCCESS && s.mem_on) {
    Forget(s.arrays, reinterpret_cast<uint64_t>(array));
  }
  return rc;
}

template <int S>
CUresult HookIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  ACCELPOOL_REAL_OR_FAIL(cuIpcOpenMemHandleFn, kHookIpcOpenMemHandle);
  CUresult rc = real(dptr, handle, flags);
  int dev = 0;
  if (rc != CUDA_SUCCESS || !s.mem_on || dptr == nullptr || s.mem_get_address_range == nullptr ||
      !CurrentDevice(&dev)) {
    return rc;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (s.mem_get_address_range(&base, &size, *dptr) != CUDA_SUCCESS) {
    return rc;
  }
  uint64_t bytes = RoundToGranularity(size);
  Charge c = ChargeBytes(dev, bytes);
  if (c == Charge::kOverLimit) {
    if (auto close_fn = Real<cuIpcCloseMemHandleFn>(kHookIpcCloseMemHandle, 0)) {
      close_fn(*dptr);
    }
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (c == Charge::kCharged) {
    Remember(s.ipc, *dptr, bytes, dev);
  }
  return rc;
}

template <int S>
CUresult HookIpcCloseMemHandle(CUdeviceptr ptr) {
  ACCELPOOL_REAL_OR_FAIL(cuIpcCloseMemHandleFn, kHookIpcCloseMemHandle);
  CUresult rc = real(ptr);
  if (rc == CUDA_SUCCESS && s.mem_on) {
    Forget(s.ipc, ptr);
  }
  return rc;
}

template <int S>
CUresult HookMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ACCELPOOL_REAL_OR_FAIL(cuMemGetInfoFn, kHookMemGetInfo);
  int dev = 0;
  if (!s.mem_on || !CurrentDevice(&dev) || !s.config.MemoryLimited(dev)) {
    return real(free_bytes, total_bytes);
  }
  size_t phys_free = 0;
  size_t phys_total = 0;
  CUresult rc = real(&phys_free, &phys_total);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  uint64_t cap = s.config.memory_limit_bytes[dev];
  if (cap > phys_total) {
    cap = phys_total;
  }
  uint64_t used = ContainerUsed(dev);
  uint64_t free_in_cap = used >= cap ? 0 : cap - used;
  if (free_in_cap > phys_free) {
    free_in_cap = phys_free;  // Other tenants may hold the rest of the card.
  }
  if (free_bytes != nullptr) {
    *free_bytes = static_cast<size_t>(free_in_cap);
  }
  if (total_bytes != nullptr) {
    *total_bytes = static_cast<size_t>(cap);
  }
  return CUDA_SUCCESS;
}

template <int S>
CUresult HookDeviceTotalMem(size_t* bytes, CUdevice device) {
  ACCELPOOL_REAL_OR_FAIL(cuDeviceTotalMemFn, kHookDeviceTotalMem);
  CUresult rc = real(bytes, device);
  if (rc == CUDA_SUCCESS && bytes != nullptr && s.config.MemoryLimited(device) &&
      *bytes > s.config.memory_limit_bytes[device]) {
    *bytes = static_cast<size_t>(s.config.memory_limit_bytes[device]);
  }
  return rc;
}

}  // namespace

// VMM hooks live in hooks_vmm.cc; their instances are looked up there.
void* VmmHook(HookId id, int slot);

#define ACCELPOOL_SLOTS(fn) \
  {reinterpret_cast<void*>(&fn<0>), reinterpret_cast<void*>(&fn<1>), \
   reinterpret_cast<void*>(&fn<2>), reinterpret_cast<void*>(&fn<3>)}

void* MemoryHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {
      ACCELPOOL_SLOTS(HookMemAlloc),          ACCELPOOL_SLOTS(HookMemAllocPitch),
      ACCELPOOL_SLOTS(HookMemAllocManaged),   ACCELPOOL_SLOTS(HookMemFree),
      ACCELPOOL_SLOTS(HookArrayCreate),       ACCELPOOL_SLOTS(HookArray3DCreate),
      ACCELPOOL_SLOTS(HookArrayDestroy),      ACCELPOOL_SLOTS(HookMemAllocAsync),
      ACCELPOOL_SLOTS(HookMemAllocFromPoolAsync), ACCELPOOL_SLOTS(HookMemFreeAsync),
  };
  if (slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  if (id >= kHookMemAlloc && id <= kHookMemFreeAsync) {
    return kTable[id - kHookMemAlloc][slot];
  }
  if (id >= kHookMemCreate && id <= kHookMemUnmap) {
    return VmmHook(id, slot);
  }
  static void* const kOther[][kSlots] = {
      ACCELPOOL_SLOTS(HookIpcOpenMemHandle), ACCELPOOL_SLOTS(HookIpcCloseMemHandle),
      ACCELPOOL_SLOTS(HookMemGetInfo), ACCELPOOL_SLOTS(HookDeviceTotalMem)};
  if (id >= kHookIpcOpenMemHandle && id <= kHookDeviceTotalMem) {
    return kOther[id - kHookIpcOpenMemHandle][slot];
  }
  return nullptr;
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

// Charge helpers shared with hooks_vmm.cc.
bool VmmCharge(int device, uint64_t bytes, bool* charged) {
  Charge c = ChargeBytes(device, bytes);
  *charged = c == Charge::kCharged;
  return c != Charge::kOverLimit;
}
void VmmUncharge(int device, uint64_t bytes) { UnchargeBytes(device, bytes); }

}  // namespace accelpool::cuda

using namespace accelpool::cuda;  // NOLINT: exported C entry points below.

ACCELPOOL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return HookMemAlloc<0>(p, n); }
ACCELPOOL_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t w, size_t h,
                                             unsigned e) {
  return HookMemAllocPitch<0>(p, pitch, w, h, e);
}
ACCELPOOL_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned f) {
  return HookMemAllocManaged<0>(p, n, f);
}
ACCELPOOL_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return HookMemFree<0>(p); }
ACCELPOOL_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* d) {
  return HookArrayCreate<0>(a, d);
}
ACCELPOOL_EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  return HookArray3DCreate<0>(a, d);
}
ACCELPOOL_EXPORT CUresult cuArrayDestroy(CUarray a) { return HookArrayDestroy<0>(a); }
ACCELPOOL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream st) {
  return HookMemAllocAsync<0>(p, n, st);
}
ACCELPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t n, CUstream st) {
  return HookMemAllocAsync<1>(p, n, st);
}
ACCELPOOL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, CUmemoryPool pool,
                                                  CUstream st) {
  return HookMemAllocFromPoolAsync<0>(p, n, pool, st);
}
ACCELPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t n,
                                                       CUmemoryPool pool, CUstream st) {
  return HookMemAllocFromPoolAsync<1>(p, n, pool, st);
}
ACCELPOOL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream st) {
  return HookMemFreeAsync<0>(p, st);
}
ACCELPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream st) {
  return HookMemFreeAsync<1>(p, st);
}
ACCELPOOL_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle h, unsigned f) {
  return HookIpcOpenMemHandle<0>(p, h, f);
}
ACCELPOOL_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return HookIpcCloseMemHandle<0>(p); }
ACCELPOOL_EXPORT CUresult cuMemGetInfo_v2(size_t* f, size_t* t) { return HookMemGetInfo<0>(f, t); }
ACCELPOOL_EXPORT CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice d) {
  return HookDeviceTotalMem<0>(b, d);
}
