// Dynamic vNPU: a fractional Ascend grant served as a virtual NPU that the
// Ascend Docker Runtime carves out of the physical chip when the container
// starts and destroys when it stops.
//
// The plugin creates nothing itself. Allocate hands the runtime the chip's
// physical id (ASCEND_VISIBLE_DEVICES) and a virtualization template
// (ASCEND_VNPU_SPECS, e.g. "vir05_1c_16g": 5 AI cores, 1 AI CPU, 16 GiB), and
// no device node: the runtime mounts the vNPU it creates, so a container that
// does not run under the Ascend runtime gets no NPU at all rather than the
// whole chip.
//
// Templates by chip (Huawei's virtualization template tables, and the names
// the Ascend Docker Runtime accepts):
//   Ascend910A (30 usable AI cores, 32 GiB)   vir02 vir04 vir08 vir16
//   Ascend310P (8 AI cores)                   vir01 vir02 vir04 (3, 6, 12 GiB)
//   910B / 910C with 24 AI cores per die       vir06_1c_16g vir12_3c_32g
//   910B / 910C with 20 AI cores, 64 GiB       vir05_1c_16g vir10_3c_32g
//   910B with 20 AI cores, 32 GiB              vir05_1c_8g  vir10_3c_16g
// A template's AI cores are the same share of the chip as its memory, so the
// scheduler models a template as a memory slice whose compute follows it
// (core::SliceRule::compute_follows_memory), and a request rounds up to the
// smallest template that holds both its memory and its compute.
#ifndef ACCELPOOL_VENDORS_ASCEND_VNPU_H_
#define ACCELPOOL_VENDORS_ASCEND_VNPU_H_

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"
#include "vendors/driver.h"

namespace accelpool::vendors::ascend {

struct VnpuTemplate {
  std::string name;  // "vir05_1c_16g"
  int32_t aicores = 0;
  int64_t memory_mib = 0;
};

// The templates of a chip, smallest first; empty when dynamic vNPU is not
// known for it. `aicores` 0 (not reported) takes the model's usual count.
std::vector<VnpuTemplate> VnpuTemplates(std::string_view model, int32_t aicores,
                                        int64_t memory_mib);

// Slots one chip offers kubelet: as many of the smallest template as its
// memory holds (a 64 GiB 910B3: 4; a 310P3 reporting 21527 MiB: 7); 0 when
// the chip has no templates.
int32_t VnpuSlots(const std::vector<VnpuTemplate>& templates, int64_t memory_mib);

// The slice rule the templates make: sizes = the templates' memory, compute
// follows memory, one chip per fractional request.
core::SliceRule VnpuSliceRule(const std::vector<VnpuTemplate>& templates);

// True when `g` is served as a vNPU: a share of a chip that offers more than
// one slot. A grant whose memory reaches the chip's is the chip, and a share
// of a one-slot chip holds that chip alone: both are served whole.
bool IsVnpuGrant(const GrantedDevice& g);

// The spec of a container granted one vNPU of `g`'s chip, whose physical id
// is `phy_id`: ASCEND_VISIBLE_DEVICES=<phy_id>, ASCEND_VNPU_SPECS=<template>,
// ASCEND_RT_VISIBLE_DEVICES=0, no device nodes. The template is the smallest
// of the chip's that holds the grant's memory. kInvalidArgument for more than
// one grant (a vNPU request takes one chip) or a chip without templates;
// kFailedPrecondition when no template holds the grant.
StatusOr<ContainerSpec> VnpuContainerSpec(const std::vector<GrantedDevice>& grants, int32_t phy_id);

}  // namespace accelpool::vendors::ascend

#endif  // ACCELPOOL_VENDORS_ASCEND_VNPU_H_
