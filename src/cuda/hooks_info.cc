// IPC import hooks and memory queries. An imported IPC range is charged at
// its size (it occupies the importer's budget as HAMi users expect) to the
// device that holds it; memory queries report the container's cap and usage,
// never an underflow, and guard NULL out-parameters. See shim.h.
#include "cuda/accounting.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

// Device that holds the memory at `ptr` (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).
bool OwningDevice(CUdeviceptr ptr, int* device) {
  ShimState& s = State();
  int ordinal = -1;
  if (s.pointer_get_attribute == nullptr ||
      s.pointer_get_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) !=
          CUDA_SUCCESS ||
      ordinal < 0) {
    return false;
  }
  *device = ordinal;
  return true;
}

// The key of an IPC handle in the region's export table: FNV-1a over its
// bytes (0 is reserved for "free").
uint64_t HandleKey(const CUipcMemHandle& handle) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : handle.reserved) {
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  }
  return h == 0 ? 1 : h;
}

// Records what this process exports, so that an import by another process
// of the container is not charged a second time.
template <int S>
CUresult HookIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  ACCELPOOL_REAL_OR_FAIL(cuIpcGetMemHandleFn, kHookIpcGetMemHandle);
  CUresult rc = real(handle, dptr);
  if (rc != CUDA_SUCCESS || !s.mem_on || handle == nullptr) {
    return rc;
  }
  int slot = -1;
  if (CurrentSlot(&slot)) {
    s.region->RecordExport(slot, HandleKey(*handle));
  }
  return rc;
}

template <int S>
CUresult HookIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  ACCELPOOL_REAL_OR_FAIL(cuIpcOpenMemHandleFn, kHookIpcOpenMemHandle);
  CUresult rc = real(dptr, handle, flags);
  if (rc != CUDA_SUCCESS || !s.mem_on || dptr == nullptr || s.mem_get_address_range == nullptr) {
    return rc;
  }
  // A handle already open in this context: the driver returns the same
  // pointer with one more reference, mapping nothing new. The first open's
  // record is made before it is charged (ReserveRecord), so that an open of
  // the same handle by another thread meanwhile finds it.
  const uint64_t key = *dptr;
  if (!ReserveRecord(s.ipc, key, CurrentContext())) {  // The context's mapping.
    return rc;
  }
  // Exported by a process of this container: its allocation already counts.
  if (s.region->ExportedHere(HandleKey(handle))) {
    DropReservedRecord(s.ipc, key);
    return rc;
  }
  // The exporter's device may differ from the importer's current one (peer
  // access); the current device is the fallback.
  int dev = 0;
  CUdeviceptr base = 0;
  size_t size = 0;
  if ((!OwningDevice(key, &dev) && !CurrentDevice(&dev)) ||
      s.mem_get_address_range(&base, &size, key) != CUDA_SUCCESS) {
    DropReservedRecord(s.ipc, key);
    return rc;
  }
  uint64_t bytes = RoundToGranularity(size);
  Charge c = ChargeBytesAfterSync(dev, bytes);
  if (c == Charge::kOverLimit) {
    if (TakeReservedUnlessShared(s.ipc, key)) {
      if (auto close_fn = Real<cuIpcCloseMemHandleFn>(kHookIpcCloseMemHandle, 0)) {
        close_fn(key);
      }
      *dptr = 0;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // Other threads opened the handle meanwhile and got this pointer: it
    // stays mapped for them whatever this open returns, so it counts.
    c = ForceChargeBytes(dev, bytes, "an IPC import that several threads opened at once",
                         "it is closed")
            ? Charge::kCharged
            : Charge::kNotLimited;
  }
  if (c != Charge::kCharged) {
    DropReservedRecord(s.ipc, key);
  } else if (!FillReservedRecord(s.ipc, key, bytes, dev)) {
    UnchargeBytes(dev, bytes);  // Its context was destroyed meanwhile, or no room to record.
  }
  return rc;
}

template <int S>
CUresult HookIpcCloseMemHandle(CUdeviceptr ptr) {
  ACCELPOOL_REAL_OR_FAIL(cuIpcCloseMemHandleFn, kHookIpcCloseMemHandle);
  if (!s.mem_on) {
    return real(ptr);
  }
  // The driver unmaps at the last close of the pointer; the record (taken
  // before the call, as in ForgetAndCall) returns its charge only then.
  AllocRecord record;
  Drop drop = DropReference(s.ipc, ptr, &record);
  CUresult rc = real(ptr);
  if (drop == Drop::kLast) {
    if (rc == CUDA_SUCCESS) {
      ReleaseRecord(record);
    } else {
      RestoreRecord(s.ipc, ptr, record);
    }
  } else if (drop == Drop::kOneOfMany && rc != CUDA_SUCCESS) {
    RetainRecord(s.ipc, ptr);
  }
  return rc;
}

template <int S>
CUresult HookMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ACCELPOOL_REAL_OR_FAIL(cuMemGetInfoFn, kHookMemGetInfo);
  int dev = 0;
  if (!s.mem_on || !CurrentDevice(&dev) || !DeviceMemoryLimited(dev)) {
    return real(free_bytes, total_bytes);
  }
  size_t phys_free = 0;
  size_t phys_total = 0;
  CUresult rc = real(&phys_free, &phys_total);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  SyncPools(dev);  // Pools may have released memory since their last allocation.
  SyncGraphMemory(dev);
  uint64_t cap = DeviceMemoryCap(dev);
  if (cap > phys_total) {
    cap = phys_total;
  }
  // The context reserve this process's first allocation will add is not
  // free to it: allocating all that shows would be refused.
  uint64_t used = ContainerUsed(dev) + PendingContextReserve(ContainerIndex(dev));
  uint64_t free_in_cap = used >= cap ? 0 : cap - used;
  if (free_in_cap > phys_free) {
    free_in_cap = phys_free;  // Other tenants may hold the rest of the card.
  }
  if (free_bytes != nullptr) {
    *free_bytes = static_cast<size_t>(free_in_cap);
  }
  if (total_bytes != nullptr) {
    *total_bytes = static_cast<size_t>(cap);
  }
  return CUDA_SUCCESS;
}

template <int S>
CUresult HookDeviceTotalMem(size_t* bytes, CUdevice device) {
  ACCELPOOL_REAL_OR_FAIL(cuDeviceTotalMemFn, kHookDeviceTotalMem);
  CUresult rc = real(bytes, device);
  if (rc == CUDA_SUCCESS && bytes != nullptr && DeviceMemoryLimited(device) &&
      *bytes > DeviceMemoryCap(device)) {
    *bytes = static_cast<size_t>(DeviceMemoryCap(device));
  }
  return rc;
}

}  // namespace

void* InfoHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {
      ACCELPOOL_HOOK_SLOTS(HookIpcOpenMemHandle), ACCELPOOL_HOOK_SLOTS(HookIpcCloseMemHandle),
      ACCELPOOL_HOOK_SLOTS(HookIpcGetMemHandle),  ACCELPOOL_HOOK_SLOTS(HookMemGetInfo),
      ACCELPOOL_HOOK_SLOTS(HookDeviceTotalMem)};
  if (id < kHookIpcOpenMemHandle || id > kHookDeviceTotalMem || slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  return kTable[id - kHookIpcOpenMemHandle][slot];
}

}  // namespace accelpool::cuda

using namespace accelpool::cuda;  // NOLINT: exported C entry points below.

ACCELPOOL_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle h, unsigned f) {
  return HookIpcOpenMemHandle<0>(p, h, f);
}
ACCELPOOL_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return HookIpcCloseMemHandle<0>(p); }
ACCELPOOL_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  return HookIpcGetMemHandle<0>(h, p);
}
ACCELPOOL_EXPORT CUresult cuMemGetInfo_v2(size_t* f, size_t* t) { return HookMemGetInfo<0>(f, t); }
ACCELPOOL_EXPORT CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice d) {
  return HookDeviceTotalMem<0>(b, d);
}
