// A fake libnvidia-ml.so.1: two devices of 80 GiB with a settable used
// figure, enough to check that the shim's NVML hooks report the cap. Their
// UUIDs are those of the fake driver's devices (kFakeDeviceUuids); NVML sees
// both whatever CUDA_VISIBLE_DEVICES says, as it does in a container.
// FAKENVML_USED_MIB=<n>: the card's used figure (default 1 GiB), as other
// tenants' memory would make it.
//
// Thread-safety: the used figure is atomic; everything else is constant.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/cuda_types.h"
#include "cuda/testing/driver_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
constexpr unsigned long long kTotal = 80ULL << 30;  // NOLINT
std::atomic<unsigned long long> g_used{1ULL << 30};  // NOLINT
nvmlDevice_t Handle(unsigned i) { return reinterpret_cast<nvmlDevice_t>(uintptr_t{i} + 0x100); }
unsigned long long Used() {  // NOLINT
  const char* mib = std::getenv("FAKENVML_USED_MIB");
  return mib != nullptr ? std::strtoull(mib, nullptr, 10) << 20 : g_used.load();
}
}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (d == nullptr || i > 1) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *d = Handle(i);
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned* i) {
  *i = static_cast<unsigned>(reinterpret_cast<uintptr_t>(d) - 0x100);
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  auto i = static_cast<unsigned>(reinterpret_cast<uintptr_t>(d) - 0x100);
  if (uuid == nullptr || i > 1 || length <= std::strlen(kFakeDeviceUuids[i])) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  std::strcpy(uuid, kFakeDeviceUuids[i]);  // NOLINT: the length was checked.
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t* m) {
  if (m == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  m->total = kTotal;
  m->used = Used();
  m->free = kTotal - m->used;
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t* m) {
  if (m == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  m->total = kTotal;
  m->reserved = 0;
  m->used = Used();
  m->free = kTotal - m->used;
  return NVML_SUCCESS;
}
