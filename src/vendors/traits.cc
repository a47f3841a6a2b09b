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
       {},
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
               {},
               {"libdcmi.so", "/usr/local/dcmi/libdcmi.so"},
               false,
               false,
               1,
               "",
               "npu-smi"});
  // No visible-devices variable: Kunlunxin's own plugin hands over
  // /dev/xpuctrl and /dev/xpu<N> and sets none. XPU_VISIBLE_DEVICES is read
  // by the runtime inside the container, where a host number can name no
  // mounted device (docs/vendors.md).
  t.push_back({core::Vendor::kKunlunxin,
               {},
               {"/dev/xpu{minor}"},
               {"/dev/xpuctrl"},
               {},
               {"libxpuml.so", "libxpuml.so.1"},
               false,
               false,
               1,
               "",
               "xpu-smi"});
  // No visible-devices variable: MACA_VISIBLE_DEVICES is the MACA runtime's
  // in-process filter, and the mounted DRM nodes already select the GPUs
  // (docs/vendors.md).
  t.push_back({core::Vendor::kMetax,
               {},
               {"/dev/dri/card{minor}"},
               {"/dev/mxcd"},
               {},
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
               {},
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
               // As Cambricon's plugin: the monitor node, GPUDirect RDMA where
               // present, and each MLU's IPC and MLULink communication nodes
               // where its driver creates them.
               {"/dev/cambricon_ctl", "/dev/cambricon_gdr"},
               {"/dev/cambricon_ipcm{minor}", "/dev/commu{minor}", "/dev/cmsg_ctrl{minor}"},
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
               {},
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
