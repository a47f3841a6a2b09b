// A stand-in for Cambricon's libcndev.so: 4 MLU370-X8 boards (8 chips) as
// cnmon shows them (24 GiB each), with card handles = index + 100 so a
// binding that skips the handle lookup reads the wrong card, and NUMA 0 for
// chips 0-3 and 1 for 4-7. Structs start with the caller's `int version`.
// Processes: cndevGetProcessInfo lists those added with
// accelpool_fake_cndev_process(chip, pid, mib) (chip -1 clears them), memory
// in KiB; a short buffer gets CNDEV_ERROR_INSUFFICIENT_SPACE and the count.
// cndevGetCardSN answers the board's serial, the same for its two chips.
// accelpool_fake_cndev_uuid(chip, mode) sets what cndevGetUUID answers for a
// chip (-1: every chip): mode 0 its UUID, -1 an error (CNDEV_ERROR_UNKNOWN),
// -2 an empty UUID, -3 CNDEV_ERROR_NOT_SUPPORTED, n >= 1 the UUID of chip n - 1.
#include <cstdint>
#include <cstdio>

#include "fake_control.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;
using accelpool_fake::UsedOr;

namespace {
constexpr int kInvalidDeviceId = 6;
constexpr int kUnsupportedVersion = 3;
constexpr int kHandleBase = 100;
bool Bad(int version) { return version < 1 || version > 6; }
accelpool_fake::ProcessTable& Processes() {
  static accelpool_fake::ProcessTable table(nullptr);
  return table;
}
int uuid_modes[64] = {};
bool ToIndex(int handle, unsigned* i) {
  const int idx = handle - kHandleBase;
  if (idx < 0 || idx >= State().count) return false;
  *i = static_cast<unsigned>(idx);
  return true;
}
}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" __attribute__((visibility("default"))) void accelpool_fake_cndev_process(int chip,
                                                                                    unsigned pid,
                                                                                    int mib) {
  Processes().Add(chip, pid, mib);
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_cndev_uuid(int chip,
                                                                                 int mode) {
  for (int i = 0; i < 64; ++i) {
    if (chip < 0 || chip == i) uuid_modes[i] = mode;
  }
}

extern "C" {
__attribute__((visibility("default"))) int cndevInit(int) { return State().init_error; }
__attribute__((visibility("default"))) int cndevGetDeviceCount(int* info) {
  if (Bad(info[0])) return kUnsupportedVersion;
  reinterpret_cast<unsigned*>(info)[1] = static_cast<unsigned>(State().count);
  return 0;
}
__attribute__((visibility("default"))) int cndevGetDeviceHandleByIndex(int index, int* handle) {
  if (index < 0 || index >= State().count) return kInvalidDeviceId;
  *handle = index + kHandleBase;
  return 0;
}
__attribute__((visibility("default"))) int cndevGetUUID(int* uuid, int handle) {
  unsigned i = 0;
  if (Bad(uuid[0]) || !ToIndex(handle, &i)) return kInvalidDeviceId;
  const int mode = uuid_modes[i % 64];
  if (mode == -1) return 7;   // CNDEV_ERROR_UNKNOWN
  if (mode == -3) return 10;  // CNDEV_ERROR_NOT_SUPPORTED
  if (mode >= 1) i = static_cast<unsigned>(mode - 1);
  char s[64];
  std::snprintf(s, sizeof(s), "5f1e22a0-8c4d-11ee-b9d1-0242ac1200%02u", i % 100u);
  if (mode == -2) s[0] = '\0';
  CopyString(reinterpret_cast<char*>(uuid + 1), 37, s);
  return 0;
}
__attribute__((visibility("default"))) int cndevGetCardSN(int* sn, int handle) {
  unsigned i = 0;
  if (Bad(sn[0]) || !ToIndex(handle, &i)) return kInvalidDeviceId;
  *reinterpret_cast<int64_t*>(sn + 2) = 0x370800a0 + i / 2;  // one serial per board
  return 0;
}
__attribute__((visibility("default"))) const char* cndevGetCardNameStringByDevId(int handle) {
  unsigned i = 0;
  return ToIndex(handle, &i) ? "MLU370-X8" : nullptr;
}
__attribute__((visibility("default"))) int cndevGetMemoryUsage(int* mem, int handle) {
  unsigned i = 0;
  if (Bad(mem[0]) || !ToIndex(handle, &i)) return kInvalidDeviceId;
  if (Fails(i)) return 7;  // CNDEV_ERROR_UNKNOWN
  int64_t* fields = reinterpret_cast<int64_t*>(mem + 2);
  fields[0] = 24576;  // physical total, MB
  fields[1] = UsedOr(i, 311);  // physical used, MB
  return 0;
}
__attribute__((visibility("default"))) int cndevGetProcessInfo(unsigned* count, int32_t* rows,
                                                               int handle) {
  unsigned i = 0;
  if (count == nullptr || rows == nullptr || !ToIndex(handle, &i)) return kInvalidDeviceId;
  if (Fails(i)) return 7;  // CNDEV_ERROR_UNKNOWN
  unsigned n = 0;
  for (const accelpool_fake::FakeProcess& p : Processes()) n += p.device == static_cast<int>(i);
  if (n > *count) {
    *count = n;
    return 9;  // CNDEV_ERROR_INSUFFICIENT_SPACE
  }
  unsigned w = 0;
  for (const accelpool_fake::FakeProcess& p : Processes()) {
    if (p.device != static_cast<int>(i)) continue;
    int32_t* row = rows + 6 * w;  // 24-byte rows
    if (Bad(row[0])) return kUnsupportedVersion;
    reinterpret_cast<uint32_t*>(row)[1] = p.pid;
    reinterpret_cast<uint64_t*>(row + 2)[0] = static_cast<uint64_t>(p.mib) * 1024;  // KiB
    reinterpret_cast<uint64_t*>(row + 2)[1] = static_cast<uint64_t>(p.mib) * 2048;
    ++w;
  }
  *count = n;
  return 0;
}
__attribute__((visibility("default"))) int cndevGetPCIeInfo(int* pci, int handle) {
  unsigned i = 0;
  if (Bad(pci[0]) || !ToIndex(handle, &i)) return kInvalidDeviceId;
  unsigned* u = reinterpret_cast<unsigned*>(pci);
  u[1] = 0;       // subsystem
  u[2] = 0x0370;  // device id
  reinterpret_cast<uint16_t*>(u + 3)[0] = 0xcabc;
  u[4] = 0;                // domain
  u[5] = 0x31 + 0x10 * i;  // bus
  u[6] = 0;                // device
  u[7] = 0;                // function
  return 0;
}
__attribute__((visibility("default"))) int cndevGetNUMANodeIdByDevId(int* numa, int handle) {
  unsigned i = 0;
  if (Bad(numa[0]) || !ToIndex(handle, &i)) return kInvalidDeviceId;
  numa[1] = i < 4 ? 0 : 1;
  return 0;
}
__attribute__((visibility("default"))) int cndevGetCardHealthState(int* health, int handle) {
  unsigned i = 0;
  if (Bad(health[0]) || !ToIndex(handle, &i)) return kInvalidDeviceId;
  if (Fails(i)) return 7;
  health[1] = static_cast<int>(i) == State().fault_device ? 0 : 1;
  return 0;
}
}
