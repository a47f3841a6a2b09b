// A fake libcuda.so.1 for CPU-only tests of libaccelpool-cuda.
//
// It implements, with in-memory bookkeeping, every driver entry point the
// shim hooks or calls: device memory (two devices of 80 GiB each; every
// allocation consumes whole 2 MiB pages, as the shim assumes), stream-ordered
// pools (fake_cuda_state.h: 32 MiB segments, a release threshold), VMM
// handles, IPC imports, launches on a simulated device timeline, timing
// events, and cuGetProcAddress[_v2] with a per-version, per-stream-mode table
// that returns this library's own functions. Nothing here touches a GPU. This
// file holds devices, memory and pools, VMM and IPC; fake_cuda_exec.cc the
// launches, events and cuGetProcAddress.
//
// Simulated time: each stream has a tail; a launch runs from max(now, tail)
// for its duration, which the test passes as the int64 nanoseconds pointed to
// by kernelParams[0] (graphs: the CUgraphExec value itself). Events complete
// when wall time passes the stream position they were recorded at.
//
// Linked with -Bsymbolic like a real driver: its own references (the
// cuGetProcAddress table, fakecuda_Lookup) bind to its own functions even
// with the shim preloaded.
//
// Test-only entry points (prefix fakecuda_): physical bytes used per device,
// total simulated busy time, the library's own address of a function,
// making a named entry point fail (fakecuda_Fail), and running a callback
// inside the next free (fakecuda_OnNextFree).
//
// Thread-safety: one mutex around all state; safe from any thread.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cuda/testing/driver_api.h"
#include "cuda/testing/fake_cuda_state.h"

namespace accelpool::cuda::fake {

State& S() {
  static State state;
  return state;
}

int& CurrentDevice() {
  thread_local int device = 0;
  return device;
}

uintptr_t& CurrentContext() {
  thread_local uintptr_t context = 0;
  return context;
}

// A green context's CUcontext made current by the test (fakecuda_GreenCurrent):
// cuCtxGetCurrent reports it, while memory allocated meanwhile is the
// primary context's, as the driver documents (cuCtxFromGreenCtx).
uintptr_t& GreenCurrent() {
  thread_local uintptr_t green = 0;
  return green;
}

bool& NoContext() {
  thread_local bool none = false;
  return none;
}

uintptr_t CurrentContextHandle() {
  return CurrentContext() != 0 ? CurrentContext() : static_cast<uintptr_t>(CurrentDevice() + 1);
}

int64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

uintptr_t StreamKey(CUstream stream, bool per_thread) {
  auto key = reinterpret_cast<uintptr_t>(stream);
  return key == 0 && per_thread ? 2 : key;
}

void SleepUntil(int64_t t) {
  int64_t now = Now();
  if (t > now) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(t - now));
  }
}

uint64_t Pages(uint64_t bytes) { return (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage; }

// A fresh device address, or the one fakecuda_OnNextFree set up for reuse.
CUdeviceptr NextAddressLocked(State& s, uint64_t bytes) {
  CUdeviceptr p = s.reuse_address;
  s.reuse_address = 0;
  if (p == 0 || s.allocations.count(p) != 0) {
    p = s.next_address;
    s.next_address += bytes + kPage;
  }
  return p;
}

}  // namespace accelpool::cuda::fake

namespace {

using namespace accelpool::cuda::fake;  // NOLINT: test fake.

CUresult Allocate(CUdeviceptr* out, uint64_t bytes, int device, bool physical) {
  if (out == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  uint64_t need = Pages(bytes);
  if (physical && s.used[device] + need > kDeviceBytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (physical) {
    s.used[device] += need;
  }
  *out = NextAddressLocked(s, need);
  Allocation a{need, device, physical};
  a.context = CurrentContextHandle();
  s.allocations[*out] = a;
  return CUDA_SUCCESS;
}

// REQUIRES: s.mu held.
bool FailingLocked(const State& s, const char* name) {
  return !s.failing.empty() && s.failing.count(name) != 0;
}

// Returns empty segments to the device while the reserve exceeds `keep`.
// REQUIRES: s.mu held.
void ReleaseSegmentsLocked(State& s, Pool& p, uint64_t keep) {
  for (auto it = p.segments.begin(); it != p.segments.end() && p.reserved > keep;) {
    if (it->second.used == 0) {
      p.reserved -= it->second.size;
      if (!p.host) {
        s.used[p.device] -= it->second.size;
      }
      it = p.segments.erase(it);
    } else {
      ++it;
    }
  }
}

// REQUIRES: s.mu held.
CUmemoryPool NewPoolLocked(State& s, int device) {
  auto handle = reinterpret_cast<CUmemoryPool>(static_cast<uintptr_t>(0x5000 + s.next_pool++));
  s.pools[handle].device = device;
  return handle;
}

// REQUIRES: s.mu held.
CUmemoryPool CurrentPoolLocked(State& s, int device) {
  if (s.default_pool[device] == nullptr) {
    s.default_pool[device] = NewPoolLocked(s, device);
  }
  if (s.current_pool[device] == nullptr) {
    s.current_pool[device] = s.default_pool[device];
  }
  return s.current_pool[device];
}

// From `handle`, or with handle == nullptr from the current pool of the
// device of `stream` (cuMemAllocAsync).
CUresult PoolAllocate(CUdeviceptr* out, uint64_t bytes, CUmemoryPool handle, CUstream stream) {
  if (out == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (handle == nullptr) {
    auto it = s.streams.find(reinterpret_cast<uintptr_t>(stream));
    handle = CurrentPoolLocked(s, it != s.streams.end() ? it->second.device : CurrentDevice());
  }
  auto pit = s.pools.find(handle);
  if (pit == s.pools.end() || pit->second.destroyed) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Pool& p = pit->second;
  bool small = bytes <= kPoolChunk;
  uint64_t need = small ? (std::max<uint64_t>(bytes, 1) + kPoolAlign - 1) / kPoolAlign * kPoolAlign
                        : Pages(bytes);
  uint64_t segment = 0;
  for (auto& [id, seg] : p.segments) {
    if (small && seg.size == kPoolChunk && seg.size - seg.used >= need) {
      segment = id;
      break;
    }
  }
  if (segment == 0) {
    uint64_t size = small ? kPoolChunk : need;
    if (!p.host && s.used[p.device] + size > kDeviceBytes) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    segment = s.next_segment++;
    p.segments[segment] = PoolSegment{size, 0};
    p.reserved += size;
    if (!p.host) {
      s.used[p.device] += size;
    }
  }
  p.segments[segment].used += need;
  p.used += need;
  *out = NextAddressLocked(s, need);
  s.allocations[*out] = Allocation{need, p.device, false, handle, segment};
  return CUDA_SUCCESS;
}

// REQUIRES: s.mu held.
void PoolFreeLocked(State& s, const Allocation& a) {
  auto pit = s.pools.find(a.pool);
  if (pit == s.pools.end()) {
    return;
  }
  Pool& p = pit->second;
  p.segments[a.segment].used -= a.bytes;
  p.used -= a.bytes;
  if (!p.destroyed) {
    ReleaseSegmentsLocked(s, p, p.release_threshold);
  } else if (p.used == 0) {
    ReleaseSegmentsLocked(s, p, 0);  // Its last block: the destroyed pool goes.
    s.pools.erase(pit);
  }
}

}  // namespace

namespace accelpool::cuda::fake {

void CompletePendingFreesLocked(State& s) {
  for (const Allocation& a : s.pending_frees) {
    PoolFreeLocked(s, a);
  }
  s.pending_frees.clear();
}

}  // namespace accelpool::cuda::fake

namespace {

// `entry` names the calling entry point for fakecuda_Fail.
CUresult Free(CUdeviceptr ptr, const char* entry) {
  State& s = S();
  void (*on_free)(void*) = nullptr;
  void* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (FailingLocked(s, entry)) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    auto it = s.allocations.find(ptr);
    if (it == s.allocations.end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (it->second.physical) {
      s.used[it->second.device] -= it->second.bytes;
    }
    if (it->second.graph) {
      s.graph_used[it->second.device] -= it->second.bytes;
    }
    if (it->second.pool != nullptr && s.defer_async_frees &&
        std::strncmp(entry, "cuMemFreeAsync", 14) == 0) {
      s.pending_frees.push_back(it->second);
    } else if (it->second.pool != nullptr) {
      PoolFreeLocked(s, it->second);
    }
    s.allocations.erase(it);
    std::swap(on_free, s.on_free);
    std::swap(ctx, s.on_free_ctx);
    if (on_free != nullptr) {
      s.reuse_address = ptr;
    }
  }
  if (on_free != nullptr) {
    on_free(ctx);  // Another thread, as it were, between the free and its return.
  }
  return CUDA_SUCCESS;
}

}  // namespace

using namespace accelpool::cuda::fake;  // NOLINT: test fake.

namespace {

// The physical devices this process sees, in its ordinal order, after
// CUDA_VISIBLE_DEVICES as CUDA reads it: indices or UUIDs (kFakeDeviceUuids),
// the list ending at the first that names no device. Only the UUIDs follow
// it; the rest of the fake keeps its state by ordinal.
struct Visible {
  int count = kDevices;
  int physical[kDevices] = {0, 1};
};

const Visible& VisibleDevices() {
  static const Visible visible = [] {
    Visible v;
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    if (env == nullptr) {
      return v;
    }
    v.count = 0;
    std::string list = env;
    for (size_t start = 0; start <= list.size() && v.count < kDevices;) {
      size_t comma = list.find(',', start);
      std::string token = list.substr(start, comma == std::string::npos ? comma : comma - start);
      int found = -1;
      for (int d = 0; d < kDevices; ++d) {
        if (token == std::to_string(d) || token == kFakeDeviceUuids[d]) {
          found = d;
        }
      }
      if (found < 0) {
        break;
      }
      v.physical[v.count++] = found;
      if (comma == std::string::npos) {
        break;
      }
      start = comma + 1;
    }
    return v;
  }();
  return visible;
}

}  // namespace

FAKE_EXPORT CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = VisibleDevices().count;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= VisibleDevices().count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *d = ordinal;
  return CUDA_SUCCESS;
}
// The UUID of the physical device behind the ordinal; fails when told to
// (fakecuda_Fail "cuDeviceGetUuid").
FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr || dev < 0 || dev >= VisibleDevices().count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (FailingLocked(s, "cuDeviceGetUuid")) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  std::memcpy(uuid->bytes, kFakeUuidPrefix, sizeof(kFakeUuidPrefix));
  uuid->bytes[15] = static_cast<char>(VisibleDevices().physical[dev]);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}
FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = kDeviceBytes;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* d) {
  if (NoContext()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *d = CurrentDevice();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = NoContext() ? nullptr
                     : reinterpret_cast<CUcontext>(GreenCurrent() != 0 ? GreenCurrent()
                                                                       : CurrentContextHandle());
  return CUDA_SUCCESS;
}
// A null context unbinds the current one (NoContext), as on a real driver.
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  auto v = reinterpret_cast<uintptr_t>(ctx);
  GreenCurrent() = 0;
  if (v == 0) {
    NoContext() = true;
    return CUDA_SUCCESS;
  }
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.contexts.find(v);
    if (it != s.contexts.end()) {
      CurrentContext() = v;
      CurrentDevice() = it->second;
      NoContext() = false;
      return CUDA_SUCCESS;
    }
  }
  if (v < 1 || v > kDevices) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  CurrentContext() = 0;
  CurrentDevice() = static_cast<int>(v - 1);
  NoContext() = false;
  return CUDA_SUCCESS;
}
namespace {

constexpr uint64_t kDefaultHeap = 8ULL << 20;

// Device memory a malloc heap of `size` holds past the default one.
uint64_t HeapExtra(uint64_t size) { return size > kDefaultHeap ? Pages(size - kDefaultHeap) : 0; }

}  // namespace

// The current context's malloc heap (CU_LIMIT_MALLOC_HEAP_SIZE; 8 MiB by
// default): resized at once, the growth past the default taken from the
// device. Other limits are accepted and not modelled.
FAKE_EXPORT CUresult cuCtxSetLimit(int limit, size_t value) {
  if (limit != CU_LIMIT_MALLOC_HEAP_SIZE) {
    return CUDA_SUCCESS;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const uintptr_t ctx = CurrentContextHandle();
  auto it = s.heaps.find(ctx);
  const uint64_t extra = HeapExtra(it != s.heaps.end() ? it->second : kDefaultHeap);
  const uint64_t want = HeapExtra(value);
  uint64_t& used = s.used[CurrentDevice()];
  if (used - extra + want > kDeviceBytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  used = used - extra + want;
  s.heaps[ctx] = value;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetLimit(size_t* value, int limit) {
  if (value == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (limit != CU_LIMIT_MALLOC_HEAP_SIZE) {
    *value = 1024;
    return CUDA_SUCCESS;
  }
  auto it = s.heaps.find(CurrentContextHandle());
  *value = it != s.heaps.end() ? it->second : kDefaultHeap;
  return CUDA_SUCCESS;
}
// The context stack of cuCtxPushCurrent / cuCtxPopCurrent: what was current
// before each push.
struct Saved {
  uintptr_t context;
  int device;
  uintptr_t green;
  bool none;
};
std::vector<Saved>& ContextStack() {
  thread_local std::vector<Saved> stack;
  return stack;
}
FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  Saved saved{CurrentContext(), CurrentDevice(), GreenCurrent(), NoContext()};
  CUresult rc = cuCtxSetCurrent(ctx);
  if (rc == CUDA_SUCCESS) {
    ContextStack().push_back(saved);
  }
  return rc;
}
FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (ContextStack().empty()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (ctx != nullptr) {
    *ctx = reinterpret_cast<CUcontext>(CurrentContextHandle());
  }
  const Saved saved = ContextStack().back();
  ContextStack().pop_back();
  CurrentContext() = saved.context;
  CurrentDevice() = saved.device;
  GreenCurrent() = saved.green;
  NoContext() = saved.none;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned) {
  if (stream == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  uintptr_t v = s.next_stream;
  s.next_stream += 0x10;
  s.streams[v] = Stream{CurrentContextHandle(), CurrentDevice()};
  *stream = reinterpret_cast<CUstream>(v);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.streams.erase(reinterpret_cast<uintptr_t>(stream)) == 1 ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_INVALID_HANDLE;
}
// Both fail when told to (fakecuda_Fail), as on drivers without them.
FAKE_EXPORT CUresult cuStreamGetCtx(CUstream stream, CUcontext* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ctx == nullptr || FailingLocked(s, "cuStreamGetCtx")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto it = s.streams.find(reinterpret_cast<uintptr_t>(stream));
  if (it == s.streams.end() && NoContext()) {
    return CUDA_ERROR_INVALID_CONTEXT;  // A stream of the current context: there is none.
  }
  *ctx = reinterpret_cast<CUcontext>(it != s.streams.end() ? it->second.context
                                                           : CurrentContextHandle());
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamGetDevice(CUstream stream, CUdevice* device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (device == nullptr || FailingLocked(s, "cuStreamGetDevice")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto it = s.streams.find(reinterpret_cast<uintptr_t>(stream));
  if (it == s.streams.end() && NoContext()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *device = it != s.streams.end() ? it->second.device : CurrentDevice();
  return CUDA_SUCCESS;
}
// A context of its own on `dev`, made current. Handles start at 0x1000; the
// lowest free one is taken, so a destroyed context's handle comes back; or
// the one fakecuda_NextCtxHandle chose, when free. All three ABIs.
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned, CUdevice dev) {
  if (ctx == nullptr || dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  uintptr_t v = 0x1000;
  if (s.next_ctx_handle > static_cast<uintptr_t>(kDevices) &&
      s.contexts.count(s.next_ctx_handle) == 0) {
    v = s.next_ctx_handle;
  }
  s.next_ctx_handle = 0;
  while (s.contexts.count(v) != 0) {
    ++v;
  }
  s.contexts[v] = dev;
  CurrentContext() = v;
  CurrentDevice() = dev;
  GreenCurrent() = 0;
  *ctx = reinterpret_cast<CUcontext>(v);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam*, int, unsigned flags,
                                    CUdevice dev) {
  return cuCtxCreate_v2(ctx, flags, dev);
}
FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams*, unsigned flags,
                                    CUdevice dev) {
  return cuCtxCreate_v2(ctx, flags, dev);
}
namespace {
// Events die with their context. REQUIRES: s.mu held.
void DestroyContextEventsLocked(State& s, uintptr_t ctx) {
  for (auto it = s.event_context.begin(); it != s.event_context.end();) {
    if (it->second == ctx) {
      s.events.erase(it->first);
      it = s.event_context.erase(it);
    } else {
      ++it;
    }
  }
}
// The memory a destroyed context owned goes with it (cuMemAlloc*, arrays,
// IPC imports, its malloc heap); pool blocks and graph memory stay.
// REQUIRES: s.mu held.
void FreeContextMemoryLocked(State& s, uintptr_t ctx) {
  auto heap = s.heaps.find(ctx);
  if (heap != s.heaps.end()) {
    auto owner = s.contexts.find(ctx);
    const int device = owner != s.contexts.end() ? owner->second : static_cast<int>(ctx) - 1;
    s.used[device] -= HeapExtra(heap->second);
    s.heaps.erase(heap);
  }
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    if (it->second.context != ctx) {
      ++it;
      continue;
    }
    if (it->second.physical) {
      s.used[it->second.device] -= it->second.bytes;
    }
    s.ipc_refs.erase(it->first);
    for (auto open = s.ipc_open.begin(); open != s.ipc_open.end(); ++open) {
      if (open->second == it->first) {
        s.ipc_open.erase(open);
        break;
      }
    }
    it = s.allocations.erase(it);
  }
}
}  // namespace
// Destroys a context made by cuCtxCreate_v2, its events and the memory it
// owns, as the real driver does. A primary context cannot be destroyed so
// (cuDevicePrimaryCtxReset does that).
FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto v = reinterpret_cast<uintptr_t>(ctx);
  State& s = S();
  void (*on_destroy)(void*) = nullptr;
  void* on_destroy_ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (FailingLocked(s, "cuCtxDestroy_v2")) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (s.contexts.count(v) == 0) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    DestroyContextEventsLocked(s, v);
    FreeContextMemoryLocked(s, v);
    s.contexts.erase(v);
    if (CurrentContext() == v) {
      CurrentContext() = 0;
    }
    std::swap(on_destroy, s.on_ctx_destroy);
    std::swap(on_destroy_ctx, s.on_ctx_destroy_ctx);
  }
  if (on_destroy != nullptr) {
    on_destroy(on_destroy_ctx);  // Another thread, as it were, before the destroy returns.
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
// A device's primary context is the handle device + 1, usable without a
// retain (the tests allocate in it directly); retains and releases count
// references, as the driver does: the release of the last one resets the
// context, which frees the memory and events it owns (pool blocks, VMM
// handles and graph memory stay), and leaves it inactive.
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr || dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.primary_refs[dev];
  *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(dev + 1));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (FailingLocked(s, "cuDevicePrimaryCtxRelease_v2")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (s.primary_refs[dev] == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;  // Not retained.
  }
  if (--s.primary_refs[dev] == 0) {
    auto v = static_cast<uintptr_t>(dev + 1);
    DestroyContextEventsLocked(s, v);
    FreeContextMemoryLocked(s, v);
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned* flags, int* active) {
  if (flags == nullptr || active == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (FailingLocked(s, "cuDevicePrimaryCtxGetState")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *flags = 0;
  *active = s.primary_refs[dev] > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (free_bytes == nullptr || total == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - s.used[CurrentDevice()];
  return CUDA_SUCCESS;
}
// The CUDA 3.1-era ABI with 32-bit sizes: reachable only through
// cuGetProcAddress with an old version; the shim must pass it through.
FAKE_EXPORT CUresult cuMemAlloc(unsigned* dptr, unsigned bytes) {
  CUdeviceptr p = 0;
  CUresult rc = Allocate(&p, bytes, CurrentDevice(), true);
  *dptr = static_cast<unsigned>(p);
  return rc;
}
// Zero bytes is CUDA_ERROR_INVALID_VALUE, as documented for both.
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  return n == 0 ? CUDA_ERROR_INVALID_VALUE : Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned) {
  return n == 0 ? CUDA_ERROR_INVALID_VALUE : Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t w, size_t h,
                                        unsigned) {
  if (pitch == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pitch = (w + 511) / 512 * 512;
  return Allocate(p, *pitch * h, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return Free(p, "cuMemFree_v2"); }
// On a capturing stream an allocation becomes a memory node of the graph
// being captured: an address, no memory until the graph runs.
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream st) {
  return Capturing(st) ? CaptureAlloc(p, n) : PoolAllocate(p, n, nullptr, st);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t n, CUstream st) {
  return Capturing(st) ? CaptureAlloc(p, n) : PoolAllocate(p, n, nullptr, st);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, CUmemoryPool pool,
                                             CUstream st) {
  return pool == nullptr ? CUDA_ERROR_INVALID_VALUE : PoolAllocate(p, n, pool, st);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t n, CUmemoryPool pool,
                                                  CUstream st) {
  return pool == nullptr ? CUDA_ERROR_INVALID_VALUE : PoolAllocate(p, n, pool, st);
}

FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr || dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  CurrentPoolLocked(s, dev);
  *pool = s.default_pool[dev];
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr || dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (FailingLocked(s, "cuDeviceGetMemPool")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *pool = CurrentPoolLocked(s, dev);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(pool);
  if (dev < 0 || dev >= kDevices || it == s.pools.end() || it->second.destroyed ||
      it->second.device != dev) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.current_pool[dev] = pool;
  return CUDA_SUCCESS;
}
// Device pools, host pools (location types 2 to 4: host, host NUMA node,
// the thread's NUMA node), whose memory never counts as the device's, and
// pools of a location type newer than the shim (5 and up; CUDA 13.4 adds a
// device's locality domain), which the fake keeps in device `id`'s memory.
FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int type = props->location.type;
  bool host = type >= 2 && type <= 4;
  if (!host && ((type != CU_MEM_LOCATION_TYPE_DEVICE && type < 5) || props->location.id < 0 ||
                props->location.id >= kDevices)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *pool = NewPoolLocked(s, host ? 0 : props->location.id);
  s.pools[*pool].host = host;
  s.pools[*pool].location_type = type;
  return CUDA_SUCCESS;
}
// Like the real driver: a pool destroyed with live blocks (or frees not yet
// completed) returns at once, and all of its memory, what it kept besides
// them included, goes once they do (cuMemPoolDestroy).
FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(pool);
  if (it == s.pools.end() || it->second.destroyed || s.default_pool[it->second.device] == pool) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (s.current_pool[it->second.device] == pool) {
    s.current_pool[it->second.device] = s.default_pool[it->second.device];
  }
  it->second.destroyed = true;
  if (it->second.used == 0) {
    ReleaseSegmentsLocked(s, it->second, 0);
    s.pools.erase(it);
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void* value) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (FailingLocked(s, "cuMemPoolGetAttribute")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto it = s.pools.find(pool);
  if (value == nullptr || it == s.pools.end() || it->second.destroyed) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* out = static_cast<cuuint64_t*>(value);
  // Location attributes (int): newer drivers only; FAKECUDA_FAIL with
  // "cuMemPoolGetAttribute.location" plays an older one.
  if (attr == CU_MEMPOOL_ATTR_LOCATION_TYPE || attr == CU_MEMPOOL_ATTR_LOCATION_ID) {
    if (FailingLocked(s, "cuMemPoolGetAttribute.location")) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *static_cast<int*>(value) = attr == CU_MEMPOOL_ATTR_LOCATION_TYPE
                                    ? it->second.location_type
                                    : (it->second.host ? 0 : it->second.device);
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = it->second.release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = it->second.reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = it->second.used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void* value) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(pool);
  if (value == nullptr || it == s.pools.end() || it->second.destroyed ||
      attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  it->second.release_threshold = *static_cast<cuuint64_t*>(value);
  // The real driver releases down to the new threshold at the next
  // synchronisation; the fake does so at once, like its frees.
  ReleaseSegmentsLocked(s, it->second, it->second.release_threshold);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(pool);
  if (it == s.pools.end() || it->second.destroyed) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ReleaseSegmentsLocked(s, it->second, keep);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream st) {
  return Capturing(st) ? CaptureFree(p) : Free(p, "cuMemFreeAsync");
}
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream st) {
  return Capturing(st) ? CaptureFree(p) : Free(p, "cuMemFreeAsync_ptsz");
}
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* d) {
  CUdeviceptr p = 0;
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  CUresult rc = Allocate(&p, d->Width * std::max<size_t>(d->Height, 1) * elem * d->NumChannels,
                         CurrentDevice(), true);
  *a = reinterpret_cast<CUarray>(p);
  return rc;
}
// A sparse or deferred-mapping array takes no memory of its own.
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  CUdeviceptr p = 0;
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  bool backed = (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) == 0;
  CUresult rc = Allocate(&p,
                         d->Width * std::max<size_t>(d->Height, 1) * std::max<size_t>(d->Depth, 1) *
                             elem * d->NumChannels,
                         CurrentDevice(), backed);
  *a = reinterpret_cast<CUarray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuArrayDestroy(CUarray a) {
  return Free(reinterpret_cast<CUdeviceptr>(a), "cuArrayDestroy");
}
// Every level at once: level l is the extent halved l times (at least 1);
// nothing for a sparse or deferred-mapping one.
FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* a, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                            unsigned levels) {
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  // Layered and cubemap arrays: Depth counts layers, every level has them all.
  const bool layers = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t bytes = 0;
  for (unsigned l = 0; l < levels; ++l) {
    bytes += std::max<size_t>(d->Width >> l, 1) * elem * d->NumChannels *
             (d->Height == 0 ? 1 : std::max<size_t>(d->Height >> l, 1)) *
             (d->Depth == 0 ? 1 : std::max<size_t>(layers ? d->Depth : d->Depth >> l, 1));
  }
  CUdeviceptr p = 0;
  bool backed = (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) == 0;
  CUresult rc = Allocate(&p, bytes, CurrentDevice(), backed);
  *a = reinterpret_cast<CUmipmappedArray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
  return Free(reinterpret_cast<CUdeviceptr>(a), "cuMipmappedArrayDestroy");
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t n,
                                 const CUmemAllocationProp* prop, unsigned long long) {  // NOLINT
  if (h == nullptr || prop == nullptr || n % kPage != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  int dev = prop->location.id;
  if (s.used[dev] + n > kDeviceBytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.used[dev] += n;
  if (std::getenv("FAKE_CUDA_REUSE_HANDLES") != nullptr && !s.freed_handles.empty()) {
    *h = s.freed_handles.back();
    s.freed_handles.pop_back();
  } else {
    *h = s.next_handle++;
  }
  s.handles[*h] = Handle{n, dev, 0, false, 0};
  return CUDA_SUCCESS;
}

namespace {
// REQUIRES: s.mu held.
void MaybeFreeHandle(State& s, CUmemGenericAllocationHandle h) {
  auto it = s.handles.find(h);
  if (it != s.handles.end() && it->second.released && it->second.maps == 0) {
    s.used[it->second.device] -= it->second.bytes;
    s.handles.erase(it);
    s.freed_handles.push_back(h);
  }
}
}  // namespace

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (FailingLocked(s, "cuMemRelease")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto it = s.handles.find(h);
  if (it == s.handles.end() || it->second.released) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (it->second.retains > 0) {
    --it->second.retains;  // One of several references.
    return CUDA_SUCCESS;
  }
  it->second.released = true;
  MaybeFreeHandle(s, h);
  return CUDA_SUCCESS;
}
// The handle mapped at (or over) `addr`, with one more reference: as the
// real driver, each retain takes a cuMemRelease of its own.
FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.mappings.upper_bound(reinterpret_cast<CUdeviceptr>(addr));
  if (h == nullptr || it == s.mappings.begin()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  --it;
  auto handle = s.handles.find(it->second);
  if (handle == s.handles.end() ||
      reinterpret_cast<CUdeviceptr>(addr) >= it->first + handle->second.bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (handle->second.released) {
    handle->second.released = false;  // Its mappings kept it alive; now a reference does.
  } else {
    ++handle->second.retains;
  }
  *h = it->second;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t, size_t, CUmemGenericAllocationHandle h,
                              unsigned long long) {  // NOLINT
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.handles.find(h);
  if (it == s.handles.end() || s.mappings.count(p) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ++it->second.maps;
  s.mappings[p] = h;
  return CUDA_SUCCESS;
}
namespace {
// Maps handles into sparse arrays: each map holds its handle as a mapping
// does; an unmap of an array (its memHandle NULL) drops the oldest one
// mapped there. Tiles and offsets are not modelled.
CUresult MapArray(CUarrayMapInfo* infos, unsigned count) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (infos == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned i = 0; i < count; ++i) {
    const CUarrayMapInfo& m = infos[i];
    const auto array = reinterpret_cast<uintptr_t>(m.resource.array);
    std::vector<CUmemGenericAllocationHandle>& mapped = s.array_maps[array];
    if (m.memOperationType == CU_MEM_OPERATION_TYPE_MAP) {
      auto it = s.handles.find(m.memHandle.memHandle);
      if (m.memHandleType != CU_MEM_HANDLE_TYPE_GENERIC || it == s.handles.end()) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      ++it->second.maps;
      mapped.push_back(m.memHandle.memHandle);
    } else if (m.memOperationType == CU_MEM_OPERATION_TYPE_UNMAP) {
      if (m.memHandle.memHandle != 0 || mapped.empty()) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      const CUmemGenericAllocationHandle h = mapped.front();
      mapped.erase(mapped.begin());
      --s.handles[h].maps;
      MaybeFreeHandle(s, h);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}
}  // namespace
FAKE_EXPORT CUresult cuMemMapArrayAsync(CUarrayMapInfo* m, unsigned n, CUstream) {
  return MapArray(m, n);
}
FAKE_EXPORT CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo* m, unsigned n, CUstream) {
  return MapArray(m, n);
}
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
  State& s = S();
  void (*on_unmap)(void*) = nullptr;
  void* ctx = nullptr;
  bool failing = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    failing = FailingLocked(s, "cuMemUnmap");
    if (failing) {
      std::swap(on_unmap, s.on_unmap);
      std::swap(ctx, s.on_unmap_ctx);
    }
  }
  if (failing) {
    if (on_unmap != nullptr) {
      on_unmap(ctx);  // Another thread, as it were, while the unmap fails.
    }
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.mappings.lower_bound(p);
    if (it == s.mappings.end() || it->first >= p + n) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    while (it != s.mappings.end() && it->first < p + n) {
      CUmemGenericAllocationHandle h = it->second;
      --s.handles[h].maps;
      it = s.mappings.erase(it);
      MaybeFreeHandle(s, h);
    }
    std::swap(on_unmap, s.on_unmap);
    std::swap(ctx, s.on_unmap_ctx);
  }
  if (on_unmap != nullptr) {
    on_unmap(ctx);  // Another thread, as it were, between the unmap and its return.
  }
  return CUDA_SUCCESS;
}

// The fake's IPC handle carries the exported size in its first 8 bytes and,
// in the next 4, the exporter's device plus one (0: the current device).
FAKE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle handle, unsigned) {
  uint64_t bytes = 0;
  int32_t device_plus_one = 0;
  std::memcpy(&bytes, handle.reserved, sizeof(bytes));
  std::memcpy(&device_plus_one, handle.reserved + sizeof(bytes), sizeof(device_plus_one));
  if (device_plus_one < 0 || device_plus_one > kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::string key(handle.reserved, sizeof(handle.reserved));
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.ipc_refcounted && p != nullptr ? s.ipc_open.find(key) : s.ipc_open.end();
    if (it != s.ipc_open.end()) {
      ++s.ipc_refs[it->second];
      *p = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult rc =
      Allocate(p, bytes, device_plus_one == 0 ? CurrentDevice() : device_plus_one - 1, false);
  std::lock_guard<std::mutex> lock(s.mu);
  if (rc == CUDA_SUCCESS && s.ipc_refcounted) {
    s.ipc_open[key] = *p;
    s.ipc_refs[*p] = 1;
  }
  return rc;
}
FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.ipc_refs.find(p);
    if (it != s.ipc_refs.end()) {
      if (FailingLocked(s, "cuIpcCloseMemHandle")) {
        return CUDA_ERROR_NOT_SUPPORTED;
      }
      if (--it->second > 0) {
        return CUDA_SUCCESS;
      }
      s.ipc_refs.erase(it);
      for (auto open = s.ipc_open.begin(); open != s.ipc_open.end(); ++open) {
        if (open->second == p) {
          s.ipc_open.erase(open);
          break;
        }
      }
    }
  }
  return Free(p, "cuIpcCloseMemHandle");
}
// Like cudaDeviceReset: what the device's primary context holds goes (the
// memory it owns, as at a last release, and its events), with the device's
// default pool (its blocks and reserve) and its graph pool. What belongs to
// no context or to another one stays: the memory of contexts made with
// cuCtxCreate, cuMemCreate handles and their mappings, pools made with
// cuMemPoolCreate and their blocks. The device's current pool is its
// default one again. The next allocations get the addresses of the first
// ones again when nothing else is left.
FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (dev < 0 || dev >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto primary = static_cast<uintptr_t>(dev + 1);
  DestroyContextEventsLocked(s, primary);
  FreeContextMemoryLocked(s, primary);
  const CUmemoryPool default_pool = s.default_pool[dev];
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    const Allocation& a = it->second;
    bool freed = a.device == dev && ((default_pool != nullptr && a.pool == default_pool) ||
                                     (a.graph && a.pool == nullptr));
    it = freed ? s.allocations.erase(it) : std::next(it);
  }
  auto pool = s.pools.find(default_pool);
  if (pool != s.pools.end()) {
    s.used[dev] -= pool->second.reserved;
    s.pools.erase(pool);
  }
  s.default_pool[dev] = nullptr;
  s.current_pool[dev] = nullptr;
  s.used[dev] -= s.graph_reserved[dev];
  s.graph_reserved[dev] = 0;
  s.graph_used[dev] = 0;
  if (s.allocations.empty()) {
    s.next_address = 1ULL << 40;
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return cuDevicePrimaryCtxReset_v2(dev);
}

FAKE_EXPORT void fakecuda_DeferAsyncFrees(int on) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.defer_async_frees = on != 0;
}

// Makes IPC opens reference-counted per handle, as the real driver's are.
FAKE_EXPORT void fakecuda_IpcRefcounted(int on) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.ipc_refcounted = on != 0;
}
// Exports an allocation in the layout cuIpcOpenMemHandle_v2 reads, plus its
// address in bytes 16-23, so that two exports have different handles.
FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.find(p);
  if (handle == nullptr || it == s.allocations.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  int32_t device_plus_one = it->second.device + 1;
  std::memcpy(handle->reserved, &it->second.bytes, sizeof(uint64_t));
  std::memcpy(handle->reserved + sizeof(uint64_t), &device_plus_one, sizeof(device_plus_one));
  std::memcpy(handle->reserved + 16, &p, sizeof(p));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (FailingLocked(s, "cuPointerGetAttribute")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto it = s.allocations.upper_bound(p);
  if (it == s.allocations.begin()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  --it;
  if (data == nullptr || p >= it->first + it->second.bytes ||
      attr != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<int*>(data) = it->second.device;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  State& s = S();
  void (*on_address_range)(void*) = nullptr;
  void* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::swap(on_address_range, s.on_address_range);
    std::swap(ctx, s.on_address_range_ctx);
  }
  if (on_address_range != nullptr) {
    on_address_range(ctx);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.find(p);
  if (it == s.allocations.end()) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (base != nullptr) {
    *base = it->first;
  }
  if (size != nullptr) {
    *size = it->second.bytes;
  }
  return CUDA_SUCCESS;
}

// Makes the named entry point fail with CUDA_ERROR_NOT_SUPPORTED (fail != 0)
// or work again (fail == 0). Only entry points that check are affected.
FAKE_EXPORT void fakecuda_Fail(const char* name, int fail) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (fail != 0) {
    s.failing.insert(name);
  } else {
    s.failing.erase(name);
  }
}

// Runs fn(ctx) once, inside the next successful free, after the driver has
// released the address and before the free returns; the next allocation gets
// the freed address again. Deterministically replays another thread taking
// the address between a free and its caller's bookkeeping.
FAKE_EXPORT void fakecuda_OnNextFree(void (*fn)(void*), void* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.on_free = fn;
  s.on_free_ctx = ctx;
}

// Runs fn(ctx) once, inside the next successful cuCtxDestroy, after the
// driver has destroyed the context and before the call returns: replays
// another thread creating a context (which gets the destroyed one's handle)
// and allocating in it meanwhile.
FAKE_EXPORT void fakecuda_OnNextCtxDestroy(void (*fn)(void*), void* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.on_ctx_destroy = fn;
  s.on_ctx_destroy_ctx = ctx;
}

// Runs fn(ctx) once, inside the next cuMemGetAddressRange, before it
// answers: the shim asks it the size of an IPC import it is about to charge,
// so this replays another thread's call landing while an import is half
// accounted.
FAKE_EXPORT void fakecuda_OnNextAddressRange(void (*fn)(void*), void* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.on_address_range = fn;
  s.on_address_range_ctx = ctx;
}

// Runs fn(ctx) once, inside the next successful cuMemUnmap, after the
// driver has unmapped the range (freeing a released handle whose last
// mapping it was) and before the call returns: replays another thread's
// cuMemCreate getting the freed handle's value meanwhile.
FAKE_EXPORT void fakecuda_OnNextUnmap(void (*fn)(void*), void* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.on_unmap = fn;
  s.on_unmap_ctx = ctx;
}

// The next cuCtxCreate* returns `handle` (above the primary contexts' and
// not in use), as a driver may hand out any value that is free again.
FAKE_EXPORT void fakecuda_NextCtxHandle(uintptr_t handle) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.next_ctx_handle = handle;
}

// Makes `green` the calling thread's current context as a green context's
// CUcontext is (cuCtxFromGreenCtx, cuCtxSetCurrent): cuCtxGetCurrent reports
// it, and what is allocated meanwhile is the current primary context's.
// 0: back to that primary context, as cuGreenCtxDestroy leaves it.
FAKE_EXPORT void fakecuda_GreenCurrent(uintptr_t green) { GreenCurrent() = green; }

FAKE_EXPORT uint64_t fakecuda_DeviceUsedBytes(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return device >= 0 && device < kDevices ? s.used[device] : 0;
}
