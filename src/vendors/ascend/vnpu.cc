#include "vendors/ascend/vnpu.h"

#include <algorithm>

namespace accelpool::vendors::ascend {
namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// AI cores per die when DCMI did not say (the chips' data sheets).
int32_t UsualAicores(std::string_view model) {
  if (model == "Ascend910B2") return 24;
  if (model == "Ascend910B3" || model == "Ascend910B4" || model == "Ascend910B4-1") return 20;
  return 0;
}

// A chip's memory as DCMI reports it may fall a little short of its nominal
// size: within 10 % counts as that size.
constexpr int64_t kNear32Gib = 32768 * 9 / 10;
constexpr int64_t kNear64Gib = 65536 * 9 / 10;

}  // namespace

std::vector<VnpuTemplate> VnpuTemplates(std::string_view model, int32_t aicores,
                                        int64_t memory_mib) {
  if (aicores <= 0) aicores = UsualAicores(model);
  std::vector<VnpuTemplate> t;
  if (model == "Ascend910A") {
    // 30 usable AI cores share 32 GiB: each template's memory is its cores' part.
    if (memory_mib >= kNear32Gib) {
      t = {{"vir02", 2, 2184}, {"vir04", 4, 4369}, {"vir08", 8, 8738}, {"vir16", 16, 17476}};
    }
  } else if (StartsWith(model, "Ascend310P")) {
    if (memory_mib >= 12288) {
      t = {{"vir01", 1, 3072}, {"vir02", 2, 6144}, {"vir04", 4, 12288}};
    }
  } else if (StartsWith(model, "Ascend910B") || model == "Ascend910C") {
    if (aicores == 24 && memory_mib >= kNear64Gib) {
      t = {{"vir06_1c_16g", 6, 16384}, {"vir12_3c_32g", 12, 32768}};
    } else if (aicores == 20 && memory_mib >= kNear64Gib) {
      t = {{"vir05_1c_16g", 5, 16384}, {"vir10_3c_32g", 10, 32768}};
    } else if (aicores == 20 && memory_mib >= kNear32Gib) {
      t = {{"vir05_1c_8g", 5, 8192}, {"vir10_3c_16g", 10, 16384}};
    }
  }
  return t;
}

int32_t VnpuSlots(const std::vector<VnpuTemplate>& templates, int64_t memory_mib) {
  if (templates.empty() || templates.front().memory_mib <= 0) return 0;
  return static_cast<int32_t>(std::min<int64_t>(memory_mib / templates.front().memory_mib, 32));
}

core::SliceRule VnpuSliceRule(const std::vector<VnpuTemplate>& templates) {
  core::SliceRule s;
  for (const VnpuTemplate& t : templates) s.memory_sizes.push_back(t.memory_mib);
  s.compute_follows_memory = true;
  s.fraction_single_device = true;
  return s;
}

bool IsVnpuGrant(const GrantedDevice& g) {
  if (g.exclusive || g.device.max_shares <= 1) return false;
  if (g.memory_mib > 0) return g.memory_mib < g.device.memory_mib;
  return g.compute > 0 && g.compute < core::kComputeWhole;
}

StatusOr<ContainerSpec> VnpuContainerSpec(const std::vector<GrantedDevice>& grants,
                                          int32_t phy_id) {
  if (grants.size() != 1) {
    return InvalidArgumentError("a vNPU share takes one NPU, but " + std::to_string(grants.size()) +
                                " are granted; ask for whole NPUs for more than one");
  }
  const GrantedDevice& g = grants.front();
  const core::Device& d = g.device;
  const std::vector<VnpuTemplate> templates = VnpuTemplates(d.model, d.compute_units, d.memory_mib);
  if (templates.empty()) {
    return InvalidArgumentError(
        "NPU " + d.id + " (" + d.model + ", " + std::to_string(d.compute_units) + " AI cores, " +
        std::to_string(d.memory_mib) + " MiB) has no vNPU templates; it can only be granted whole");
  }
  // The memory decides (a grant carries the template's size); a grant without
  // memory goes by its compute share.
  const int64_t need =
      g.memory_mib > 0 ? g.memory_mib
                       : (d.memory_mib * g.compute + core::kComputeWhole - 1) / core::kComputeWhole;
  const auto it = std::find_if(templates.begin(), templates.end(),
                               [need](const VnpuTemplate& t) { return t.memory_mib >= need; });
  if (it == templates.end()) {
    return FailedPreconditionError(
        "no vNPU template of NPU " + d.id + " holds " + std::to_string(need) +
        " MiB (the largest is " + templates.back().name + ", " +
        std::to_string(templates.back().memory_mib) +
        " MiB); the assignment was made for another chip, delete the pod");
  }
  ContainerSpec spec;
  spec.env["ASCEND_VISIBLE_DEVICES"] = std::to_string(phy_id);
  spec.env["ASCEND_VNPU_SPECS"] = it->name;
  spec.env["ASCEND_RT_VISIBLE_DEVICES"] = "0";
  return spec;
}

}  // namespace accelpool::vendors::ascend
