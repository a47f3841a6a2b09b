// Shared state of the fake libcuda.so.1 (fake_cuda.cc: devices and memory;
// fake_cuda_exec.cc: launches, events, cuGetProcAddress). Test-only.
//
// Thread-safety: every field of State is guarded by State::mu.
#ifndef ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_
#define ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_types.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace accelpool::cuda::fake {


constexpr int kDevices = 2;
constexpr uint64_t kDeviceBytes = 80ULL << 30;
constexpr uint64_t kPage = 2ULL << 20;

struct Allocation {
  uint64_t bytes;
  int device;
  bool physical;  // false for IPC imports (memory of another process).
  CUmemoryPool pool = nullptr;  // Stream-ordered: the pool it was carved from.
  uint64_t segment = 0;         // ... and the segment of that pool.
  bool graph = false;           // A graph allocation that outlived its launch.
  // The context it was made in, which frees it when destroyed (cuMemAlloc*,
  // arrays, IPC imports); 0 for memory no context owns (pools, graphs).
  uintptr_t context = 0;
};

// Graphs (fake_cuda_graph.cc). A graph pool per device reserves physical
// memory when an executable graph is uploaded or launched: the sum of its
// allocations, less what the pool holds unused. Allocations freed inside
// the graph are back in the pool once the launch completes (at once here);
// an allocation without a free node stays in use until freed by the
// application. cuDeviceGraphMemTrim returns what is not in use.
struct GraphNode {
  int type;               // CU_GRAPH_NODE_TYPE_*
  uint64_t bytes = 0;     // Memory nodes: requested size.
  int device = 0;
  CUdeviceptr dptr = 0;   // Memory nodes: the allocation's address.
  uintptr_t child = 0;    // Child graph nodes: the graph.
  int location_type = CU_MEM_LOCATION_TYPE_DEVICE;  // Memory nodes: as added.
};
struct GraphExec {
  int device = 0;
  uint64_t bytes = 0;                 // Sum of the allocations, in pages.
  std::vector<GraphNode> outliving;   // Allocations with no free node.
};

// Stream-ordered pools. A pool reserves device memory in segments: requests
// up to kPoolChunk are carved (kPoolAlign-aligned) from shared 32 MiB
// segments, larger ones get a segment of their own rounded to 2 MiB. Freed
// memory stays reserved while the reserve is within the release threshold
// (default 0); the fake applies the threshold at free time, where the real
// driver does so at the next synchronisation. Fragmentation is not modelled.
constexpr uint64_t kPoolChunk = 32ULL << 20;
constexpr uint64_t kPoolAlign = 512;

struct PoolSegment {
  uint64_t size;
  uint64_t used;
};

struct Pool {
  int device = 0;
  bool host = false;  // Host-located (its memory is not the device's).
  int location_type = CU_MEM_LOCATION_TYPE_DEVICE;  // As created.
  uint64_t release_threshold = 0;
  uint64_t reserved = 0;
  uint64_t used = 0;
  bool destroyed = false;  // Destroyed with live blocks: goes when they do.
  std::map<uint64_t, PoolSegment> segments;
};

struct Handle {
  uint64_t bytes;
  int device;
  int maps;
  bool released;  // Every reference released (the creator's and each retain's).
  int retains;    // cuMemRetainAllocationHandle references not yet released.
};

// A stream made by cuStreamCreate: it belongs to the context current then.
// Other handles (0, the legacy and per-thread handles, and the arbitrary
// values tests launch into) are streams of the calling thread's current
// context.
struct Stream {
  uintptr_t context;
  int device;
};

struct State {
  std::mutex mu;
  uint64_t used[kDevices] = {};
  uint64_t next_address = 1ULL << 40;
  std::map<CUdeviceptr, Allocation> allocations;
  std::map<CUmemGenericAllocationHandle, Handle> handles;
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> mappings;
  // Handles mapped into each sparse array (cuMemMapArrayAsync), oldest
  // first; an unmap, which names no handle, takes the oldest out.
  std::map<uintptr_t, std::vector<CUmemGenericAllocationHandle>> array_maps;
  uint64_t next_handle = 1;
  // Handle values the driver freed; with FAKE_CUDA_REUSE_HANDLES set,
  // cuMemCreate hands the last one out again (a real driver may).
  std::vector<CUmemGenericAllocationHandle> freed_handles;
  std::map<uintptr_t, int64_t> stream_tail;
  std::map<uintptr_t, Stream> streams;  // cuStreamCreate's.
  // Malloc heap sizes set by cuCtxSetLimit, by context handle (absent: the
  // default). What a heap holds past the default is device memory in use.
  std::map<uintptr_t, uint64_t> heaps;
  uintptr_t next_stream = 0x57000;
  std::map<CUevent, int64_t> events;  // Position; -1 = never recorded.
  std::map<CUevent, uintptr_t> event_context;  // The context each event was created in.
  // Record, query and destroy calls on event handles that do not exist (a
  // destroyed context took them): a real driver may crash on them.
  int64_t unknown_event_calls = 0;
  int64_t unknown_event_destroys = 0;  // Of those, cuEventDestroy calls.
  // Records refused because the event is of another context than the
  // stream, as a real driver refuses them (CUDA_ERROR_INVALID_HANDLE).
  int64_t foreign_event_records = 0;
  // Contexts made by cuCtxCreate_v2 (handle -> device); primary contexts
  // are the handles 1 .. kDevices. A destroyed handle is handed out again;
  // the memory the context owned goes with it.
  std::map<uintptr_t, int> contexts;
  uintptr_t next_ctx_handle = 0;  // The next create's handle (fakecuda_NextCtxHandle); 0: lowest.
  // References to each device's primary context (cuDevicePrimaryCtxRetain);
  // active while above zero.
  int primary_refs[kDevices] = {};
  uint64_t next_event = 1;
  int64_t busy_ns = 0;
  // Pools (fake_cuda.cc).
  std::map<CUmemoryPool, Pool> pools;
  CUmemoryPool default_pool[kDevices] = {};
  CUmemoryPool current_pool[kDevices] = {};
  uint64_t next_pool = 1;
  uint64_t next_segment = 1;
  // Graphs (fake_cuda_graph.cc).
  std::map<uintptr_t, std::vector<uintptr_t>> graphs;  // Graph -> its nodes.
  std::map<uintptr_t, GraphNode> nodes;
  std::map<uintptr_t, GraphExec> execs;
  std::vector<GraphNode> captured;  // Nodes recorded on the capturing stream.
  // Capture sequences begun in CU_STREAM_CAPTURE_MODE_GLOBAL and not ended;
  // a potentially unsafe call (cuEventQuery) from a thread not in relaxed
  // mode meanwhile fails and invalidates them, as a real driver does.
  int global_captures = 0;
  bool capture_invalidated = false;
  uint64_t graph_reserved[kDevices] = {};
  uint64_t graph_used[kDevices] = {};
  uintptr_t next_graph_object = 1;
  // Test hooks (fake_cuda.cc): entry points told to fail (fakecuda_Fail), and
  // a callback run once inside the next free, right after the driver has
  // released the address, which the next allocation then gets again
  // (fakecuda_OnNextFree).
  std::set<std::string> failing;
  void (*on_free)(void*) = nullptr;
  void* on_free_ctx = nullptr;
  // A callback run once inside the next successful cuCtxDestroy, after the
  // driver has destroyed the context (fakecuda_OnNextCtxDestroy).
  void (*on_ctx_destroy)(void*) = nullptr;
  void* on_ctx_destroy_ctx = nullptr;
  // A callback run once inside the next cuMemGetAddressRange, before it
  // answers (fakecuda_OnNextAddressRange).
  void (*on_address_range)(void*) = nullptr;
  void* on_address_range_ctx = nullptr;
  // A callback run once inside the next successful cuMemUnmap, after the
  // driver has unmapped (and perhaps freed a handle), before the call
  // returns (fakecuda_OnNextUnmap).
  void (*on_unmap)(void*) = nullptr;
  void* on_unmap_ctx = nullptr;
  CUdeviceptr reuse_address = 0;
  // IPC opens as the real driver counts them (fakecuda_IpcRefcounted): a
  // handle already open returns its pointer with one more reference, and
  // the last close unmaps it. Off by default: tests open one handle many times.
  bool ipc_refcounted = false;
  // Stream-ordered frees of pool blocks completing only at the next
  // cuStreamSynchronize / cuCtxSynchronize (fakecuda_DeferAsyncFrees), as
  // the host sees them on a real driver: until then a trim keeps them.
  bool defer_async_frees = false;
  std::vector<Allocation> pending_frees;
  std::map<std::string, CUdeviceptr> ipc_open;  // Handle bytes -> pointer.
  std::map<CUdeviceptr, int> ipc_refs;
  // A callback run once inside the next upload or launch of an instantiated
  // graph, before (0) or after (1) it maps its memory (fakecuda_OnNextGraphMap).
  void (*on_graph_map)(void*) = nullptr;
  void* on_graph_map_ctx = nullptr;
  int on_graph_map_when = 0;
  // A callback run once inside the next cuDeviceGetGraphMemAttribute, before
  // it answers (fakecuda_OnNextGraphMemAttribute).
  void (*on_graph_attr)(void*) = nullptr;
  void* on_graph_attr_ctx = nullptr;
};

State& S();
// Device of the calling thread's current context (cuCtxSetCurrent).
int& CurrentDevice();
// The calling thread's current context: one of State::contexts, or 0 for
// the primary context of CurrentDevice().
uintptr_t& CurrentContext();
// True while the calling thread has no current context (cuCtxSetCurrent
// with a null context): cuCtxGetCurrent then reports none and the calls
// that need one fail. CurrentDevice() and CurrentContext() keep what was
// current before, which the memory calls still use.
bool& NoContext();
// The handle of the calling thread's current context.
uintptr_t CurrentContextHandle();
int64_t Now();
// Stream 0 of a _ptsz entry point is the per-thread stream (key 2).
uintptr_t StreamKey(CUstream stream, bool per_thread);
// Runs `duration_ns` of work on the stream's simulated timeline
// (fake_cuda_exec.cc); a capturing stream records instead. The lengths
// kFakeGateKernelNs and kFakeReleaseKernelNs (driver_api.h) gate the stream
// until the next release: its timeline from the gate on sits at kGatedBase
// and beyond (never reached), and a release moves it to the present.
CUresult Launch(CUstream stream, bool per_thread, int64_t duration_ns);
constexpr int64_t kGatedBase = INT64_MAX / 4;
// Moves every gated stream tail and event position to the present.
// REQUIRES: S().mu held.
void ReleaseGatesLocked(State& s);
// Test convention: this stream handle is always capturing.
bool Capturing(CUstream stream);
// A fresh device address range of `bytes` (fake_cuda.cc). REQUIRES: S().mu held.
CUdeviceptr NextAddressLocked(State& s, uint64_t bytes);
uint64_t Pages(uint64_t bytes);
// Completes the deferred stream-ordered frees (fakecuda_DeferAsyncFrees).
// REQUIRES: S().mu held.
void CompletePendingFreesLocked(State& s);
// Stream-ordered allocation and free on the capturing stream: recorded as
// memory nodes of the graph cuStreamEndCapture returns (fake_cuda_graph.cc).
CUresult CaptureAlloc(CUdeviceptr* out, uint64_t bytes);
CUresult CaptureFree(CUdeviceptr ptr);
void SleepUntil(int64_t t);

}  // namespace accelpool::cuda::fake

#endif  // ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_
