// NVML memory hooks: nvmlDeviceGetMemoryInfo[_v2] report the container's cap
// and usage for capped devices, so in-container nvidia-smi and libraries that
// size themselves from NVML see the slice, not the card. The NVML index is
// taken as the visible device index (true when the device plugin exposes only
// the assigned GPUs, which it does). Never underflows. See shim.h.
#include "cuda/accounting.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

constexpr nvmlReturn_t kNvmlFunctionNotFound = 13;

// Returns the cap for the NVML device, or 0 when it is not capped.
uint64_t CapFor(nvmlDevice_t device, unsigned* index) {
  ShimState& s = State();
  if (!s.mem_on || s.nvml_get_index == nullptr ||
      s.nvml_get_index(device, index) != NVML_SUCCESS ||
      !s.config.MemoryLimited(static_cast<int>(*index))) {
    return 0;
  }
  SyncPools(static_cast<int>(*index));  // Pools may have released memory meanwhile.
  SyncGraphMemory(static_cast<int>(*index));
  return s.config.memory_limit_bytes[*index];
}

// Rewrites what the real query answered for a capped device. Both structs
// carry total, free and used; _v2 adds reserved (the driver's own share), which
// the capped view reports as 0. Free is what is left of the cap, but never
// more than the card has free (other tenants may hold the rest), like
// cuMemGetInfo; used is the rest of the cap, so that used + free = total.
template <typename Memory>
nvmlReturn_t ReportCap(nvmlReturn_t rc, nvmlDevice_t device, Memory* memory) {
  unsigned index = 0;
  uint64_t cap = rc == NVML_SUCCESS && memory != nullptr ? CapFor(device, &index) : 0;
  if (cap == 0) {
    return rc;
  }
  if (cap > memory->total) {
    cap = memory->total;
  }
  uint64_t used = ContainerUsed(static_cast<int>(index));
  uint64_t avail = used < cap ? cap - used : 0;
  if (avail > memory->free) {
    avail = memory->free;
  }
  memory->total = cap;
  if constexpr (requires { memory->reserved; }) {
    memory->reserved = 0;
  }
  memory->free = avail;
  memory->used = cap - avail;
  return rc;
}

nvmlReturn_t HookMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  EnsureNvml();
  auto real = Real<nvmlDeviceGetMemoryInfoFn>(kHookNvmlMemoryInfo, 0);
  return real == nullptr ? kNvmlFunctionNotFound : ReportCap(real(device, memory), device, memory);
}

nvmlReturn_t HookMemoryInfoV2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  EnsureNvml();
  auto real = Real<nvmlDeviceGetMemoryInfo_v2Fn>(kHookNvmlMemoryInfoV2, 0);
  return real == nullptr ? kNvmlFunctionNotFound : ReportCap(real(device, memory), device, memory);
}

}  // namespace

void* NvmlHook(HookId id) {
  if (id == kHookNvmlMemoryInfo) {
    return reinterpret_cast<void*>(&HookMemoryInfo);
  }
  if (id == kHookNvmlMemoryInfoV2) {
    return reinterpret_cast<void*>(&HookMemoryInfoV2);
  }
  return nullptr;
}

}  // namespace accelpool::cuda

ACCELPOOL_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  return reinterpret_cast<nvmlDeviceGetMemoryInfoFn>(
      accelpool::cuda::NvmlHook(accelpool::cuda::kHookNvmlMemoryInfo))(d, m);
}
ACCELPOOL_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  return reinterpret_cast<nvmlDeviceGetMemoryInfo_v2Fn>(
      accelpool::cuda::NvmlHook(accelpool::cuda::kHookNvmlMemoryInfoV2))(d, m);
}
