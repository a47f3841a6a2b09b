// NVML memory hooks: nvmlDeviceGetMemoryInfo[_v2] report the container's cap
// and usage for capped devices, so in-container nvidia-smi and libraries that
// size themselves from NVML see the slice, not the card. NVML numbers the
// devices the container sees in its own order, not the grant's: a device is
// the container's device whose UUID the plugin listed
// (ACCELPOOL_CUDA_DEVICE_UUIDS), or, without the list, the one of its NVML
// index. Never underflows. See shim.h.
#include "cuda/accounting.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

constexpr nvmlReturn_t kNvmlFunctionNotFound = 13;

// The container index of an NVML device, or its NVML index where the
// plugin listed no UUIDs or its UUID is not listed (warned once).
int NvmlContainerIndex(nvmlDevice_t device, unsigned nvml_index) {
  ShimState& s = State();
  if (s.config.device_uuid_count == 0) {
    return static_cast<int>(nvml_index);
  }
  char uuid[kDeviceIdLen] = {};
  if (s.nvml_get_uuid != nullptr && s.nvml_get_uuid(device, uuid, sizeof(uuid)) == NVML_SUCCESS) {
    uuid[sizeof(uuid) - 1] = '\0';
    int index = s.config.DeviceIndexOf(uuid);
    if (index >= 0) {
      return index;
    }
  }
  WarnUnmappedDevice(uuid, "NVML device", static_cast<int>(nvml_index));
  return static_cast<int>(nvml_index);
}

// Returns the cap for the NVML device, or 0 when it is not capped; *index
// is its container index.
uint64_t CapFor(nvmlDevice_t device, int* index) {
  ShimState& s = State();
  unsigned nvml_index = 0;
  if (!s.mem_on || s.nvml_get_index == nullptr ||
      s.nvml_get_index(device, &nvml_index) != NVML_SUCCESS) {
    return 0;
  }
  *index = NvmlContainerIndex(device, nvml_index);
  if (!s.config.MemoryLimited(*index)) {
    return 0;
  }
  SyncIndex(*index);  // Pools may have released memory meanwhile.
  return s.config.memory_limit_bytes[*index];
}

// Rewrites what the real query answered for a capped device. Both structs
// carry total, free and used; _v2 adds reserved (the driver's own share), which
// the capped view reports as 0. Free is what is left of the cap, but never
// more than the card has free (other tenants may hold the rest), like
// cuMemGetInfo; used is the rest of the cap, so that used + free = total.
template <typename Memory>
nvmlReturn_t ReportCap(nvmlReturn_t rc, nvmlDevice_t device, Memory* memory) {
  int index = 0;
  uint64_t cap = rc == NVML_SUCCESS && memory != nullptr ? CapFor(device, &index) : 0;
  if (cap == 0) {
    return rc;
  }
  if (cap > memory->total) {
    cap = memory->total;
  }
  // Less the context reserve this process's first allocation will add.
  uint64_t used = IndexUsed(index) + PendingContextReserve(index);
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
