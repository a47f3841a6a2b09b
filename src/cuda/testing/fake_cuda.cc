// A fake libcuda.so.1 for CPU-only tests of libaccelpool-cuda.
//
// It implements, with in-memory bookkeeping, every driver entry point the
// shim hooks or calls: device memory (two devices of 80 GiB each; every
// allocation consumes whole 2 MiB pages, as the shim assumes), VMM handles,
// IPC imports, launches on a simulated device timeline, timing events, and
// cuGetProcAddress[_v2] with a per-version, per-stream-mode table that
// returns this library's own functions. Nothing here touches a GPU.
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
// total simulated busy time, and the library's own address of a function.
//
// Thread-safety: one mutex around all state; safe from any thread.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include "cuda/cuda_types.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kDevices = 2;
constexpr uint64_t kDeviceBytes = 80ULL << 30;
constexpr uint64_t kPage = 2ULL << 20;

struct Allocation {
  uint64_t bytes;
  int device;
  bool physical;  // false for IPC imports (memory of another process).
};

struct Handle {
  uint64_t bytes;
  int device;
  int maps;
  bool released;
};

struct State {
  std::mutex mu;
  uint64_t used[kDevices] = {};
  uint64_t next_address = 1ULL << 40;
  std::map<CUdeviceptr, Allocation> allocations;
  std::map<CUmemGenericAllocationHandle, Handle> handles;
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> mappings;
  uint64_t next_handle = 1;
  std::map<uintptr_t, int64_t> stream_tail;
  std::map<CUevent, int64_t> events;  // Position; -1 = never recorded.
  uint64_t next_event = 1;
  int64_t busy_ns = 0;
};

State& S() {
  static State state;
  return state;
}

thread_local int t_device = 0;

int64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

uint64_t Pages(uint64_t bytes) { return (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage; }

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
  *out = s.next_address;
  s.next_address += need + kPage;
  s.allocations[*out] = Allocation{need, device, physical};
  return CUDA_SUCCESS;
}

CUresult Free(CUdeviceptr ptr) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.find(ptr);
  if (it == s.allocations.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (it->second.physical) {
    s.used[it->second.device] -= it->second.bytes;
  }
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

uintptr_t StreamKey(CUstream stream, bool per_thread) {
  auto key = reinterpret_cast<uintptr_t>(stream);
  return key == 0 && per_thread ? 2 : key;
}

// Like a real launch queue, a stream holds a bounded amount of work: the
// launching thread blocks while more than this is queued.
constexpr int64_t kQueueNs = 20'000'000;

void SleepUntil(int64_t t);

CUresult Launch(CUstream stream, bool per_thread, int64_t duration_ns) {
  State& s = S();
  int64_t queued_until = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    int64_t& tail = s.stream_tail[StreamKey(stream, per_thread)];
    int64_t start = std::max(Now(), tail);
    tail = start + duration_ns;
    s.busy_ns += duration_ns;
    queued_until = tail;
  }
  SleepUntil(queued_until - kQueueNs);
  return CUDA_SUCCESS;
}

int64_t KernelNs(void** params) {
  return params != nullptr && params[0] != nullptr ? *static_cast<int64_t*>(params[0]) : 1000;
}

CUresult Record(CUevent event, CUstream stream, bool per_thread) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(event);
  if (it == s.events.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  it->second = std::max(Now(), s.stream_tail[StreamKey(stream, per_thread)]);
  return CUDA_SUCCESS;
}

void SleepUntil(int64_t t) {
  int64_t now = Now();
  if (t > now) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(t - now));
  }
}

}  // namespace

FAKE_EXPORT CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = kDevices;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *d = ordinal;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = kDeviceBytes;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* d) {
  *d = t_device;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(t_device + 1));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  auto v = reinterpret_cast<uintptr_t>(ctx);
  if (v < 1 || v > kDevices) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  t_device = static_cast<int>(v - 1);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (free_bytes == nullptr || total == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - s.used[t_device];
  return CUDA_SUCCESS;
}
// The CUDA 3.1-era ABI with 32-bit sizes: reachable only through
// cuGetProcAddress with an old version; the shim must pass it through.
FAKE_EXPORT CUresult cuMemAlloc(unsigned* dptr, unsigned bytes) {
  CUdeviceptr p = 0;
  CUresult rc = Allocate(&p, bytes, t_device, true);
  *dptr = static_cast<unsigned>(p);
  return rc;
}
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return Allocate(p, n, t_device, true); }
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned) {
  return Allocate(p, n, t_device, true);
}
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t w, size_t h,
                                        unsigned) {
  if (pitch == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pitch = (w + 511) / 512 * 512;
  return Allocate(p, *pitch * h, t_device, true);
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return Free(p); }
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream) {
  return Allocate(p, n, t_device, true);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t n, CUstream) {
  return Allocate(p, n, t_device, true);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, CUmemoryPool, CUstream) {
  return Allocate(p, n, t_device, true);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t n, CUmemoryPool,
                                                  CUstream) {
  return Allocate(p, n, t_device, true);
}
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { return Free(p); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream) { return Free(p); }
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* d) {
  CUdeviceptr p = 0;
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  CUresult rc = Allocate(&p, d->Width * std::max<size_t>(d->Height, 1) * elem * d->NumChannels,
                         t_device, true);
  *a = reinterpret_cast<CUarray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  CUdeviceptr p = 0;
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  CUresult rc = Allocate(&p,
                         d->Width * std::max<size_t>(d->Height, 1) *
                             std::max<size_t>(d->Depth, 1) * elem * d->NumChannels,
                         t_device, true);
  *a = reinterpret_cast<CUarray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuArrayDestroy(CUarray a) { return Free(reinterpret_cast<CUdeviceptr>(a)); }

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
  *h = s.next_handle++;
  s.handles[*h] = Handle{n, dev, 0, false};
  return CUDA_SUCCESS;
}

namespace {
// REQUIRES: s.mu held.
void MaybeFreeHandle(State& s, CUmemGenericAllocationHandle h) {
  auto it = s.handles.find(h);
  if (it != s.handles.end() && it->second.released && it->second.maps == 0) {
    s.used[it->second.device] -= it->second.bytes;
    s.handles.erase(it);
  }
}
}  // namespace

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.handles.find(h);
  if (it == s.handles.end() || it->second.released) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  it->second.released = true;
  MaybeFreeHandle(s, h);
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
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
  State& s = S();
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
  return CUDA_SUCCESS;
}

// The fake's IPC handle carries the exported size in its first 8 bytes.
FAKE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle handle, unsigned) {
  uint64_t bytes = 0;
  std::memcpy(&bytes, handle.reserved, sizeof(bytes));
  return Allocate(p, bytes, t_device, false);
}
FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return Free(p); }
FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  State& s = S();
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

#define FAKE_LAUNCH(name, per_thread)                                                       \
  FAKE_EXPORT CUresult name(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,   \
                            unsigned, unsigned, CUstream st, void** params, void**) {       \
    return Launch(st, per_thread, KernelNs(params));                                        \
  }
FAKE_LAUNCH(cuLaunchKernel, false)
FAKE_LAUNCH(cuLaunchKernel_ptsz, true)
#define FAKE_COOP(name, per_thread)                                                         \
  FAKE_EXPORT CUresult name(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,   \
                            unsigned, unsigned, CUstream st, void** params) {               \
    return Launch(st, per_thread, KernelNs(params));                                        \
  }
FAKE_COOP(cuLaunchCooperativeKernel, false)
FAKE_COOP(cuLaunchCooperativeKernel_ptsz, true)
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction, void** p, void**) {
  return c == nullptr ? CUDA_ERROR_INVALID_VALUE : Launch(c->hStream, false, KernelNs(p));
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction, void** p,
                                           void**) {
  return c == nullptr ? CUDA_ERROR_INVALID_VALUE : Launch(c->hStream, true, KernelNs(p));
}
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream st) {
  return Launch(st, false, static_cast<int64_t>(reinterpret_cast<uintptr_t>(g)));
}
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream st) {
  return Launch(st, true, static_cast<int64_t>(reinterpret_cast<uintptr_t>(g)));
}
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream, int* status) {
  *status = 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream, int* status) {
  *status = 0;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent* e, unsigned) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *e = reinterpret_cast<CUevent>(s.next_event++);
  s.events[*e] = -1;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.events.erase(e) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
FAKE_EXPORT CUresult cuEventRecord(CUevent e, CUstream st) { return Record(e, st, false); }
FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream st) { return Record(e, st, true); }
FAKE_EXPORT CUresult cuEventQuery(CUevent e) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(e);
  if (it == s.events.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return it->second >= 0 && Now() >= it->second ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
FAKE_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto ia = s.events.find(a);
  auto ib = s.events.find(b);
  if (ia == s.events.end() || ib == s.events.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  int64_t now = Now();
  if (ia->second < 0 || ib->second < 0 || now < ia->second || now < ib->second) {
    return CUDA_ERROR_NOT_READY;
  }
  *ms = static_cast<float>(static_cast<double>(ib->second - ia->second) / 1e6);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream st) {
  int64_t tail = 0;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    tail = s.stream_tail[StreamKey(st, false)];
  }
  SleepUntil(tail);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSynchronize() {
  int64_t tail = 0;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& [key, t] : s.stream_tail) {
      tail = std::max(tail, t);
    }
  }
  SleepUntil(tail);
  return CUDA_SUCCESS;
}

// ---- Test-only entry points.
FAKE_EXPORT uint64_t fakecuda_DeviceUsedBytes(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return device >= 0 && device < kDevices ? s.used[device] : 0;
}
FAKE_EXPORT int64_t fakecuda_BusyNs() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.busy_ns;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult*);

namespace {

struct ProcEntry {
  const char* exported;
  const char* base;
  int min_version;
  bool per_thread;
  void* fn;
};

#define E(exported, base, version, ptds) \
  {#exported, base, version, ptds, reinterpret_cast<void*>(&exported)}
const ProcEntry kProcs[] = {
    E(cuInit, "cuInit", 2000, false),
    E(cuDeviceGetCount, "cuDeviceGetCount", 2000, false),
    E(cuCtxGetDevice, "cuCtxGetDevice", 2000, false),
    E(cuMemAlloc, "cuMemAlloc", 2000, false),
    E(cuMemAlloc_v2, "cuMemAlloc", 3020, false),
    E(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, false),
    E(cuMemAllocManaged, "cuMemAllocManaged", 6000, false),
    E(cuMemFree_v2, "cuMemFree", 3020, false),
    E(cuArrayCreate_v2, "cuArrayCreate", 3020, false),
    E(cuArray3DCreate_v2, "cuArray3DCreate", 3020, false),
    E(cuArrayDestroy, "cuArrayDestroy", 2000, false),
    E(cuMemAllocAsync, "cuMemAllocAsync", 11020, false),
    E(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, true),
    E(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, false),
    E(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, true),
    E(cuMemFreeAsync, "cuMemFreeAsync", 11020, false),
    E(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, true),
    E(cuMemCreate, "cuMemCreate", 10020, false),
    E(cuMemRelease, "cuMemRelease", 10020, false),
    E(cuMemMap, "cuMemMap", 10020, false),
    E(cuMemUnmap, "cuMemUnmap", 10020, false),
    E(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, false),
    E(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, false),
    E(cuMemGetInfo_v2, "cuMemGetInfo", 3020, false),
    E(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, false),
    E(cuLaunchKernel, "cuLaunchKernel", 4000, false),
    E(cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, true),
    E(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, false),
    E(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, true),
    E(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, false),
    E(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000, true),
    E(cuGraphLaunch, "cuGraphLaunch", 10000, false),
    E(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, true),
    E(cuEventCreate, "cuEventCreate", 2000, false),
    E(cuEventRecord, "cuEventRecord", 2000, false),
    E(cuEventRecord_ptsz, "cuEventRecord", 7000, true),
    E(cuEventQuery, "cuEventQuery", 2000, false),
    E(cuEventElapsedTime, "cuEventElapsedTime", 2000, false),
    E(cuCtxSynchronize, "cuCtxSynchronize", 2000, false),
    E(cuGetProcAddress, "cuGetProcAddress", 11030, false),
    E(cuGetProcAddress_v2, "cuGetProcAddress", 12000, false),
};
#undef E

}  // namespace

FAKE_EXPORT void* fakecuda_Lookup(const char* exported) {
  for (const ProcEntry& e : kProcs) {
    if (std::string_view(exported) == e.exported) {
      return e.fn;
    }
  }
  return nullptr;
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const ProcEntry& e : kProcs) {
    if (std::string_view(symbol) != e.base) {
      continue;
    }
    known = true;
    if (e.min_version > version || (e.per_thread && !per_thread)) {
      continue;
    }
    // Prefer the matching stream mode, then the newest ABI.
    if (best == nullptr || (e.per_thread == per_thread && best->per_thread != per_thread) ||
        (e.per_thread == best->per_thread && e.min_version > best->min_version)) {
      best = &e;
    }
  }
  *pfn = best != nullptr ? best->fn : nullptr;
  if (status != nullptr) {
    *status = best != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS
              : known         ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return best != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}
