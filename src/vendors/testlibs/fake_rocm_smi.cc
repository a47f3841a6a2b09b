// A stand-in for ROCm SMI (librocm_smi64.so, as Hygon's DTK ships it): an
// 8 x K100_AI node as hy-smi shows it (64 GiB VRAM each) with the topology of
// the published K100-AI sample: every pair PCIe through switches (PXB, two
// hops), all DCUs on NUMA node 0. DRM render minors are 128 + index. Bus ids
// are illustrative. Prototypes as in the public rocm_smi.h.
#include <cstdint>

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
const unsigned kBus[] = {0x13, 0x33, 0x53, 0x73, 0x93, 0xb3, 0xd3, 0xf3};
}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

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
  *used = static_cast<uint64_t>(UsedOr(dv, 150)) << 20;
  return kSuccess;
}
__attribute__((visibility("default"))) int rsmi_dev_pci_id_get(uint32_t dv, uint64_t* bdfid) {
  if (!Valid(dv)) return kInvalidArgs;
  *bdfid = static_cast<uint64_t>(kBus[dv % 8]) << 8;  // domain 0, device 0, function 0
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
