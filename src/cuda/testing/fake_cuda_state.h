// Shared state of the fake libcuda.so.1 (fake_cuda.cc: devices and memory;
// fake_cuda_exec.cc: launches, events, cuGetProcAddress). Test-only.
//
// Thread-safety: every field of State is guarded by State::mu.
#ifndef ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_
#define ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_

#include <cstdint>
#include <map>
#include <mutex>

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

State& S();
// Device of the calling thread's current context (cuCtxSetCurrent).
int& CurrentDevice();
int64_t Now();
// Stream 0 of a _ptsz entry point is the per-thread stream (key 2).
uintptr_t StreamKey(CUstream stream, bool per_thread);
void SleepUntil(int64_t t);

}  // namespace accelpool::cuda::fake

#endif  // ACCELPOOL_CUDA_TESTING_FAKE_CUDA_STATE_H_
