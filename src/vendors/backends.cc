#include "vendors/backends.h"

#include <algorithm>
#include <sstream>

#include "vendors/ascend/ascend_driver.h"
#include "vendors/cambricon/cndev_library.h"
#include "vendors/fake/fake_driver.h"
#include "vendors/hygon/rocm_smi_library.h"
#include "vendors/kunlunxin/xpuml_library.h"
#include "vendors/library_specs.h"
#include "vendors/metax/mxsml_library.h"
#include "vendors/mthreads/mtml_library.h"
#include "vendors/nvidia/nvidia_driver.h"
#include "vendors/thead/hgml_library.h"

namespace accelpool::vendors {
namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

StatusOr<VendorDriverPtr> MakeHardware(const std::string& name, const BackendOptions& o) {
  if (name == "nvidia") {
    StatusOr<nvidia::NvmlLibraryPtr> lib = nvidia::NewDlNvml();
    if (!lib.ok()) {
      return Status(lib.status().code(),
                    lib.status().message() +
                        "; the NVIDIA container runtime injects it into a container that has "
                        "NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility (the "
                        "chart sets both; the runtime must be the node's default or the pod's "
                        "runtimeClassName)");
    }
    nvidia::NvidiaOptions no;
    no.node = o.node;
    if (o.max_shares > 0) {
      no.max_shares = o.max_shares;
    }
    no.mig_single = o.mig_single;
    no.imex_channel = o.imex_channel;
    return VendorDriverPtr(new nvidia::NvidiaDriver(std::move(lib).value(), no));
  }
  if (name == "ascend") {
    StatusOr<ascend::DcmiLibraryPtr> lib = ascend::NewDlDcmi();
    if (!lib.ok()) {
      return lib.status();
    }
    ascend::AscendOptions ao;
    ao.node = o.node;
    ao.vnpu = o.ascend_vnpu;
    return VendorDriverPtr(new ascend::AscendDriver(std::move(lib).value(), ao));
  }
  // The vendors served through a DeviceLibrary: how to load it, and the spec.
  struct LibraryBackend {
    const char* name;
    StatusOr<DeviceLibraryPtr> (*load)();
    LibraryDriverSpec (*spec)();
  };
  static const LibraryBackend kLibraryBackends[] = {
      {"hygon", [] { return hygon::NewRocmSmiLibrary(); }, HygonSpec},
      {"thead", [] { return thead::NewHgmlLibrary(); }, TheadSpec},
      {"kunlunxin", [] { return kunlunxin::NewXpumlLibrary(); }, KunlunxinSpec},
      {"metax", [] { return metax::NewMxsmlLibrary(); }, MetaxSpec},
      {"mthreads", [] { return mthreads::NewMtmlLibrary(); }, MthreadsSpec},
      {"cambricon", [] { return cambricon::NewCndevLibrary(); }, CambriconSpec},
  };
  for (const LibraryBackend& b : kLibraryBackends) {
    if (name != b.name) {
      continue;
    }
    StatusOr<DeviceLibraryPtr> lib = b.load();
    if (!lib.ok()) {
      return lib.status();
    }
    return VendorDriverPtr(new LibraryDriver(std::move(lib).value(), b.spec(), o.node));
  }
  return UnimplementedError("the " + name + " backend is not built into this binary");
}

}  // namespace

const std::vector<std::string>& HardwareBackends() {
  static const std::vector<std::string> kNames = {"nvidia",    "ascend", "hygon",    "thead",
                                                  "kunlunxin", "metax",  "mthreads", "cambricon"};
  return kNames;
}

std::set<core::Vendor> BackendVendors(const std::string& backends) {
  std::set<core::Vendor> out;
  for (const std::string& name : Split(backends)) {
    if (name == "auto" || name == "fake") return {};
    if (std::optional<core::Vendor> v = core::ParseVendor(name)) out.insert(*v);
  }
  return out;
}

StatusOr<std::vector<VendorDriverPtr>> MakeBackends(const BackendOptions& options,
                                                    std::vector<std::string>* skipped) {
  std::vector<VendorDriverPtr> out;
  std::vector<std::string> names = Split(options.backends);
  if (names.empty()) {
    return InvalidArgumentError("--backend is empty; use auto, fake or a vendor name");
  }
  for (const std::string& name : names) {
    if (name == "fake") {
      if (options.fake_inventory.empty()) {
        return InvalidArgumentError("--backend fake needs --fake-inventory <file>");
      }
      out.push_back(VendorDriverPtr(
          new fake::FakeDriver(fake::FakeDriverOptions{options.fake_inventory, options.node})));
      continue;
    }
    if (name == "auto") {
      for (const std::string& hw : HardwareBackends()) {
        StatusOr<VendorDriverPtr> d = MakeHardware(hw, options);
        if (d.ok()) {
          out.push_back(std::move(d).value());
        } else if (skipped != nullptr) {
          skipped->push_back(hw + ": " + d.status().message());
        }
      }
      continue;
    }
    bool known = false;
    for (const std::string& hw : HardwareBackends()) {
      known = known || hw == name;
    }
    if (!known) {
      std::string list = "auto, fake";
      for (const std::string& hw : HardwareBackends()) {
        list += ", " + hw;
      }
      return InvalidArgumentError("unknown backend \"" + name + "\"; use one of: " + list);
    }
    StatusOr<VendorDriverPtr> d = MakeHardware(name, options);
    if (!d.ok()) {
      return d.status().WithPrefix("backend " + name);
    }
    out.push_back(std::move(d).value());
  }
  return out;
}

StatusOr<std::vector<VendorDriverPtr>> RetryWhileUnavailable(const BackendFactory& make,
                                                             const Backoff& backoff,
                                                             const BackendWait& wait) {
  std::chrono::milliseconds delay = std::max(backoff.first, std::chrono::milliseconds(1));
  while (true) {
    StatusOr<std::vector<VendorDriverPtr>> drivers = make();
    if (drivers.ok() || drivers.status().code() != StatusCode::kUnavailable) {
      return drivers;
    }
    if (!wait(drivers.status(), delay)) {
      return Status(StatusCode::kCancelled, "stopped while waiting: " + drivers.status().message());
    }
    delay = std::min(delay * 2, std::max(backoff.max, backoff.first));
  }
}

}  // namespace accelpool::vendors
