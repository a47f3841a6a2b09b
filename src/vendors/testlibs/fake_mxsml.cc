// A stand-in for MetaX's libmxsml.so: an 8 x C500 node as mx-smi shows it
// ("MetaX C500", 64 GiB each), two MetaXLink groups {0-3} {4-7} joined
// across the system, NUMA 0 for 0-3 and 1 for 4-7. Every GPU is bare metal
// (virtualization mode 0) until accelpool_fake_mxsml_mode(gpu, mode) sets
// its mode (1: a physical function with SR-IOV on, 2: a virtual function);
// gpu -1 sets every GPU's.
#include <cstdio>

#include "fake_control.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;
using accelpool_fake::UsedOr;
using accelpool_fake::Valid;

namespace {
constexpr unsigned kFailure = 1;
constexpr unsigned kInvalidDevice = 6;
int far_level = 6;  // the level of two GPUs in different halves (6: SYSTEM)
unsigned modes[64] = {};
}  // namespace

extern "C" __attribute__((visibility("default"))) void accelpool_fake_mxsml_mode(int gpu,
                                                                                 int mode) {
  for (int i = 0; i < 64; ++i) {
    if (gpu < 0 || gpu == i) modes[i] = static_cast<unsigned>(mode);
  }
}

// Sets the level mxSmlGetDeviceTopology answers for GPUs in different halves
// (7: ETH, 8: UNDEFINED in MxSml.h).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_mxsml_far_level(int level) {
  far_level = level;
}

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" {
__attribute__((visibility("default"))) unsigned mxSmlInit() {
  return static_cast<unsigned>(State().init_error);
}
__attribute__((visibility("default"))) unsigned mxSmlGetDeviceCount() {
  return static_cast<unsigned>(State().count);
}
__attribute__((visibility("default"))) unsigned mxSmlGetDeviceInfo(unsigned i, unsigned* info) {
  if (!Valid(i)) return kInvalidDevice;
  info[0] = i;
  info[1] = 0;
  std::snprintf(reinterpret_cast<char*>(info + 2), 32, "0000:%02x:00.0", 0x0f + 0x10 * i);
  info[10] = i;
  info[11] = 128 + i;
  char* uuid = reinterpret_cast<char*>(info + 12);
  std::snprintf(uuid, 96, "GPU-7c1a%04u-51d2-4f0e-9a3b-00000000000%u", i, i);
  info[36] = 2;  // brand C
  info[37] = i < 64 ? modes[i] : 0;  // virtualization mode
  CopyString(reinterpret_cast<char*>(info + 38), 32, "MetaX C500");
  return 0;
}
__attribute__((visibility("default"))) unsigned mxSmlGetMemoryInfo(unsigned i, long* m) {
  if (!Valid(i) || Fails(i) || static_cast<int>(i) == State().fault_device) return kFailure;
  m[0] = m[2] = 64L * 1024 * 1024;  // KB
  m[1] = m[3] = static_cast<long>(UsedOr(i, 880)) * 1024;
  m[4] = m[5] = 0;
  return 0;
}
__attribute__((visibility("default"))) unsigned mxSmlGetDeviceTopology(unsigned a, unsigned b,
                                                                       int* level) {
  if (!Valid(a) || !Valid(b)) return kInvalidDevice;
  *level = a == b ? 0 : (a / 4 == b / 4 ? 5 : far_level);
  return 0;
}
__attribute__((visibility("default"))) unsigned mxSmlGetNodeAffinity(unsigned i, unsigned words,
                                                                     unsigned* set) {
  if (!Valid(i) || words == 0) return kFailure;
  set[0] = i < 4 ? 1u : 2u;
  return 0;
}
}
