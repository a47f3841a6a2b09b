// The table of Kubernetes extended-resource names accelpool understands.
//
// Each name belongs to one vendor and plays one role in a container's
// request: the device count, memory (in units of `unit` MiB), memory as a
// percent of each device, compute in 1/`unit` of a device, or a model-specific
// count whose name implies a device family (huawei.com/Ascend910B).
// Names follow the vendors' own plugins and HAMi (VENDORS.md §0) so that
// workloads move over unchanged. Some families are patterns:
// huawei.com/<Chip>[-memory|-core], iluvatar.ai/<Chip>-vgpu|.vMem|.vCore,
// nvidia.com/mig-<profile> (NVIDIA's "mixed" MIG names: one count resource
// per MIG profile, e.g. nvidia.com/mig-1g.18gb), enflame.com/*.
//
// Thread-safety: immutable data; free functions.
#ifndef ACCELPOOL_API_RESOURCES_H_
#define ACCELPOOL_API_RESOURCES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace accelpool::api {

enum class ResourceRole : uint8_t {
  kCount,          // number of devices (or of shares when memory/compute is also given)
  kMemory,         // memory per device, value x unit MiB
  kMemoryPercent,  // memory per device, percent 1..100
  kCompute,        // compute per device, value / unit of a device (percent: unit 100)
  kIgnored,        // recognised but carries no allocation meaning (nvidia.com/priority)
};

struct ResourceInfo {
  std::string name;  // the full resource name, e.g. "mthreads.com/sgpu-memory"
  core::Vendor vendor = core::Vendor::kUnknown;
  ResourceRole role = ResourceRole::kCount;
  // kMemory: MiB per unit (1, 256, 512, 1024). kCompute: units per whole
  // device (100 for percent, 16 for Moore Threads sgpu-core). Otherwise 1.
  int64_t unit = 1;
  // Device model family implied by the name ("Ascend910B", "MR-V100"), "" for
  // vendor-wide names. A request through such a name only fits devices whose
  // model starts with the family (case-insensitive).
  std::string model_family;
  // Count names of hardware partitions only: the partition profile the name
  // implies (nvidia.com/mig-1g.18gb -> "1g.18gb"); such a request fits only
  // devices of that profile (core::Device::partition). "" otherwise.
  std::string partition;
  // kMemory only: a value with a binary unit ("8Gi") is bytes, a number (decimal
  // suffixes and exponents included: "2k" is 2000) is `unit` MiB (MetaX
  // vmemory). When false, binary units are rejected.
  bool suffix_means_bytes = false;
  // Count names only: the sibling names carrying memory / percent / compute for
  // this count ("" when the vendor has none).
  std::string memory_name, memory_percent_name, compute_name;
};

// Classifies a resource name; nullopt for names that are not accelerator
// resources (cpu, memory, example.com/foo). Patterns are matched here, so
// "huawei.com/Ascend310P-memory" -> {ascend, kMemory, family Ascend310P}.
std::optional<ResourceInfo> LookupResource(std::string_view name);

// The fixed (non-pattern) names, for documentation, webhook routing and tests.
const std::vector<ResourceInfo>& KnownResources();

// True when any fixed name or pattern matches (faster than LookupResource).
bool IsAcceleratorResource(std::string_view name);

// The default count resource a vendor's device plugin advertises
// (nvidia -> "nvidia.com/gpu", ascend -> "huawei.com/Ascend910B" is model
// specific so "huawei.com/npu", ...). Used for slot advertisement.
std::string_view DefaultCountResource(core::Vendor v);

// The count resource a device plugin advertises one whole device under:
// "huawei.com/<model>" for an Ascend chip model with a count name
// (huawei.com/Ascend910B3), otherwise the vendor's first vendor-wide count
// name in the table, its official whole-device name (nvidia.com/gpu,
// huawei.com/npu, kunlunxin.com/xpu, metax-tech.com/gpu, mthreads.com/gpu,
// alibabacloud.com/ppu, cambricon.com/mlu, hygon.com/dcu). "" for kUnknown.
// A device that is a hardware partition (`partition` non-empty, an NVIDIA MIG
// instance) is advertised under its partition's name: "nvidia.com/mig-" +
// partition.
std::string DeviceResource(core::Vendor v, std::string_view model, std::string_view partition = "");

// For a count name that no accelpool device plugin advertises, so that
// kube-scheduler finds no node with it: what to ask for instead, in words
// ("huawei.com/Ascend310P", "the chip's own name, ..."). nullopt for a name
// that is advertised (DeviceResource of a real model) or is no count name.
// Unadvertised: the Ascend family names huawei.com/Ascend910 and
// huawei.com/Ascend910B (nodes advertise the chip: Ascend910A, Ascend910B3
// ...), huawei.com/npu, a 310P chip's own name (huawei.com/Ascend310P3:
// advertised as huawei.com/Ascend310P), and the sharing count names of the
// vendors whose shares are not offered (mthreads.com/vgpu ...).
std::optional<std::string> UnadvertisedCountHint(std::string_view name);

// What the device plugin decides through a container's environment, when
// `name` is one of those variables; nullopt otherwise:
//   "enforcement": the libaccelpool-cuda contract and its HAMi and MPS
//     counterparts (ACCELPOOL_CUDA_*, CUDA_DEVICE_MEMORY_LIMIT[_<i>],
//     CUDA_DEVICE_SM_LIMIT, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_PIPE_DIRECTORY) and the
//     Ascend vNPU template (ASCEND_VNPU_SPECS: a pod's own would take a larger
//     vNPU than it was granted);
//   "device selection": the variables a container runtime hook reads to
//     decide which devices to put into the container (NVIDIA_VISIBLE_DEVICES,
//     ASCEND_VISIBLE_DEVICES, ...; the first entry of each vendor's
//     visible_env in src/vendors/traits.cc).
// Container runtimes let a later value win, and the pod's own env comes
// after the device plugin's: a pod that sets one of these overrides its cap
// or its devices. In-process selectors (CUDA_VISIBLE_DEVICES,
// ASCEND_RT_VISIBLE_DEVICES, ...) only narrow what is mounted and are not
// listed.
std::optional<std::string_view> DeviceControlledEnv(std::string_view name);

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_RESOURCES_H_
