#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "vendors/driver.h"

namespace accelpool::vendors {
namespace {

std::string ReplaceMinor(const std::string& pattern, int32_t minor) {
  std::string out = pattern;
  const std::string key = "{minor}";
  size_t at = out.find(key);
  if (at != std::string::npos) {
    out.replace(at, key.size(), std::to_string(minor));
  }
  return out;
}

}  // namespace

bool DeviceNodeExists(const std::string& device_root, const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(device_root + path, ec) && !ec;
}

StatusOr<ContainerSpec> GenericContainerSpec(
    const VendorTraits& traits, const std::vector<GrantedDevice>& grants,
    const std::function<int32_t(const core::Device&)>& minor_of, const std::string& device_root,
    const std::function<std::vector<std::string>(const core::Device&)>& nodes_of) {
  ContainerSpec spec;
  for (const std::string& node : traits.shared_nodes) {
    if (DeviceNodeExists(device_root, node)) {
      spec.devices.push_back({node, node, "rw"});
    }
  }
  std::vector<int32_t> minors;
  for (const GrantedDevice& g : grants) {
    int32_t minor = minor_of ? minor_of(g.device) : -1;
    if (minor < 0) {
      minor = g.device.index;
    }
    minors.push_back(minor);
    std::vector<std::string> paths = nodes_of ? nodes_of(g.device) : std::vector<std::string>{};
    if (paths.empty()) {
      for (const std::string& pattern : traits.device_nodes) {
        paths.push_back(ReplaceMinor(pattern, minor));
      }
    }
    for (const std::string& path : paths) {
      if (!DeviceNodeExists(device_root, path)) {
        return FailedPreconditionError(
            "device node " + path + " of device " + g.device.id + " does not exist" +
            (device_root.empty() ? "" : " under " + device_root) +
            "; check that the vendor driver is loaded on the node and that the device plugin "
            "mounts the host's /dev");
      }
      spec.devices.push_back({path, path, "rw"});
    }
    for (const std::string& pattern : traits.optional_device_nodes) {
      const std::string path = ReplaceMinor(pattern, minor);
      if (DeviceNodeExists(device_root, path)) {
        spec.devices.push_back({path, path, "rw"});
      }
    }
    if (!traits.cdi_kind.empty()) {
      spec.cdi_devices.push_back(traits.cdi_kind + "=" + g.device.id);
    }
  }
  for (const VisibleEnv& v : traits.visible_env) {
    std::string value;
    for (size_t i = 0; i < grants.size(); ++i) {
      if (i > 0) {
        value += ",";
      }
      switch (v.kind) {
        case VisibleIdKind::kDeviceId:
          value += grants[i].device.id;
          break;
        case VisibleIdKind::kHostIndex:
          value += std::to_string(minors[i]);
          break;
        case VisibleIdKind::kContainerOrdinal:
          value += std::to_string(i);
          break;
      }
    }
    spec.env[v.name] = value;
  }
  return spec;
}

}  // namespace accelpool::vendors
