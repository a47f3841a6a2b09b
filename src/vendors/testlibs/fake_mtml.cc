// A stand-in for Moore Threads' libmtml.so: an 8 x MTT S4000 node as
// mthreads-gmi shows it (48 GiB, 128 MUSA cores each), NODE inside {0-3} and
// {4-7}, SYSTEM between them. Library, device and memory handles are
// pointers into static tables. MTML allocates a new device or memory object
// at every mtmlLibraryInitDeviceByIndex and mtmlDeviceInitMemory;
// accelpool_fake_mtml_inits() says how many such calls were made since it
// was last asked.
//
// mtmlDeviceGetProperty answers each GPU's MPC type (0: no MPC) as set with
// accelpool_fake_mtml_mpc(gpu, type) (1: the MPC parent, 2: an MPC instance;
// gpu -1 sets every GPU's), in the bit-fields of MtmlDeviceProperty's first
// word (mpcCap bit 4, mpcType bits 5-7), or the code set with
// accelpool_fake_mtml_property_result (4: MTML_ERROR_NOT_SUPPORTED).
//
// mtmlDeviceGetGpuPath answers /dev/mtgpu.<index>, or, after
// accelpool_fake_mtml_gpu_paths(1), the nodes numbered backwards
// (/dev/mtgpu.<7 - index>: the kernel's numbers need not be MTML's), or
// after accelpool_fake_mtml_gpu_paths(2), MTML_ERROR_NOT_SUPPORTED.
#include <cstdio>

#include "fake_control.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;
using accelpool_fake::UsedOr;
using accelpool_fake::Valid;

namespace {
constexpr int kDriverFailure = 2;
constexpr int kInvalidArgument = 3;
int library_token = 0;
bool mtlink_pairs = false;  // MtLink bridges 0-1, 2-3, 4-5, 6-7 (off: as the published sample)
int devices[64];
int memories[64];
int inits = 0;  // device and memory objects made
unsigned mpc_types[64] = {};
int property_result = 0;
int gpu_paths = 0;
unsigned DevIndex(const void* d) {
  return static_cast<unsigned>(static_cast<const int*>(d) - devices);
}
unsigned MemIndex(const void* m) {
  return static_cast<unsigned>(static_cast<const int*>(m) - memories);
}
}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" __attribute__((visibility("default"))) void accelpool_fake_mtlink_pairs(int on) {
  mtlink_pairs = on != 0;
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_mtml_mpc(int gpu, int type) {
  for (int i = 0; i < 64; ++i) {
    if (gpu < 0 || gpu == i) mpc_types[i] = static_cast<unsigned>(type);
  }
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_mtml_property_result(int r) {
  property_result = r;
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_mtml_gpu_paths(int mode) {
  gpu_paths = mode;
}

extern "C" __attribute__((visibility("default"))) int accelpool_fake_mtml_inits() {
  const int n = inits;
  inits = 0;
  return n;
}

extern "C" {
__attribute__((visibility("default"))) int mtmlLibraryInit(void** lib) {
  if (State().init_error != 0) return State().init_error;
  *lib = &library_token;
  return 0;
}
__attribute__((visibility("default"))) int mtmlLibraryCountDevice(const void* lib, unsigned* n) {
  if (lib != &library_token) return kInvalidArgument;
  *n = static_cast<unsigned>(State().count);
  return 0;
}
__attribute__((visibility("default"))) int mtmlLibraryInitDeviceByIndex(const void* lib, unsigned i,
                                                                        void** dev) {
  if (lib != &library_token || !Valid(i) || i >= 64) return kInvalidArgument;
  ++inits;
  *dev = &devices[i];
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetUUID(const void* dev, char* uuid,
                                                             unsigned n) {
  char s[48];
  std::snprintf(s, sizeof(s), "a1b2c3d4-0000-4000-8000-0000000000%02u", DevIndex(dev));
  CopyString(uuid, n, s);
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetName(const void*, char* name, unsigned n) {
  CopyString(name, n, "MTT S4000");
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetPciInfo(const void* dev, char* pci) {
  std::snprintf(pci, 32, "00000000:%02x:00.0", 0x18 + 0x10 * DevIndex(dev));
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceInitMemory(const void* dev, void** mem) {
  if (Fails(DevIndex(dev))) return kDriverFailure;
  ++inits;
  *mem = &memories[DevIndex(dev)];
  return 0;
}
__attribute__((visibility("default"))) int mtmlMemoryGetTotal(const void* mem,
                                                              unsigned long long* total) {
  if (Fails(MemIndex(mem))) return kDriverFailure;
  *total = 49152ull << 20;
  return 0;
}
__attribute__((visibility("default"))) int mtmlMemoryGetUsed(const void* mem,
                                                             unsigned long long* used) {
  if (Fails(MemIndex(mem)) || static_cast<int>(MemIndex(mem)) == State().fault_device) {
    return kDriverFailure;
  }
  *used = static_cast<unsigned long long>(UsedOr(MemIndex(mem), 1)) << 20;
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetProperty(const void* dev, unsigned* prop) {
  if (property_result != 0) return property_result;
  const unsigned type = mpc_types[DevIndex(dev) % 64];
  prop[0] = (type != 0 ? 1u << 4 : 0u) | (type << 5);  // mpcCap, mpcType
  prop[1] = 0;
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetGpuPath(const void* dev, char* path,
                                                                unsigned n) {
  if (gpu_paths == 2) return 4;  // MTML_ERROR_NOT_SUPPORTED
  const unsigned i = DevIndex(dev);
  char s[64];
  std::snprintf(s, sizeof(s), "/dev/mtgpu.%u", gpu_paths == 1 ? 7 - i % 8 : i);
  CopyString(path, n, s);
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceCountGpuCores(const void*, unsigned* n) {
  *n = 128;
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetTopologyLevel(const void* a, const void* b,
                                                                      int* level) {
  const unsigned i = DevIndex(a);
  const unsigned j = DevIndex(b);
  *level = i == j ? 0 : (i / 4 == j / 4 ? 4 : 5);
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetMtLinkSpec(const void*, unsigned* spec) {
  if (!mtlink_pairs) return 4;  // MTML_ERROR_NOT_SUPPORTED
  spec[0] = 1;
  spec[1] = 100;
  spec[2] = 2;  // link 0 to the pair partner, link 1 down
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetMtLinkState(const void*, unsigned link,
                                                                    unsigned* state) {
  *state = link == 0 ? 1 : 0;
  return 0;
}
__attribute__((visibility("default"))) int mtmlDeviceGetMtLinkRemoteDevice(const void* dev,
                                                                           unsigned link,
                                                                           void** remote) {
  if (link != 0) return kInvalidArgument;
  *remote = &devices[DevIndex(dev) ^ 1u];
  return 0;
}
}
