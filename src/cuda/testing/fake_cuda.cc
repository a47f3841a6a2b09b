// A fake libcuda.so.1 for CPU-only tests of libaccelpool-cuda.
//
// It implements, with in-memory bookkeeping, every driver entry point the
// shim hooks or calls: device memory (two devices of 80 GiB each; every
// allocation consumes whole 2 MiB pages, as the shim assumes), VMM handles,
// IPC imports, launches on a simulated device timeline, timing events, and
// cuGetProcAddress[_v2] with a per-version, per-stream-mode table that
// returns this library's own functions. Nothing here touches a GPU. This
// file holds devices, memory, VMM and IPC; fake_cuda_exec.cc the launches,
// events and cuGetProcAddress.
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
#include <chrono>
#include <cstring>
#include <thread>

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

}  // namespace accelpool::cuda::fake

namespace {

using namespace accelpool::cuda::fake;  // NOLINT: test fake.

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

}  // namespace

using namespace accelpool::cuda::fake;  // NOLINT: test fake.

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
  *d = CurrentDevice();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(CurrentDevice() + 1));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  auto v = reinterpret_cast<uintptr_t>(ctx);
  if (v < 1 || v > kDevices) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  CurrentDevice() = static_cast<int>(v - 1);
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
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return Allocate(p, n, CurrentDevice(), true); }
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned) {
  return Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t w, size_t h,
                                        unsigned) {
  if (pitch == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pitch = (w + 511) / 512 * 512;
  return Allocate(p, *pitch * h, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return Free(p); }
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream) {
  return Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t n, CUstream) {
  return Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, CUmemoryPool, CUstream) {
  return Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t n, CUmemoryPool,
                                                  CUstream) {
  return Allocate(p, n, CurrentDevice(), true);
}
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { return Free(p); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream) { return Free(p); }
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* d) {
  CUdeviceptr p = 0;
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  CUresult rc = Allocate(&p, d->Width * std::max<size_t>(d->Height, 1) * elem * d->NumChannels,
                         CurrentDevice(), true);
  *a = reinterpret_cast<CUarray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  CUdeviceptr p = 0;
  uint64_t elem = d->Format == CU_AD_FORMAT_UNSIGNED_INT8 ? 1 : 4;
  CUresult rc = Allocate(&p,
                         d->Width * std::max<size_t>(d->Height, 1) *
                             std::max<size_t>(d->Depth, 1) * elem * d->NumChannels,
                         CurrentDevice(), true);
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
  return Allocate(p, bytes, CurrentDevice(), false);
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

FAKE_EXPORT uint64_t fakecuda_DeviceUsedBytes(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return device >= 0 && device < kDevices ? s.used[device] : 0;
}
