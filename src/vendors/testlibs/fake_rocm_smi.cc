// A stand-in for ROCm SMI (librocm_smi64.so, as Hygon's DTK ships it): an
// 8 x K100_AI node as hy-smi shows it (64 GiB VRAM each) with the topology of
// the published K100-AI sample: every pair PCIe through switches (PXB, two
// hops), all DCUs on NUMA node 0. DRM render minors are 128 + index. Bus ids
// are illustrative. Prototypes as in the public rocm_smi.h.
//
// Memory: rsmi_dev_memory_usage_get reports what the driver reserves on an
// idle DCU (94% of it, as hy-smi shows on Hygon) plus the processes' VRAM,
// or what accelpool_fake_used set. Processes: rsmi_compute_process_info_by_device_get
// answers for those added with accelpool_fake_rsmi_process(dcu, pid, mib)
// (dcu -1 clears them) or given as ACCELPOOL_FAKE_RSMI_PROCESSES="dcu:pid:mib,...",
// with the current rsmi_process_info_t (32 bytes); RSMI_STATUS_NOT_FOUND for
// a process not on that DCU. The PIDs a caller finds are its KFD sysfs
// folders, which the tests make.
//
// rsmi_dev_vendor_id_get answers 0x1d94 (Hygon) for every device, or what
// accelpool_fake_rsmi_vendor(dv, id) set (dv -1: every device; id 0: the
// call fails, RSMI_STATUS_NOT_SUPPORTED, so the caller reads sysfs).
#include <atomic>
#include <cstdint>
#include <cstring>

#include "fake_control.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;
using accelpool_fake::UsedOr;
using accelpool_fake::Valid;

namespace {
constexpr int kSuccess = 0;
constexpr int kInvalidArgs = 1;
constexpr int kFileError = 3;
constexpr int kNotFound = 10;
constexpr unsigned long long kReservedMib = 61604;  // NOLINT(runtime/int) 94% of 64 GiB

struct ProcessInfo {  // rsmi_process_info_t as current rocm_smi.h lays it out
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;
  uint64_t sdma_usage;
  uint32_t cu_occupancy;
};
static_assert(sizeof(ProcessInfo) == 32, "rsmi_process_info_t is 32 bytes");

accelpool_fake::ProcessTable& Processes() {
  static accelpool_fake::ProcessTable table("ACCELPOOL_FAKE_RSMI_PROCESSES");
  return table;
}

long long ProcessMib(uint32_t dv) {  // NOLINT(runtime/int)
  long long sum = 0;                 // NOLINT(runtime/int)
  for (const accelpool_fake::FakeProcess& p : Processes()) {
    if (p.device == static_cast<int>(dv)) sum += p.mib;
  }
  return sum;
}
const unsigned kBus[] = {0x13, 0x33, 0x53, 0x73, 0x93, 0xb3, 0xd3, 0xf3};
std::atomic<bool> render_fails{false};  // rsmi_dev_drm_render_minor_get answers an error
constexpr int kNotSupported = 2;        // RSMI_STATUS_NOT_SUPPORTED
int vendors[64] = {};                   // 0: Hygon's 0x1d94; -1: the call fails; else the id
}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" __attribute__((visibility("default"))) void accelpool_fake_rsmi_process(int dcu,
                                                                                   unsigned pid,
                                                                                   int mib) {
  Processes().Add(dcu, pid, mib);
}

// 1: rsmi_dev_drm_render_minor_get answers RSMI_STATUS_FILE_ERROR (a DTK
// whose sysfs read fails).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_rsmi_render_fails(int on) {
  render_fails = on != 0;
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_rsmi_vendor(int dv, int id) {
  for (int i = 0; i < 64; ++i) {
    if (dv < 0 || dv == i) vendors[i] = id == 0x1d94 ? 0 : (id == 0 ? -1 : id);
  }
}

extern "C" {
__attribute__((visibility("default"))) int rsmi_init(uint64_t flags) { return State().init_error; }
__attribute__((visibility("default"))) int rsmi_num_monitor_devices(uint32_t* n) {
  *n = static_cast<uint32_t>(State().count);
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_name_get(uint32_t dv, char* name, size_t len) {
  if (!Valid(dv)) return kInvalidArgs;
  CopyString(name, static_cast<unsigned>(len), "K100_AI");
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_unique_id_get(uint32_t dv, uint64_t* id) {
  if (!Valid(dv)) return kInvalidArgs;
  *id = 0x3a7c91d2e45b6000ULL + dv;
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_memory_total_get(uint32_t dv, int type,
                                                                     uint64_t* total) {
  if (!Valid(dv) || type != 0) return kInvalidArgs;  // RSMI_MEM_TYPE_VRAM only
  if (Fails(dv)) return kFileError;
  *total = 64ULL << 30;
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_memory_usage_get(uint32_t dv, int type,
                                                                     uint64_t* used) {
  if (!Valid(dv) || type != 0) return kInvalidArgs;
  if (Fails(dv)) return kFileError;
  *used = static_cast<uint64_t>(UsedOr(dv, static_cast<long long>(kReservedMib) +  // NOLINT
                                               ProcessMib(dv)))
          << 20;
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_compute_process_info_by_device_get(
    uint32_t pid, uint32_t dv, ProcessInfo* proc) {
  if (!Valid(dv) || proc == nullptr) return kInvalidArgs;
  if (Fails(dv)) return kFileError;
  for (const accelpool_fake::FakeProcess& p : Processes()) {
    if (p.device != static_cast<int>(dv) || p.pid != pid) continue;
    std::memset(proc, 0, sizeof(*proc));
    proc->process_id = pid;
    proc->pasid = 0x8000u + pid % 0x1000u;
    proc->vram_usage = static_cast<uint64_t>(p.mib) << 20;
    proc->sdma_usage = 1200;
    proc->cu_occupancy = 0xFFFFFFFFu;  // CU_OCCUPANCY_INVALID
    return kSuccess;
  }
  return kNotFound;
}
__attribute__((visibility("default"))) int rsmi_dev_pci_id_get(uint32_t dv, uint64_t* bdfid) {
  if (!Valid(dv)) return kInvalidArgs;
  *bdfid = static_cast<uint64_t>(kBus[dv % 8]) << 8;  // domain 0, device 0, function 0
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_vendor_id_get(uint32_t dv, uint16_t* id) {
  if (!Valid(dv) || id == nullptr) return kInvalidArgs;
  const int v = vendors[dv % 64];
  if (v < 0) return kNotSupported;
  *id = static_cast<uint16_t>(v == 0 ? 0x1d94 : v);
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_topo_get_numa_node_number(uint32_t dv,
                                                                          uint32_t* node) {
  if (!Valid(dv)) return kInvalidArgs;
  *node = 0;
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_drm_render_minor_get(uint32_t dv,
                                                                         uint32_t* minor) {
  if (!Valid(dv)) return kInvalidArgs;
  if (render_fails) return kFileError;
  *minor = 128 + dv;
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_topo_get_link_type(uint32_t a, uint32_t b,
                                                                   uint64_t* hops, int* type) {
  if (!Valid(a) || !Valid(b)) return kInvalidArgs;
  *hops = a == b ? 0 : 2;
  *type = 1;  // RSMI_IOLINK_TYPE_PCIEXPRESS
  return kSuccess;
}
// A faulty DCU stops answering (ROCm SMI has no fault state of its own).
__attribute__((visibility("default"))) int rsmi_dev_busy_percent_get(uint32_t dv, uint32_t* busy) {
  if (!Valid(dv)) return kInvalidArgs;
  if (Fails(dv) || static_cast<int>(dv) == State().fault_device) return kFileError;
  *busy = 3;
  return kSuccess;
}
}
