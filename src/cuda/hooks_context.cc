// Context lifetime hooks: a primary context reset (cudaDeviceReset) and
// cuCtxDestroy free what was made in the context without a free the shim
// sees. Their records go once the driver has done so: otherwise the
// charges stay until the process exits (a process that creates and destroys
// contexts in a loop is refused well under its cap), and measurement events
// of a dead context are later queried and destroyed on dangling handles.
// See shim.h.
//
// A primary context reset drops every record of its device. cuCtxDestroy
// drops the records of the memory the destroyed context owned: each record
// of such memory carries the context current at its allocation (Owner,
// accounting.h). Memory that no context owns (stream-ordered pools,
// cuMemCreate handles, graph memory) stays charged until its own free, as
// the driver keeps it. docs/enforcement.md says more.
#include "cuda/accounting.h"
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
  CUresult rc = real(device);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s.mem_on) {
    DropDeviceRecords(device);
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
  if (rc == CUDA_SUCCESS && s.compute_on && ctx != nullptr) {
    ForgetContextEvents(ctx, -1);
  }
  return rc;
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

}  // namespace

void* ContextHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxReset),
                                         ACCELPOOL_HOOK_SLOTS(HookDevicePrimaryCtxResetV2),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxDestroy),
                                         ACCELPOOL_HOOK_SLOTS(HookCtxDestroyV2)};
  if (id < kHookDevicePrimaryCtxReset || id > kHookCtxDestroyV2 || slot < 0 || slot >= kSlots) {
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
