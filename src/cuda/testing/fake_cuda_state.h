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
  // Pools (fake_cuda.cc).
  std::map<CUmemoryPool, Pool> pools;
  CUmemoryPool default_pool[kDevices] = {};
  CUmemoryPool current_pool[kDevices] = {};
  uint64_t next_pool = 1;
  uint64_t next_segment = 1;
  // Test hooks (fake_cuda.cc): entry points told to fail (fakecuda_Fail), and
  // a callback run once inside the next free, right after the driver has
  // released the address, which the next allocation then gets again
  // (fakecuda_OnNextFree).
  std::set<std::string> failing;
  void (*on_free)(void*) = nullptr;
  void* on_free_ctx = nullptr;
  CUdeviceptr reuse_address = 0;
};

State& S();
// Device of the calling thread's current context (cuCtxSetCurrent).
int& CurrentDevice();
int64_t Now();
// Stream 0 of a _ptsz entry point is the per-thread stream (key 2).
uintptr_t StreamKey(CUstream stream, bool per_thread);
void SleepUntil(int64_t t);

}  // namespace accelpool::cuda::fake

#endif  // ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_
