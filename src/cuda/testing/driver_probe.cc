// driver_probe: a small CUDA-driver client that the shim tests run under
// LD_PRELOAD=libaccelpool-cuda.so against the fake libcuda.so.1.
//
// It reaches the driver the way real programs do, chosen by the first
// argument: "direct" (linked calls), "dlsym" (dlopen + dlsym, like the CUDA
// runtime of old), "procaddr" (cuGetProcAddress_v2, like CUDA 12/13
// runtimes), "procaddr_ptds" (the same with per-thread default streams),
// "procaddr_abi" and "procaddr_abi_ptds" (each entry asked at the version of
// its default ABI, with no status pointer, as NVIDIA's cuda.bindings does)
// and "procaddr_v1" (the CUDA 11 cuGetProcAddress). Results are printed as
// key=value lines for the test to parse.
//
// Commands:
//   fill <api> <chunk>       allocate with one API until failure, free, refill
//   meminfo                  cuMemGetInfo / cuDeviceTotalMem, NULL arguments
//   hold <bytes>             allocate, print held=..., wait for stdin EOF
//   alloc <bytes>            one cuMemAlloc; print rc and the shim's view
//   allfree                  cuMemGetInfo, then cuMemAlloc of all it called
//                            free; the free memory after
//   launch <api> <us> <ms> [<us2>]
//                            launch fixed-length kernels for <ms> wall ms
//                            (with <us2>: the same kernel runs <us2> from
//                            half-time on, a true change of its length);
//                            <api>: kernel, ex, coop, graph, cu, grid,
//                            gridasync (the deprecated cuLaunch,
//                            cuLaunchGrid, cuLaunchGridAsync), sync, capture
//                            (into the fake's always-capturing stream) or
//                            twoctx (alternating the current context between
//                            the fake's two devices before every launch)
//   streamlaunch <api> <us> <ms> none|other
//                            launch as launch does (kernel, ex, coop, graph,
//                            gridasync) into a stream made on device 1, with
//                            no context current (none) or, every other
//                            launch, with device 0's current (other; the
//                            rest go to its stream 0)
//   prilaunch <device> <api> <count>
//                            <count> launches of 1 us kernels on device
//                            <device>'s primary context; <api>: kernel, ex,
//                            coop, graph, cu, grid, gridasync (as for
//                            launch), capture or capturegraph (a kernel
//                            or a graph launched into the fake's always-
//                            capturing stream); prints start_ns and end_ns
//                            (CLOCK_MONOTONIC) around them
//   symbols                  which lookups returned hooks vs driver functions
//   libc                     the C library this process runs on, and the file
//                            its dlsym comes from (the shim, when preloaded)
//   nvml [<index>]           nvmlDeviceGetMemoryInfo[_v2] of NVML device <index>
//                            (default 0) through dlsym
//   overhead <n>             host ns per zero-length launch and per alloc+free
//   threads <n> <rounds>     n threads allocate/free 64 MiB concurrently
//   poolhold <bytes> <thr>   device 0's current pool with release threshold
//                            <thr> ("max" = UINT64_MAX): allocate and free
//                            <bytes> async, print; on each stdin line "trim"
//                            trim the pool, on "lower" set the threshold to 0,
//                            on "lower_alloc <bytes>" set it to 0 and cuMemAlloc
//                            (not hooked), and print again; exit at EOF
//   poolover <first> <next>  (threshold max) hold <first>, try <next> too
//   poolwhere host|dev1|newtype <bytes> [<fillers>]  from device 0, <bytes>
//                            from a host pool, a pool on device 1 or a pool
//                            of a newer location type, after <fillers> host
//                            pools are in use
//   graphmem <bytes> <first> launch|upload|params  a graph allocating <bytes>
//                            (after <first> bytes by cuMemAlloc), mapped by
//                            a launch, an upload or an uploading instantiation
//   graphfill <bytes>        graphs whose <bytes> outlive the launch, to the cap
//   graphrace before|after|query <idle> <first> <a> <b>
//                            inside graph A's launch, before or after it maps,
//                            graph B is launched or the free memory read
//   graphtrimrace <bytes> <first>  the graph pool is trimmed inside a graph's
//                            first launch; <first> allocated; relaunch
//   graphorder <bytes>       the first launch of a graph of <bytes> (freed
//                            inside it): the event records made by the time
//                            its memory hold reads the graph pool, and in all
//   capturealloc <bytes>     cuMemAllocAsync of <bytes> on a capturing stream
//   capturefree <bytes>      cuMemAllocAsync of <bytes> on stream 0, freed on
//                            a capturing stream; then cuMemAlloc of <bytes>
//                            + 256 MiB
//   capturegraph <bytes> flags|v2 kept|freed  the same captured into a graph
//                            (freed inside it or kept past the launch),
//                            instantiated through that ABI and launched
//   poolsync <first> <next>  (frees complete at the next synchronisation) <first>
//                            async from device 0's default pool (threshold
//                            0), freed, the stream synchronised (the pool
//                            gives it back); <next> from a pool created
//                            then; cuMemAlloc of <next> after it
//   poolcustom <bytes>       a created pool keeps <bytes> freed, is destroyed
//   pooldestroylive <bytes> <kept>  a created pool (keeping <kept> freed) is
//                            destroyed while a block of <bytes> is allocated;
//                            cuMemAlloc <bytes>; the block freed; again
//   execinto <bytes> <program> [<args>]  allocate <bytes>, print, then exec
//                            <program> (same pid and start time)
//   reexec <bytes>           allocate <bytes>, then exec this program as
//                            "<mode> hold <bytes>" (same pid and start time)
//   ipcdev <bytes> <device>  from device 0, import <bytes> exported by <device>
//   freerace <api> <bytes>   free a block while (inside the driver's free) a
//                            new allocation gets the same address
//   freefail <api> <entry> <bytes>  a free that fails (entry told to fail),
//                            then one that succeeds
//   ipcself <bytes>          allocate, export, import the handle again
//   mipmaplevels             a 3-level mipmapped array: charge and return
//   relfail <bytes>          cuMemRelease failing on an unmapped and on a
//                            mapped handle, then unmap and a real release
//   capturerace <ms>         a thread captures the capturing stream in global
//                            mode for <ms>; meanwhile this thread launches
//                            20 us kernels on stream 0; the capture's end rc
//   initrace <threads>       (any mode) the first driver lookups of the
//                            process, from <threads> threads at once: each
//                            resolves cuGetProcAddress_v2 by dlsym, then
//                            cuMemAlloc and cuLaunchKernel through it, and
//                            allocates 64 MiB
//   loaderrace dlsym|init|cuda|nvml <library>
//                            (any mode) a step of the shim's initialisation
//                            (resolving the real dlsym, the environment, the
//                            driver, NVML; the steps before it done first) is
//                            started by this thread while another dlopens
//                            <library> (testing/loader_race_ctor.cc), whose
//                            constructor uses the driver (or NVML) through
//                            the shim while that dlopen holds the loader's
//                            lock; this thread allocates 64 MiB (NVML: reads
//                            device 0's memory); free memory at the end
//   vmmtwice <bytes>         one cuMemCreate handle mapped at two addresses;
//                            free memory after each map, unmap and release,
//                            then PyTorch's order (unmap before release)
//   vmmunmap <bytes>         a released cuMemCreate handle of <bytes> is freed
//                            by its last unmap, inside which (as another
//                            thread) a cuMemCreate of <bytes> gets its value
//                            (FAKE_CUDA_REUSE_HANDLES); then an unmap that
//                            fails and one that succeeds
//   vmmretain <bytes>        two mapped cuMemCreate handles; one's handle is
//                            retained from its address and released (the
//                            query pattern of UCX, mscclpp), unmapped, mapped
//                            again; then unmapped and released for good
//   forkalloc <bytes>        allocate, fork (a DataLoader worker); the child
//                            allocates and frees <bytes> and exits normally;
//                            the parent's view of free memory at each step
//   newlocation vmm|graph <bytes>  <bytes> of device 0's memory at a location
//                            type newer than the shim (6): a cuMemCreate handle
//                            (mapped) or a graph memory node (launched)
//   ipctwice <bytes>         the same handle of <bytes> opened twice (the fake
//                            counts the opens, as a real driver does), then
//                            closed twice
//   ipcrace <bytes> <held>   with <held> bytes allocated, the same handle of
//                            <bytes> opened by two threads at once (the fake
//                            counts the opens): the second opens while the
//                            first, inside the shim, asks the size of what
//                            it imported; then both closed
//   exitinhook <bytes>       print ready; after a stdin line, cuMemAlloc of
//                            <bytes>, interrupted 300 ms in by a signal whose
//                            handler calls exit(7)
//   forkbind <forks>         (procaddr) a thread looks up cuMemAlloc over and
//                            over while this one forks; each child looks it
//                            up once; how many children hung
//   resetalloc <a> <b>       cuMemAlloc <a>, reset the device where the shim
//                            does not see it (the fake's own entry point),
//                            cuMemAlloc <b> (the fake gives it the address of
//                            <a>), free it
//   resetcap <bytes>         device 0 holds <bytes> / 4 each by cuMemAlloc, a
//                            mapped cuMemCreate handle, an IPC import and a
//                            stream-ordered allocation; reset (as
//                            cudaDeviceReset); then the rest by cuMemAlloc
//   resetkeeps <unit>        a reset beside what it does not free: a created
//                            context's memory, a created pool's block and a
//                            mapped cuMemCreate handle; see ResetKeeps
//   ctxmem <unit>            <unit> of each kind the shim records, made in a
//                            created context; the primary context made
//                            current again, the created one destroyed (a
//                            refused try first); the freed blocks freed
//                            again; the rest of the cap allocated
//   primaryrelease <unit>    retain/allocate/release cycles of device 0's
//                            primary context: the first with <unit> of each
//                            kind the shim records and two references, then
//                            many with 2 x <unit>; a created context, a pool
//                            and a cuMemCreate handle hold <unit> each beside
//                            it; a release refused, one before any retain,
//                            one whose state query fails
//   ctxreuse <unit>          a context holding <unit> is destroyed while (inside
//                            the driver's destroy) a new context gets its
//                            handle and allocates 2 x <unit>
//   ctxevents destroy|reset <ms>  measured launches for <ms> in a created
//                            context (destroyed, then one created again: the
//                            fake hands out the same handle) or in device
//                            0's primary context (reset), ending with longer
//                            kernels still running at the end; then <ms> of
//                            launches more; the fake's calls on unknown events
//   ctxreusedev <n>          <n> launches in a context created on device 0;
//                            another thread destroys it and creates one on
//                            device 1, which gets its handle; <n> launches
//                            more in that one
//   pooldefer <chunk> <n>    (threshold max; frees complete at the next
//                            synchronisation, as the host sees them) <n>
//                            async allocations of <chunk> until one is
//                            refused; one freed; then <chunk> / 2 again
//   zeroalloc <bytes>        after cuMemAlloc of <bytes>, cuMemAlloc and
//                            cuMemAllocManaged of 0 bytes
//   arraymap <bytes>         a cuMemCreate handle of <bytes> mapped into a
//                            sparse array and released; cuMemAlloc of
//                            <bytes> + 256 MiB; the array's tile unmapped
//   backedlater <bytes>      cuArray3DCreate and cuMipmappedArrayCreate of
//                            <bytes> with CUDA_ARRAY3D_SPARSE, with
//                            CUDA_ARRAY3D_DEFERRED_MAPPING and with neither
//   asyncdev <bytes>         from device 0's primary context, cuMemAllocAsync of
//                            <bytes> on a stream of device 1's, then freed:
//                            each device's free memory after each step
//   poolnoctx <bytes>        with no current context, cuMemAllocFromPoolAsync
//                            of <bytes> from a pool created on device 1, on
//                            a stream of device 1; each device's free
//                            memory, then freed again
//   heaplimit <unit>         the malloc heap (cuCtxSetLimit) grown by <unit>,
//                            then past the cap, shrunk by <unit> / 2, back to
//                            its size; the stack size set; a created context's
//                            heap grown, the context destroyed; the primary
//                            context's grown, the device reset: free memory
//                            and the heap's size after each step
//   gate same|other <n>      after 64 1 us kernels on one stream, a gate
//                            kernel (driver_api.h) on another, then <n>
//                            more 1 us kernels on the same stream (queued
//                            behind it) or on another one, then the release
//                            kernel on the other stream; the launch rcs and
//                            the wall ns all took
//
// FAKECUDA_FAIL=name,name makes those fake entry points fail (fakecuda_Fail).
#include <dlfcn.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cuda/cuda_types.h"
#include "cuda/testing/driver_api.h"

namespace {

using CtxSyncFn = CUresult (*)();
using UsedFn = uint64_t (*)(int);
using BusyFn = int64_t (*)();
using LookupFn = void* (*)(const char*);

struct Api {
  cuMemAllocFn alloc;
  cuMemAllocPitchFn pitch;
  cuMemAllocManagedFn managed;
  cuMemFreeFn free;
  cuArrayCreateFn array_create;
  cuArrayDestroyFn array_destroy;
  cuMemAllocAsyncFn alloc_async;
  cuMemAllocFromPoolAsyncFn alloc_pool;
  cuMemFreeAsyncFn free_async;
  cuMemCreateFn create;
  cuMemReleaseFn release;
  cuMemMapFn map;
  cuMemUnmapFn unmap;
  cuIpcOpenMemHandleFn ipc_open;
  cuIpcCloseMemHandleFn ipc_close;
  cuMemGetInfoFn get_info;
  cuDeviceTotalMemFn total_mem;
  cuLaunchKernelFn launch;
  cuLaunchKernelExFn launch_ex;
  cuLaunchCooperativeKernelFn launch_coop;
  cuGraphLaunchFn graph_launch;
  CtxSyncFn ctx_sync;
  cuMemPoolTrimToFn pool_trim;
  cuMemPoolDestroyFn pool_destroy;
  cuMipmappedArrayCreateFn mipmap_create;
  cuMipmappedArrayDestroyFn mipmap_destroy;
  cuIpcGetMemHandleFn ipc_get;
  cuGraphInstantiateWithFlagsFn graph_instantiate;
  cuGraphInstantiateWithParamsFn graph_instantiate_params;
  cuGraphUploadFn graph_upload;
  cuGraphExecDestroyFn graph_exec_destroy;
  cuDeviceGraphMemTrimFn graph_trim;
  cuMemPoolCreateFn pool_create;
  cuMemRetainAllocationHandleFn retain;
  cuDevicePrimaryCtxResetFn reset;
  cuCtxDestroyFn ctx_destroy;
  cuDevicePrimaryCtxRetainFn primary_retain;
  cuDevicePrimaryCtxReleaseFn primary_release;
  cuCtxSetLimitFn set_limit;
  cuLaunchFn launch_old;  // The deprecated cuLaunch.
  cuLaunchGridFn launch_grid;
  cuLaunchGridAsyncFn launch_grid_async;
  cuMemMapArrayAsyncFn map_array;
};

void* g_driver = nullptr;

void* Driver() {
  if (g_driver == nullptr) {
    g_driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (g_driver == nullptr) {
      std::fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
      std::exit(2);
    }
  }
  return g_driver;
}

// `abi`: the version of the entry's default ABI (cudaTypedefs.h), which
// the procaddr_abi modes ask for, as NVIDIA's cuda.bindings does.
template <typename T>
void Get(T* out, const std::string& mode, const char* exported, const char* base, int version,
         int abi) {  // NOLINT: version is adjusted per mode.
  void* p = nullptr;
  if (mode == "dlsym") {
    p = dlsym(Driver(), exported);
  } else if (mode == "procaddr" || mode == "procaddr_ptds" || mode == "procaddr13" ||
             mode == "procaddr_abi" || mode == "procaddr_abi_ptds") {
    if (mode == "procaddr13") {
      version = 13000;
    } else if (mode == "procaddr_abi" || mode == "procaddr_abi_ptds") {
      version = abi;
    }
    auto gpa = reinterpret_cast<cuGetProcAddress_v2Fn>(dlsym(Driver(), "cuGetProcAddress_v2"));
    bool ptds = mode == "procaddr_ptds" || mode == "procaddr_abi_ptds";
    cuuint64_t flags =
        ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    // cuda.bindings passes no status pointer: it is optional.
    if (gpa == nullptr || gpa(base, &p, version, flags, nullptr) != CUDA_SUCCESS) {
      p = nullptr;
    }
  } else if (mode == "procaddr_v1") {
    auto gpa = reinterpret_cast<cuGetProcAddressFn>(dlsym(Driver(), "cuGetProcAddress"));
    if (gpa == nullptr || gpa(base, &p, version < 11080 ? version : 11080, 0) != CUDA_SUCCESS) {
      p = nullptr;
    }
  }
  *out = reinterpret_cast<T>(p);
}

Api Load(const std::string& mode) {
  Api a{};
  if (mode == "direct") {
    a = Api{&cuMemAlloc_v2,
            &cuMemAllocPitch_v2,
            &cuMemAllocManaged,
            &cuMemFree_v2,
            &cuArrayCreate_v2,
            &cuArrayDestroy,
            &cuMemAllocAsync,
            &cuMemAllocFromPoolAsync,
            &cuMemFreeAsync,
            &cuMemCreate,
            &cuMemRelease,
            &cuMemMap,
            &cuMemUnmap,
            &cuIpcOpenMemHandle_v2,
            &cuIpcCloseMemHandle,
            &cuMemGetInfo_v2,
            &cuDeviceTotalMem_v2,
            &cuLaunchKernel,
            &cuLaunchKernelEx,
            &cuLaunchCooperativeKernel,
            &cuGraphLaunch,
            &cuCtxSynchronize,
            &cuMemPoolTrimTo,
            &cuMemPoolDestroy,
            &cuMipmappedArrayCreate,
            &cuMipmappedArrayDestroy,
            &cuIpcGetMemHandle,
            &cuGraphInstantiateWithFlags,
            &cuGraphInstantiateWithParams,
            &cuGraphUpload,
            &cuGraphExecDestroy,
            &cuDeviceGraphMemTrim,
            &cuMemPoolCreate,
            &cuMemRetainAllocationHandle,
            &cuDevicePrimaryCtxReset_v2,
            &cuCtxDestroy_v2,
            &cuDevicePrimaryCtxRetain,
            &cuDevicePrimaryCtxRelease_v2,
            &cuCtxSetLimit,
            &cuLaunch,
            &cuLaunchGrid,
            &cuLaunchGridAsync,
            &cuMemMapArrayAsync};
    return a;
  }
  const int v = 12080;
  Get(&a.alloc, mode, "cuMemAlloc_v2", "cuMemAlloc", v, 3020);
  Get(&a.pitch, mode, "cuMemAllocPitch_v2", "cuMemAllocPitch", v, 3020);
  Get(&a.managed, mode, "cuMemAllocManaged", "cuMemAllocManaged", v, 6000);
  Get(&a.free, mode, "cuMemFree_v2", "cuMemFree", v, 3020);
  Get(&a.array_create, mode, "cuArrayCreate_v2", "cuArrayCreate", v, 3020);
  Get(&a.array_destroy, mode, "cuArrayDestroy", "cuArrayDestroy", v, 2000);
  Get(&a.alloc_async, mode, "cuMemAllocAsync", "cuMemAllocAsync", v, 11020);
  Get(&a.alloc_pool, mode, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", v, 11020);
  Get(&a.free_async, mode, "cuMemFreeAsync", "cuMemFreeAsync", v, 11020);
  Get(&a.create, mode, "cuMemCreate", "cuMemCreate", v, 10020);
  Get(&a.release, mode, "cuMemRelease", "cuMemRelease", v, 10020);
  Get(&a.map, mode, "cuMemMap", "cuMemMap", v, 10020);
  Get(&a.unmap, mode, "cuMemUnmap", "cuMemUnmap", v, 10020);
  Get(&a.ipc_open, mode, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle", v, 11000);
  Get(&a.ipc_close, mode, "cuIpcCloseMemHandle", "cuIpcCloseMemHandle", v, 4010);
  Get(&a.get_info, mode, "cuMemGetInfo_v2", "cuMemGetInfo", v, 3020);
  Get(&a.total_mem, mode, "cuDeviceTotalMem_v2", "cuDeviceTotalMem", v, 3020);
  bool ptds = mode == "procaddr_ptds";
  Get(&a.launch, mode, ptds ? "cuLaunchKernel_ptsz" : "cuLaunchKernel", "cuLaunchKernel", v, 4000);
  Get(&a.launch_ex, mode, ptds ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx", "cuLaunchKernelEx",
      v, 11060);
  Get(&a.launch_coop, mode, "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", v, 9000);
  Get(&a.graph_launch, mode, "cuGraphLaunch", "cuGraphLaunch", v, 10000);
  Get(&a.ctx_sync, mode, "cuCtxSynchronize", "cuCtxSynchronize", v, 2000);
  Get(&a.pool_trim, mode, "cuMemPoolTrimTo", "cuMemPoolTrimTo", v, 11020);
  Get(&a.pool_destroy, mode, "cuMemPoolDestroy", "cuMemPoolDestroy", v, 11020);
  Get(&a.mipmap_create, mode, "cuMipmappedArrayCreate", "cuMipmappedArrayCreate", v, 5000);
  Get(&a.mipmap_destroy, mode, "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", v, 5000);
  Get(&a.ipc_get, mode, "cuIpcGetMemHandle", "cuIpcGetMemHandle", v, 4010);
  // From CUDA 12 "cuGraphInstantiate" is the WithFlags ABI. (cuda.bindings
  // asks it at 11040, where which ABI a real driver returns is unverified.)
  Get(&a.graph_instantiate, mode, "cuGraphInstantiateWithFlags", "cuGraphInstantiate", v, 12000);
  Get(&a.graph_instantiate_params, mode, "cuGraphInstantiateWithParams",
      "cuGraphInstantiateWithParams", v, 12000);
  Get(&a.graph_upload, mode, "cuGraphUpload", "cuGraphUpload", v, 11010);
  Get(&a.graph_exec_destroy, mode, "cuGraphExecDestroy", "cuGraphExecDestroy", v, 10000);
  Get(&a.graph_trim, mode, "cuDeviceGraphMemTrim", "cuDeviceGraphMemTrim", v, 11040);
  Get(&a.pool_create, mode, "cuMemPoolCreate", "cuMemPoolCreate", v, 11020);
  Get(&a.retain, mode, "cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", v, 11000);
  Get(&a.reset, mode, "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", v, 11000);
  Get(&a.ctx_destroy, mode, "cuCtxDestroy_v2", "cuCtxDestroy", v, 4000);
  Get(&a.primary_retain, mode, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", v, 7000);
  Get(&a.primary_release, mode, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", v,
      11000);
  Get(&a.set_limit, mode, "cuCtxSetLimit", "cuCtxSetLimit", v, 3010);
  Get(&a.launch_old, mode, "cuLaunch", "cuLaunch", v, 2000);
  Get(&a.launch_grid, mode, "cuLaunchGrid", "cuLaunchGrid", v, 2000);
  Get(&a.launch_grid_async, mode, "cuLaunchGridAsync", "cuLaunchGridAsync", v, 2000);
  Get(&a.map_array, mode, ptds ? "cuMemMapArrayAsync_ptsz" : "cuMemMapArrayAsync",
      "cuMemMapArrayAsync", v, 11010);
  return a;
}

uint64_t DeviceUsed() {
  auto fn = reinterpret_cast<UsedFn>(dlsym(Driver(), "fakecuda_DeviceUsedBytes"));
  return fn != nullptr ? fn(0) : 0;
}

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// One allocation of `bytes` through `api`; *key identifies it for Release.
CUresult AllocOne(const Api& a, const std::string& api, uint64_t bytes, uint64_t* key,
                  uint64_t* va) {
  CUdeviceptr p = 0;
  if (api == "alloc") {
    CUresult rc = a.alloc(&p, bytes);
    *key = p;
    return rc;
  }
  if (api == "pitch") {
    size_t pitch = 0;
    CUresult rc = a.pitch(&p, &pitch, bytes / 256, 256, 4);
    *key = p;
    return rc;
  }
  if (api == "managed") {
    CUresult rc = a.managed(&p, bytes, 1);
    *key = p;
    return rc;
  }
  if (api == "async") {
    CUresult rc = a.alloc_async(&p, bytes, nullptr);
    *key = p;
    return rc;
  }
  if (api == "pool") {
    CUmemoryPool pool = nullptr;
    cuDeviceGetDefaultMemPool(&pool, 0);
    CUresult rc = a.alloc_pool(&p, bytes, pool, nullptr);
    *key = p;
    return rc;
  }
  if (api == "mipmap") {  // One level of `bytes` (mipmaplevels checks the sum).
    CUDA_ARRAY3D_DESCRIPTOR d{bytes, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CUmipmappedArray arr = nullptr;
    CUresult rc = a.mipmap_create(&arr, &d, 1);
    *key = reinterpret_cast<uint64_t>(arr);
    return rc;
  }
  if (api == "array") {
    CUDA_ARRAY_DESCRIPTOR d{bytes, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1};
    CUarray arr = nullptr;
    CUresult rc = a.array_create(&arr, &d);
    *key = reinterpret_cast<uint64_t>(arr);
    return rc;
  }
  if (api == "ipc") {
    CUipcMemHandle h{};
    std::memcpy(h.reserved, &bytes, sizeof(bytes));
    CUresult rc = a.ipc_open(&p, h, 1);
    *key = p;
    return rc;
  }
  if (api == "vmm") {
    CUmemAllocationProp prop{};
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    uint64_t size = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    CUresult rc = a.create(&h, size, &prop, 0);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
    static uint64_t next_va = 1ULL << 46;
    *va = next_va;
    next_va += size;
    a.map(*va, size, 0, h, 0);
    a.release(h);  // Typical VMM use: release right after mapping.
    *key = size;
    return rc;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

void ReleaseOne(const Api& a, const std::string& api, uint64_t key, uint64_t va) {
  if (api == "mipmap") {
    a.mipmap_destroy(reinterpret_cast<CUmipmappedArray>(key));
  } else if (api == "array") {
    a.array_destroy(reinterpret_cast<CUarray>(key));
  } else if (api == "ipc") {
    a.ipc_close(key);
  } else if (api == "vmm") {
    a.unmap(va, key);
  } else if (api == "async" || api == "pool") {
    a.free_async(key, nullptr);
  } else {
    a.free(key);
  }
}

int Fill(const Api& a, const std::string& api, uint64_t chunk) {
  uint64_t totals[2] = {0, 0};
  for (int round = 0; round < 2; ++round) {
    std::vector<std::pair<uint64_t, uint64_t>> held;
    CUresult first_error = CUDA_SUCCESS;
    for (int i = 0; i < 200000; ++i) {
      uint64_t key = 0;
      uint64_t va = 0;
      CUresult rc = AllocOne(a, api, chunk, &key, &va);
      if (rc != CUDA_SUCCESS) {
        first_error = rc;
        break;
      }
      held.emplace_back(key, va);
      totals[round] += chunk;
    }
    if (round == 0) {
      std::printf("allocated=%llu count=%zu first_error=%d device_used=%llu\n",
                  static_cast<unsigned long long>(totals[0]), held.size(), first_error,
                  static_cast<unsigned long long>(DeviceUsed()));
    }
    for (auto& [key, va] : held) {
      ReleaseOne(a, api, key, va);
    }
    if (round == 0) {
      std::printf("after_free_device_used=%llu\n",
                  static_cast<unsigned long long>(DeviceUsed()));
    }
  }
  std::printf("second_allocated=%llu\n", static_cast<unsigned long long>(totals[1]));
  return 0;
}

int MemInfo(const Api& a) {
  size_t free_bytes = 0;
  size_t total = 0;
  CUresult rc = a.get_info(&free_bytes, &total);
  size_t total_only = 0;
  CUresult null_free_rc = a.get_info(nullptr, &total_only);
  CUresult null_both_rc = a.get_info(nullptr, nullptr);
  size_t device_total = 0;
  a.total_mem(&device_total, 0);
  std::printf("rc=%d free=%zu total=%zu null_free_rc=%d total_only=%zu null_both_rc=%d "
              "device_total=%zu\n",
              rc, free_bytes, total, null_free_rc, total_only, null_both_rc, device_total);
  return 0;
}

// One launch of a 132x128 kernel through `api`: kernel, ex, coop, graph,
// the deprecated cu (cuLaunch), grid (cuLaunchGrid) and gridasync
// (cuLaunchGridAsync, on a stream of its own), or capture / capturegraph (a
// kernel / graph launch into a capturing stream). params[0] points at the
// kernel's length in ns, which is also the fake driver's CUgraphExec handle
// and, for the deprecated launches, its CUfunction.
// `stream`: where kernel, ex, coop, graph and gridasync go (gridasync: a
// stream handle of its own when nullptr).
CUresult LaunchBy(const Api& a, const std::string& api, CUlaunchConfig* cfg, void** params,
                  CUstream stream = nullptr) {
  const auto capturing = reinterpret_cast<CUstream>(0xCA97);
  const auto graph = reinterpret_cast<CUgraphExec>(*static_cast<int64_t*>(params[0]));
  const auto function = reinterpret_cast<CUfunction>(*static_cast<int64_t*>(params[0]));
  if (api == "kernel") return a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
  if (api == "ex") {
    cfg->hStream = stream;
    return a.launch_ex(cfg, nullptr, params, nullptr);
  }
  if (api == "coop") return a.launch_coop(nullptr, 132, 1, 1, 128, 1, 1, 0, stream, params);
  if (api == "graph") return a.graph_launch(graph, stream);
  if (api == "cu") return a.launch_old(function);
  if (api == "grid") return a.launch_grid(function, 132, 1);
  if (api == "gridasync") {
    return a.launch_grid_async(function, 132, 1,
                               stream != nullptr ? stream : reinterpret_cast<CUstream>(0x6A1D));
  }
  if (api == "capture") {
    return a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, capturing, params, nullptr);
  }
  if (api == "capturegraph") return a.graph_launch(graph, capturing);
  return CUDA_ERROR_INVALID_VALUE;
}

int Launch(const Api& a, const std::string& api, int64_t kernel_us, int64_t millis,
           int64_t kernel_us_after_half) {
  int64_t kernel_ns = kernel_us * 1000;
  void* params[] = {&kernel_ns};
  CUlaunchConfig cfg{};
  auto busy = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_BusyNs"));
  auto records = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_EventRecords"));
  auto foreign = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_ForeignNs"));
  int64_t start = NowNs();
  int64_t end = start + millis * 1'000'000;
  int64_t half = start + millis * 500'000;
  long launches = 0;  // NOLINT
  int64_t now = start;
  while ((now = NowNs()) < end) {
    if (kernel_us_after_half > 0 && now >= half) {
      kernel_ns = kernel_us_after_half * 1000;
    }
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (api == "sync") {
      rc = LaunchBy(a, "kernel", &cfg, params);
      a.ctx_sync();
    } else if (api == "twoctx") {
      rc = cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1 + launches % 2)));
      if (rc == CUDA_SUCCESS) {
        rc = LaunchBy(a, "kernel", &cfg, params);
      }
    } else {
      rc = LaunchBy(a, api, &cfg, params);
    }
    if (rc != CUDA_SUCCESS) {
      std::printf("launch_error=%d\n", rc);
      return 1;
    }
    ++launches;
  }
  a.ctx_sync();
  int64_t elapsed = NowNs() - start;
  std::printf("busy_ns=%lld elapsed_ns=%lld launches=%ld start_ns=%lld\n",
              static_cast<long long>(busy != nullptr ? busy() : -1),  // NOLINT
              static_cast<long long>(elapsed), launches,                // NOLINT
              static_cast<long long>(start));                           // NOLINT
  std::printf("event_records=%lld foreign_ns=%lld\n",
              static_cast<long long>(records != nullptr ? records() : -1),  // NOLINT
              static_cast<long long>(foreign != nullptr ? foreign() : -1));  // NOLINT
  return 0;
}

// Launches of `kernel_us` kernels through `api` for `millis` into a stream
// made on device 1: with no context current at all (where == "none"), or,
// every other launch, while device 0's context is current (where ==
// "other"; the rest go to device 0's stream 0).
int StreamLaunch(const Api& a, const std::string& api, int64_t kernel_us, int64_t millis,
                 const std::string& where) {
  int64_t kernel_ns = kernel_us * 1000;
  void* params[] = {&kernel_ns};
  CUlaunchConfig cfg{};
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(2)));
  CUstream device1 = nullptr;
  if (cuStreamCreate(&device1, 0) != CUDA_SUCCESS) {
    std::printf("stream_error=1\n");
    return 1;
  }
  cuCtxSetCurrent(where == "none" ? nullptr
                                  : reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1)));
  int64_t start = NowNs();
  int64_t end = start + millis * 1'000'000;
  long launches = 0;  // NOLINT
  while (NowNs() < end) {
    CUstream stream = where == "none" || launches % 2 == 1 ? device1 : nullptr;
    CUresult rc = LaunchBy(a, api, &cfg, params, stream);
    if (rc != CUDA_SUCCESS) {
      std::printf("launch_error=%d\n", rc);
      return 1;
    }
    ++launches;
  }
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1)));
  a.ctx_sync();
  std::printf(
      "busy_ns=%lld elapsed_ns=%lld launches=%ld event_records=%lld "
      "foreign_event_records=%lld\n",
      static_cast<long long>(fakecuda_BusyNs()),                // NOLINT
      static_cast<long long>(NowNs() - start), launches,        // NOLINT
      static_cast<long long>(fakecuda_EventRecords()),          // NOLINT
      static_cast<long long>(fakecuda_ForeignEventRecords()));  // NOLINT
  return 0;
}

// A measured kernel that only finishes after a later launch of the same
// process (a spin-wait released by a later kernel, one side of a
// collective): the later launches, the release included, must get through.
int Gate(const Api& a, const std::string& where, long count) {  // NOLINT
  const auto gated = reinterpret_cast<CUstream>(0x6A7E);
  const auto other = reinterpret_cast<CUstream>(0x07E5);
  int64_t gate_ns = kFakeGateKernelNs;
  int64_t kernel_ns = 1000;
  int64_t release_ns = kFakeReleaseKernelNs;
  void* gate[] = {&gate_ns};
  void* kernel[] = {&kernel_ns};
  void* release[] = {&release_ns};
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < 64 && rc == CUDA_SUCCESS; ++i) {  // The kernel's price, learned.
    rc = a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, other, kernel, nullptr);
  }
  a.ctx_sync();
  const int64_t start = NowNs();
  CUresult gate_rc = a.launch(nullptr, 1, 1, 1, 32, 1, 1, 0, gated, gate, nullptr);
  for (long i = 0; i < count && rc == CUDA_SUCCESS; ++i) {  // NOLINT
    rc = a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, where == "same" ? gated : other, kernel,
                  nullptr);
  }
  CUresult release_rc = a.launch(nullptr, 1, 1, 1, 1, 1, 1, 0, other, release, nullptr);
  a.ctx_sync();
  std::printf("gate_rc=%d rc=%d release_rc=%d elapsed_ns=%lld\n", gate_rc, rc, release_rc,
              static_cast<long long>(NowNs() - start));  // NOLINT
  return 0;
}

int PriorityLaunch(const Api& a, int device, const std::string& api, long count) {  // NOLINT
  int64_t kernel_ns = 1000;
  void* params[] = {&kernel_ns};
  CUlaunchConfig cfg{};
  if (cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1 + device))) !=
      CUDA_SUCCESS) {
    std::printf("set_current_error=1\n");
    return 1;
  }
  int64_t start = NowNs();
  for (long i = 0; i < count; ++i) {  // NOLINT
    const CUresult rc = LaunchBy(a, api, &cfg, params);
    if (rc != CUDA_SUCCESS) {
      std::printf("launch_error=%d\n", rc);
      return 1;
    }
  }
  a.ctx_sync();
  std::printf("start_ns=%lld end_ns=%lld launches=%ld\n", static_cast<long long>(start),  // NOLINT
              static_cast<long long>(NowNs()), count);                                    // NOLINT
  return 0;
}

int Symbols() {
  auto lookup = reinterpret_cast<LookupFn>(dlsym(Driver(), "fakecuda_Lookup"));
  auto gpa = reinterpret_cast<cuGetProcAddress_v2Fn>(dlsym(Driver(), "cuGetProcAddress_v2"));
  auto hooked = [&](void* p, const char* exported) { return p != nullptr && p != lookup(exported); };
  void* p = nullptr;
  CUdriverProcAddressQueryResult st;
  std::printf("dlsym_memalloc_hooked=%d\n",
              hooked(dlsym(Driver(), "cuMemAlloc_v2"), "cuMemAlloc_v2"));
  std::printf("dlsym_unknown_passthrough=%d\n",
              dlsym(Driver(), "cuDeviceGetCount") == lookup("cuDeviceGetCount"));
  std::printf("dlsym_gpa_hooked=%d\n", hooked(reinterpret_cast<void*>(gpa), "cuGetProcAddress_v2"));
  gpa("cuMemAlloc", &p, 12000, 0, &st);
  std::printf("procaddr_memalloc_hooked=%d\n", hooked(p, "cuMemAlloc_v2"));
  gpa("cuMemAlloc", &p, 13000, 0, &st);
  std::printf("procaddr13_memalloc_hooked=%d\n", hooked(p, "cuMemAlloc_v2"));
  gpa("cuMemAlloc", &p, 3000, 0, &st);
  std::printf("procaddr_legacy_passthrough=%d\n", p == lookup("cuMemAlloc"));
  gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
  std::printf("procaddr_ptsz_launch_hooked=%d\n", hooked(p, "cuLaunchKernel_ptsz"));
  gpa("cuGraphLaunch", &p, 13000, 0, &st);
  std::printf("procaddr_graph_hooked=%d\n", hooked(p, "cuGraphLaunch"));
  gpa("cuCtxSynchronize", &p, 12000, 0, &st);
  std::printf("procaddr_unknown_passthrough=%d\n", p == lookup("cuCtxSynchronize"));
  gpa("cuGetProcAddress", &p, 12000, 0, &st);
  std::printf("procaddr_self_hooked=%d\n", hooked(p, "cuGetProcAddress_v2"));
  // The per-thread resolver (what cuda.h calls cuGetProcAddress in a program
  // built for the per-thread default stream): found by dlsym and by the
  // resolver itself, it hands out the hooks, per-thread ones when the request
  // names no stream mode.
  auto ptsz = reinterpret_cast<cuGetProcAddress_v2Fn>(dlsym(Driver(), "cuGetProcAddress_v2_ptsz"));
  std::printf("dlsym_gpa_ptsz_hooked=%d\n",
              hooked(reinterpret_cast<void*>(ptsz), "cuGetProcAddress_v2_ptsz"));
  gpa("cuGetProcAddress", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
  std::printf("procaddr_self_ptsz_is_the_hook=%d\n", p == reinterpret_cast<void*>(ptsz));
  void* launch_ptds = nullptr;
  void* launch_default = nullptr;
  gpa("cuLaunchKernel", &launch_ptds, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
  gpa("cuLaunchKernel", &launch_default, 12000, 0, &st);
  p = nullptr;
  if (ptsz != nullptr) ptsz("cuLaunchKernel", &p, 12000, 0, &st);
  std::printf("ptsz_launch_hooked=%d ptsz_launch_is_per_thread=%d\n",
              hooked(p, "cuLaunchKernel_ptsz"), p == launch_ptds && p != launch_default);
  p = nullptr;
  if (ptsz != nullptr) ptsz("cuMemAlloc", &p, 12000, 0, &st);
  std::printf("ptsz_memalloc_hooked=%d\n", hooked(p, "cuMemAlloc_v2"));
  CUresult rc = gpa("cuNoSuchFunction", &p, 12000, 0, &st);
  std::printf("procaddr_missing_rc=%d status=%d\n", rc, static_cast<int>(st));
  return 0;
}

int Overhead(const Api& a, long n) {  // NOLINT
  int64_t zero = 0;
  void* params[] = {&zero};
  std::vector<int64_t> launch_ns;
  std::vector<int64_t> alloc_ns;
  launch_ns.reserve(static_cast<size_t>(n));
  auto records = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_EventRecords"));
  int64_t records_before = records != nullptr ? records() : 0;
  int64_t launch_total = 0;
  for (long i = 0; i < n; ++i) {  // NOLINT
    int64_t t0 = NowNs();
    a.launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    launch_ns.push_back(NowNs() - t0);
    launch_total += launch_ns.back();
  }
  int64_t launch_records = records != nullptr ? records() - records_before : 0;
  for (long i = 0; i < n / 10; ++i) {  // NOLINT
    CUdeviceptr p = 0;
    int64_t t0 = NowNs();
    a.alloc(&p, 256ULL << 20);
    a.free(p);
    alloc_ns.push_back(NowNs() - t0);
  }
  std::sort(launch_ns.begin(), launch_ns.end());
  std::sort(alloc_ns.begin(), alloc_ns.end());
  auto pct = [](const std::vector<int64_t>& v, double q) {
    return static_cast<long long>(v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]);  // NOLINT
  };
  std::printf("launch_p50_ns=%lld launch_p99_ns=%lld alloc_free_p50_ns=%lld alloc_free_p99_ns=%lld\n",
              pct(launch_ns, 0.5), pct(launch_ns, 0.99), pct(alloc_ns, 0.5), pct(alloc_ns, 0.99));
  // The mean carries what a percentile hides: costs paid on one launch in N.
  // Launches of 50 us or more are left out and counted: throttling sleeps
  // (the shim's polls are 50 us and longer) or preemptions of the machine.
  size_t kept = launch_ns.size();
  while (kept > 0 && launch_ns[kept - 1] >= 50'000) {
    launch_total -= launch_ns[--kept];
  }
  std::printf("launch_mean_ns=%.1f launches_over_50us=%zu event_records_per_launch=%.4f\n",
              static_cast<double>(launch_total) / static_cast<double>(kept > 0 ? kept : 1),
              launch_ns.size() - kept,
              static_cast<double>(launch_records) / static_cast<double>(n > 0 ? n : 1));
  return 0;
}

// Threads hammer alloc/free; each refused allocation must be an OOM and the
// process must never hold more than the cap.
int Threads(const Api& a, int n, int rounds) {
  std::atomic<uint64_t> held{0};
  std::atomic<uint64_t> peak{0};
  std::atomic<int> other_errors{0};
  std::atomic<long> refused{0};  // NOLINT
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        CUdeviceptr p = 0;
        CUresult rc = a.alloc(&p, 64ULL << 20);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
          ++refused;
          continue;
        }
        if (rc != CUDA_SUCCESS) {
          ++other_errors;
          continue;
        }
        uint64_t now = held.fetch_add(64ULL << 20) + (64ULL << 20);
        uint64_t old = peak.load();
        while (now > old && !peak.compare_exchange_weak(old, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));  // Hold it a moment.
        held.fetch_sub(64ULL << 20);
        a.free(p);
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  size_t free_bytes = 0;
  size_t total = 0;
  a.get_info(&free_bytes, &total);
  std::printf("peak=%llu refused=%ld other_errors=%d free=%zu total=%zu device_used=%llu\n",
              static_cast<unsigned long long>(peak.load()), refused.load(), other_errors.load(),
              free_bytes, total, static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

unsigned long long Reserved(CUmemoryPool pool) {  // NOLINT
  cuuint64_t v = 0;
  cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
  return v;
}

size_t FreeBytes(const Api& a) {
  size_t free_bytes = 0;
  size_t total = 0;
  a.get_info(&free_bytes, &total);
  return free_bytes;
}

// torch.cuda.graph captures in global mode by default: meanwhile no thread
// may make a potentially unsafe call (an event query) unless it is in
// relaxed mode, or the capture is invalidated. The shim's own measurement
// events are queried on launches of other threads.
int CaptureRace(const Api& a, int64_t millis) {
  auto capturing = reinterpret_cast<CUstream>(0xCA97);
  std::atomic<bool> begun{false};
  std::atomic<bool> ended{false};
  CUresult begin_rc = CUDA_SUCCESS;
  CUresult end_rc = CUDA_SUCCESS;
  std::thread capturer([&] {
    begin_rc = cuStreamBeginCapture_v2(capturing, 0);  // CU_STREAM_CAPTURE_MODE_GLOBAL
    begun.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(millis));
    CUgraph graph = nullptr;
    end_rc = cuStreamEndCapture(capturing, &graph);
    ended.store(true);
  });
  while (!begun.load()) {
  }
  int64_t kernel_ns = 20'000;
  void* params[] = {&kernel_ns};
  long launches = 0;  // NOLINT
  int failed = 0;
  while (!ended.load()) {
    if (a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr) != CUDA_SUCCESS) {
      ++failed;
    }
    ++launches;
  }
  capturer.join();
  std::printf("begin_rc=%d end_rc=%d launches=%ld failed_launches=%d\n", begin_rc, end_rc, launches,
              failed);
  return 0;
}

// The shim initialises on the first lookup: many threads making it at once
// must all get the same hooks, and the cap must hold across them.
int InitRace(int threads) {
  void* lib = Driver();  // dlopen only: nothing of the shim has run yet.
  auto lookup = reinterpret_cast<LookupFn>(dlsym(lib, "fakecuda_Lookup"));
  std::atomic<bool> go{false};
  std::vector<void*> allocs(static_cast<size_t>(threads));
  std::vector<void*> launches(static_cast<size_t>(threads));
  std::vector<int> rcs(static_cast<size_t>(threads), -1);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      while (!go.load(std::memory_order_acquire)) {
      }
      auto gpa = reinterpret_cast<cuGetProcAddress_v2Fn>(dlsym(lib, "cuGetProcAddress_v2"));
      void* alloc = nullptr;
      void* launch = nullptr;
      if (gpa != nullptr) {
        gpa("cuMemAlloc", &alloc, 3020, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
        gpa("cuLaunchKernel", &launch, 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
            nullptr);
      }
      allocs[static_cast<size_t>(i)] = alloc;
      launches[static_cast<size_t>(i)] = launch;
      CUdeviceptr p = 0;
      if (alloc != nullptr) {
        rcs[static_cast<size_t>(i)] = reinterpret_cast<cuMemAllocFn>(alloc)(&p, 64ULL << 20);
      }
    });
  }
  go.store(true, std::memory_order_release);
  for (std::thread& t : pool) {
    t.join();
  }
  int same = 0;
  int hooked = 0;
  int ok = 0;
  for (int i = 0; i < threads; ++i) {
    size_t k = static_cast<size_t>(i);
    same += allocs[k] == allocs[0] && launches[k] == launches[0] ? 1 : 0;
    hooked += allocs[k] != nullptr && allocs[k] != lookup("cuMemAlloc_v2") &&
                      launches[k] != nullptr && launches[k] != lookup("cuLaunchKernel_ptsz")
                  ? 1
                  : 0;
    ok += rcs[k] == CUDA_SUCCESS ? 1 : 0;
  }
  std::printf("threads=%d same=%d hooked=%d allocated=%llu\n", threads, same, hooked,
              static_cast<unsigned long long>(ok) * (64ULL << 20));
  return 0;
}

// The shim's own NVML entry point, bound when the probe is loaded (no dlsym,
// which would run a step of the shim's initialisation); null without the shim.
extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t*) __attribute__((weak));

// See "loaderrace" above. A thread inside a dlopen holds the loader's lock
// while the library's constructors run; the constructor here waits until
// this thread sleeps (on that lock, inside the step under test) before it
// uses the driver.
int LoaderRace(const std::string& first, const char* library) {
  void* cuda = Driver();  // dlopen only: nothing of the shim has run yet.
  const auto nvml_device = reinterpret_cast<nvmlDevice_t>(uintptr_t{0x100});
  nvmlMemory_t memory{};
  CUdeviceptr p = 0;
  CUresult primed_rc = CUDA_SUCCESS;
  if (first == "cuda" && nvmlDeviceGetMemoryInfo != nullptr) {
    nvmlDeviceGetMemoryInfo(nvml_device, &memory);  // The real dlsym and the environment.
  } else if (first == "nvml") {
    primed_rc = cuMemAlloc_v2(&p, 64ULL << 20);  // The above and the driver.
  }
  int fds[2];
  if (pipe(fds) != 0 || fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
    std::perror("pipe");
    return 2;
  }
  setenv("ACCELPOOL_LOADER_RACE_FD", std::to_string(fds[1]).c_str(), 1);
  setenv("ACCELPOOL_LOADER_RACE_TID", std::to_string(syscall(SYS_gettid)).c_str(), 1);
  setenv("ACCELPOOL_LOADER_RACE_USE", first == "nvml" ? "nvml" : "cuda", 1);
  void* loaded = nullptr;
  std::thread loader([&] { loaded = dlopen(library, RTLD_NOW); });
  // Spin (never asleep) until the constructor runs.
  char byte = 0;
  int64_t deadline = NowNs() + 30'000'000'000;
  while (read(fds[0], &byte, 1) != 1 && NowNs() < deadline) {
    sched_yield();
  }
  int rc = -1;
  if (first == "dlsym") {
    auto alloc = reinterpret_cast<cuMemAllocFn>(dlsym(cuda, "cuMemAlloc_v2"));
    rc = alloc != nullptr ? alloc(&p, 64ULL << 20) : -1;
  } else if (first == "nvml") {
    rc = nvmlDeviceGetMemoryInfo != nullptr ? nvmlDeviceGetMemoryInfo(nvml_device, &memory) : -1;
  } else {
    rc = cuMemAlloc_v2(&p, 64ULL << 20);
  }
  loader.join();
  size_t free_bytes = 0;
  size_t total = 0;
  cuMemGetInfo_v2(&free_bytes, &total);
  std::printf("signalled=%d loaded=%d primed_rc=%d rc=%d nvml_total=%llu free=%zu\n",
              byte == 1 ? 1 : 0, loaded != nullptr ? 1 : 0, primed_rc, rc,
              static_cast<unsigned long long>(memory.total), free_bytes);
  return 0;
}

// One physical handle mapped twice is one allocation: charged once, and
// returned when the handle is released and its last mapping is gone.
int VmmTwice(const Api& a, uint64_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  const CUdeviceptr va1 = 1ULL << 45;
  const CUdeviceptr va2 = va1 + bytes;
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = a.create(&h, bytes, &prop, 0);
  std::printf("create_rc=%d created=%zu\n", rc, FreeBytes(a));
  CUresult m1 = a.map(va1, bytes, 0, h, 0);
  CUresult m2 = a.map(va2, bytes, 0, h, 0);
  std::printf("map_rc=%d,%d mapped_twice=%zu\n", m1, m2, FreeBytes(a));
  a.unmap(va1, bytes);
  std::printf("one_unmapped=%zu\n", FreeBytes(a));
  a.release(h);
  std::printf("released_one_mapped=%zu\n", FreeBytes(a));
  a.unmap(va2, bytes);
  std::printf("all_gone=%zu\n", FreeBytes(a));
  // PyTorch's expandable segments: create, map, (use), unmap, release.
  rc = a.create(&h, bytes, &prop, 0);
  a.map(va1, bytes, 0, h, 0);
  std::printf("segment_rc=%d segment_mapped=%zu\n", rc, FreeBytes(a));
  a.unmap(va1, bytes);
  std::printf("segment_unmapped=%zu\n", FreeBytes(a));
  a.release(h);
  std::printf("segment_released=%zu\n", FreeBytes(a));
  return 0;
}

// The handle of a mapped address, retained and released again (to export it
// or read its properties), leaves the handle the application's: unmapping
// it frees nothing, and it stays charged while mapped again. A second
// handle stays mapped throughout, so a double uncharge would show.
int VmmRetain(const Api& a, uint64_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  const CUdeviceptr va = 1ULL << 45;
  const CUdeviceptr other_va = va + bytes;
  CUmemGenericAllocationHandle h = 0;
  CUmemGenericAllocationHandle other = 0;
  CUresult rc = a.create(&h, bytes, &prop, 0);
  CUresult other_rc = a.create(&other, bytes, &prop, 0);
  a.map(va, bytes, 0, h, 0);
  a.map(other_va, bytes, 0, other, 0);
  std::printf("create_rc=%d,%d mapped=%zu\n", rc, other_rc, FreeBytes(a));
  CUmemGenericAllocationHandle retained = 0;
  CUresult retain_rc = a.retain(&retained, reinterpret_cast<void*>(va + 4096));
  CUresult query_release_rc = a.release(retained);
  std::printf("retain_rc=%d same=%d query_release_rc=%d queried=%zu\n", retain_rc,
              retained == h ? 1 : 0, query_release_rc, FreeBytes(a));
  a.unmap(va, bytes);
  std::printf("unmapped=%zu\n", FreeBytes(a));
  CUresult remap_rc = a.map(va, bytes, 0, h, 0);
  std::printf("remap_rc=%d remapped=%zu\n", remap_rc, FreeBytes(a));
  a.unmap(va, bytes);
  CUresult release_rc = a.release(h);
  std::printf("release_rc=%d released=%zu device_used=%llu\n", release_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  a.unmap(other_va, bytes);
  a.release(other);
  std::printf("all_released=%zu\n", FreeBytes(a));
  return 0;
}

// Every kind of device memory the shim records, then the device's primary
// context reset: all of it is gone, and so is its charge.
int ResetCap(const Api& a, uint64_t bytes) {
  uint64_t quarter = bytes / 4;
  CUdeviceptr p = 0;
  CUresult alloc_rc = a.alloc(&p, quarter);
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CUresult create_rc = a.create(&h, quarter, &prop, 0);
  CUresult map_rc = a.map(1ULL << 45, quarter, 0, h, 0);
  CUipcMemHandle ipc{};
  std::memcpy(ipc.reserved, &quarter, sizeof(quarter));
  CUdeviceptr imported = 0;
  CUresult ipc_rc = a.ipc_open(&imported, ipc, 1);
  CUdeviceptr q = 0;
  CUresult async_rc = a.alloc_async(&q, quarter, nullptr);
  std::printf("alloc_rc=%d create_rc=%d map_rc=%d ipc_rc=%d async_rc=%d held=%zu\n", alloc_rc,
              create_rc, map_rc, ipc_rc, async_rc, FreeBytes(a));
  CUresult reset_rc = a.reset(0);
  std::printf("reset_rc=%d reset_free=%zu reset_used=%llu\n", reset_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  CUdeviceptr all = 0;
  CUresult all_rc = a.alloc(&all, FreeBytes(a));
  std::printf("all_rc=%d all_free=%zu\n", all_rc, FreeBytes(a));
  return 0;
}

// A primary context reset beside memory it does not free: <unit> each by
// cuMemAlloc and cuArrayCreate in a created context, from a created pool,
// and by a mapped cuMemCreate handle; in the primary context <unit> by
// cuMemAlloc, cuArrayCreate and from the default pool. After the reset the
// rest of the cap is allocated, then the survivors are freed one by one.
int ResetKeeps(const Api& a, uint64_t unit) {
  CUcontext primary = nullptr;
  cuCtxGetCurrent(&primary);
  CUresult rcs[9] = {};
  CUdeviceptr prim = 0;
  CUdeviceptr def = 0;
  CUarray prim_array = nullptr;
  rcs[0] = a.alloc(&prim, unit);
  rcs[1] = a.alloc_async(&def, unit, nullptr);
  CUDA_ARRAY_DESCRIPTOR desc{unit / 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1};
  rcs[2] = a.array_create(&prim_array, &desc);
  CUcontext created = nullptr;
  CUdeviceptr mine = 0;
  CUarray mine_array = nullptr;
  rcs[3] = cuCtxCreate_v2(&created, 0, 0);
  rcs[4] = a.alloc(&mine, unit);
  rcs[5] = a.array_create(&mine_array, &desc);
  cuCtxSetCurrent(primary);
  CUmemPoolProps props{};
  props.allocType = 1;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  CUdeviceptr pooled = 0;
  rcs[6] = a.pool_create(&pool, &props);
  rcs[7] = a.alloc_pool(&pooled, unit, pool, nullptr);
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  rcs[8] = a.create(&handle, unit, &prop, 0);
  CUresult map_rc = a.map(1ULL << 45, unit, 0, handle, 0);
  for (int i = 0; i < 9; ++i) {
    std::printf("rc%d=%d ", i, rcs[i]);
  }
  std::printf("map_rc=%d held_free=%zu\n", map_rc, FreeBytes(a));
  CUresult reset_rc = a.reset(0);
  std::printf("reset_rc=%d reset_free=%zu reset_used=%llu\n", reset_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  CUresult stale_rc = a.free(prim);
  CUresult stale_async_rc = a.free_async(def, nullptr);
  CUresult stale_array_rc = a.array_destroy(prim_array);
  std::printf("stale_rc=%d stale_async_rc=%d stale_array_rc=%d stale_free=%zu\n", stale_rc,
              stale_async_rc, stale_array_rc, FreeBytes(a));
  CUdeviceptr rest = 0;
  const size_t free_now = FreeBytes(a);
  CUresult over_rc = a.alloc(&rest, free_now + unit);
  CUresult rest_rc = a.alloc(&rest, free_now);
  std::printf("over_rc=%d rest_rc=%d rest_free=%zu\n", over_rc, rest_rc, FreeBytes(a));
  a.free(rest);
  const size_t base = FreeBytes(a);
  CUresult mine_rc = a.free(mine);
  CUresult mine_array_rc = a.array_destroy(mine_array);
  std::printf("mine_rc=%d mine_array_rc=%d mine_freed=%zu\n", mine_rc, mine_array_rc,
              FreeBytes(a) - base);
  CUresult pooled_rc = a.free_async(pooled, nullptr);
  std::printf("pooled_rc=%d pooled_freed=%zu\n", pooled_rc, FreeBytes(a) - base);
  a.unmap(1ULL << 45, unit);
  CUresult release_rc = a.release(handle);
  std::printf("release_rc=%d handle_freed=%zu final_used=%llu\n", release_rc, FreeBytes(a) - base,
              static_cast<unsigned long long>(DeviceUsed()));
  a.ctx_destroy(created);
  a.pool_destroy(pool);
  return 0;
}

// Measured launches in a context that then ends (cuCtxDestroy of a created
// context, or a primary context reset) while some are still running; more
// launches after. The shim must make no call on the dead context's events.
int CtxEvents(const Api& a, const std::string& how, int64_t millis) {
  auto unknown = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_UnknownEventCalls"));
  CUcontext created = nullptr;
  if (how == "destroy" && cuCtxCreate_v2(&created, 0, 0) != CUDA_SUCCESS) {
    return 2;
  }
  int64_t kernel_ns = 20'000;
  void* params[] = {&kernel_ns};
  auto run = [&](int64_t ms) {
    int64_t end = NowNs() + ms * 1'000'000;
    while (NowNs() < end) {
      a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
    }
  };
  run(millis);
  kernel_ns = 20'000'000;  // Still running when the context ends.
  for (int i = 0; i < 16; ++i) {
    a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  }
  kernel_ns = 20'000;
  CUresult end_rc = CUDA_SUCCESS;
  CUcontext again = nullptr;
  if (how == "destroy") {
    end_rc = a.ctx_destroy(created);
    cuCtxCreate_v2(&again, 0, 0);
  } else {
    end_rc = a.reset(0);
  }
  run(millis);
  a.ctx_sync();
  run(millis / 4);
  std::printf("end_rc=%d same_handle=%d unknown_event_calls=%lld\n", end_rc,
              again == created ? 1 : 0, static_cast<long long>(unknown()));
  return 0;
}

// A created context destroyed where the shim does not see it (the fake's
// own cuCtxDestroy, as a green context's destroy would be) while measured
// launches are in flight, then a new context under the same handle: the
// shim may query the dead events, but never destroys one (those handles are
// not the driver's any more), and the new context's launches are measured
// again with events of its own.
int CtxUnseen(const Api& a, int64_t millis) {
  auto destroys = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_UnknownEventDestroys"));
  auto records = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_EventRecords"));
  auto unseen_destroy = reinterpret_cast<cuCtxDestroyFn>(
      reinterpret_cast<LookupFn>(dlsym(Driver(), "fakecuda_Lookup"))("cuCtxDestroy_v2"));
  CUcontext created = nullptr;
  if (cuCtxCreate_v2(&created, 0, 0) != CUDA_SUCCESS) {
    return 2;
  }
  int64_t kernel_ns = 20'000;
  void* params[] = {&kernel_ns};
  auto run = [&](int64_t ms) {
    int64_t end = NowNs() + ms * 1'000'000;
    while (NowNs() < end) {
      a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
    }
  };
  run(millis);
  kernel_ns = 20'000'000;  // Still running when the context ends.
  for (int i = 0; i < 16; ++i) {
    a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  }
  kernel_ns = 20'000;
  CUresult end_rc = unseen_destroy(created);
  CUcontext again = nullptr;
  cuCtxCreate_v2(&again, 0, 0);
  run(millis);
  a.ctx_sync();
  const int64_t records_before = records();
  run(millis);
  a.ctx_sync();
  std::printf("end_rc=%d same_handle=%d unknown_event_destroys=%lld records_after=%lld\n", end_rc,
              again == created ? 1 : 0, static_cast<long long>(destroys()),
              static_cast<long long>(records() - records_before));
  return 0;
}

// Contexts that each had many measured launches in flight keep that many free
// event pairs; a context made after them must still get pairs of its own
// (its launches measured: the fake counts event records).
int CtxHoard(const Api& a, int contexts, int in_flight) {
  auto records = reinterpret_cast<BusyFn>(dlsym(Driver(), "fakecuda_EventRecords"));
  std::vector<CUcontext> made(static_cast<size_t>(contexts), nullptr);
  int64_t kernel_ns = 200'000;
  void* params[] = {&kernel_ns};
  // Every launch a grid of its own: a new kernel shape, measured while its
  // cost is learnt, as a program's first launches of many kernels are.
  unsigned grid = 1;
  for (CUcontext& c : made) {
    if (cuCtxCreate_v2(&c, 0, 0) != CUDA_SUCCESS) {
      return 2;
    }
    for (int i = 0; i < in_flight; ++i) {
      a.launch(nullptr, grid++, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
    }
    a.ctx_sync();
  }
  CUcontext last = nullptr;
  if (cuCtxCreate_v2(&last, 0, 0) != CUDA_SUCCESS) {
    return 2;
  }
  kernel_ns = 20'000;
  a.ctx_sync();
  const int64_t before = records();
  for (int i = 0; i < 200; ++i) {
    a.launch(nullptr, grid++, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  }
  a.ctx_sync();
  std::printf("last_context_records=%lld\n", static_cast<long long>(records() - before));
  return 0;
}

// A context's handle reused on another device by another thread: the
// launches after it are the new device's (ShimTest reads which buckets the
// region has started).
int CtxReuseDevice(const Api& a, int n) {
  CUcontext created = nullptr;
  if (cuCtxCreate_v2(&created, 0, 0) != CUDA_SUCCESS) {
    return 2;
  }
  int64_t kernel_ns = 20'000;
  void* params[] = {&kernel_ns};
  auto run = [&] {
    for (int i = 0; i < n; ++i) {
      a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
    }
    a.ctx_sync();
  };
  run();
  CUresult destroy_rc = CUDA_ERROR_NOT_FOUND;
  CUcontext again = nullptr;
  std::thread other([&] {
    destroy_rc = a.ctx_destroy(created);
    cuCtxCreate_v2(&again, 0, 1);
  });
  other.join();
  cuCtxSetCurrent(again);
  run();
  std::printf("destroy_rc=%d same_handle=%d\n", destroy_rc, again == created ? 1 : 0);
  return 0;
}

// Memory of every kind the shim records, made in a context created on
// device 0; then device 0's primary context (holding 2 x <unit> of its own)
// is made current again, and the created context, current nowhere, is
// destroyed: once refused by the driver (told to fail), once by handle of
// the primary context (refused), then for good. Then the freed blocks are
// freed again, and what is left of the cap is allocated. (One thread: under
// qemu-user, the tests' Arm run, a second thread sees another start time
// of the process and takes its accounting slot for a dead process's.)
int CtxMem(const Api& a, uint64_t unit) {
  CUcontext primary = nullptr;
  cuCtxGetCurrent(&primary);
  CUdeviceptr kept = 0;
  CUresult kept_rc = a.alloc(&kept, 2 * unit);
  CUcontext created = nullptr;
  CUdeviceptr p = 0;
  CUdeviceptr pitched = 0;
  CUdeviceptr managed = 0;
  CUdeviceptr imported = 0;
  CUdeviceptr async = 0;
  CUarray array = nullptr;
  CUmipmappedArray mipmap = nullptr;
  CUmemGenericAllocationHandle handle = 0;
  CUresult rcs[10] = {};
  rcs[0] = cuCtxCreate_v2(&created, 0, 0);
  rcs[1] = a.alloc(&p, unit);
  size_t pitch = 0;
  rcs[2] = a.pitch(&pitched, &pitch, unit / 64, 64, 4);  // A pitch of unit / 64.
  rcs[3] = a.managed(&managed, unit, 1);
  CUDA_ARRAY_DESCRIPTOR desc{unit / 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1};
  rcs[4] = a.array_create(&array, &desc);
  CUDA_ARRAY3D_DESCRIPTOR desc3{unit / 64, 64, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
  rcs[5] = a.mipmap_create(&mipmap, &desc3, 1);
  CUipcMemHandle ipc{};
  std::memcpy(ipc.reserved, &unit, sizeof(unit));
  rcs[6] = a.ipc_open(&imported, ipc, 1);
  rcs[7] = a.alloc_async(&async, unit, nullptr);
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  rcs[8] = a.create(&handle, unit, &prop, 0);
  rcs[9] = cuCtxSetCurrent(primary);
  std::printf("kept_rc=%d", kept_rc);
  for (int i = 0; i < 10; ++i) {
    std::printf(" rc%d=%d", i, rcs[i]);
  }
  std::printf(" held_free=%zu\n", FreeBytes(a));
  fakecuda_Fail("cuCtxDestroy_v2", 1);
  CUresult failed_rc = a.ctx_destroy(created);
  fakecuda_Fail("cuCtxDestroy_v2", 0);
  std::printf("failed_rc=%d failed_free=%zu\n", failed_rc, FreeBytes(a));
  CUresult primary_rc = a.ctx_destroy(primary);
  std::printf("primary_rc=%d primary_free=%zu\n", primary_rc, FreeBytes(a));
  CUresult destroy_rc = a.ctx_destroy(created);
  std::printf("destroy_rc=%d destroyed_free=%zu device_used=%llu\n", destroy_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  CUresult stale_free_rc = a.free(p);
  CUresult stale_array_rc = a.array_destroy(array);
  CUresult stale_close_rc = a.ipc_close(imported);
  std::printf("stale_free_rc=%d stale_array_rc=%d stale_close_rc=%d stale_free=%zu\n",
              stale_free_rc, stale_array_rc, stale_close_rc, FreeBytes(a));
  CUdeviceptr rest = 0;
  CUresult rest_rc = a.alloc(&rest, FreeBytes(a));
  std::printf("rest_rc=%d full_free=%zu\n", rest_rc, FreeBytes(a));
  CUresult kept_free_rc = a.free(kept);
  std::printf("kept_free_rc=%d kept_freed=%zu\n", kept_free_rc, FreeBytes(a));
  return 0;
}

// Device 0's primary context (the current one) retained, allocated in and
// released, as PyCUDA's retain_primary_context and detach do: the first
// cycle with <unit> of each kind the shim records and two references (the
// first release keeps the context), then many cycles of 2 x <unit>, far
// more in all than the cap. Beside it a created context, a pool and a
// cuMemCreate handle hold <unit> each. Also: a release before any retain, a
// release the driver refuses, and a last release whose state query fails.
int PrimaryRelease(const Api& a, uint64_t unit) {
  CUcontext primary = nullptr;
  cuCtxGetCurrent(&primary);
  CUcontext created = nullptr;
  CUdeviceptr other = 0;
  CUdeviceptr async = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUresult base_rcs[5] = {};
  base_rcs[0] = cuCtxCreate_v2(&created, 0, 0);
  base_rcs[1] = a.alloc(&other, unit);
  base_rcs[2] = cuCtxSetCurrent(primary);
  base_rcs[3] = a.alloc_async(&async, unit, nullptr);
  base_rcs[4] = a.create(&handle, unit, &prop, 0);
  for (int i = 0; i < 5; ++i) {
    std::printf("base_rc%d=%d ", i, base_rcs[i]);
  }
  std::printf("base_free=%zu\n", FreeBytes(a));
  CUresult unretained_rc = a.primary_release(0);
  std::printf("unretained_rc=%d unretained_free=%zu\n", unretained_rc, FreeBytes(a));

  CUcontext retained[2] = {};
  CUresult rcs[8] = {};
  rcs[0] = a.primary_retain(&retained[0], 0);
  rcs[1] = a.primary_retain(&retained[1], 0);
  CUdeviceptr p = 0;
  CUdeviceptr pitched = 0;
  CUdeviceptr managed = 0;
  CUdeviceptr imported = 0;
  CUarray array = nullptr;
  CUmipmappedArray mipmap = nullptr;
  rcs[2] = a.alloc(&p, unit);
  size_t pitch = 0;
  rcs[3] = a.pitch(&pitched, &pitch, unit / 64, 64, 4);  // A pitch of unit / 64.
  rcs[4] = a.managed(&managed, unit, 1);
  CUDA_ARRAY_DESCRIPTOR desc{unit / 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1};
  rcs[5] = a.array_create(&array, &desc);
  CUDA_ARRAY3D_DESCRIPTOR desc3{unit / 64, 64, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
  rcs[6] = a.mipmap_create(&mipmap, &desc3, 1);
  CUipcMemHandle ipc{};
  std::memcpy(ipc.reserved, &unit, sizeof(unit));
  rcs[7] = a.ipc_open(&imported, ipc, 1);
  for (int i = 0; i < 8; ++i) {
    std::printf("rc%d=%d ", i, rcs[i]);
  }
  std::printf("same_handle=%d held_free=%zu\n",
              retained[0] == primary && retained[1] == primary ? 1 : 0, FreeBytes(a));
  CUresult first_rc = a.primary_release(0);
  std::printf("first_rc=%d kept_free=%zu\n", first_rc, FreeBytes(a));
  fakecuda_Fail("cuDevicePrimaryCtxRelease_v2", 1);
  CUresult refused_rc = a.primary_release(0);
  fakecuda_Fail("cuDevicePrimaryCtxRelease_v2", 0);
  std::printf("refused_rc=%d refused_free=%zu\n", refused_rc, FreeBytes(a));
  CUresult last_rc = a.primary_release(0);
  std::printf("last_rc=%d released_free=%zu device_used=%llu\n", last_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  CUresult stale_free_rc = a.free(p);
  CUresult stale_array_rc = a.array_destroy(array);
  CUresult stale_close_rc = a.ipc_close(imported);
  std::printf("stale_free_rc=%d stale_array_rc=%d stale_close_rc=%d stale_free=%zu\n",
              stale_free_rc, stale_array_rc, stale_close_rc, FreeBytes(a));

  int cycles_ok = 0;
  for (int i = 0; i < 40; ++i) {
    CUcontext ctx = nullptr;
    CUdeviceptr block = 0;
    CUresult retain_rc = a.primary_retain(&ctx, 0);
    CUresult alloc_rc = a.alloc(&block, 2 * unit);
    CUresult release_rc = a.primary_release(0);
    if (retain_rc == CUDA_SUCCESS && alloc_rc == CUDA_SUCCESS && release_rc == CUDA_SUCCESS) {
      ++cycles_ok;
    } else {
      std::printf("cycle%d retain_rc=%d alloc_rc=%d release_rc=%d\n", i, retain_rc, alloc_rc,
                  release_rc);
    }
  }
  std::printf("cycles_ok=%d cycles_free=%zu\n", cycles_ok, FreeBytes(a));

  CUcontext ctx = nullptr;
  CUdeviceptr block = 0;
  CUresult unknown_retain_rc = a.primary_retain(&ctx, 0);
  CUresult unknown_alloc_rc = a.alloc(&block, unit);
  fakecuda_Fail("cuDevicePrimaryCtxGetState", 1);
  CUresult unknown_rc = a.primary_release(0);
  fakecuda_Fail("cuDevicePrimaryCtxGetState", 0);
  std::printf("unknown_retain_rc=%d unknown_alloc_rc=%d unknown_rc=%d unknown_free=%zu\n",
              unknown_retain_rc, unknown_alloc_rc, unknown_rc, FreeBytes(a));
  return 0;
}

struct ReuseContext {
  const Api* api;
  uint64_t bytes;
  CUcontext again = nullptr;
  CUdeviceptr p = 0;
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
};

void AllocateInNewContext(void* ctx) {
  auto* c = static_cast<ReuseContext*>(ctx);
  cuCtxCreate_v2(&c->again, 0, 0);
  c->rc = c->api->alloc(&c->p, c->bytes);
}

// A context holding <unit> is destroyed; inside the driver's destroy, after
// the context is gone, a new context gets its handle and allocates
// 2 x <unit>, as another thread could. Then that one is destroyed too.
int CtxReuse(const Api& a, uint64_t unit) {
  CUcontext created = nullptr;
  CUresult create_rc = cuCtxCreate_v2(&created, 0, 0);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc(&p, unit);
  std::printf("create_rc=%d rc=%d held_free=%zu\n", create_rc, rc, FreeBytes(a));
  ReuseContext inner{&a, 2 * unit};
  fakecuda_OnNextCtxDestroy(&AllocateInNewContext, &inner);
  CUresult destroy_rc = a.ctx_destroy(created);
  std::printf("destroy_rc=%d same_handle=%d inner_rc=%d after_free=%zu\n", destroy_rc,
              inner.again == created ? 1 : 0, inner.rc, FreeBytes(a));
  CUresult again_rc = a.ctx_destroy(inner.again);
  std::printf("again_rc=%d final_free=%zu\n", again_rc, FreeBytes(a));
  return 0;
}

// A green context's CUcontext (handle <green>) is current while <unit> is
// allocated; that memory is the primary context's and outlives the green
// context. Then, through each of cuCtxCreate's three ABIs in turn (_v2,
// _v3, _v4, reached by `mode`), a new context gets the same handle value,
// allocates <unit> and is destroyed. Last, the green block is freed.
int CtxBirth(const Api& a, const std::string& mode, uint64_t unit) {
  const uintptr_t green = 0x5000;
  CUcontext primary = nullptr;
  cuCtxGetCurrent(&primary);
  cuCtxCreateFn create_v2 = &cuCtxCreate_v2;
  cuCtxCreateV3Fn create_v3 = &cuCtxCreate_v3;
  cuCtxCreateV4Fn create_v4 = &cuCtxCreate_v4;
  if (mode != "direct") {
    Get(&create_v2, mode, "cuCtxCreate_v2", "cuCtxCreate", 3020, 3020);
    Get(&create_v3, mode, "cuCtxCreate_v3", "cuCtxCreate", 11040, 11040);
    Get(&create_v4, mode, "cuCtxCreate_v4", "cuCtxCreate", 12050, 12050);
  }
  fakecuda_GreenCurrent(green);
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);
  CUdeviceptr kept = 0;
  CUresult green_rc = a.alloc(&kept, unit);
  fakecuda_GreenCurrent(0);  // cuGreenCtxDestroy: the block stays, the primary context's.
  std::printf("green_current=%d green_rc=%d green_free=%zu\n",
              current == reinterpret_cast<CUcontext>(green) ? 1 : 0, green_rc, FreeBytes(a));
  for (int abi = 2; abi <= 4; ++abi) {
    CUcontext created = nullptr;
    fakecuda_NextCtxHandle(green);
    CUresult create_rc = CUDA_ERROR_NOT_FOUND;
    if (abi == 2 && create_v2 != nullptr) {
      create_rc = create_v2(&created, 0, 0);
    } else if (abi == 3 && create_v3 != nullptr) {
      create_rc = create_v3(&created, nullptr, 0, 0, 0);
    } else if (abi == 4 && create_v4 != nullptr) {
      create_rc = create_v4(&created, nullptr, 0, 0);
    }
    CUdeviceptr p = 0;
    CUresult alloc_rc = a.alloc(&p, unit);
    size_t held = FreeBytes(a);
    CUresult destroy_rc = a.ctx_destroy(created);
    std::printf(
        "v%d_create_rc=%d v%d_same_handle=%d v%d_alloc_rc=%d v%d_held_free=%zu "
        "v%d_destroy_rc=%d v%d_free=%zu\n",
        abi, create_rc, abi, created == reinterpret_cast<CUcontext>(green) ? 1 : 0, abi, alloc_rc,
        abi, held, abi, destroy_rc, abi, FreeBytes(a));
    cuCtxSetCurrent(primary);
  }
  CUresult kept_free_rc = a.free(kept);
  std::printf("kept_free_rc=%d final_free=%zu device_used=%llu\n", kept_free_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

// A process holding memory forks; the child uses the driver too (the fake
// allows it) and exits through its destructors. The child must get its own
// accounting slot, and its exit must not take the parent's charge with it.
int ForkAlloc(const Api& a, uint64_t bytes) {
  CUdeviceptr p = 0;
  CUresult rc = a.alloc(&p, bytes);
  std::printf("parent_rc=%d parent_free=%zu\n", rc, FreeBytes(a));
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    CUdeviceptr q = 0;
    CUresult crc = a.alloc(&q, bytes);
    std::printf("child_rc=%d child_free=%zu\n", crc, FreeBytes(a));
    if (crc == CUDA_SUCCESS) {
      a.free(q);
    }
    std::printf("child_after_free=%zu\n", FreeBytes(a));
    std::fflush(stdout);
    std::exit(0);  // Through the destructors, as a worker that returns does.
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child_exit=%d after_child=%zu\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              FreeBytes(a));
  if (rc == CUDA_SUCCESS) {
    a.free(p);
  }
  std::printf("after_parent_free=%zu\n", FreeBytes(a));
  return 0;
}

CUmemoryPool CurrentPool(const char* threshold) {
  CUmemoryPool pool = nullptr;
  cuDeviceGetMemPool(&pool, 0);
  cuuint64_t t = std::string(threshold) == "max" ? ~0ULL : std::strtoull(threshold, nullptr, 10);
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t);
  return pool;
}

int PoolHold(const Api& a, uint64_t bytes, const char* threshold) {
  CUmemoryPool pool = CurrentPool(threshold);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_async(&p, bytes, nullptr);
  CUresult free_rc = a.free_async(p, nullptr);
  std::printf("rc=%d free_rc=%d reserved=%llu free=%zu\n", rc, free_rc, Reserved(pool),
              FreeBytes(a));
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    if (std::string(line) == "trim\n") {
      CUresult trim_rc = a.pool_trim(pool, 0);
      std::printf("trim_rc=%d reserved=%llu free=%zu\n", trim_rc, Reserved(pool), FreeBytes(a));
      std::fflush(stdout);
    } else if (std::strncmp(line, "lower_alloc ", 12) == 0) {
      // The release happens unseen, and the next thing is an allocation
      // of another kind (no memory query between).
      cuuint64_t zero = 0;
      CUresult set_rc = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
      CUdeviceptr q = 0;
      CUresult alloc_rc = a.alloc(&q, std::strtoull(line + 12, nullptr, 10));
      if (alloc_rc == CUDA_SUCCESS) {
        a.free(q);
      }
      std::printf("set_rc=%d alloc_rc=%d\n", set_rc, alloc_rc);
      std::fflush(stdout);
    } else if (std::string(line) == "lower\n") {
      cuuint64_t zero = 0;
      CUresult set_rc = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
      std::printf("set_rc=%d reserved=%llu free=%zu\n", set_rc, Reserved(pool), FreeBytes(a));
      std::fflush(stdout);
    }
  }
  return 0;
}

int PoolOver(const Api& a, uint64_t first, uint64_t next) {
  CUmemoryPool pool = CurrentPool("max");
  CUdeviceptr p1 = 0;
  CUdeviceptr p2 = 12345;
  CUresult rc1 = a.alloc_async(&p1, first, nullptr);
  CUresult rc2 = a.alloc_async(&p2, next, nullptr);
  std::printf("rc1=%d rc2=%d p2=%llu reserved=%llu free=%zu device_used=%llu\n", rc1, rc2, p2,
              Reserved(pool), FreeBytes(a), static_cast<unsigned long long>(DeviceUsed()));
  a.free_async(p1, nullptr);
  std::printf("freed_reserved=%llu freed_free=%zu\n", Reserved(pool), FreeBytes(a));
  a.pool_trim(pool, 0);
  std::printf("trimmed_reserved=%llu trimmed_free=%zu trimmed_device_used=%llu\n", Reserved(pool),
              FreeBytes(a), static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

uint64_t GraphReserved() {
  auto fn = reinterpret_cast<UsedFn>(dlsym(Driver(), "fakecuda_GraphReservedBytes"));
  return fn != nullptr ? fn(0) : 0;
}

// Trims device 0's graph pool and prints what the process and the device
// have left.
int TrimAndReport(const Api& a) {
  CUresult rc = a.graph_trim(0);
  std::printf("trim_rc=%d trimmed_free=%llu trimmed_device_used=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)),
              static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

CUDA_MEM_ALLOC_NODE_PARAMS AllocNodeParams(uint64_t bytes) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = 1;  // CU_MEM_ALLOCATION_TYPE_PINNED
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = 0;
  p.bytesize = bytes;
  return p;
}

// A graph allocating `bytes` in two halves inside a child graph and freeing
// them there, beside an empty node; then instantiated and mapped by `how`
// (launch, upload, or params: instantiation with the upload flag), launched
// again, destroyed and trimmed. `first` bytes are allocated beforehand.
int GraphMem(const Api& a, uint64_t bytes, uint64_t first, const std::string& how) {
  CUdeviceptr held = 0;
  if (first > 0) {
    std::printf("first_rc=%d\n", a.alloc(&held, first));
  }
  CUgraph child = nullptr;
  CUgraph graph = nullptr;
  cuGraphCreate(&child, 0);
  cuGraphCreate(&graph, 0);
  CUgraphNode node = nullptr;
  for (int half = 0; half < 2; ++half) {
    CUDA_MEM_ALLOC_NODE_PARAMS p = AllocNodeParams(bytes / 2);
    cuGraphAddMemAllocNode(&node, child, nullptr, 0, &p);
    cuGraphAddMemFreeNode(&node, child, &node, 1, p.dptr);
  }
  cuGraphAddEmptyNode(&node, graph, nullptr, 0);
  cuGraphAddChildGraphNode(&node, graph, &node, 1, child);
  CUgraphExec exec = nullptr;
  CUresult rc = CUDA_SUCCESS;
  if (how == "params") {
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    rc = a.graph_instantiate_params(&exec, graph, &params);
    std::printf("instantiate_rc=%d result_out=%d\n", rc, params.result_out);
  } else {
    rc = a.graph_instantiate(&exec, graph, 0);
    std::printf("instantiate_rc=%d\n", rc);
    if (rc == CUDA_SUCCESS) {
      rc = how == "upload" ? a.graph_upload(exec, nullptr) : a.graph_launch(exec, nullptr);
      std::printf("map_rc=%d\n", rc);
    }
  }
  std::printf("mapped_free=%llu reserved=%llu device_used=%llu\n",
              static_cast<unsigned long long>(FreeBytes(a)),
              static_cast<unsigned long long>(GraphReserved()),
              static_cast<unsigned long long>(DeviceUsed()));
  if (rc != CUDA_SUCCESS) {
    return 0;
  }
  CUdeviceptr p = 0;
  CUresult alloc_rc = a.alloc(&p, 512ULL << 20);
  std::printf("alloc_512_rc=%d\n", alloc_rc);
  if (alloc_rc == CUDA_SUCCESS) {
    a.free(p);
  }
  rc = a.graph_launch(exec, nullptr);
  std::printf("relaunch_rc=%d relaunch_free=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)));
  rc = a.graph_exec_destroy(exec);
  std::printf("destroy_rc=%d destroyed_free=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)));
  if (held != 0) {
    a.free(held);
  }
  return TrimAndReport(a);
}

// A graph with a 512 MiB memory node launched while the compute share makes
// it wait (the bucket emptied by earlier kernels): another thread reads the
// free memory during that wait. Nothing is mapped until the launch runs, so
// nothing may be charged before.
int GraphWait(const Api& a) {
  int64_t kernel_ns = 20'000'000;
  void* params[] = {&kernel_ns};
  for (int i = 0; i < 10; ++i) {
    a.launch(nullptr, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  }
  a.ctx_sync();
  CUgraph graph = nullptr;
  cuGraphCreate(&graph, 0);
  CUgraphNode node = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS p = AllocNodeParams(512ULL << 20);
  cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &p);
  cuGraphAddMemFreeNode(&node, graph, &node, 1, p.dptr);
  CUgraphExec exec = nullptr;
  CUresult rc = a.graph_instantiate(&exec, graph, 0);
  std::atomic<bool> launching{false};
  std::atomic<bool> returned{false};
  size_t free_during = 0;
  bool read_during_wait = false;
  std::thread reader([&] {
    while (!launching.load()) {
      std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    free_during = FreeBytes(a);
    read_during_wait = !returned.load();
  });
  launching.store(true);
  const int64_t start = NowNs();
  CUresult launch_rc = a.graph_launch(exec, nullptr);
  const int64_t waited_ms = (NowNs() - start) / 1'000'000;
  returned.store(true);
  reader.join();
  a.ctx_sync();
  std::printf(
      "instantiate_rc=%d launch_rc=%d waited_ms=%lld read_during_wait=%d "
      "free_during_wait=%zu free_after=%zu\n",
      rc, launch_rc, static_cast<long long>(waited_ms), read_during_wait ? 1 : 0, free_during,
      FreeBytes(a));
  return 0;
}

// Graphs each allocating `chunk` that outlives the launch, launched until
// one fails; the allocations are freed, the graphs destroyed and the graph
// pool trimmed; twice.
int GraphFill(const Api& a, uint64_t chunk) {
  for (int round = 0; round < 2; ++round) {
    std::vector<std::pair<CUgraphExec, CUdeviceptr>> held;
    CUresult first_error = CUDA_SUCCESS;
    for (int i = 0; i < 4096 && first_error == CUDA_SUCCESS; ++i) {
      CUgraph graph = nullptr;
      cuGraphCreate(&graph, 0);
      CUgraphNode node = nullptr;
      CUDA_MEM_ALLOC_NODE_PARAMS p = AllocNodeParams(chunk);
      cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &p);
      CUgraphExec exec = nullptr;
      first_error = a.graph_instantiate(&exec, graph, 0);
      if (first_error == CUDA_SUCCESS) {
        first_error = a.graph_launch(exec, nullptr);
        if (first_error == CUDA_SUCCESS) {
          held.emplace_back(exec, p.dptr);
        } else {
          a.graph_exec_destroy(exec);
        }
      }
      cuGraphDestroy(graph);
    }
    std::printf("round=%d count=%zu first_error=%d device_used=%llu reserved=%llu\n", round,
                held.size(), first_error, static_cast<unsigned long long>(DeviceUsed()),
                static_cast<unsigned long long>(GraphReserved()));
    for (auto& [exec, dptr] : held) {
      a.free_async(dptr, nullptr);
      a.graph_exec_destroy(exec);
    }
    std::printf("round=%d freed_free=%llu\n", round,
                static_cast<unsigned long long>(FreeBytes(a)));
    a.graph_trim(0);
    std::printf("round=%d trimmed_free=%llu trimmed_device_used=%llu\n", round,
                static_cast<unsigned long long>(FreeBytes(a)),
                static_cast<unsigned long long>(DeviceUsed()));
  }
  return 0;
}

// An executable graph with one allocation of `bytes`, freed inside the
// graph or (freed = false) outliving its launch; nullptr on failure.
CUgraphExec OneAllocGraph(const Api& a, uint64_t bytes, bool freed) {
  CUgraph graph = nullptr;
  cuGraphCreate(&graph, 0);
  CUgraphNode node = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS p = AllocNodeParams(bytes);
  cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &p);
  if (freed) {
    cuGraphAddMemFreeNode(&node, graph, &node, 1, p.dptr);
  }
  CUgraphExec exec = nullptr;
  if (a.graph_instantiate(&exec, graph, 0) != CUDA_SUCCESS) {
    exec = nullptr;
  }
  cuGraphDestroy(graph);
  return exec;
}

struct GraphRaceContext {
  const Api* api;
  std::string what;  // "launch": launch `exec`; "query": cuMemGetInfo; "trim".
  CUgraphExec exec = nullptr;
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
  uint64_t free_inside = 0;
};

void InsideGraphMap(void* ctx) {
  auto* c = static_cast<GraphRaceContext*>(ctx);
  if (c->what == "launch") {
    c->rc = c->api->graph_launch(c->exec, nullptr);
  } else if (c->what == "trim") {
    c->rc = c->api->graph_trim(0);
  }
  c->free_inside = FreeBytes(*c->api);
}

// Graph A (<a> bytes, outliving its launch) is launched; inside that launch
// (as another thread would), before it maps its memory ("before") or after
// ("after"), graph B (<b> bytes, outliving) is launched, or ("query") the
// free memory is read. Beforehand a graph of <idle> bytes freed inside it is
// launched (leaving that much idle in the graph pool) and <first> bytes are
// taken by cuMemAlloc.
int GraphRace(const Api& a, const std::string& when, uint64_t idle, uint64_t first,
              uint64_t a_bytes, uint64_t b_bytes) {
  if (idle > 0) {
    std::printf("idle_rc=%d\n", a.graph_launch(OneAllocGraph(a, idle, true), nullptr));
  }
  CUdeviceptr held = 0;
  if (first > 0) {
    std::printf("first_rc=%d\n", a.alloc(&held, first));
  }
  CUgraphExec graph_a = OneAllocGraph(a, a_bytes, false);
  GraphRaceContext ctx{&a, when == "query" ? "query" : "launch"};
  ctx.exec = when == "query" ? nullptr : OneAllocGraph(a, b_bytes, false);
  fakecuda_OnNextGraphMap(when == "before" ? 0 : 1, &InsideGraphMap, &ctx);
  CUresult rc = a.graph_launch(graph_a, nullptr);
  std::printf("a_rc=%d b_rc=%d free_inside=%llu free=%llu device_used=%llu reserved=%llu\n", rc,
              ctx.rc, static_cast<unsigned long long>(ctx.free_inside),
              static_cast<unsigned long long>(FreeBytes(a)),
              static_cast<unsigned long long>(DeviceUsed()),
              static_cast<unsigned long long>(GraphReserved()));
  return 0;
}

// A graph of <bytes> freed inside it is launched; inside that launch, after
// the mapping, the graph pool is trimmed (as another thread would). Then
// <first> bytes are taken by cuMemAlloc and the graph launched again: its
// memory is no longer mapped, so the relaunch maps it anew.
int GraphTrimRace(const Api& a, uint64_t bytes, uint64_t first) {
  CUgraphExec exec = OneAllocGraph(a, bytes, true);
  GraphRaceContext ctx{&a, "trim"};
  fakecuda_OnNextGraphMap(1, &InsideGraphMap, &ctx);
  CUresult rc = a.graph_launch(exec, nullptr);
  std::printf("launch_rc=%d trim_rc=%d trimmed_reserved=%llu free=%llu\n", rc, ctx.rc,
              static_cast<unsigned long long>(GraphReserved()),
              static_cast<unsigned long long>(FreeBytes(a)));
  CUdeviceptr held = 0;
  if (first > 0) {
    std::printf("first_rc=%d\n", a.alloc(&held, first));
  }
  rc = a.graph_launch(exec, nullptr);
  std::printf("relaunch_rc=%d relaunch_free=%llu device_used=%llu reserved=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)),
              static_cast<unsigned long long>(DeviceUsed()),
              static_cast<unsigned long long>(GraphReserved()));
  return 0;
}

struct HoldRecords {
  int64_t at_hold = -1;  // fakecuda_EventRecords() when the memory hold read the pool.
};

void AtGraphMemAttribute(void* ctx) {
  static_cast<HoldRecords*>(ctx)->at_hold = fakecuda_EventRecords();
}

// The first launch of a graph allocating `bytes` (freed inside it), a
// launch the compute share measures: the event records (cuEventRecord and
// cuEventRecord_ptsz) it had made when its memory hold read the graph pool,
// and all it made.
int GraphOrder(const Api& a, uint64_t bytes) {
  CUgraphExec exec = OneAllocGraph(a, bytes, true);
  HoldRecords hold;
  const int64_t before = fakecuda_EventRecords();
  fakecuda_OnNextGraphMemAttribute(&AtGraphMemAttribute, &hold);
  CUresult rc = a.graph_launch(exec, nullptr);
  const int64_t after = fakecuda_EventRecords();
  a.ctx_sync();
  std::printf("launch_rc=%d held=%d records_at_hold=%lld records=%lld free=%llu\n", rc,
              hold.at_hold >= 0 ? 1 : 0, static_cast<long long>(hold.at_hold - before),
              static_cast<long long>(after - before),
              static_cast<unsigned long long>(FreeBytes(a)));
  return 0;
}

// Stream-ordered allocations on a capturing stream: memory nodes, nothing
// allocated yet.
// A graph captured from a stream: cuMemAllocAsync of `bytes` on the
// capturing stream (freed there too when `free_inside`), instantiated
// through `how` ("flags": the CUDA 12/13 cuGraphInstantiate; "v2": the
// CUDA 11 ABI from cuGetProcAddress at 11.8) and launched.
int CaptureGraph(const Api& a, uint64_t bytes, const std::string& how, bool free_inside) {
  auto capturing = reinterpret_cast<CUstream>(0xCA97);
  cuStreamBeginCapture_v2(capturing, 0);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_async(&p, bytes, capturing);
  if (free_inside) {
    a.free_async(p, capturing);
  }
  CUgraph graph = nullptr;
  cuStreamEndCapture(capturing, &graph);
  std::printf("capture_rc=%d captured_free=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)));
  CUgraphExec exec = nullptr;
  if (how == "v2") {
    auto gpa = reinterpret_cast<cuGetProcAddress_v2Fn>(dlsym(Driver(), "cuGetProcAddress_v2"));
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status;
    gpa("cuGraphInstantiate", &fn, 11080, 0, &status);
    char log[64];
    rc = reinterpret_cast<cuGraphInstantiateV2Fn>(fn)(&exec, graph, nullptr, log, sizeof(log));
  } else {
    rc = a.graph_instantiate(&exec, graph, 0);
  }
  std::printf("instantiate_rc=%d\n", rc);
  rc = a.graph_launch(exec, nullptr);
  std::printf("map_rc=%d mapped_free=%llu\n", rc, static_cast<unsigned long long>(FreeBytes(a)));
  if (rc == CUDA_SUCCESS && !free_inside) {
    a.free_async(p, nullptr);
  }
  a.graph_exec_destroy(exec);
  return TrimAndReport(a);
}

int CaptureAlloc(const Api& a, uint64_t bytes) {
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_async(&p, bytes, reinterpret_cast<CUstream>(0xCA97));
  std::printf("capture_rc=%d capture_free=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)));
  rc = a.free_async(p, reinterpret_cast<CUstream>(0xCA97));
  std::printf("capture_free_rc=%d\n", rc);
  return 0;
}

// A block allocated on stream 0 is freed on the capturing stream: the free
// becomes a node of the graph being captured, and the block stays
// allocated. Then `bytes` + 256 MiB more by cuMemAlloc.
int CaptureFree(const Api& a, uint64_t bytes) {
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_async(&p, bytes, nullptr);
  std::printf("alloc_rc=%d allocated_free=%zu\n", rc, FreeBytes(a));
  rc = a.free_async(p, reinterpret_cast<CUstream>(0xCA97));
  std::printf("free_rc=%d captured_free=%zu driver_used=%llu\n", rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  CUdeviceptr q = 0;
  rc = a.alloc(&q, bytes + (256ULL << 20));
  std::printf("over_rc=%d\n", rc);
  return 0;
}

// From device 0, `bytes` from a pool on `where`: "host" (a host-located
// pool), "dev1" (a pool on device 1) or "newtype" (a device-0 pool of a
// location type newer than the shim). `fillers` host pools, each allocated
// from once, are tracked first. Prints what each device has left.
int PoolWhere(const Api& a, const std::string& where, uint64_t bytes, int fillers) {
  std::vector<std::pair<CUmemoryPool, CUdeviceptr>> filled;
  for (int i = 0; i < fillers; ++i) {
    CUmemPoolProps host{};
    host.allocType = 1;
    host.location.type = 2;  // CU_MEM_LOCATION_TYPE_HOST
    CUmemoryPool pool = nullptr;
    CUdeviceptr p = 0;
    if (a.pool_create(&pool, &host) == CUDA_SUCCESS &&
        a.alloc_pool(&p, 1 << 20, pool, nullptr) == CUDA_SUCCESS) {
      filled.emplace_back(pool, p);
    }
  }
  std::printf("fillers=%zu\n", filled.size());
  CUmemPoolProps props{};
  props.allocType = 1;
  props.location.type = where == "host" ? 2 : where == "newtype" ? 6 : CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = where == "dev1" ? 1 : 0;
  CUmemoryPool pool = nullptr;
  CUresult create_rc = a.pool_create(&pool, &props);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_pool(&p, bytes, pool, nullptr);
  uint64_t free0 = FreeBytes(a);
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(2));
  uint64_t free1 = FreeBytes(a);
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(1));
  std::printf("create_rc=%d rc=%d free0=%llu free1=%llu\n", create_rc, rc,
              static_cast<unsigned long long>(free0), static_cast<unsigned long long>(free1));
  if (rc == CUDA_SUCCESS) {
    a.free_async(p, nullptr);
  }
  rc = a.pool_destroy(pool);
  std::printf("destroy_rc=%d destroyed_free0=%llu\n", rc,
              static_cast<unsigned long long>(FreeBytes(a)));
  for (auto& [filler, ptr] : filled) {
    a.free_async(ptr, nullptr);
    a.pool_destroy(filler);
  }
  return 0;
}

int PoolCustom(const Api& a, uint64_t bytes) {
  CUmemPoolProps props{};
  props.allocType = 1;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  CUresult create_rc = cuMemPoolCreate(&pool, &props);
  cuuint64_t max = ~0ULL;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_pool(&p, bytes, pool, nullptr);
  a.free_async(p, nullptr);
  std::printf("create_rc=%d rc=%d kept_free=%zu\n", create_rc, rc, FreeBytes(a));
  CUresult destroy_rc = a.pool_destroy(pool);
  std::printf("destroy_rc=%d destroyed_free=%zu device_used=%llu\n", destroy_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

// The default pool gives back a freed block when the host synchronises,
// unseen by the shim (no call of its re-reads it); an allocation from
// another pool on the device must not be refused for the stale charge.
int PoolSync(const Api& a, uint64_t first, uint64_t next) {
  fakecuda_DeferAsyncFrees(1);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_async(&p, first, nullptr);
  CUresult free_rc = a.free_async(p, nullptr);
  CUresult sync_rc = cuStreamSynchronize(nullptr);
  CUmemPoolProps props{};
  props.allocType = 1;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  CUresult create_rc = a.pool_create(&pool, &props);
  CUdeviceptr q = 0;
  CUresult pool_rc = a.alloc_pool(&q, next, pool, nullptr);
  std::printf("rc=%d free_rc=%d sync_rc=%d create_rc=%d pool_rc=%d free=%zu device_used=%llu\n", rc,
              free_rc, sync_rc, create_rc, pool_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  if (pool_rc == CUDA_SUCCESS) {
    a.free_async(q, nullptr);
    cuStreamSynchronize(nullptr);
  }
  CUdeviceptr r = 0;
  CUresult alloc_rc = a.alloc(&r, next);
  if (alloc_rc == CUDA_SUCCESS) {
    a.free(r);
  }
  std::printf("alloc_rc=%d end_free=%zu\n", alloc_rc, FreeBytes(a));
  return 0;
}

// A created pool destroyed while a block of it is still allocated (with
// <kept> bytes freed and kept beside it): the driver frees the pool's
// memory only once that block is freed.
int PoolDestroyLive(const Api& a, uint64_t bytes, uint64_t kept) {
  CUmemPoolProps props{};
  props.allocType = 1;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  CUresult create_rc = a.pool_create(&pool, &props);
  cuuint64_t max = ~0ULL;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max);
  CUdeviceptr k = 0;
  if (kept != 0 && a.alloc_pool(&k, kept, pool, nullptr) == CUDA_SUCCESS) {
    a.free_async(k, nullptr);
  }
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_pool(&p, bytes, pool, nullptr);
  std::printf("create_rc=%d rc=%d held_free=%zu\n", create_rc, rc, FreeBytes(a));
  CUresult destroy_rc = a.pool_destroy(pool);
  std::printf("destroy_rc=%d destroyed_free=%zu destroyed_used=%llu\n", destroy_rc, FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  CUdeviceptr q = 0;
  CUresult over_rc = a.alloc(&q, bytes);
  if (over_rc == CUDA_SUCCESS) {
    a.free(q);
  }
  CUresult free_rc = a.free_async(p, nullptr);
  std::printf("over_rc=%d free_rc=%d freed_free=%zu freed_used=%llu\n", over_rc, free_rc,
              FreeBytes(a), static_cast<unsigned long long>(DeviceUsed()));
  CUresult again_rc = a.alloc(&q, bytes);
  std::printf("again_rc=%d\n", again_rc);
  return 0;
}

size_t FreeOn(const Api& a, int device) {
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device + 1)));
  size_t free_bytes = FreeBytes(a);
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1)));
  return free_bytes;
}

// cudaDeviceSetLimit(cudaLimitMallocHeapSize) reserves device memory.
int HeapLimit(const Api& a, uint64_t unit) {
  auto heap = [] {
    size_t v = 0;
    cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE);
    return v;
  };
  const size_t before = heap();
  CUresult rc = a.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, before + unit);
  std::printf("before=%zu rc=%d grown_free=%zu\n", before, rc, FreeBytes(a));
  CUresult over_rc = a.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, before + 100 * unit);
  std::printf("over_rc=%d over_free=%zu over_heap=%zu\n", over_rc, FreeBytes(a), heap());
  CUresult shrink_rc = a.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, before + unit / 2);
  std::printf("shrink_rc=%d shrunk_free=%zu\n", shrink_rc, FreeBytes(a));
  CUresult back_rc = a.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, before);
  std::printf("back_rc=%d back_free=%zu\n", back_rc, FreeBytes(a));
  CUresult stack_rc = a.set_limit(CU_LIMIT_STACK_SIZE, 1 << 20);
  std::printf("stack_rc=%d stack_free=%zu\n", stack_rc, FreeBytes(a));
  CUcontext ctx = nullptr;
  cuCtxCreate_v2(&ctx, 0, 0);
  CUresult ctx_rc = a.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, before + unit);
  std::printf("ctx_rc=%d ctx_free=%zu\n", ctx_rc, FreeBytes(a));
  CUresult destroy_rc = a.ctx_destroy(ctx);
  std::printf("destroy_rc=%d destroyed_free=%zu\n", destroy_rc, FreeBytes(a));
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1)));
  CUresult primary_rc = a.set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, before + unit);
  size_t primary_free = FreeBytes(a);
  CUresult reset_rc = a.reset(0);
  std::printf("primary_rc=%d primary_free=%zu reset_rc=%d reset_free=%zu reset_heap=%zu\n",
              primary_rc, primary_free, reset_rc, FreeBytes(a), heap());
  return 0;
}

// cuMemAllocAsync allocates from the current pool of the stream's device,
// whichever context is current.
int AsyncOnStreamDevice(const Api& a, uint64_t bytes) {
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(2)));
  CUstream stream = nullptr;
  CUresult create_rc = cuStreamCreate(&stream, 0);
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1)));
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_async(&p, bytes, stream);
  std::printf("create_rc=%d rc=%d free0=%zu free1=%zu\n", create_rc, rc, FreeOn(a, 0),
              FreeOn(a, 1));
  CUresult free_rc = a.free_async(p, stream);
  std::printf("free_rc=%d freed_free0=%zu freed_free1=%zu\n", free_rc, FreeOn(a, 0), FreeOn(a, 1));
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);
  std::printf("current=%zu\n", reinterpret_cast<size_t>(current));
  cuStreamDestroy_v2(stream);
  return 0;
}

// With no current context (cuCtxSetCurrent(NULL)), cuMemAllocFromPoolAsync
// of `bytes` from a pool created on device 1, on a stream of device 1.
int PoolWithoutContext(const Api& a, uint64_t bytes) {
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(2)));
  CUstream stream = nullptr;
  CUresult create_rc = cuStreamCreate(&stream, 0);
  CUmemPoolProps props{};
  props.allocType = 1;  // CU_MEM_ALLOCATION_TYPE_PINNED
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 1;
  CUmemoryPool pool = nullptr;
  CUresult pool_rc = a.pool_create(&pool, &props);
  cuCtxSetCurrent(nullptr);
  CUcontext none = reinterpret_cast<CUcontext>(1);
  cuCtxGetCurrent(&none);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc_pool(&p, bytes, pool, stream);
  cuCtxSetCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(1)));
  std::printf("create_rc=%d pool_rc=%d none=%d rc=%d free0=%zu free1=%zu\n", create_rc, pool_rc,
              none == nullptr ? 1 : 0, rc, FreeOn(a, 0), FreeOn(a, 1));
  CUresult free_rc = a.free_async(p, stream);
  a.pool_destroy(pool);
  std::printf("free_rc=%d freed_free1=%zu\n", free_rc, FreeOn(a, 1));
  cuStreamDestroy_v2(stream);
  return 0;
}

int IpcFromDevice(const Api& a, uint64_t bytes, int device) {
  CUipcMemHandle h{};
  int32_t device_plus_one = device + 1;
  std::memcpy(h.reserved, &bytes, sizeof(bytes));
  std::memcpy(h.reserved + sizeof(bytes), &device_plus_one, sizeof(device_plus_one));
  CUdeviceptr p = 0;
  CUresult rc = a.ipc_open(&p, h, 1);
  std::printf("rc=%d free0=%zu free1=%zu\n", rc, FreeOn(a, 0), FreeOn(a, 1));
  CUresult close_rc = a.ipc_close(p);
  std::printf("close_rc=%d closed_free0=%zu closed_free1=%zu\n", close_rc, FreeOn(a, 0),
              FreeOn(a, 1));
  return 0;
}

struct RaceContext {
  const Api* api;
  std::string which;
  uint64_t bytes;
  uint64_t key = 0;
  uint64_t va = 0;
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
};

void AllocateInsideFree(void* ctx) {
  auto* c = static_cast<RaceContext*>(ctx);
  c->rc = AllocOne(*c->api, c->which, c->bytes, &c->key, &c->va);
}

int FreeRace(const Api& a, const std::string& api, uint64_t bytes) {
  uint64_t key = 0;
  uint64_t va = 0;
  CUresult rc = AllocOne(a, api, bytes, &key, &va);
  RaceContext ctx{&a, api, bytes};
  fakecuda_OnNextFree(&AllocateInsideFree, &ctx);
  ReleaseOne(a, api, key, va);
  std::printf("rc=%d rc2=%d same_address=%d free_mid=%zu\n", rc, ctx.rc, ctx.key == key,
              FreeBytes(a));
  ReleaseOne(a, api, ctx.key, ctx.va);
  std::printf("free_after=%zu device_used=%llu\n", FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

int FreeFail(const Api& a, const std::string& api, const char* entry, uint64_t bytes) {
  uint64_t key = 0;
  uint64_t va = 0;
  CUresult rc = AllocOne(a, api, bytes, &key, &va);
  fakecuda_Fail(entry, 1);
  CUresult free_rc = CUDA_ERROR_INVALID_VALUE;
  if (api == "array") {
    free_rc = a.array_destroy(reinterpret_cast<CUarray>(key));
  } else if (api == "ipc") {
    free_rc = a.ipc_close(key);
  } else if (api == "async" || api == "pool") {
    free_rc = a.free_async(key, nullptr);
  } else {
    free_rc = a.free(key);
  }
  size_t free_mid = FreeBytes(a);
  fakecuda_Fail(entry, 0);
  ReleaseOne(a, api, key, va);
  std::printf("rc=%d failed_free_rc=%d free_mid=%zu free_after=%zu\n", rc, free_rc, free_mid,
              FreeBytes(a));
  return 0;
}

// Exports `bytes` and imports the handle again, as another process of the
// same container would: the import must not be charged a second time.
// With "print", prints the handle's bytes in hex and imports nothing.
int IpcSelf(const Api& a, uint64_t bytes, bool print) {
  size_t before = FreeBytes(a);
  CUdeviceptr p = 0;
  CUresult rc = a.alloc(&p, bytes);
  CUipcMemHandle h{};
  CUresult get_rc = a.ipc_get(&h, p);
  size_t after_alloc = FreeBytes(a);
  if (print) {
    std::printf("rc=%d get_rc=%d handle=", rc, get_rc);
    for (unsigned char c : h.reserved) {
      std::printf("%02x", c);
    }
    std::printf("\n");
    return 0;
  }
  CUdeviceptr q = 0;
  CUresult open_rc = a.ipc_open(&q, h, 1);
  size_t after_import = FreeBytes(a);
  CUresult close_rc = a.ipc_close(q);
  a.free(p);
  std::printf("rc=%d get_rc=%d open_rc=%d close_rc=%d charged_alloc=%zu charged_import=%zu "
              "returned=%d\n",
              rc, get_rc, open_rc, close_rc, before - after_alloc, after_alloc - after_import,
              FreeBytes(a) == before ? 1 : 0);
  return 0;
}

// A fork while another thread binds a hook (cuGetProcAddress): the child's
// own lookup must not wait for a lock that thread held at the fork.
void ExitOnSignal(int) { std::exit(7); }

// A signal whose handler calls exit() (as handlers of SIGTERM often do)
// interrupts this thread inside cuMemAlloc, while it holds the shim's
// memory lock: its first charge claims the process's slot, and the test
// holds the region's mutex meanwhile. The process must still exit.
int ExitInHook(const Api& a, uint64_t bytes) {
  std::printf("ready free=%zu\n", FreeBytes(a));  // The region is open from here on.
  std::fflush(stdout);
  char c = 0;
  while (read(0, &c, 1) == 1 && c != '\n') {
  }
  signal(SIGUSR1, ExitOnSignal);
  const pthread_t self = pthread_self();
  std::thread([self] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    pthread_kill(self, SIGUSR1);
  }).detach();
  CUdeviceptr p = 0;
  CUresult rc = a.alloc(&p, bytes);
  std::printf("alloc_rc=%d\n", rc);  // Not while the region's mutex is held.
  return 1;
}

int ForkBind(int forks) {
  auto gpa = reinterpret_cast<cuGetProcAddress_v2Fn>(dlsym(Driver(), "cuGetProcAddress_v2"));
  std::atomic<bool> stop{false};
  std::thread binder([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      void* p = nullptr;
      gpa("cuMemAlloc", &p, 12080, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
    }
  });
  int hung = 0;
  int done = 0;
  for (; done < forks && hung == 0; ++done) {
    pid_t child = fork();
    if (child == 0) {
      void* p = nullptr;
      _exit(gpa("cuMemAlloc", &p, 12080, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) == CUDA_SUCCESS ? 0
                                                                                               : 1);
    }
    int status = 0;
    int64_t deadline = NowNs() + 5'000'000'000;
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (NowNs() > deadline) {
        ++hung;
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  stop.store(true);
  binder.join();
  std::printf("forks=%d hung=%d\n", done, hung);
  return 0;
}

// A handle already open in the context: the driver returns the same pointer
// with one more reference, and unmaps it at the last close.
int IpcTwice(const Api& a, uint64_t bytes) {
  fakecuda_IpcRefcounted(1);
  CUipcMemHandle h{};
  std::memcpy(h.reserved, &bytes, sizeof(bytes));
  CUdeviceptr p1 = 0;
  CUdeviceptr p2 = 0;
  CUresult rc1 = a.ipc_open(&p1, h, 1);
  size_t free1 = FreeBytes(a);
  CUresult rc2 = a.ipc_open(&p2, h, 1);
  size_t free2 = FreeBytes(a);
  std::printf("rc1=%d free1=%zu rc2=%d same=%d free2=%zu\n", rc1, free1, rc2, p1 == p2 ? 1 : 0,
              free2);
  CUresult close1 = a.ipc_close(p1);
  size_t closed_once = FreeBytes(a);
  CUresult close2 = a.ipc_close(p2);
  std::printf("close1_rc=%d closed_once=%zu close2_rc=%d closed_twice=%zu\n", close1, closed_once,
              close2, FreeBytes(a));
  return 0;
}

// Two threads open one handle at once: the driver gives both the same
// pointer, with two references, and unmaps it at the second close.
int IpcRace(const Api& a, uint64_t bytes, uint64_t held) {
  fakecuda_IpcRefcounted(1);
  CUdeviceptr hold = 0;
  CUresult hold_rc = held != 0 ? a.alloc(&hold, held) : CUDA_SUCCESS;
  struct Race {
    const Api* a;
    CUipcMemHandle handle;
    CUdeviceptr p;
    CUresult rc;
  };
  Race race{&a, {}, 0, CUDA_ERROR_INVALID_VALUE};
  std::memcpy(race.handle.reserved, &bytes, sizeof(bytes));
  fakecuda_OnNextAddressRange(
      [](void* ctx) {
        auto* r = static_cast<Race*>(ctx);
        std::thread other([r] { r->rc = r->a->ipc_open(&r->p, r->handle, 1); });
        other.join();
      },
      &race);
  CUdeviceptr p = 0;
  CUresult rc = a.ipc_open(&p, race.handle, 1);
  std::printf("hold_rc=%d rc1=%d rc2=%d same=%d opened=%zu\n", hold_rc, rc, race.rc,
              p == race.p ? 1 : 0, FreeBytes(a));
  CUresult close1 = a.ipc_close(p);
  size_t closed_once = FreeBytes(a);
  CUresult close2 = a.ipc_close(race.p);
  size_t closed_twice = FreeBytes(a);
  if (hold != 0) {
    a.free(hold);
  }
  std::printf("close1_rc=%d closed_once=%zu close2_rc=%d closed_twice=%zu\n", close1, closed_once,
              close2, closed_twice);
  return 0;
}

// A 4096 x 4096 8-bit mipmapped array with 3 levels holds 16 + 4 + 1 MiB.
int MipmapLevels(const Api& a) {
  size_t before = FreeBytes(a);
  CUDA_ARRAY3D_DESCRIPTOR d{4096, 4096, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
  CUmipmappedArray arr = nullptr;
  CUresult rc = a.mipmap_create(&arr, &d, 3);
  size_t mid = FreeBytes(a);
  CUresult destroy_rc = a.mipmap_destroy(arr);
  std::printf("rc=%d charged=%zu destroy_rc=%d returned=%d\n", rc, before - mid, destroy_rc,
              FreeBytes(a) == before ? 1 : 0);
  // Depth counts layers (8) or faces (6): every level has them all.
  for (const auto& [name, depth, flags] : {std::tuple{"layered", 8, CUDA_ARRAY3D_LAYERED},
                                           std::tuple{"cubemap", 6, CUDA_ARRAY3D_CUBEMAP}}) {
    CUDA_ARRAY3D_DESCRIPTOR l = d;
    l.Depth = static_cast<size_t>(depth);
    l.Flags = flags;
    CUresult layered_rc = a.mipmap_create(&arr, &l, 3);
    size_t charged = before - FreeBytes(a);
    CUresult layered_destroy_rc = a.mipmap_destroy(arr);
    std::printf("%s_rc=%d %s_charged=%zu %s_destroy_rc=%d %s_returned=%d\n", name, layered_rc, name,
                charged, name, layered_destroy_rc, name, FreeBytes(a) == before ? 1 : 0);
  }
  return 0;
}

struct UnmapRaceContext {
  const Api* api;
  uint64_t bytes;
  CUmemGenericAllocationHandle handle = 0;
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
};

void CreateInsideUnmap(void* ctx) {
  auto* c = static_cast<UnmapRaceContext*>(ctx);
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  c->rc = c->api->create(&c->handle, c->bytes, &prop, 0);
}

void ReleaseInsideUnmap(void* ctx) {
  auto* c = static_cast<UnmapRaceContext*>(ctx);
  c->rc = c->api->release(c->handle);
}

// Another thread releases the handle being unmapped and a third creates one
// (which gets its value once the driver freed it).
struct ReleaseCreateContext {
  UnmapRaceContext release;
  UnmapRaceContext create;
};
void ReleaseAndCreateInsideUnmap(void* ctx) {
  auto* c = static_cast<ReleaseCreateContext*>(ctx);
  ReleaseInsideUnmap(&c->release);
  CreateInsideUnmap(&c->create);
}

// The last unmap of a released handle frees it; the driver may give its
// value to a cuMemCreate of another thread before the unmap returns. That
// new handle is charged, and the freed one uncharged once. An unmap that
// fails frees nothing and keeps the handle charged.
int VmmUnmap(const Api& a, uint64_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  const CUdeviceptr va = 1ULL << 45;
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = a.create(&h, bytes, &prop, 0);
  CUresult map_rc = a.map(va, bytes, 0, h, 0);
  CUresult release_rc = a.release(h);
  UnmapRaceContext ctx{&a, bytes};
  fakecuda_OnNextUnmap(&CreateInsideUnmap, &ctx);
  CUresult unmap_rc = a.unmap(va, bytes);
  std::printf(
      "rc=%d map_rc=%d release_rc=%d unmap_rc=%d create2_rc=%d reused=%d "
      "raced_free=%zu device_used=%llu\n",
      rc, map_rc, release_rc, unmap_rc, ctx.rc, ctx.handle == h ? 1 : 0, FreeBytes(a),
      static_cast<unsigned long long>(DeviceUsed()));
  CUdeviceptr p = 0;
  CUresult over_rc = a.alloc(&p, bytes + (256 << 20));
  if (over_rc == CUDA_SUCCESS) {
    a.free(p);
  }
  a.release(ctx.handle);
  std::printf("over_rc=%d second_released=%zu\n", over_rc, FreeBytes(a));
  // The last unmap of a released handle, failing: the handle lives on.
  rc = a.create(&h, bytes, &prop, 0);
  a.map(va, bytes, 0, h, 0);
  a.release(h);
  fakecuda_Fail("cuMemUnmap", 1);
  CUresult failed_rc = a.unmap(va, bytes);
  size_t failed_free = FreeBytes(a);
  fakecuda_Fail("cuMemUnmap", 0);
  unmap_rc = a.unmap(va, bytes);
  std::printf(
      "again_rc=%d failed_unmap_rc=%d failed_free=%zu unmap_again_rc=%d "
      "all_free=%zu\n",
      rc, failed_rc, failed_free, unmap_rc, FreeBytes(a));
  // The last mapping of a handle not released yet, unmapped while another
  // thread releases the handle, and the unmap fails: the handle lives on,
  // mapped, and stays charged.
  rc = a.create(&h, bytes, &prop, 0);
  a.map(va, bytes, 0, h, 0);
  UnmapRaceContext rel{&a, bytes, h};
  fakecuda_OnNextUnmap(&ReleaseInsideUnmap, &rel);
  fakecuda_Fail("cuMemUnmap", 1);
  failed_rc = a.unmap(va, bytes);
  fakecuda_Fail("cuMemUnmap", 0);
  failed_free = FreeBytes(a);
  unmap_rc = a.unmap(va, bytes);
  std::printf(
      "third_rc=%d raced_release_rc=%d raced_unmap_rc=%d raced_failed_free=%zu "
      "raced_unmap_again_rc=%d raced_all_free=%zu\n",
      rc, rel.rc, failed_rc, failed_free, unmap_rc, FreeBytes(a));
  // The same unmap succeeding, and a third thread creating a handle that
  // gets the freed one's value before it returns: the new handle is charged,
  // the freed one not any more.
  rc = a.create(&h, bytes, &prop, 0);
  a.map(va, bytes, 0, h, 0);
  ReleaseCreateContext both{{&a, bytes, h}, {&a, bytes}};
  fakecuda_OnNextUnmap(&ReleaseAndCreateInsideUnmap, &both);
  unmap_rc = a.unmap(va, bytes);
  const size_t held_free = FreeBytes(a);
  a.release(both.create.handle);
  std::printf(
      "fourth_rc=%d rc_release=%d rc_create=%d rc_reused=%d rc_unmap_rc=%d "
      "rc_held_free=%zu rc_all_free=%zu\n",
      rc, both.release.rc, both.create.rc, both.create.handle == h ? 1 : 0, unmap_rc, held_free,
      FreeBytes(a));
  return 0;
}

// A cuMemRelease that fails leaves the handle allocated and charged, both
// without a mapping and with one (then the last unmap must not uncharge it).
int ReleaseFail(const Api& a, uint64_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  const uint64_t size = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = a.create(&h, size, &prop, 0);
  fakecuda_Fail("cuMemRelease", 1);
  CUresult unmapped_rc = a.release(h);
  size_t free_unmapped = FreeBytes(a);
  const uint64_t va = 1ULL << 45;
  a.map(va, size, 0, h, 0);
  CUresult mapped_rc = a.release(h);
  fakecuda_Fail("cuMemRelease", 0);
  a.unmap(va, size);
  size_t free_after_unmap = FreeBytes(a);
  CUresult release_rc = a.release(h);
  std::printf("rc=%d unmapped_release_rc=%d free_unmapped=%zu mapped_release_rc=%d "
              "free_after_unmap=%zu release_rc=%d free_after=%zu\n",
              rc, unmapped_rc, free_unmapped, mapped_rc, free_after_unmap, release_rc,
              FreeBytes(a));
  return 0;
}

// CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN and later are device memory
// of location types the shim does not know; the fake keeps them in device id.
constexpr int kNewerLocationType = 6;

int NewLocation(const Api& a, const std::string& how, uint64_t bytes) {
  const uint64_t size = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
  if (how == "vmm") {
    CUmemAllocationProp prop{};
    prop.type = 1;
    prop.location.type = kNewerLocationType;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    rc = a.create(&h, size, &prop, 0);
    const CUdeviceptr va = 1ULL << 45;
    if (rc == CUDA_SUCCESS) {
      a.map(va, size, 0, h, 0);
      a.release(h);
    }
    std::printf("rc=%d free=%zu\n", rc, FreeBytes(a));
    if (rc == CUDA_SUCCESS) {
      a.unmap(va, size);
    }
  } else if (how == "graph") {
    CUgraph graph = nullptr;
    cuGraphCreate(&graph, 0);
    CUgraphNode node = nullptr;
    CUDA_MEM_ALLOC_NODE_PARAMS p = AllocNodeParams(size);
    p.poolProps.location.type = kNewerLocationType;
    cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &p);
    cuGraphAddMemFreeNode(&node, graph, &node, 1, p.dptr);
    CUgraphExec exec = nullptr;
    rc = a.graph_instantiate(&exec, graph, 0);
    if (rc == CUDA_SUCCESS) {
      rc = a.graph_launch(exec, nullptr);
    }
    std::printf("rc=%d free=%zu\n", rc, FreeBytes(a));
    if (exec != nullptr) {
      a.graph_exec_destroy(exec);
    }
    cuGraphDestroy(graph);
    a.graph_trim(0);
  }
  std::printf("after_free=%zu device_used=%llu\n", FreeBytes(a),
              static_cast<unsigned long long>(DeviceUsed()));
  return 0;
}

int BackedLater(const Api& a, uint64_t bytes) {
  const struct {
    const char* name;
    unsigned flags;
  } kinds[] = {
      {"sparse", CUDA_ARRAY3D_SPARSE}, {"deferred", CUDA_ARRAY3D_DEFERRED_MAPPING}, {"plain", 0}};
  for (const auto& kind : kinds) {
    CUDA_ARRAY3D_DESCRIPTOR d{bytes, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, kind.flags};
    CUarray arr = nullptr;
    CUresult rc = cuArray3DCreate_v2(&arr, &d);
    size_t free_array = FreeBytes(a);
    if (rc == CUDA_SUCCESS) {
      cuArrayDestroy(arr);
    }
    CUmipmappedArray mip = nullptr;
    CUresult mip_rc = a.mipmap_create(&mip, &d, 1);
    size_t free_mip = FreeBytes(a);
    if (mip_rc == CUDA_SUCCESS) {
      a.mipmap_destroy(mip);
    }
    std::printf("%s_rc=%d %s_free=%zu %s_mip_rc=%d %s_mip_free=%zu\n", kind.name, rc, kind.name,
                free_array, kind.name, mip_rc, kind.name, free_mip);
  }
  std::printf("after_free=%zu\n", FreeBytes(a));
  return 0;
}

// A cuMemCreate handle of `bytes` backs a sparse array (cuMemMapArrayAsync)
// and is released, as a tile pool is; then `bytes` + 256 MiB by cuMemAlloc;
// then the array's tile is unmapped.
int ArrayMap(const Api& a, uint64_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CUresult create_rc = a.create(&h, bytes, &prop, 0);
  CUDA_ARRAY3D_DESCRIPTOR d{1024, 1024, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, CUDA_ARRAY3D_SPARSE};
  CUarray arr = nullptr;
  CUresult array_rc = cuArray3DCreate_v2(&arr, &d);
  CUarrayMapInfo map{};
  map.resource.array = arr;
  map.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
  map.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  map.memHandle.memHandle = h;
  map.deviceBitMask = 1;
  CUresult map_rc = a.map_array(&map, 1, nullptr);
  CUresult release_rc = a.release(h);
  std::printf(
      "create_rc=%d array_rc=%d map_rc=%d release_rc=%d released_free=%zu "
      "driver_used=%llu\n",
      create_rc, array_rc, map_rc, release_rc, FreeBytes(a),
      static_cast<unsigned long long>(DeviceUsed()));
  CUdeviceptr p = 0;
  CUresult over_rc = a.alloc(&p, bytes + (256ULL << 20));
  if (over_rc == CUDA_SUCCESS) {
    a.free(p);
  }
  CUarrayMapInfo unmap = map;
  unmap.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
  unmap.memHandle.memHandle = 0;
  CUresult unmap_rc = a.map_array(&unmap, 1, nullptr);
  std::printf("over_rc=%d unmap_rc=%d unmapped_free=%zu unmapped_driver_used=%llu\n", over_rc,
              unmap_rc, FreeBytes(a), static_cast<unsigned long long>(DeviceUsed()));
  cuArrayDestroy(arr);
  // A new handle, which a driver may give the freed handle's value.
  CUmemGenericAllocationHandle again = 0;
  CUresult again_rc = a.create(&again, bytes / 2, &prop, 0);
  std::printf("again_rc=%d reused=%d again_free=%zu\n", again_rc, again == h ? 1 : 0, FreeBytes(a));
  a.release(again);
  return 0;
}

int Nvml(unsigned index) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (h == nullptr) {
    std::printf("nvml_missing=1\n");
    return 1;
  }
  using InitFn = nvmlReturn_t (*)();
  using HandleFn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
  reinterpret_cast<InitFn>(dlsym(h, "nvmlInit_v2"))();
  nvmlDevice_t dev = nullptr;
  reinterpret_cast<HandleFn>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(index, &dev);
  nvmlMemory_t m{};
  auto v1 = reinterpret_cast<nvmlDeviceGetMemoryInfoFn>(dlsym(h, "nvmlDeviceGetMemoryInfo"));
  nvmlReturn_t rc = v1(dev, &m);
  nvmlMemory_v2_t m2{};
  auto v2 = reinterpret_cast<nvmlDeviceGetMemoryInfo_v2Fn>(dlsym(h, "nvmlDeviceGetMemoryInfo_v2"));
  nvmlReturn_t rc2 = v2(dev, &m2);
  std::printf("rc=%d total=%llu used=%llu free=%llu rc2=%d total2=%llu used2=%llu free2=%llu\n",
              rc, m.total, m.used, m.free, rc2, m2.total, m2.used, m2.free);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s <direct|dlsym|procaddr|procaddr_ptds|procaddr_abi|procaddr_abi_ptds|"
                 "procaddr_v1> <command> "
                 "[args]\n",
                 argv[0]);
    return 2;
  }
  if (const char* fail = std::getenv("FAKECUDA_FAIL")) {
    auto fail_fn = reinterpret_cast<void (*)(const char*, int)>(dlsym(Driver(), "fakecuda_Fail"));
    std::string names = fail;
    for (size_t start = 0; start <= names.size();) {
      size_t comma = names.find(',', start);
      size_t end = comma == std::string::npos ? names.size() : comma;
      if (end > start) {
        fail_fn(names.substr(start, end - start).c_str(), 1);
      }
      start = end + 1;
    }
  }
  std::string mode = argv[1];
  std::string command = argv[2];
  if (command == "symbols") {
    return Symbols();
  }
  if (command == "libc") {
    Dl_info info{};
    const char* from =
        dladdr(reinterpret_cast<void*>(&dlsym), &info) != 0 && info.dli_fname != nullptr
            ? info.dli_fname
            : "unknown";
    const char* slash = std::strrchr(from, '/');
    std::printf("glibc=%s dlsym_from=%s\n", gnu_get_libc_version(),
                slash != nullptr ? slash + 1 : from);
    return 0;
  }
  if (command == "nvml") {
    return Nvml(argc == 4 ? static_cast<unsigned>(std::atoi(argv[3])) : 0);
  }
  if (command == "initrace" && argc == 4) {
    return InitRace(std::atoi(argv[3]));
  }
  if (command == "loaderrace" && argc == 5) {
    return LoaderRace(argv[3], argv[4]);
  }
  Api a = Load(mode);
  if (a.alloc == nullptr || a.launch == nullptr) {
    std::fprintf(stderr, "could not resolve the driver entry points via %s\n", mode.c_str());
    return 2;
  }
  if (command == "fill" && argc == 5) {
    return Fill(a, argv[3], std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "meminfo") {
    return MemInfo(a);
  }
  if (command == "alloc" && argc == 4) {
    CUdeviceptr p = 0;
    CUresult rc = a.alloc(&p, std::strtoull(argv[3], nullptr, 10));
    size_t free_bytes = 0;
    size_t total = 0;
    a.get_info(&free_bytes, &total);
    std::printf("rc=%d free=%zu total=%zu\n", rc, free_bytes, total);
    return 0;
  }
  if (command == "allfree") {
    size_t free_bytes = 0;
    size_t total = 0;
    CUresult info_rc = a.get_info(&free_bytes, &total);
    CUdeviceptr p = 0;
    CUresult rc = a.alloc(&p, free_bytes);
    size_t after = 0;
    a.get_info(&after, &total);
    std::printf("info_rc=%d free=%zu rc=%d after=%zu total=%zu\n", info_rc, free_bytes, rc, after,
                total);
    return 0;
  }
  if (command == "hold" && argc == 4) {
    uint64_t want = std::strtoull(argv[3], nullptr, 10);
    CUdeviceptr p = 0;
    CUresult rc = a.alloc(&p, want);
    std::printf("rc=%d held=%llu\n", rc, static_cast<unsigned long long>(rc == 0 ? want : 0));
    std::fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof(buf)) > 0) {
    }
    return 0;
  }
  if (command == "threads" && argc == 5) {
    return Threads(a, std::atoi(argv[3]), std::atoi(argv[4]));
  }
  if (command == "overhead" && argc == 4) {
    return Overhead(a, std::atol(argv[3]));
  }
  if (command == "poolhold" && argc == 5) {
    return PoolHold(a, std::strtoull(argv[3], nullptr, 10), argv[4]);
  }
  if (command == "poolover" && argc == 5) {
    return PoolOver(a, std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "poolwhere" && (argc == 5 || argc == 6)) {
    return PoolWhere(a, argv[3], std::strtoull(argv[4], nullptr, 10),
                     argc == 6 ? std::atoi(argv[5]) : 0);
  }
  if (command == "graphmem" && argc == 6) {
    return GraphMem(a, std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                    argv[5]);
  }
  if (command == "graphfill" && argc == 4) {
    return GraphFill(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "graphrace" && argc == 8) {
    return GraphRace(a, argv[3], std::strtoull(argv[4], nullptr, 10),
                     std::strtoull(argv[5], nullptr, 10), std::strtoull(argv[6], nullptr, 10),
                     std::strtoull(argv[7], nullptr, 10));
  }
  if (command == "graphtrimrace" && argc == 5) {
    return GraphTrimRace(a, std::strtoull(argv[3], nullptr, 10),
                         std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "capturegraph" && argc == 6) {
    return CaptureGraph(a, std::strtoull(argv[3], nullptr, 10), argv[4],
                        std::string(argv[5]) == "freed");
  }
  if (command == "capturefree" && argc == 4) {
    return CaptureFree(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "capturealloc" && argc == 4) {
    return CaptureAlloc(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "poolsync" && argc == 5) {
    return PoolSync(a, std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "poolcustom" && argc == 4) {
    return PoolCustom(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "pooldestroylive" && argc == 5) {
    return PoolDestroyLive(a, std::strtoull(argv[3], nullptr, 10),
                           std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "execinto" && argc >= 5) {
    CUdeviceptr p = 0;
    CUresult rc = a.alloc(&p, std::strtoull(argv[3], nullptr, 10));
    std::printf("rc=%d free=%zu\n", rc, FreeBytes(a));
    std::fflush(stdout);
    execv(argv[4], argv + 4);  // The slot is left behind, and its lock goes.
    std::perror("execv");
    return 1;
  }
  if (command == "reexec" && argc == 4) {
    CUdeviceptr p = 0;
    if (a.alloc(&p, std::strtoull(argv[3], nullptr, 10)) != CUDA_SUCCESS) {
      std::printf("reexec_alloc_failed=1\n");
      return 1;
    }
    char hold[] = "hold";
    char* args[] = {argv[0], argv[1], hold, argv[3], nullptr};
    execv(argv[0], args);  // The shim's accounting slot is left behind, as with any exec.
    std::perror("execv");
    return 1;
  }
  if (command == "ipcdev" && argc == 5) {
    return IpcFromDevice(a, std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]));
  }
  if (command == "freerace" && argc == 5) {
    return FreeRace(a, argv[3], std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "ipcself" && argc == 4) {
    return IpcSelf(a, std::strtoull(argv[3], nullptr, 10), false);
  }
  if (command == "mipmaplevels" && argc == 3) {
    return MipmapLevels(a);
  }
  if (command == "capturerace" && argc == 4) {
    return CaptureRace(a, std::atoll(argv[3]));
  }
  if (command == "vmmretain" && argc == 4) {
    return VmmRetain(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "vmmunmap" && argc == 4) {
    return VmmUnmap(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "vmmtwice" && argc == 4) {
    return VmmTwice(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "forkalloc" && argc == 4) {
    return ForkAlloc(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "relfail" && argc == 4) {
    return ReleaseFail(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "newlocation" && argc == 5) {
    return NewLocation(a, argv[3], std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "resetcap" && argc == 4) {
    return ResetCap(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "resetkeeps" && argc == 4) {
    return ResetKeeps(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "ctxmem" && argc == 4) {
    return CtxMem(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "primaryrelease" && argc == 4) {
    return PrimaryRelease(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "ctxbirth" && argc == 4) {
    return CtxBirth(a, mode, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "ctxreuse" && argc == 4) {
    return CtxReuse(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "ctxreusedev" && argc == 4) {
    return CtxReuseDevice(a, std::atoi(argv[3]));
  }
  if (command == "graphwait" && argc == 3) {
    return GraphWait(a);
  }
  if (command == "graphorder" && argc == 4) {
    return GraphOrder(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "ctxunseen" && argc == 4) {
    return CtxUnseen(a, std::strtoll(argv[3], nullptr, 10));
  }
  if (command == "ctxhoard" && argc == 5) {
    return CtxHoard(a, std::atoi(argv[3]), std::atoi(argv[4]));
  }
  if (command == "ctxevents" && argc == 5) {
    return CtxEvents(a, argv[3], std::strtoll(argv[4], nullptr, 10));
  }
  if (command == "resetalloc" && argc == 5) {
    CUdeviceptr p = 0;
    CUresult rc = a.alloc(&p, std::strtoull(argv[3], nullptr, 10));
    auto unseen_reset = reinterpret_cast<cuDevicePrimaryCtxResetFn>(reinterpret_cast<LookupFn>(
        dlsym(Driver(), "fakecuda_Lookup"))("cuDevicePrimaryCtxReset_v2"));
    CUresult reset_rc = unseen_reset(0);
    CUdeviceptr q = 0;
    CUresult rc2 = a.alloc(&q, std::strtoull(argv[4], nullptr, 10));
    std::printf("rc=%d reset_rc=%d rc2=%d same_address=%d free=%zu\n", rc, reset_rc, rc2,
                p == q ? 1 : 0, FreeBytes(a));
    a.free(q);
    std::printf("freed_free=%zu\n", FreeBytes(a));
    return 0;
  }
  if (command == "pooldefer" && argc == 5) {
    CUmemoryPool pool = CurrentPool("max");
    fakecuda_DeferAsyncFrees(1);
    uint64_t chunk = std::strtoull(argv[3], nullptr, 10);
    std::vector<CUdeviceptr> held;
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < std::atoi(argv[4]) && rc == CUDA_SUCCESS; ++i) {
      CUdeviceptr p = 0;
      rc = a.alloc_async(&p, chunk, nullptr);
      if (rc == CUDA_SUCCESS) {
        held.push_back(p);
      }
    }
    std::printf("held=%zu refused_rc=%d reserved=%llu\n", held.size(), rc, Reserved(pool));
    a.free_async(held.front(), nullptr);
    CUdeviceptr q = 0;
    CUresult again_rc = a.alloc_async(&q, chunk / 2, nullptr);
    std::printf("again_rc=%d reserved=%llu free=%zu\n", again_rc, Reserved(pool), FreeBytes(a));
    return 0;
  }
  if (command == "zeroalloc" && argc == 4) {
    CUdeviceptr p = 0;
    CUresult rc = a.alloc(&p, std::strtoull(argv[3], nullptr, 10));
    CUdeviceptr z = 0;
    CUresult zero_rc = a.alloc(&z, 0);
    CUresult managed_rc = a.managed(&z, 0, 1);
    std::printf("rc=%d zero_rc=%d managed_zero_rc=%d free=%zu\n", rc, zero_rc, managed_rc,
                FreeBytes(a));
    return 0;
  }
  if (command == "exitinhook" && argc == 4) {
    return ExitInHook(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "forkbind" && argc == 4) {
    return ForkBind(std::atoi(argv[3]));
  }
  if (command == "ipcrace" && argc == 5) {
    return IpcRace(a, std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10));
  }
  if (command == "ipctwice" && argc == 4) {
    return IpcTwice(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "arraymap" && argc == 4) {
    return ArrayMap(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "backedlater" && argc == 4) {
    return BackedLater(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "freefail" && argc == 6) {
    return FreeFail(a, argv[3], argv[4], std::strtoull(argv[5], nullptr, 10));
  }
  if (command == "heaplimit" && argc == 4) {
    return HeapLimit(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "poolnoctx" && argc == 4) {
    return PoolWithoutContext(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "asyncdev" && argc == 4) {
    return AsyncOnStreamDevice(a, std::strtoull(argv[3], nullptr, 10));
  }
  if (command == "gate" && argc == 5) {
    return Gate(a, argv[3], std::atol(argv[4]));
  }
  if (command == "prilaunch" && argc == 6) {
    return PriorityLaunch(a, std::atoi(argv[3]), argv[4], std::atol(argv[5]));
  }
  if (command == "streamlaunch" && argc == 7) {
    return StreamLaunch(a, argv[3], std::atoll(argv[4]), std::atoll(argv[5]), argv[6]);
  }
  if (command == "launch" && (argc == 6 || argc == 7)) {
    return Launch(a, argv[3], std::atoll(argv[4]), std::atoll(argv[5]),
                  argc == 7 ? std::atoll(argv[6]) : 0);
  }
  std::fprintf(stderr, "bad command line\n");
  return 2;
}
