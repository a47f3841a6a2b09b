#include "cuda/symbols.h"

#include "cuda/cuda_types.h"

namespace accelpool::cuda {
namespace {

constexpr int kNoMax = 1 << 30;
constexpr HookLibrary kCu = HookLibrary::kCuda;

constexpr SymbolInfo kSymbols[] = {
    {"cuMemAlloc_v2", "cuMemAlloc", 3020, kNoMax, kHookMemAlloc, false, kCu},
    {"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, kNoMax, kHookMemAllocPitch, false, kCu},
    {"cuMemAllocManaged", "cuMemAllocManaged", 6000, kNoMax, kHookMemAllocManaged, false, kCu},
    {"cuMemFree_v2", "cuMemFree", 3020, kNoMax, kHookMemFree, false, kCu},
    {"cuArrayCreate_v2", "cuArrayCreate", 3020, kNoMax, kHookArrayCreate, false, kCu},
    {"cuArray3DCreate_v2", "cuArray3DCreate", 3020, kNoMax, kHookArray3DCreate, false, kCu},
    {"cuArrayDestroy", "cuArrayDestroy", 2000, kNoMax, kHookArrayDestroy, false, kCu},
    {"cuMemAllocAsync", "cuMemAllocAsync", 11020, kNoMax, kHookMemAllocAsync, false, kCu},
    {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, kNoMax, kHookMemAllocAsync, true, kCu},
    {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, kNoMax,
     kHookMemAllocFromPoolAsync, false, kCu},
    {"cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 11020, kNoMax,
     kHookMemAllocFromPoolAsync, true, kCu},
    {"cuMemFreeAsync", "cuMemFreeAsync", 11020, kNoMax, kHookMemFreeAsync, false, kCu},
    {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, kNoMax, kHookMemFreeAsync, true, kCu},
    {"cuMemPoolTrimTo", "cuMemPoolTrimTo", 11020, kNoMax, kHookMemPoolTrimTo, false, kCu},
    {"cuMemPoolDestroy", "cuMemPoolDestroy", 11020, kNoMax, kHookMemPoolDestroy, false, kCu},
    // Where a created pool lives (CUDA 13.0 drivers cannot be asked later).
    {"cuMemPoolCreate", "cuMemPoolCreate", 11020, kNoMax, kHookMemPoolCreate, false, kCu},
    {"cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 5000, kNoMax, kHookMipmappedArrayCreate,
     false, kCu},
    {"cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 5000, kNoMax, kHookMipmappedArrayDestroy,
     false, kCu},
    {"cuMemCreate", "cuMemCreate", 10020, kNoMax, kHookMemCreate, false, kCu},
    {"cuMemRelease", "cuMemRelease", 10020, kNoMax, kHookMemRelease, false, kCu},
    {"cuMemMap", "cuMemMap", 10020, kNoMax, kHookMemMap, false, kCu},
    {"cuMemUnmap", "cuMemUnmap", 10020, kNoMax, kHookMemUnmap, false, kCu},
    // A retained handle is one more reference that cuMemRelease drops.
    {"cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 11000, kNoMax,
     kHookMemRetainAllocationHandle, false, kCu},
    // A handle mapped into a sparse or deferred-mapping array stays charged.
    {"cuMemMapArrayAsync", "cuMemMapArrayAsync", 11010, kNoMax, kHookMemMapArrayAsync, false, kCu},
    {"cuMemMapArrayAsync_ptsz", "cuMemMapArrayAsync", 11010, kNoMax, kHookMemMapArrayAsync, true,
     kCu},
    {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle", 11000, kNoMax, kHookIpcOpenMemHandle, false,
     kCu},
    {"cuIpcCloseMemHandle", "cuIpcCloseMemHandle", 4010, kNoMax, kHookIpcCloseMemHandle, false,
     kCu},
    {"cuIpcGetMemHandle", "cuIpcGetMemHandle", 4010, kNoMax, kHookIpcGetMemHandle, false, kCu},
    {"cuMemGetInfo_v2", "cuMemGetInfo", 3020, kNoMax, kHookMemGetInfo, false, kCu},
    {"cuDeviceTotalMem_v2", "cuDeviceTotalMem", 3020, kNoMax, kHookDeviceTotalMem, false, kCu},
    // Context ends (cudaDeviceReset, cuCtxDestroy) free what was made in the
    // context: its records go. The two ABIs of each share a signature but
    // not an implementation, so each has a hook of its own.
    {"cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset", 7000, 11000, kHookDevicePrimaryCtxReset,
     false, kCu},
    {"cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", 11000, kNoMax,
     kHookDevicePrimaryCtxResetV2, false, kCu},
    {"cuCtxDestroy", "cuCtxDestroy", 2000, 4000, kHookCtxDestroy, false, kCu},
    {"cuCtxDestroy_v2", "cuCtxDestroy", 4000, kNoMax, kHookCtxDestroyV2, false, kCu},
    // The last release of a primary context resets it, freeing its memory.
    // A retain returns the primary context's handle, which the release needs
    // (records carry the context current at allocation); it changes nothing.
    {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 7000, kNoMax,
     kHookDevicePrimaryCtxRetain, false, kCu},
    {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease", 7000, 11000,
     kHookDevicePrimaryCtxRelease, false, kCu},
    {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 11000, kNoMax,
     kHookDevicePrimaryCtxReleaseV2, false, kCu},
    // A new context cannot own memory recorded before it: records that
    // carry its handle (an ended green context's, say) lose their context.
    // cuGetProcAddress("cuCtxCreate") hands out the ABI of the version asked
    // for: _v2 from 3020, _v3 (affinity parameters) from 11040, _v4
    // (CUctxCreateParams) from 12050; cuda.h calls _v4 cuCtxCreate from 13.0.
    {"cuCtxCreate_v2", "cuCtxCreate", 3020, 11040, kHookCtxCreateV2, false, kCu},
    {"cuCtxCreate_v3", "cuCtxCreate", 11040, 12050, kHookCtxCreateV3, false, kCu},
    {"cuCtxCreate_v4", "cuCtxCreate", 12050, kNoMax, kHookCtxCreateV4, false, kCu},
    // The device malloc heap (CU_LIMIT_MALLOC_HEAP_SIZE) is device memory
    // the driver reserves when the limit is raised: its growth is charged.
    {"cuCtxSetLimit", "cuCtxSetLimit", 3010, kNoMax, kHookCtxSetLimit, false, kCu},
    {"cuLaunchKernel", "cuLaunchKernel", 4000, kNoMax, kHookLaunchKernel, false, kCu},
    {"cuLaunchKernel_ptsz", "cuLaunchKernel", 7000, kNoMax, kHookLaunchKernel, true, kCu},
    {"cuLaunchKernelEx", "cuLaunchKernelEx", 11060, kNoMax, kHookLaunchKernelEx, false, kCu},
    {"cuLaunchKernelEx_ptsz", "cuLaunchKernelEx", 11060, kNoMax, kHookLaunchKernelEx, true, kCu},
    {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 9000, kNoMax,
     kHookLaunchCooperativeKernel, false, kCu},
    {"cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernel", 9000, kNoMax,
     kHookLaunchCooperativeKernel, true, kCu},
    {"cuGraphLaunch", "cuGraphLaunch", 10000, kNoMax, kHookGraphLaunch, false, kCu},
    {"cuGraphLaunch_ptsz", "cuGraphLaunch", 10000, kNoMax, kHookGraphLaunch, true, kCu},
    // Deprecated, yet still exported and declared in cuda.h: a launch through
    // them is a launch like any other. They have no _ptsz variants.
    {"cuLaunch", "cuLaunch", 2000, kNoMax, kHookLaunch, false, kCu},
    {"cuLaunchGrid", "cuLaunchGrid", 2000, kNoMax, kHookLaunchGrid, false, kCu},
    {"cuLaunchGridAsync", "cuLaunchGridAsync", 2000, kNoMax, kHookLaunchGridAsync, false, kCu},
    // Graph memory nodes (CUDA 11.4+) are charged when a graph is uploaded or
    // launched; instantiation is where the shim learns what a graph needs.
    // From CUDA 12.0, cuGetProcAddress("cuGraphInstantiate") hands out the
    // WithFlags ABI; the 11.x ABI is cuGraphInstantiate_v2; older ones have
    // no memory nodes and pass through.
    {"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags", 11040, kNoMax,
     kHookGraphInstantiateWithFlags, false, kCu},
    {"cuGraphInstantiateWithFlags", "cuGraphInstantiate", 12000, kNoMax,
     kHookGraphInstantiateWithFlags, false, kCu},
    {"cuGraphInstantiate_v2", "cuGraphInstantiate", 11000, 12000, kHookGraphInstantiateV2, false,
     kCu},
    {"cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams", 12000, kNoMax,
     kHookGraphInstantiateWithParams, false, kCu},
    {"cuGraphInstantiateWithParams_ptsz", "cuGraphInstantiateWithParams", 12000, kNoMax,
     kHookGraphInstantiateWithParams, true, kCu},
    {"cuGraphUpload", "cuGraphUpload", 11010, kNoMax, kHookGraphUpload, false, kCu},
    {"cuGraphUpload_ptsz", "cuGraphUpload", 11010, kNoMax, kHookGraphUpload, true, kCu},
    {"cuGraphExecDestroy", "cuGraphExecDestroy", 10000, kNoMax, kHookGraphExecDestroy, false, kCu},
    {"cuDeviceGraphMemTrim", "cuDeviceGraphMemTrim", 11040, kNoMax, kHookDeviceGraphMemTrim, false,
     kCu},
    {"cuGetProcAddress", "cuGetProcAddress", 11030, 12000, kHookGetProcAddress, false, kCu},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, kNoMax, kHookGetProcAddressV2, false, kCu},
    // The resolver a program built for the per-thread default stream calls
    // (cuda.h maps cuGetProcAddress to it): a request with neither stream
    // flag gets the per-thread entries.
    {"cuGetProcAddress_v2_ptsz", "cuGetProcAddress", 12000, kNoMax, kHookGetProcAddressV2, true,
     kCu},
    {"nvmlDeviceGetMemoryInfo", nullptr, 0, kNoMax, kHookNvmlMemoryInfo, false, HookLibrary::kNvml},
    {"nvmlDeviceGetMemoryInfo_v2", nullptr, 0, kNoMax, kHookNvmlMemoryInfoV2, false,
     HookLibrary::kNvml},
};
constexpr int kSymbolCount = sizeof(kSymbols) / sizeof(kSymbols[0]);

}  // namespace

const SymbolInfo* AllSymbols(int* count) {
  *count = kSymbolCount;
  return kSymbols;
}

ACCELPOOL_UNINSTRUMENTED const SymbolInfo* FindExported(const char* name) {
  // Cheap reject for the common case: dlsym of something unrelated.
  if (name == nullptr || (name[0] != 'c' && name[0] != 'n') || name[1] == '\0') {
    return nullptr;
  }
  for (const SymbolInfo& s : kSymbols) {
    const char* a = name;
    const char* b = s.exported;
    while (*a != '\0' && *a == *b) {
      ++a;
      ++b;
    }
    if (*a == *b) {
      return &s;
    }
  }
  return nullptr;
}

const SymbolInfo* FindForProcAddress(std::string_view base, int cuda_version, uint64_t flags) {
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const SymbolInfo* best = nullptr;
  const SymbolInfo* fallback = nullptr;  // Default-stream entry of that version.
  for (const SymbolInfo& s : kSymbols) {
    if (s.base == nullptr || base != s.base) {
      continue;
    }
    if (cuda_version < s.min_version || cuda_version >= s.max_version) {
      continue;
    }
    if (s.per_thread_stream == per_thread) {
      best = &s;
    } else if (!s.per_thread_stream) {
      fallback = &s;
    }
  }
  if (best != nullptr) {
    return best;
  }
  // A per-thread request for a function without a _ptsz variant, or below
  // its _ptsz version (NVIDIA's cuda.bindings asks cuLaunchKernel at 4000
  // with the per-thread flag), maps to the default entry of that version.
  // Every hooked _ptsz entry shares its default entry's signature, and
  // BindHook finds the stream mode of an exported pointer by its slot.
  return fallback;
}

bool IsGraph(HookId id) {
  return id >= kHookGraphInstantiateWithFlags && id <= kHookDeviceGraphMemTrim;
}

bool IsLaunch(HookId id) { return id >= kHookLaunchKernel && id <= kHookLaunchGridAsync; }

}  // namespace accelpool::cuda
