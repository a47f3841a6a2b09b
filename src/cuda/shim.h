// Internal state of libaccelpool-cuda, shared by the hook translation units.
//
// The shim is a preloaded library: its entry points are C functions called
// by arbitrary code, so it necessarily keeps one process-wide state object
// (ShimState, via State()). It is the library's single piece of global
// mutable state; everything in it is either set once during initialisation
// (before `ready` is published) or guarded by the mutex named beside it.
//
// Initialisation is lazy and split so that a process that never touches
// CUDA pays nothing beyond the dlsym name check:
//   EnsureInit()  parses the env once (config, log level, what is on);
//   EnsureCuda()  also opens libcuda.so.1 and resolves the real entry points;
//   EnsureNvml()  also opens libnvidia-ml.so.1.
// After that the disabled path of every hook is: one acquire load, one
// branch, one indirect call. No getenv, syscall, lock or shared-memory scan.
// No step calls the dynamic loader inside its once-only section: a thread
// holding the loader's lock (a library's constructor) may wait for it
// (shim.cc, "Order of initialisation").
//
// Real dlsym: resolved with dlvsym(RTLD_NEXT, "dlsym", <glibc version>),
// which needs no private glibc symbol (__libc_dlsym / _dl_sym are avoided).
//
// Hook slots: each hooked entry point has kSlots template instances. Slot 0
// is the exported default-stream name, slot 1 the exported _ptsz name, slots
// 2-5 take any other distinct pointer cuGetProcAddress returns for the same
// ABI. Each slot forwards to the real pointer it was bound to, so a
// version- or stream-specific implementation is never swapped for another.
//
// Thread-safety: as described per member.
#ifndef ACCELPOOL_CUDA_SHIM_H_
#define ACCELPOOL_CUDA_SHIM_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "cuda/alloc_table.h"
#include "cuda/config.h"
#include "cuda/cuda_types.h"
#include "cuda/priority_format.h"
#include "cuda/shared_region.h"
#include "cuda/symbols.h"
#include "cuda/throttle.h"

#define ACCELPOOL_EXPORT extern "C" __attribute__((visibility("default")))

namespace accelpool::cuda {

inline constexpr int kSlots = 6;

// The kSlots instances of a hook template, as a row of a lookup table.
#define ACCELPOOL_HOOK_SLOTS(fn)                                                       \
  {                                                                                    \
    reinterpret_cast<void*>(&fn<0>), reinterpret_cast<void*>(&fn<1>),                \
        reinterpret_cast<void*>(&fn<2>), reinterpret_cast<void*>(&fn<3>),            \
        reinterpret_cast<void*>(&fn<4>), reinterpret_cast<void*>(&fn<5>)             \
  }
// Device memory is handed out in 2 MiB pages; a request is charged rounded up.
inline constexpr uint64_t kAllocGranularity = 2ULL << 20;

typedef CUresult (*cuStreamIsCapturingFn)(CUstream, int*);
typedef CUresult (*cuStreamSynchronizeFn)(CUstream);

// Stream-ordered pools are charged what they physically reserve
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), tracked per pool (accounting.h).
inline constexpr int kMaxPools = 32;
struct PoolAccount {
  uint64_t pool = 0;     // CUmemoryPool; 0 = free entry.
  int32_t device = -1;   // Device the reserve is charged to; -1: host memory, never charged.
  uint64_t charged = 0;  // Reserve currently charged to the region.
  // A pool destroyed while blocks of it were still allocated: the driver
  // frees its memory only once they are freed (cuMemPoolDestroy). `pool` is
  // then a mark its pointers' records link to instead of the dead handle,
  // and `live` counts those records; the last one's free uncharges `charged`.
  uint64_t live = 0;
};

// The driver entries the shim calls itself (beside the hooked ones), and
// its handle. One thread resolves them and EnsureCuda publishes them (see
// the order of initialisation in shim.cc); set before `cuda_ready`.
struct DriverEntries {
  void* cuda = nullptr;
  cuCtxGetDeviceFn ctx_get_device = nullptr;
  cuCtxGetCurrentFn ctx_get_current = nullptr;
  cuCtxGetLimitFn ctx_get_limit = nullptr;
  cuCtxPushCurrentFn ctx_push_current = nullptr;
  cuCtxPopCurrentFn ctx_pop_current = nullptr;
  cuStreamGetCtxFn stream_get_ctx = nullptr;
  cuStreamGetDeviceFn stream_get_device = nullptr;  // nullptr before CUDA 12.8.
  cuDevicePrimaryCtxGetStateFn primary_ctx_get_state = nullptr;
  cuMemGetAddressRangeFn mem_get_address_range = nullptr;
  cuPointerGetAttributeFn pointer_get_attribute = nullptr;
  cuDeviceGetMemPoolFn device_get_mem_pool = nullptr;
  cuDeviceGetMemPoolFn device_get_default_mem_pool = nullptr;  // cuDeviceGetDefaultMemPool.
  cuDeviceGetUuidFn device_get_uuid = nullptr;                 // cuDeviceGetUuid[_v2].
  cuMemPoolGetAttributeFn mem_pool_get_attribute = nullptr;
  cuMemPoolTrimToFn mem_pool_trim_to = nullptr;
  cuEventCreateFn event_create = nullptr;
  cuEventDestroyFn event_destroy = nullptr;
  cuEventRecordFn event_record[2] = {};  // [per-thread-stream]
  cuEventQueryFn event_query = nullptr;
  cuEventElapsedTimeFn event_elapsed = nullptr;
  cuStreamIsCapturingFn stream_is_capturing[2] = {};
  cuStreamSynchronizeFn stream_synchronize = nullptr;
  cuThreadExchangeStreamCaptureModeFn exchange_capture_mode = nullptr;
  cuGraphGetNodesFn graph_get_nodes = nullptr;
  cuGraphNodeGetTypeFn graph_node_get_type = nullptr;
  cuGraphMemAllocNodeGetParamsFn graph_mem_alloc_node_get_params = nullptr;
  cuGraphChildGraphNodeGetGraphFn graph_child_graph = nullptr;
  cuDeviceGetGraphMemAttributeFn device_get_graph_mem_attribute = nullptr;
};

// The same for NVML (EnsureNvml); set before `nvml_ready`.
struct NvmlEntries {
  void* nvml = nullptr;
  nvmlDeviceGetIndexFn nvml_get_index = nullptr;
  nvmlDeviceGetUUIDFn nvml_get_uuid = nullptr;
};

struct ShimState : DriverEntries, NvmlEntries {
  // --- Set once before `ready` / `cuda_ready` / `nvml_ready` are published
  // (and the bases: before `cuda_ready` / `nvml_ready`).
  ShimConfig config;
  bool mem_on = false;      // Some device has a memory cap.
  bool compute_on = false;  // Compute share below 100%.
  // The priority file, mapped when config.priority is set and the file is
  // sound (priority_file.h); nullptr otherwise. Never unmapped.
  PriorityLayout* priority = nullptr;
  // The launch hooks do more than forward: compute_on, or `priority` mapped.
  // The one flag a launch hook tests before forwarding.
  bool launch_on = false;
  TokenBucketParams bucket;
  std::atomic<bool> ready{false};
  std::atomic<bool> cuda_ready{false};
  std::atomic<bool> nvml_ready{false};

  // --- The handle of each device's primary context, as the last
  // cuDevicePrimaryCtxRetain returned it (0: none seen); its release takes
  // the records of that context (hooks_context.cc). Relaxed atomics.
  std::atomic<uint64_t> primary_ctx[kMaxDevices] = {};
  std::atomic<bool> logged_primary_state{false};  // The state query failed once (logged).

  // --- The container index (ContainerIndex) of each CUDA ordinal of this
  // process, plus one; 0 until first asked. Relaxed atomics: every thread
  // that resolves an ordinal finds the same index.
  std::atomic<int> container_index[kMaxDevices] = {};
  std::atomic<bool> warned_device_map{false};  // A device not in the plugin's list (logged).

  // --- Real entry points per hook slot; written under slot_mu, read lock-free.
  std::atomic<void*> real[kHookCount][kSlots] = {};
  bool per_thread_stream[kHookCount][kSlots] = {};
  pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;

  // --- Accounting; region opened in EnsureInit when a limit is on.
  SharedRegion* region = nullptr;
  pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;  // Guards the fields below.
  int slot = -1;  // This process's claim on a region slot (SharedRegion::ClaimSlot).
  AllocTable* pointers = nullptr;  // cuMemAlloc*, managed, async, pool allocations
                                   // (record.link: pool charged by reserve, else 0;
                                   // record.context: see Owner, accounting.h).
  AllocTable* arrays = nullptr;    // CUarray and CUmipmappedArray handles.
  AllocTable* vmm_handles = nullptr;
  AllocTable* vmm_maps = nullptr;  // Mapped address -> handle (record.link).
  AllocTable* ipc = nullptr;       // Imported IPC pointers.
  AllocTable* graph_execs = nullptr;  // Executable graphs with memory nodes (hooks_graph.cc):
                                      // bytes = the sum of their allocations, device (or
                                      // kGraphMultiDevice), link = graph_epoch when mapped.
  AllocTable* pool_homes = nullptr;   // Pools created through the shim: device = where the
                                      // pool's memory lives, -1 for host memory.
  AllocTable* heaps = nullptr;        // Malloc heaps resized (cuCtxSetLimit), by context: bytes =
                                      // the growth charged, link = the size charged from.
  AllocTable* contexts = nullptr;     // Contexts created through the shim (cuCtxCreate*) and
                                      // not destroyed, by handle: device. A primary context
                                      // reset leaves their memory alone.
  uint64_t graph_epoch[kMaxDevices] = {};  // Bumped by cuDeviceGraphMemTrim.
  uint64_t context_marks = 0;              // Marks handed out by MarkContextRecords and RetirePool.
  bool warned_unaccounted = false;

  // --- Stream-ordered pools charged by reserve. pool_mu is taken before
  // mem_mu (never while holding it) and guards the fields below.
  pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
  PoolAccount pools[kMaxPools] = {};
  bool warned_pools = false;
  // Graph memory: what each device's graph pool reserve is charged, and
  // whether this process has instantiated a graph with memory nodes there.
  uint64_t graph_charged[kMaxDevices] = {};
  bool graph_seen[kMaxDevices] = {};
  // Uploads and first launches in flight (held, driver not yet returned or
  // not yet settled): the room they hold (charged beside graph_charged), and
  // the idle graph-pool memory they count on, which no other hold may.
  uint64_t graph_held[kMaxDevices] = {};
  uint64_t graph_idle_claimed[kMaxDevices] = {};
};

ShimState& State();
void EnsureInit();
void EnsureCuda();
void EnsureNvml();

template <typename Fn>
inline Fn Real(HookId id, int slot) {
  return reinterpret_cast<Fn>(State().real[id][slot].load(std::memory_order_acquire));
}

// Binds `real_fn` to a slot of `id` and returns that slot's hook, or nullptr
// when all slots are taken by other pointers (the caller then passes through).
void* BindHook(HookId id, void* real_fn, bool per_thread_stream);

// Hook instance tables, one per translation unit.
void* MemoryHook(HookId id, int slot);
void* LaunchHook(HookId id, int slot);
void* NvmlHook(HookId id);
void* GraphHook(HookId id, int slot);

// Accounting helpers (accounting.cc).
uint64_t RoundToGranularity(uint64_t bytes);
// Device of the calling thread's current context; false without one.
bool CurrentDevice(int* device);
// The calling thread's current context (cuCtxGetCurrent of the real
// driver), as a record's context; 0 without one or when it cannot be read.
uint64_t CurrentContext();
// Device of the context `stream` belongs to: the current device for the
// default streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), else
// cuStreamGetDevice, else the device of cuStreamGetCtx's context (read with
// that context pushed, when it is not the current one), else the current
// device. False only when there is no current device either.
bool StreamDevice(CUstream stream, int* device);
// True when work issued to `stream` is being captured into a graph rather
// than run (per_thread: stream 0 is the per-thread default stream).
bool StreamCapturing(CUstream stream, bool per_thread);
// The container's devices and this process's. The caps, the compute
// buckets, the region's figures and the priority file are numbered by the
// container's device index: the order of the plugin's grant, in which it
// lists their UUIDs (ACCELPOOL_CUDA_DEVICE_UUIDS). A process numbers its
// CUDA devices after its own CUDA_VISIBLE_DEVICES, so everything else the
// shim keeps (records, pools, events) is by CUDA ordinal, and crosses over
// through ContainerIndex. Without the list, or for a device not in it
// (warned once), the ordinal is taken for the index.
//
// The container index of CUDA ordinal `ordinal`: resolved once per ordinal
// by cuDeviceGetUuid (not before the driver is initialised: until then the
// ordinal, uncached), then one relaxed load.
int ContainerIndex(int ordinal);
// The cap of the container device of CUDA ordinal `ordinal`.
bool DeviceMemoryLimited(int ordinal);
uint64_t DeviceMemoryCap(int ordinal);
// Container usage on the device of CUDA ordinal `device` (after reclaiming
// dead processes), 0 if off; IndexUsed by container index.
uint64_t ContainerUsed(int device);
uint64_t IndexUsed(int index);
// The context reserve (ACCELPOOL_CUDA_CONTEXT_RESERVE_MIB) this process's
// first charge on container device `index` will add, 0 once it was charged
// (or with none configured): what a memory query must not offer as free.
uint64_t PendingContextReserve(int index);

// Compute controller (hooks_launch.cc): resets per-process state in a child.
void ResetLaunchStateAfterFork();
// Forgets, without a driver call, the measurement events of a context the
// driver destroyed: those of `ctx`, or with ctx == nullptr those of every
// context of `device` (a primary context reset, whose handle the shim does
// not know; events of other contexts of the device are leaked, not
// destroyed on dangling handles). Launches in flight settle unmeasured.
void ForgetContextEvents(CUcontext ctx, int device);
// A context was created: every thread drops its cached context answers at
// its next launch (the new one may have the handle of one destroyed a
// moment before on another device, before the destroying thread said so).
void NoteContextCreated();
// An executable graph was destroyed: its handle's launch cost starts over
// (the driver may hand the value to another graph).
void ForgetGraphCost(CUgraphExec exec);

int64_t MonotonicNs();

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_SHIM_H_
