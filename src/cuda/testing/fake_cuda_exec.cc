// Launches, timing events, synchronisation and cuGetProcAddress of the fake
// libcuda.so.1. See fake_cuda.cc for the simulated timeline.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "cuda/testing/driver_api.h"
#include "cuda/testing/fake_cuda_state.h"

namespace {

using namespace accelpool::cuda::fake;  // NOLINT: test fake.

// Like a real launch queue, a stream holds a bounded amount of work: the
// launching thread blocks while more than this is queued.
constexpr int64_t kQueueNs = 20'000'000;

// Test knobs for the launch path, set from the environment on first use or
// by the fakecuda_Set* entry points. Guarded by their own mutex (not State's,
// which belongs to the memory half as well).
//   FAKECUDA_FOREIGN=<fraction>,<factor>  another context's time-slice
//       precedes that fraction of launches on the device, for (factor - 1)
//       times the kernel's own duration: an event pair around such a launch
//       measures factor x the kernel (contention inflation without MPS).
//       The choice is a fixed hash of the launch number: reproducible.
//   FAKECUDA_EVENT_RECORD_NS=<ns>  host time each cuEventRecord spins for,
//       to price the shim's event records like a real driver's.
struct Knobs {
  std::mutex mu;
  bool loaded = false;
  double foreign_fraction = 0;
  double foreign_factor = 1;
  int64_t record_ns = 0;
  uint64_t launches = 0;
  int64_t event_records = 0;
  int64_t foreign_ns = 0;
};

Knobs& K() {
  static Knobs knobs;
  return knobs;
}

// Call with K().mu held.
void LoadKnobs(Knobs& k) {
  if (k.loaded) {
    return;
  }
  k.loaded = true;
  if (const char* v = std::getenv("FAKECUDA_FOREIGN")) {
    double fraction = 0;
    double factor = 1;
    if (std::sscanf(v, "%lf,%lf", &fraction, &factor) == 2) {
      k.foreign_fraction = fraction;
      k.foreign_factor = factor;
    }
  }
  if (const char* v = std::getenv("FAKECUDA_EVENT_RECORD_NS")) {
    k.record_ns = std::atoll(v);
  }
}

// splitmix64: launch number -> uniform 64-bit value.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Foreign-context time that precedes the next launch of `duration_ns`.
int64_t ForeignNs(int64_t duration_ns) {
  Knobs& k = K();
  std::lock_guard<std::mutex> lock(k.mu);
  LoadKnobs(k);
  uint64_t n = k.launches++;
  if (k.foreign_fraction <= 0 || k.foreign_factor <= 1) {
    return 0;
  }
  double u = static_cast<double>(Mix(n) >> 11) / 9007199254740992.0;  // [0, 1)
  if (u >= k.foreign_fraction) {
    return 0;
  }
  auto extra = static_cast<int64_t>((k.foreign_factor - 1) * static_cast<double>(duration_ns));
  k.foreign_ns += extra;
  return extra;
}

void Spin(int64_t ns) {
  if (ns <= 0) {
    return;
  }
  int64_t until = Now() + ns;
  while (Now() < until) {
  }
}

// Test convention: this stream handle is always capturing. Work launched
// into it is recorded into a graph, not run.
constexpr uintptr_t kCapturingStream = 0xCA97;

}  // namespace

namespace accelpool::cuda::fake {

bool Capturing(CUstream stream) { return reinterpret_cast<uintptr_t>(stream) == kCapturingStream; }

CUresult Launch(CUstream stream, bool per_thread, int64_t duration_ns) {
  if (Capturing(stream)) {
    return CUDA_SUCCESS;
  }
  State& s = S();
  if (duration_ns == kFakeReleaseKernelNs) {
    std::lock_guard<std::mutex> lock(s.mu);
    ReleaseGatesLocked(s);
    return CUDA_SUCCESS;
  }
  const bool gate = duration_ns == kFakeGateKernelNs;
  if (gate) {
    duration_ns = 0;
  }
  int64_t foreign = ForeignNs(duration_ns);
  int64_t queued_until = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    int64_t& tail = s.stream_tail[StreamKey(stream, per_thread)];
    int64_t start = std::max(Now(), tail) + foreign;
    if (gate && start < kGatedBase) {
      start = kGatedBase;  // Runs when released (ReleaseGatesLocked).
    }
    tail = start + duration_ns;
    s.busy_ns += duration_ns;
    queued_until = tail;
  }
  if (queued_until < kGatedBase) {
    SleepUntil(queued_until - kQueueNs);  // A gated stream's queue is not modelled as full.
  }
  return CUDA_SUCCESS;
}

void ReleaseGatesLocked(State& s) {
  const int64_t shift = Now() - kGatedBase;
  for (auto& [key, tail] : s.stream_tail) {
    if (tail >= kGatedBase) {
      tail += shift;
    }
  }
  for (auto& [event, position] : s.events) {
    if (position >= kGatedBase) {
      position += shift;
    }
  }
}

}  // namespace accelpool::cuda::fake

namespace {

int64_t KernelNs(void** params) {
  return params != nullptr && params[0] != nullptr ? *static_cast<int64_t*>(params[0]) : 1000;
}

CUresult Record(CUevent event, CUstream stream, bool per_thread) {
  int64_t spin = 0;
  {
    Knobs& k = K();
    std::lock_guard<std::mutex> lock(k.mu);
    LoadKnobs(k);
    ++k.event_records;
    spin = k.record_ns;
  }
  Spin(spin);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(event);
  if (it == s.events.end()) {
    ++s.unknown_event_calls;
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // An event records on a stream of its own context only. A stream made by
  // cuStreamCreate is its creator's; any other handle the current context's.
  auto made = s.streams.find(reinterpret_cast<uintptr_t>(stream));
  const uintptr_t stream_context =
      made != s.streams.end() ? made->second.context : CurrentContextHandle();
  auto made_in = s.event_context.find(event);
  if (made_in != s.event_context.end() && made_in->second != stream_context) {
    ++s.foreign_event_records;
    return CUDA_ERROR_INVALID_HANDLE;
  }
  it->second = std::max(Now(), s.stream_tail[StreamKey(stream, per_thread)]);
  return CUDA_SUCCESS;
}

}  // namespace

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
// The deprecated launches take their parameters from cuParamSet*, which the
// fake does not model: by test convention the function handle is the
// kernel's length in ns (nullptr: 1 us, as a launch without parameters).
int64_t FunctionNs(CUfunction f) {
  return f != nullptr ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(f)) : 1000;
}
FAKE_EXPORT CUresult cuLaunch(CUfunction f) { return Launch(nullptr, false, FunctionNs(f)); }
FAKE_EXPORT CUresult cuLaunchGrid(CUfunction f, int, int) {
  return Launch(nullptr, false, FunctionNs(f));
}
FAKE_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int, int, CUstream st) {
  return Launch(st, false, FunctionNs(f));
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction, void** p, void**) {
  return c == nullptr ? CUDA_ERROR_INVALID_VALUE : Launch(c->hStream, false, KernelNs(p));
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction, void** p,
                                           void**) {
  return c == nullptr ? CUDA_ERROR_INVALID_VALUE : Launch(c->hStream, true, KernelNs(p));
}
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream st, int* status) {
  *status = Capturing(st) ? 1 : 0;  // CU_STREAM_CAPTURE_STATUS_ACTIVE
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream st, int* status) {
  *status = Capturing(st) ? 1 : 0;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent* e, unsigned) {
  if (NoContext()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *e = reinterpret_cast<CUevent>(s.next_event++);
  s.events[*e] = -1;
  s.event_context[*e] = CurrentContextHandle();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.event_context.erase(e);
  if (s.events.erase(e) == 1) {
    return CUDA_SUCCESS;
  }
  ++s.unknown_event_calls;
  ++s.unknown_event_destroys;
  return CUDA_ERROR_INVALID_HANDLE;
}
FAKE_EXPORT CUresult cuEventRecord(CUevent e, CUstream st) { return Record(e, st, false); }
FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream st) { return Record(e, st, true); }
// The calling thread's stream capture interaction mode (cuStreamCaptureMode).
int& CaptureMode() {
  thread_local int mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}
FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
  if (mode == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::swap(*mode, CaptureMode());
  return CUDA_SUCCESS;
}
// Querying an event is potentially unsafe while a global-mode capture is
// under way in any thread, unless this thread is in relaxed mode: it fails
// and the capture is invalidated (PyTorch's pinned-memory event queries
// during torch.cuda.graph hit exactly this).
FAKE_EXPORT CUresult cuEventQuery(CUevent e) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.global_captures > 0 && CaptureMode() != CU_STREAM_CAPTURE_MODE_RELAXED) {
    s.capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  auto it = s.events.find(e);
  if (it == s.events.end()) {
    ++s.unknown_event_calls;
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
    CompletePendingFreesLocked(s);
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
    CompletePendingFreesLocked(s);
  }
  SleepUntil(tail);
  return CUDA_SUCCESS;
}

// ---- Test-only entry points.
FAKE_EXPORT int64_t fakecuda_BusyNs() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.busy_ns;
}
// cuEventRecord[_ptsz] calls so far, successful or not.
FAKE_EXPORT int64_t fakecuda_EventRecords() {
  Knobs& k = K();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.event_records;
}
// Records refused: the event and the stream are of different contexts.
FAKE_EXPORT int64_t fakecuda_ForeignEventRecords() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.foreign_event_records;
}
// Record, query and destroy calls on event handles that do not exist.
FAKE_EXPORT int64_t fakecuda_UnknownEventDestroys() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.unknown_event_destroys;
}
FAKE_EXPORT int64_t fakecuda_UnknownEventCalls() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.unknown_event_calls;
}
// Device time given to the simulated foreign context so far.
FAKE_EXPORT int64_t fakecuda_ForeignNs() {
  Knobs& k = K();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.foreign_ns;
}
// Overrides FAKECUDA_FOREIGN (fraction 0 turns the injection off).
FAKE_EXPORT void fakecuda_SetForeign(double fraction, double factor) {
  Knobs& k = K();
  std::lock_guard<std::mutex> lock(k.mu);
  LoadKnobs(k);
  k.foreign_fraction = fraction;
  k.foreign_factor = factor;
}


namespace {

struct ProcEntry {
  const char* exported;
  const char* base;
  int min_version;
  bool per_thread;
  void* fn;
};

// A distinct entry point for the same ABI, as a newer driver may hand out
// for a newer cudaVersion: the shim must bind it to a hook slot of its own.
CUresult MemAllocForCuda13(CUdeviceptr* p, size_t n) { return cuMemAlloc_v2(p, n); }

#define E(exported, base, version, ptds) \
  {#exported, base, version, ptds, reinterpret_cast<void*>(&exported)}
const ProcEntry kProcs[] = {
    E(cuInit, "cuInit", 2000, false),
    E(cuDeviceGetCount, "cuDeviceGetCount", 2000, false),
    E(cuCtxGetDevice, "cuCtxGetDevice", 2000, false),
    E(cuMemAlloc, "cuMemAlloc", 2000, false),
    E(cuMemAlloc_v2, "cuMemAlloc", 3020, false),
    {"cuMemAlloc_v2", "cuMemAlloc", 13000, false, reinterpret_cast<void*>(&MemAllocForCuda13)},
    E(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, false),
    E(cuMemAllocManaged, "cuMemAllocManaged", 6000, false),
    E(cuMemFree_v2, "cuMemFree", 3020, false),
    E(cuArrayCreate_v2, "cuArrayCreate", 3020, false),
    E(cuArray3DCreate_v2, "cuArray3DCreate", 3020, false),
    E(cuArrayDestroy, "cuArrayDestroy", 2000, false),
    E(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, false),
    E(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, false),
    E(cuMemAllocAsync, "cuMemAllocAsync", 11020, false),
    E(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, true),
    E(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, false),
    E(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, true),
    E(cuMemFreeAsync, "cuMemFreeAsync", 11020, false),
    E(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, true),
    E(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, false),
    E(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, false),
    E(cuMemPoolCreate, "cuMemPoolCreate", 11020, false),
    E(cuMemCreate, "cuMemCreate", 10020, false),
    E(cuMemRelease, "cuMemRelease", 10020, false),
    E(cuMemMap, "cuMemMap", 10020, false),
    E(cuMemUnmap, "cuMemUnmap", 10020, false),
    E(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, false),
    E(cuMemMapArrayAsync, "cuMemMapArrayAsync", 11010, false),
    E(cuMemMapArrayAsync_ptsz, "cuMemMapArrayAsync", 11010, true),
    E(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, false),
    E(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, false),
    E(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, false),
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
    E(cuLaunch, "cuLaunch", 2000, false),
    E(cuLaunchGrid, "cuLaunchGrid", 2000, false),
    E(cuLaunchGridAsync, "cuLaunchGridAsync", 2000, false),
    E(cuGraphInstantiate_v2, "cuGraphInstantiate", 11000, false),
    E(cuGraphInstantiateWithFlags, "cuGraphInstantiate", 12000, false),
    E(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, false),
    E(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, false),
    E(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams", 12000, true),
    E(cuGraphUpload, "cuGraphUpload", 11010, false),
    E(cuGraphUpload_ptsz, "cuGraphUpload", 11010, true),
    E(cuGraphExecDestroy, "cuGraphExecDestroy", 10000, false),
    E(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, false),
    E(cuEventCreate, "cuEventCreate", 2000, false),
    E(cuEventRecord, "cuEventRecord", 2000, false),
    E(cuEventRecord_ptsz, "cuEventRecord", 7000, true),
    E(cuEventQuery, "cuEventQuery", 2000, false),
    E(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010, false),
    E(cuEventElapsedTime, "cuEventElapsedTime", 2000, false),
    E(cuCtxSynchronize, "cuCtxSynchronize", 2000, false),
    E(cuCtxSetLimit, "cuCtxSetLimit", 3010, false),
    E(cuCtxGetLimit, "cuCtxGetLimit", 3010, false),
    E(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000, false),
    E(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, false),
    E(cuCtxCreate_v2, "cuCtxCreate", 3020, false),
    E(cuCtxCreate_v3, "cuCtxCreate", 11040, false),
    E(cuCtxCreate_v4, "cuCtxCreate", 12050, false),
    E(cuCtxDestroy, "cuCtxDestroy", 2000, false),
    E(cuCtxDestroy_v2, "cuCtxDestroy", 4000, false),
    E(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, false),
    E(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, false),
    E(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, false),
    E(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 7000, false),
    E(cuGetProcAddress, "cuGetProcAddress", 11030, false),
    E(cuGetProcAddress_v2, "cuGetProcAddress", 12000, false),
    E(cuGetProcAddress_v2_ptsz, "cuGetProcAddress", 12000, true),
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

// As the driver's: a request that names no stream mode is a per-thread one.
FAKE_EXPORT CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int version,
                                              cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* status) {
  if ((flags &
       (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) == 0) {
    flags |= CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  }
  return cuGetProcAddress_v2(symbol, pfn, version, flags, status);
}

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}
