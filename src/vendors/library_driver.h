// LibraryDriver: the VendorDriver for every vendor whose SDK is wrapped as a
// DeviceLibrary. The vendor differences are data (LibraryDriverSpec): how a
// product name becomes a model, and which topology profile a model and count
// map to. Discovery maps each device (id = UUID, else "<PREFIX>-<pci bus>"),
// applies the profile (or NUMA groups when none fits), and overwrites the
// link matrix with the library's pairwise links where it reports them
// (LinkKindScore). A link query that fails (other than kUnimplemented, "the
// library cannot say"), or a pair answered kUnknown beside measured pairs,
// keeps the profile's links, with one error line: a
// half-measured matrix would score the unread pairs 0, and no device of the
// node would be served were the discovery failed for it. At the plugin's
// start (DiscoverPartial) a device that cannot be read, or that answers the
// same id as another (both are left out), is left out, with an error logged
// once; the others are (their ids are not positional). A later discovery
// fails instead. A device
// the library says is not for workloads (LibraryDevice::not_offered: an SR-IOV
// physical function, an MPC parent) is left out of every discovery, with one
// info line, and is never polled. Health is
// polled and two-way; a device that stops answering is unhealthy until it
// answers again.
//
// Thread-safety: see VendorDriver.
#ifndef ACCELPOOL_VENDORS_LIBRARY_DRIVER_H_
#define ACCELPOOL_VENDORS_LIBRARY_DRIVER_H_

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/device_library.h"
#include "vendors/discovery_log.h"
#include "vendors/driver.h"

namespace accelpool::vendors {

struct ProfileRule {
  std::string model_prefix;  // case-sensitive prefix of the model
  size_t count = 0;          // devices on the node
  std::string profile;       // core profile name
};

struct LibraryDriverSpec {
  core::Vendor vendor = core::Vendor::kUnknown;
  std::string id_prefix;  // "XPU", "MX", ...
  // Product name -> model ("MetaX C500" -> "C500"); identity when null.
  std::function<std::string(const std::string&)> model;
  std::vector<ProfileRule> profiles;
  std::chrono::milliseconds health_poll = std::chrono::seconds(5);
  // Prefix under which device nodes are checked (GenericContainerSpec); ""
  // checks /dev as this process sees it.
  std::string device_root;
  // The device nodes are only those the library or sysfs names for the
  // device (LibraryDevice::nodes): the traits' pattern filled with the index
  // would name another device's node (a DRM card number counts every DRM
  // device, a BMC's VGA included), so a device whose nodes were not found
  // is refused.
  bool nodes_from_sysfs_only = false;
};

// The profile of the first rule matching `model` and `count`, or "".
std::string PickProfile(const std::vector<ProfileRule>& rules, const std::string& model,
                        size_t count);

class LibraryDriver : public VendorDriver {
 public:
  LibraryDriver(DeviceLibraryPtr library, LibraryDriverSpec spec, std::string node);

  // VendorDriver:
  std::string_view Name() const override { return core::VendorName(spec_.vendor); }
  StatusOr<std::vector<core::NodeInventory>> Discover() override { return DiscoverDevices(false); }
  StatusOr<std::vector<core::NodeInventory>> DiscoverPartial() override {
    return DiscoverDevices(true);
  }
  Status WatchHealth(std::stop_token stop, const HealthSink& sink) override;
  StatusOr<ContainerSpec> BuildContainerSpec(
      const std::vector<GrantedDevice>& grants) const override;
  // The library's memory in use of every discovered device that answers.
  StatusOr<std::map<std::string, int64_t>> MemoryInUse() override;
  // The library's process list of every discovered device that answers.
  StatusOr<std::map<std::string, std::vector<ProcessMemory>>> MemoryHolders() override;

 private:
  // `partial`: a device that cannot be read is left out (DiscoverPartial).
  StatusOr<std::vector<core::NodeInventory>> DiscoverDevices(bool partial);
  // (library index, id) of every discovered device; kFailedPrecondition
  // before the first discovery.
  StatusOr<std::vector<std::pair<int32_t, std::string>>> Discovered(const char* what) const;

  const DeviceLibraryPtr library_;
  const LibraryDriverSpec spec_;
  const std::string node_;

  mutable std::mutex mu_;
  bool initialized_ = false;               // guarded by mu_
  // By library index; "" for a device discovery could not read. Guarded by mu_.
  std::vector<std::string> ids_;
  std::map<std::string, int32_t> minors_;  // guarded by mu_
  std::map<std::string, std::vector<std::string>> nodes_;  // LibraryDevice::nodes; by mu_
  LoggedLines discovery_lines_;                            // what the last Discover logged
};

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_LIBRARY_DRIVER_H_
