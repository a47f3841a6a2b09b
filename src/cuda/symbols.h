// The name and version map of the driver entry points the shim replaces.
//
// Two lookups serve the two ways a process reaches the driver:
//   * dlsym(handle, "cuMemAlloc_v2") and direct linking use the *exported*
//     name, which already carries the ABI version and the _ptsz suffix;
//   * cuGetProcAddress("cuMemAlloc", ..., cudaVersion, flags) uses the *base*
//     name; the driver picks the ABI variant from cudaVersion and picks the
//     per-thread-default-stream variant from the flags.
// An entry is hooked for requests with min_version <= cudaVersion <
// max_version. A request below min_version asks for an older ABI (say the
// 32-bit cuMemAlloc of CUDA 3.1) that the shim does not replace: it passes
// straight through, as does every name not in the table. None of the hooked
// ABIs changed between CUDA 12.0 and 13.0, so one table serves both.
//
// Thread-safety: immutable tables; all functions are pure.
#ifndef ACCELPOOL_CUDA_SYMBOLS_H_
#define ACCELPOOL_CUDA_SYMBOLS_H_

#include <cstdint>
#include <string_view>

#include "cuda/uninstrumented.h"

namespace accelpool::cuda {

enum HookId : int {
  kHookMemAlloc,
  kHookMemAllocPitch,
  kHookMemAllocManaged,
  kHookMemFree,
  kHookArrayCreate,
  kHookArray3DCreate,
  kHookArrayDestroy,
  kHookMemAllocAsync,
  kHookMemAllocFromPoolAsync,
  kHookMemFreeAsync,
  kHookMemPoolTrimTo,
  kHookMemPoolDestroy,
  kHookMipmappedArrayCreate,
  kHookMipmappedArrayDestroy,
  kHookMemPoolCreate,
  kHookMemCreate,
  kHookMemRelease,
  kHookMemMap,
  kHookMemUnmap,
  kHookMemRetainAllocationHandle,
  kHookMemMapArrayAsync,
  kHookIpcOpenMemHandle,
  kHookIpcCloseMemHandle,
  kHookIpcGetMemHandle,
  kHookMemGetInfo,
  kHookDeviceTotalMem,
  kHookDevicePrimaryCtxReset,
  kHookDevicePrimaryCtxResetV2,
  kHookCtxDestroy,
  kHookCtxDestroyV2,
  kHookDevicePrimaryCtxRetain,
  kHookDevicePrimaryCtxRelease,
  kHookDevicePrimaryCtxReleaseV2,
  kHookCtxCreateV2,
  kHookCtxCreateV3,
  kHookCtxCreateV4,
  kHookCtxSetLimit,
  kHookLaunchKernel,
  kHookLaunchKernelEx,
  kHookLaunchCooperativeKernel,
  kHookGraphLaunch,
  kHookLaunch,  // The deprecated cuLaunch, cuLaunchGrid and cuLaunchGridAsync.
  kHookLaunchGrid,
  kHookLaunchGridAsync,
  kHookGraphInstantiateWithFlags,
  kHookGraphInstantiateWithParams,
  kHookGraphInstantiateV2,
  kHookGraphUpload,
  kHookGraphExecDestroy,
  kHookDeviceGraphMemTrim,
  kHookGetProcAddress,
  kHookGetProcAddressV2,
  kHookNvmlMemoryInfo,
  kHookNvmlMemoryInfoV2,
  kHookCount,
};

enum class HookLibrary { kCuda, kNvml };

struct SymbolInfo {
  const char* exported;  // Name in libcuda.so.1 / libnvidia-ml.so.1.
  const char* base;      // Name asked of cuGetProcAddress; nullptr = not offered there.
  int min_version;       // First cudaVersion (1000*major + 10*minor) of this ABI.
  int max_version;       // First cudaVersion that no longer maps here.
  HookId id;
  bool per_thread_stream;  // The _ptsz variant: stream 0 means per-thread.
  HookLibrary library;
};

// All entries, for iteration (tests, logging the hooked set).
const SymbolInfo* AllSymbols(int* count);

// Entry for an exported name, or nullptr (pass through). A name offered to
// cuGetProcAddress under two bases has two entries with the same hook id;
// this returns the first. Uses no libc string
// function: it runs inside dlsym, which sanitizer runtimes call before their
// own interceptors (strlen, memcmp, ...) are ready.
ACCELPOOL_UNINSTRUMENTED const SymbolInfo* FindExported(const char* name);

// Entry that cuGetProcAddress(base, cuda_version, flags) resolves to, or
// nullptr when the shim does not replace that ABI (pass through).
const SymbolInfo* FindForProcAddress(std::string_view base, int cuda_version, uint64_t flags);

// True for entry points that launch work (the compute controller applies).
bool IsLaunch(HookId id);
// True for the graph instantiation, upload and graph-memory entry points
// (hooks_graph.cc); cuGraphLaunch is a launch.
bool IsGraph(HookId id);

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_SYMBOLS_H_
