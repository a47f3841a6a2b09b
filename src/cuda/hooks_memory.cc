// Memory hooks: every device allocation path is charged to the container's
// shared region at the driver's granularity before (or, where the size is
// only known afterwards, right after) the real call; the matching free
// uncharges exactly what was charged. Stream-ordered pools are the
// exception: they are charged what they reserve (accounting.h). Past the cap
// a call returns CUDA_ERROR_OUT_OF_MEMORY. VMM is in hooks_vmm.cc, IPC
// imports and memory queries in hooks_info.cc, graph memory nodes in
// hooks_graph.cc. See shim.h and accounting.h.
#include "cuda/accounting.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

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

// A sparse or deferred-mapping array has no memory of its own: what backs it
// is mapped in from cuMemCreate handles (cuMemMapArrayAsync), charged there,
// and kept charged once mapped into an array (hooks_vmm.cc).
bool BackedLater(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  return (desc.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) != 0;
}

template <int S>
CUresult HookMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocFn, kHookMemAlloc);
  int dev = 0;
  // Zero bytes: the driver's CUDA_ERROR_INVALID_VALUE, never an OOM at the cap.
  if (!s.mem_on || dptr == nullptr || bytes == 0 || !CurrentDevice(&dev)) {
    return real(dptr, bytes);
  }
  return ChargeAndCall(
      s.pointers, dev, RoundToGranularity(bytes), Owner::kContext,
      [&] { return real(dptr, bytes); }, [&] { return *dptr; });
}

template <int S>
CUresult HookMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocManagedFn, kHookMemAllocManaged);
  int dev = 0;
  if (!s.mem_on || dptr == nullptr || bytes == 0 || !CurrentDevice(&dev)) {
    return real(dptr, bytes, flags);
  }
  return ChargeAndCall(
      s.pointers, dev, RoundToGranularity(bytes), Owner::kContext,
      [&] { return real(dptr, bytes, flags); }, [&] { return *dptr; });
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
  Charge c = ChargeBytesAfterSync(dev, bytes);
  if (c == Charge::kOverLimit) {
    if (auto free_fn = Real<cuMemFreeFn>(kHookMemFree, 0)) {
      free_fn(*dptr);
    }
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (c == Charge::kCharged) {
    Remember(s.pointers, *dptr, bytes, dev, CurrentContext());
  }
  return rc;
}

template <int S>
CUresult HookMemFree(CUdeviceptr ptr) {
  ACCELPOOL_REAL_OR_FAIL(cuMemFreeFn, kHookMemFree);
  if (!s.mem_on) {
    return real(ptr);
  }
  return ForgetAndCall(s.pointers, ptr, [&] { return real(ptr); });
}

// Frees a refused stream-ordered allocation on `stream` through the real
// driver and waits for the stream: a pool trim does not release memory
// whose free the host has not yet seen complete, so without the wait the
// refused growth stayed reserved (uncharged) and, with a release threshold
// of UINT64_MAX, every later allocation of that pool was refused as if it
// grew past the cap. Stream 0 of a _ptsz entry point is the per-thread
// stream. The wait is made in relaxed capture mode: another thread's global
// capture must not be invalidated by it.
void FreeOnStream(CUdeviceptr ptr, CUstream stream, bool per_thread) {
  ShimState& s = State();
  CUstream target = stream == nullptr && per_thread ? ACCELPOOL_CU_STREAM_PER_THREAD : stream;
  if (auto free_fn = Real<cuMemFreeAsyncFn>(kHookMemFreeAsync, 0)) {
    free_fn(ptr, target);
  } else if (auto free_ptsz = Real<cuMemFreeAsyncFn>(kHookMemFreeAsync, 1)) {
    free_ptsz(ptr, stream);
  }
  if (s.stream_synchronize == nullptr) {
    return;
  }
  int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool swapped =
      s.exchange_capture_mode != nullptr && s.exchange_capture_mode(&mode) == CUDA_SUCCESS;
  s.stream_synchronize(target);
  if (swapped) {
    s.exchange_capture_mode(&mode);  // Back to the thread's own mode.
  }
}

// Stream-ordered allocations are charged by pool reserve (accounting.h);
// a pool whose reserve cannot be read is charged per allocation. The pool is
// the current pool of the stream's device, which need not be the current
// context's (StreamDevice). On a capturing stream an allocation becomes a
// memory node of the graph being captured: nothing is allocated now; the
// graph's upload or first launch is charged for it (hooks_graph.cc).
template <int S>
CUresult HookMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocAsyncFn, kHookMemAllocAsync);
  int dev = 0;
  bool per_thread = s.per_thread_stream[kHookMemAllocAsync][S];
  if (!s.mem_on || dptr == nullptr || !StreamDevice(stream, &dev) || !DeviceMemoryLimited(dev) ||
      StreamCapturing(stream, per_thread)) {
    return real(dptr, bytes, stream);
  }
  CUmemoryPool pool = nullptr;
  PoolTrack track = PoolTrack::kPerAllocation;
  if (s.device_get_mem_pool != nullptr && s.device_get_mem_pool(&pool, dev) == CUDA_SUCCESS) {
    track = TrackPool(pool, &dev);
  }
  if (track == PoolTrack::kHostMemory) {
    return real(dptr, bytes, stream);
  }
  if (track == PoolTrack::kPerAllocation) {
    return ChargeAndCall(
        s.pointers, dev, RoundToGranularity(bytes), Owner::kNone,
        [&] { return real(dptr, bytes, stream); }, [&] { return *dptr; });
  }
  return PoolAllocAndCharge(
      pool, dev, dptr, [&] { return real(dptr, bytes, stream); },
      [&](CUdeviceptr p) { FreeOnStream(p, stream, per_thread); });
}

template <int S>
CUresult HookMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                   CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuMemAllocFromPoolAsyncFn, kHookMemAllocFromPoolAsync);
  int dev = 0;
  bool per_thread = s.per_thread_stream[kHookMemAllocFromPoolAsync][S];
  // The stream's device, not the current context's: a thread with no current
  // context may allocate on a stream it was given (it passed through
  // uncharged), and the stream's device is the better guess for a pool
  // that does not say where it lives.
  if (!s.mem_on || dptr == nullptr || !StreamDevice(stream, &dev) ||
      StreamCapturing(stream, per_thread)) {
    return real(dptr, bytes, pool, stream);
  }
  // The pool names its location: charged to its device, whatever the
  // stream's; a host pool is never charged.
  PoolTrack track = TrackPool(pool, &dev);
  if (track == PoolTrack::kHostMemory || !DeviceMemoryLimited(dev)) {
    return real(dptr, bytes, pool, stream);
  }
  if (track == PoolTrack::kPerAllocation) {
    return ChargeAndCall(
        s.pointers, dev, RoundToGranularity(bytes), Owner::kNone,
        [&] { return real(dptr, bytes, pool, stream); }, [&] { return *dptr; });
  }
  return PoolAllocAndCharge(
      pool, dev, dptr, [&] { return real(dptr, bytes, pool, stream); },
      [&](CUdeviceptr p) { FreeOnStream(p, stream, per_thread); });
}

// On a capturing stream a free frees nothing: it becomes a free node of the
// graph being captured, and the block stays allocated until that graph runs
// (later, or never). Its record goes as at any free (once the graph has
// freed it, the address may be handed out again and must not meet it), but
// its charge is kept until the process ends: when the graph frees it is not
// seen, and over-charging is the safe side. A block of a pool charged by
// reserve keeps its pool's charge that way too (the pool is re-read at its
// next allocation, free or trim).
template <int S>
CUresult HookMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuMemFreeAsyncFn, kHookMemFreeAsync);
  if (!s.mem_on) {
    return real(ptr, stream);
  }
  if (StreamCapturing(stream, s.per_thread_stream[kHookMemFreeAsync][S])) {
    AllocRecord kept;
    const bool tracked = TakeRecord(s.pointers, ptr, &kept);
    CUresult rc = real(ptr, stream);
    if (tracked && rc != CUDA_SUCCESS) {
      RestoreRecord(s.pointers, ptr, kept);
    }
    return rc;
  }
  return ForgetAndCall(s.pointers, ptr, [&] { return real(ptr, stream); });
}

template <int S>
CUresult HookMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  ACCELPOOL_REAL_OR_FAIL(cuMemPoolTrimToFn, kHookMemPoolTrimTo);
  CUresult rc = real(pool, keep);
  if (rc == CUDA_SUCCESS && s.mem_on) {
    SyncPool(pool);  // Returns what the trim released to the container at once.
  }
  return rc;
}

template <int S>
CUresult HookMemPoolDestroy(CUmemoryPool pool) {
  ACCELPOOL_REAL_OR_FAIL(cuMemPoolDestroyFn, kHookMemPoolDestroy);
  if (!s.mem_on) {
    return real(pool);
  }
  // Untracked first, so that nothing reads the handle once it is destroyed
  // (and a new pool that gets the handle keeps its own home).
  PoolAccount account;
  bool tracked = TakePool(pool, &account);
  AllocRecord home;
  bool homed = ForgetPoolHome(pool, &home);
  CUresult rc = real(pool);
  if (rc != CUDA_SUCCESS && homed) {
    RestorePoolHome(pool, home);
  }
  if (tracked) {
    if (rc == CUDA_SUCCESS) {
      RetirePool(account);  // Its blocks still allocated keep its memory until freed.
    } else {
      RestorePool(account);
    }
  }
  return rc;
}

// A CUDA 13.0 driver cannot say later where a pool lives; its properties do.
template <int S>
CUresult HookMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  ACCELPOOL_REAL_OR_FAIL(cuMemPoolCreateFn, kHookMemPoolCreate);
  CUresult rc = real(pool, props);
  if (rc == CUDA_SUCCESS && s.mem_on && pool != nullptr && props != nullptr) {
    RememberPoolHome(*pool, props->location);
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
      s.arrays, dev, bytes, Owner::kContext, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

template <int S>
CUresult HookArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  ACCELPOOL_REAL_OR_FAIL(cuArray3DCreateFn, kHookArray3DCreate);
  int dev = 0;
  if (!s.mem_on || array == nullptr || desc == nullptr || BackedLater(*desc) ||
      !CurrentDevice(&dev)) {
    return real(array, desc);
  }
  uint64_t bytes =
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return ChargeAndCall(
      s.arrays, dev, bytes, Owner::kContext, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

// A mipmapped array holds every level: level l is the base extent halved l
// times (at least 1 in each used dimension). The driver rejects more levels
// than the extent allows, after the charge has been returned. A layered or
// cubemap array's Depth is its layer (face) count: every level has them all.
uint64_t MipmappedBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  const bool layers = (d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t total = 0;
  for (unsigned l = 0; l < levels && l < 64; ++l) {
    size_t w = d.Width >> l;
    size_t h = d.Height >> l;
    size_t z = layers ? d.Depth : d.Depth >> l;
    total += static_cast<uint64_t>(w == 0 ? 1 : w) * ElementBytes(d.Format) *
             (d.NumChannels == 0 ? 1 : d.NumChannels) * (d.Height == 0 ? 1 : (h == 0 ? 1 : h)) *
             (d.Depth == 0 ? 1 : (z == 0 ? 1 : z));
  }
  return RoundToGranularity(total);
}

template <int S>
CUresult HookMipmappedArrayCreate(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                  unsigned int levels) {
  ACCELPOOL_REAL_OR_FAIL(cuMipmappedArrayCreateFn, kHookMipmappedArrayCreate);
  int dev = 0;
  if (!s.mem_on || array == nullptr || desc == nullptr || BackedLater(*desc) ||
      !CurrentDevice(&dev)) {
    return real(array, desc, levels);
  }
  return ChargeAndCall(
      s.arrays, dev, MipmappedBytes(*desc, levels), Owner::kContext,
      [&] { return real(array, desc, levels); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

template <int S>
CUresult HookMipmappedArrayDestroy(CUmipmappedArray array) {
  ACCELPOOL_REAL_OR_FAIL(cuMipmappedArrayDestroyFn, kHookMipmappedArrayDestroy);
  if (!s.mem_on) {
    return real(array);
  }
  return ForgetAndCall(s.arrays, reinterpret_cast<uint64_t>(array), [&] { return real(array); });
}

template <int S>
CUresult HookArrayDestroy(CUarray array) {
  ACCELPOOL_REAL_OR_FAIL(cuArrayDestroyFn, kHookArrayDestroy);
  if (!s.mem_on) {
    return real(array);
  }
  return ForgetAndCall(s.arrays, reinterpret_cast<uint64_t>(array), [&] { return real(array); });
}

}  // namespace

// VMM hooks live in hooks_vmm.cc, IPC and memory queries in hooks_info.cc.
void* VmmHook(HookId id, int slot);
void* InfoHook(HookId id, int slot);
void* ContextHook(HookId id, int slot);

void* MemoryHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {
      ACCELPOOL_HOOK_SLOTS(HookMemAlloc),
      ACCELPOOL_HOOK_SLOTS(HookMemAllocPitch),
      ACCELPOOL_HOOK_SLOTS(HookMemAllocManaged),
      ACCELPOOL_HOOK_SLOTS(HookMemFree),
      ACCELPOOL_HOOK_SLOTS(HookArrayCreate),
      ACCELPOOL_HOOK_SLOTS(HookArray3DCreate),
      ACCELPOOL_HOOK_SLOTS(HookArrayDestroy),
      ACCELPOOL_HOOK_SLOTS(HookMemAllocAsync),
      ACCELPOOL_HOOK_SLOTS(HookMemAllocFromPoolAsync),
      ACCELPOOL_HOOK_SLOTS(HookMemFreeAsync),
      ACCELPOOL_HOOK_SLOTS(HookMemPoolTrimTo),
      ACCELPOOL_HOOK_SLOTS(HookMemPoolDestroy),
      ACCELPOOL_HOOK_SLOTS(HookMipmappedArrayCreate),
      ACCELPOOL_HOOK_SLOTS(HookMipmappedArrayDestroy),
      ACCELPOOL_HOOK_SLOTS(HookMemPoolCreate),
  };
  if (slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  if (id >= kHookMemAlloc && id <= kHookMemPoolCreate) {
    return kTable[id - kHookMemAlloc][slot];
  }
  if (id >= kHookMemCreate && id <= kHookMemMapArrayAsync) {
    return VmmHook(id, slot);
  }
  if (id >= kHookIpcOpenMemHandle && id <= kHookDeviceTotalMem) {
    return InfoHook(id, slot);
  }
  if (id >= kHookDevicePrimaryCtxReset && id <= kHookCtxSetLimit) {
    return ContextHook(id, slot);
  }
  return nullptr;
}

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
ACCELPOOL_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* a,
                                                 const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned n) {
  return HookMipmappedArrayCreate<0>(a, d, n);
}
ACCELPOOL_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
  return HookMipmappedArrayDestroy<0>(a);
}
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
ACCELPOOL_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  return HookMemPoolTrimTo<0>(pool, keep);
}
ACCELPOOL_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return HookMemPoolDestroy<0>(pool);
}
ACCELPOOL_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  return HookMemPoolCreate<0>(pool, props);
}
