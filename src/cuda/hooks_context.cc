// Context lifetime hooks: a primary context reset (cudaDeviceReset), the
// last release of a primary context (which resets it) and cuCtxDestroy free
// what was made in the context without a free the shim sees. Their records
// go once the driver has done so: otherwise the charges stay until the
// process exits (a process that creates and destroys contexts, or retains
// and releases a primary context, in a loop is refused well under its cap),
// and measurement events of a dead context are later queried and destroyed
// on dangling handles. See shim.h.
//
// A primary context reset drops the records of what it freed: the memory
// of its device that no created context owns, the default pool's and the
// graph pool's (DropDeviceRecords). cuCtxDestroy,
// and a cuDevicePrimaryCtxRelease after which the driver reports the primary
// context inactive, drop the records of the memory that context owned: each
// record of such memory carries the context current at its allocation
// (Owner, accounting.h); the primary context's handle is the one its last
// cuDevicePrimaryCtxRetain returned. Memory that no context owns
// (stream-ordered pools, cuMemCreate handles, graph memory) stays charged
// until its own free. Green contexts (cuGreenCtxDestroy) are not hooked:
// the memory allocated in one is the primary context's, and goes with it.
//
// A record's context is a handle value, and the driver hands a value out
// again once its context is gone. Records whose context ended without the
// shim settling them (a green context's CUcontext, whose memory lives on in
// the primary context; a release whose state query failed) would be taken
// by the end of a new context that got their value, and their charges
// returned while the memory is still held. So a context's birth disowns
// them (DisownContextRecords) at a successful cuCtxCreate_v2/_v3/_v4: they
// stay charged until their own free. Only context creation pays: one pass
// over the tables, with memory limits on. (A primary context made anew
// under a handle value with such records is not covered.)
// cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE) is hooked here too: the device
// malloc heap is memory of its context, reserved when the limit is raised,
// and goes with the context (its record is one of the context's).
// docs/enforcement.md says more.
#include "cuda/accounting.h"
#include "cuda/log.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

// After the driver's reset: allocations made on the device meanwhile by
// another thread (a race the application has already lost) go too.
CUresult PrimaryCtxReset(HookId id, int slot, CUdevice device) {
  EnsureCuda();
  auto real = Real<cuDevicePrimaryCtxResetFn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  // The reset frees the device's default pool (and makes it the current
  // one again); its handle is read before, while it is sure to be valid.
  CUmemoryPool default_pool = nullptr;
  if (s.mem_on && (s.device_get_default_mem_pool == nullptr ||
                   s.device_get_default_mem_pool(&default_pool, device) != CUDA_SUCCESS)) {
    default_pool = nullptr;
  }
  CUresult rc = real(device);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s.mem_on) {
    DropDeviceRecords(device, default_pool);
  }
  if (s.compute_on) {
    ForgetContextEvents(nullptr, device);
  }
  return rc;
}

CUresult CtxDestroy(HookId id, int slot, CUcontext ctx) {
  EnsureCuda();
  auto real = Real<cuCtxDestroyFn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  // Marked before the call: once the driver has destroyed the context, a
  // new one may get its handle, and that one's allocations are not dropped.
  // The driver refuses some handles (a primary context's, a dead one): then
  // nothing goes.
  uint64_t mark = s.mem_on ? MarkContextRecords(reinterpret_cast<uint64_t>(ctx)) : 0;
  CUresult rc = real(ctx);
  SettleContextRecords(mark, reinterpret_cast<uint64_t>(ctx), rc == CUDA_SUCCESS);
  if (rc == CUDA_SUCCESS && s.mem_on) {
    ForgetCreatedContext(reinterpret_cast<uint64_t>(ctx));
  }
  if (rc == CUDA_SUCCESS && s.compute_on && ctx != nullptr) {
    ForgetContextEvents(ctx, -1);
  }
  return rc;
}

// Passes through; learns the handle of the device's primary context.
CUresult PrimaryCtxRetain(HookId id, int slot, CUcontext* ctx, CUdevice device) {
  EnsureCuda();
  auto real = Real<cuDevicePrimaryCtxRetainFn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  CUresult rc = real(ctx, device);
  if (rc == CUDA_SUCCESS && ctx != nullptr && device >= 0 && device < kMaxDevices) {
    State().primary_ctx[device].store(reinterpret_cast<uint64_t>(*ctx), std::memory_order_relaxed);
  }
  return rc;
}

// After a successful create (any ABI): the new context owns nothing yet,
// and a reset of the device's primary context will leave its memory alone.
CUresult CtxCreated(CUresult rc, CUcontext* ctx, CUdevice device) {
  if (rc == CUDA_SUCCESS && ctx != nullptr && State().mem_on) {
    DisownContextRecords(reinterpret_cast<uint64_t>(*ctx));
    RememberCreatedContext(reinterpret_cast<uint64_t>(*ctx), device);
  }
  if (rc == CUDA_SUCCESS && State().compute_on) {
    NoteContextCreated();
  }
  return rc;
}

CUresult CtxCreateV2(HookId id, int slot, CUcontext* ctx, unsigned int flags, CUdevice device) {
  EnsureCuda();
  auto real = Real<cuCtxCreateFn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CtxCreated(real(ctx, flags, device), ctx, device);
}

CUresult CtxCreateV3(HookId id, int slot, CUcontext* ctx, CUexecAffinityParam* params,
                     int num_params, unsigned int flags, CUdevice device) {
  EnsureCuda();
  auto real = Real<cuCtxCreateV3Fn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CtxCreated(real(ctx, params, num_params, flags, device), ctx, device);
}

CUresult CtxCreateV4(HookId id, int slot, CUcontext* ctx, CUctxCreateParams* params,
                     unsigned int flags, CUdevice device) {
  EnsureCuda();
  auto real = Real<cuCtxCreateV4Fn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CtxCreated(real(ctx, params, flags, device), ctx, device);
}

// True when the driver reports `device`'s primary context inactive. A query
// that fails (or a driver without it) says active: the charges stay.
bool PrimaryCtxInactive(CUdevice device) {
  ShimState& s = State();
  unsigned int flags = 0;
  int active = 1;
  CUresult rc = s.primary_ctx_get_state != nullptr
                    ? s.primary_ctx_get_state(device, &flags, &active)
                    : CUDA_ERROR_NOT_FOUND;
  if (rc != CUDA_SUCCESS) {
    if (!s.logged_primary_state.exchange(true, std::memory_order_relaxed)) {
      Logf(LogLevel::kDebug,
           "cuDevicePrimaryCtxGetState(%d) failed (%d) after a release; the primary context's "
           "charges stay",
           static_cast<int>(device), static_cast<int>(rc));
    }
    return false;
  }
  return active == 0;
}

// The release that drops the last reference resets the primary context,
// freeing the memory it owned (cuDevicePrimaryCtxRelease's documentation);
// whether this one did, only the driver's state says afterwards.
CUresult PrimaryCtxRelease(HookId id, int slot, CUdevice device) {
  EnsureCuda();
  auto real = Real<cuDevicePrimaryCtxReleaseFn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  uint64_t primary = device >= 0 && device < kMaxDevices
                         ? s.primary_ctx[device].load(std::memory_order_relaxed)
                         : 0;
  // Marked before the call, as for cuCtxDestroy: once the context is reset,
  // another thread may retain it again (the same handle) and allocate.
  uint64_t mark = s.mem_on ? MarkContextRecords(primary) : 0;
  CUresult rc = real(device);
  bool reset = rc == CUDA_SUCCESS && (mark != 0 || s.compute_on) && PrimaryCtxInactive(device);
  SettleContextRecords(mark, primary, reset);
  if (reset && s.compute_on) {
    // A primary context the shim saw no retain of (so no handle): the
    // device's events go, as at a reset.
    ForgetContextEvents(reinterpret_cast<CUcontext>(primary), primary != 0 ? -1 : device);
  }
  return rc;
}

// Puts a heap record back; uncharges it when it cannot be kept.
void KeepHeap(ShimState& s, uint64_t ctx, const AllocRecord& heap) {
  pthread_mutex_lock(&s.mem_mu);
  bool ok = s.heaps->Put(ctx, heap);
  pthread_mutex_unlock(&s.mem_mu);
  if (!ok && heap.bytes > 0) {
    UnchargeBytes(heap.device, heap.bytes);
  }
}

// cudaDeviceSetLimit(cudaLimitMallocHeapSize, n) resizes the current
// context's device malloc heap, which the driver reserves on the device.
// Charged: its growth past the size it had when the shim first saw it
// resized (cuCtxGetLimit then; the default 8 MiB is part of the context,
// like the rest of its overhead), at the page granularity, before the call:
// past the cap the call returns CUDA_ERROR_OUT_OF_MEMORY and the heap keeps
// its size. A shrink returns the difference, the context's end the rest.
// Other limits pass through (the stack size is a known gap,
// docs/enforcement.md).
CUresult CtxSetLimit(HookId id, int slot, int limit, size_t value) {
  EnsureCuda();
  auto real = Real<cuCtxSetLimitFn>(id, slot);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  ShimState& s = State();
  int dev = 0;
  const uint64_t ctx =
      limit == CU_LIMIT_MALLOC_HEAP_SIZE && s.mem_on && s.heaps != nullptr ? CurrentContext() : 0;
  if (ctx == 0 || !CurrentDevice(&dev) || !DeviceMemoryLimited(dev)) {
    return real(limit, value);
  }
  AllocRecord heap;
  if (TakeRecord(s.heaps, ctx, &heap) && heap.device != dev) {
    // The handle of a context that ended unseen, now another device's.
    UnchargeBytes(heap.device, heap.bytes);
    heap = AllocRecord();
  }
  if (heap.device < 0) {  // First seen: the size to charge growth from.
    size_t before = 0;
    heap.device = dev;
    heap.link = s.ctx_get_limit != nullptr &&
                        s.ctx_get_limit(&before, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS
                    ? before
                    : 0;
  }
  heap.context = ctx;
  const uint64_t target = value > heap.link ? RoundToGranularity(value - heap.link) : 0;
  const uint64_t grow = target > heap.bytes ? target - heap.bytes : 0;
  if (grow > 0) {
    Charge c = ChargeBytesAfterSync(dev, grow);
    if (c != Charge::kCharged) {
      KeepHeap(s, ctx, heap);
      return c == Charge::kOverLimit ? CUDA_ERROR_OUT_OF_MEMORY : real(limit, value);
    }
  }
  CUresult rc = real(limit, value);
  if (rc != CUDA_SUCCESS) {
    if (grow > 0) {
      UnchargeBytes(dev, grow);
    }
    KeepHeap(s, ctx, heap);
    return rc;
  }
  if (target < heap.bytes) {
    UnchargeBytes(dev, heap.bytes - target);
  }
  heap.bytes = target;
  KeepHeap(s, ctx, heap);
  return rc;
}

template <int S>
CUresult HookCtxSetLimit(int limit, size_t value) {
  return CtxSetLimit(kHookCtxSetLimit, S, limit, value);
}

template <int S>
CUresult HookDevicePrimaryCtxReset(CUdevice device) {
  return PrimaryCtxReset(kHookDevicePrimaryCtxReset, S, device);
}

template <int S>
CUresult HookDevicePrimaryCtxResetV2(CUdevice device) {
  return PrimaryCtxReset(kHookDevicePrimaryCtxResetV2, S, device);
}

template <int S>
CUresult HookCtxDestroy(CUcontext ctx) {
  return CtxDestroy(kHookCtxDestroy, S, ctx);
}

template <int S>
CUresult HookCtxDestroyV2(CUcontext ctx) {
  return CtxDestroy(kHookCtxDestroyV2, S, ctx);
}

template <int S>
CUresult HookDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  return PrimaryCtxRetain(kHookDevicePrimaryCtxRetain, S, ctx, device);
}

template <int S>
CUresult HookDevicePrimaryCtxRelease(CUdevice device) {
  return PrimaryCtxRelease(kHookDevicePrimaryCtxRelease, S, device);
}

template <int S>
CUresult HookDevicePrimaryCtxReleaseV2(CUdevice device) {
  return PrimaryCtxRelease(kHookDevicePrimaryCtxReleaseV2, S, device);
}

template <int S>
CUresult HookCtxCreateV2(CUcontext* ctx, unsigned int flags, CUdevice device) {
  return CtxCreateV2(kHookCtxCreateV2, S, ctx, flags, device);
}

template <int S>
CUresult HookCtxCreateV3(CUcontext* ctx, CUexecAffinityParam* params, int num_params,
                         unsigned int flags, CUdevice device) {
  return CtxCreateV3(kHookCtxCreateV3, S, ctx, params, num_params, flags, device);
}

template <int S>
CUresult HookCtxCreateV4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                         CUdevice device) {
  return CtxCreateV4(kHookCtxCreateV4, S, ctx, params, flags, device);
}

}  // namespace

void* ContextHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxReset),
                                         ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxResetV2),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxDestroy),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxDestroyV2),
                                         ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxRetain),
                                         ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxRelease),
                                         ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxReleaseV2),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxCreateV2),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxCreateV3),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxCreateV4),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxSetLimit)};
  if (id < kHookDevicePrimaryCtxReset || id > kHookCtxSetLimit || slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  return kTable[id - kHookDevicePrimaryCtxReset][slot];
}

}  // namespace accelpool::cuda

using namespace accelpool::cuda;  // NOLINT: exported C entry points below.

ACCELPOOL_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) {
  return HookDevicePrimaryCtxReset<0>(d);
}
ACCELPOOL_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
  return HookDevicePrimaryCtxResetV2<0>(d);
}
ACCELPOOL_EXPORT CUresult cuCtxDestroy(CUcontext c) { return HookCtxDestroy<0>(c); }
ACCELPOOL_EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return HookCtxDestroyV2<0>(c); }
ACCELPOOL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  return HookDevicePrimaryCtxRetain<0>(c, d);
}
ACCELPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  return HookDevicePrimaryCtxRelease<0>(d);
}
ACCELPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  return HookDevicePrimaryCtxReleaseV2<0>(d);
}
ACCELPOOL_EXPORT CUresult cuCtxCreate_v2(CUcontext* c, unsigned int f, CUdevice d) {
  return HookCtxCreateV2<0>(c, f, d);
}
ACCELPOOL_EXPORT CUresult cuCtxCreate_v3(CUcontext* c, CUexecAffinityParam* p, int n,
                                         unsigned int f, CUdevice d) {
  return HookCtxCreateV3<0>(c, p, n, f, d);
}
ACCELPOOL_EXPORT CUresult cuCtxCreate_v4(CUcontext* c, CUctxCreateParams* p, unsigned int f,
                                         CUdevice d) {
  return HookCtxCreateV4<0>(c, p, f, d);
}
ACCELPOOL_EXPORT CUresult cuCtxSetLimit(int limit, size_t value) {
  return HookCtxSetLimit<0>(limit, value);
}
