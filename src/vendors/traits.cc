// The vendor table: visible-devices variables, device nodes and management
// libraries (VENDORS.md section 0). Resource names live in the single table
// of src/api/resources.h (api::DeviceResource).
#include <string>
#include <vector>

#include "vendors/driver.h"

namespace accelpool::vendors {
namespace {

using K = VisibleIdKind;

std::vector<VendorTraits> BuildTable() {
  std::vector<VendorTraits> t;
  t.push_back(
      {core::Vendor::kNvidia,
       {{"NVIDIA_VISIBLE_DEVICES", K::kDeviceId}, {"CUDA_VISIBLE_DEVICES", K::kDeviceId}},
       {"/dev/nvidia{minor}"},
       {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
       {"libnvidia-ml.so.1", "libnvidia-ml.so"},
       true,
       true,
       10,
       "nvidia.com/gpu",
       "nvidia-smi"});
  t.push_back({core::Vendor::kAscend,
               {{"ASCEND_VISIBLE_DEVICES", K::kHostIndex},
                {"ASCEND_RT_VISIBLE_DEVICES", K::kContainerOrdinal}},
               {"/dev/davinci{minor}"},
               {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/dvpp_cmdlist"},
               {"libdcmi.so", "/usr/local/dcmi/libdcmi.so"},
               false,
               false,
               1,
               "",
               "npu-smi"});
  t.push_back({core::Vendor::kKunlunxin,
               {{"XPU_VISIBLE_DEVICES", K::kHostIndex}},
               {"/dev/xpu{minor}"},
               {"/dev/xpuctrl"},
               {"libxpuml.so", "libxpuml.so.1"},
               false,
               false,
               1,
               "",
               "xpu-smi"});
  t.push_back({core::Vendor::kMetax,
               {{"MACA_VISIBLE_DEVICES", K::kHostIndex}},
               {"/dev/dri/card{minor}"},
               {"/dev/mxcd"},
               {"libmxsml.so", "/opt/mxdriver/lib/libmxsml.so"},
               false,
               false,
               1,
               "",
               "mx-smi"});
  t.push_back({core::Vendor::kMthreads,
               {{"MTHREADS_VISIBLE_DEVICES", K::kHostIndex},
                {"MUSA_VISIBLE_DEVICES", K::kContainerOrdinal}},
               {"/dev/mtgpu.{minor}"},
               {},
               {"libmtml.so", "libmtml.so.1"},
               false,
               false,
               1,
               "",
               "mthreads-gmi"});
  t.push_back({core::Vendor::kThead,
               {{"CUDA_VISIBLE_DEVICES", K::kContainerOrdinal}},
               {"/dev/alixpu_ppu{minor}"},
               {"/dev/alixpu", "/dev/alixpu_ctl"},
               {"libhgml.so", "libhgml.so.1"},
               false,
               false,
               1,
               "",
               "ppu-smi"});
  t.push_back({core::Vendor::kCambricon,
               {{"CAMBRICON_VISIBLE_DEVICES", K::kHostIndex},
                {"MLU_VISIBLE_DEVICES", K::kContainerOrdinal}},
               {"/dev/cambricon_dev{minor}"},
               {"/dev/cambricon_ctl"},
               {"libcndev.so", "/usr/local/neuware/lib64/libcndev.so"},
               false,
               false,
               1,
               "",
               "cnmon"});
  t.push_back({core::Vendor::kHygon,
               {{"HIP_VISIBLE_DEVICES", K::kContainerOrdinal}},
               {"/dev/dri/renderD{minor}"},  // the DRM render minor (128 + n)
               {"/dev/kfd", "/dev/mkfd"},
               {"librocm_smi64.so", "librocm_smi64.so.1", "/opt/hyhal/lib/librocm_smi64.so"},
               false,
               false,
               1,
               "",
               "hy-smi"});
  return t;
}

}  // namespace

const VendorTraits& TraitsFor(core::Vendor vendor) {
  static const std::vector<VendorTraits> kTable = BuildTable();
  static const VendorTraits kNone{};
  for (const VendorTraits& t : kTable) {
    if (t.vendor == vendor) {
      return t;
    }
  }
  return kNone;
}

}  // namespace accelpool::vendors
