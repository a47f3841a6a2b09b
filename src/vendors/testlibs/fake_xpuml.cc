// A stand-in for Kunlunxin's libxpuml.so: an 8 x P800 node as xpu-smi shows
// it (96 GiB each, bus ids in XPU ML's "%08X:%02X:%02X.%X" spelling, device
// nodes /dev/xpu0..7). Handles are index + 1.
#include <cstdint>
#include <cstdio>

#include "fake_control.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;
using accelpool_fake::UsedOr;
using accelpool_fake::Valid;

namespace {
constexpr int kUnknown = 999;
constexpr int kInvalid = 2;
const unsigned kBus[] = {0x1d, 0x1e, 0x3b, 0x3c, 0x9b, 0x9c, 0xbb, 0xbc};
unsigned Index(void* h) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(h) - 1); }
}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" {
__attribute__((visibility("default"))) int xpumlInit() { return State().init_error; }
__attribute__((visibility("default"))) int xpumlDeviceGetCount(unsigned* n) {
  *n = static_cast<unsigned>(State().count);
  return 0;
}
__attribute__((visibility("default"))) int xpumlDeviceGetHandleByIndex(unsigned i, void** h) {
  if (!Valid(i)) return kInvalid;
  *h = reinterpret_cast<void*>(static_cast<uintptr_t>(i) + 1);
  return 0;
}
__attribute__((visibility("default"))) int xpumlDeviceGetName(void* h, char* name, unsigned n) {
  CopyString(name, n, "P800 OAM");
  return 0;
}
__attribute__((visibility("default"))) int xpumlDeviceGetMemoryInfo(void* h, uint64_t* m) {
  if (Fails(Index(h))) return kUnknown;
  const unsigned long long used = static_cast<unsigned long long>(UsedOr(Index(h), 512)) << 20;
  m[1] = 98304ull << 20;  // totalGlobalMemory
  m[2] = m[1] - used;
  m[3] = used;
  return 0;
}
__attribute__((visibility("default"))) int xpumlDeviceGetPciInfo(void* h, unsigned* p) {
  const unsigned i = Index(h);
  p[0] = 0;
  p[1] = kBus[i % 8];
  p[2] = 0;
  p[3] = 0;
  std::snprintf(reinterpret_cast<char*>(p + 6), 32, "%08X:%02X:%02X.%01X", 0u, kBus[i % 8], 0u, 0u);
  return 0;
}
__attribute__((visibility("default"))) int xpumlDeviceGetId(void* h, int* id) {
  *id = static_cast<int>(Index(h));
  return 0;
}
__attribute__((visibility("default"))) int xpumlDeviceGetState(void* h, int* state) {
  if (Fails(Index(h))) return kUnknown;
  *state = static_cast<int>(Index(h)) == State().fault_device ? 207 : 201;
  return 0;
}
}
