// Small helpers the dlopen'ed DeviceLibrary bindings share (Kunlunxin XPU ML,
// MetaX MX-SML, Moore Threads MTML, Cambricon CNDev): PCI bus spelling, the
// NUMA node of a PCI device from sysfs, fixed-size C strings, the error text
// of a failed vendor call, and zero-padded out-structs so that a newer
// library writing a longer struct than the one declared here cannot overrun
// the caller's memory.
//
// Thread-safety: pure functions; PciNumaNode reads sysfs.
#ifndef ACCELPOOL_VENDORS_LIBRARY_UTIL_H_
#define ACCELPOOL_VENDORS_LIBRARY_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "vendors/device_library.h"
#include "vendors/dl_library.h"
#include "vendors/driver.h"

namespace accelpool::vendors {

// A per-device figure of every device that answers, by device id: `read`
// is asked for each (library index, id). kUnimplemented from any stops at
// once (the library has no such query); when none answers, the last error.
template <typename T, typename Read>
StatusOr<std::map<std::string, T>> ReadPerDevice(
    const std::vector<std::pair<int32_t, std::string>>& devices, const Read& read) {
  std::map<std::string, T> out;
  Status last = Status::Ok();
  for (const auto& [index, id] : devices) {
    StatusOr<T> v = read(index);
    if (v.ok()) {
      out[id] = std::move(v).value();
    } else if (v.status().code() == StatusCode::kUnimplemented) {
      return v.status();
    } else {
      last = v.status();
    }
  }
  if (out.empty() && !last.ok()) return last;
  return out;
}

// "0000:3b:00.0" from any "domain:bus:device.function" spelling
// ("00000000:3B:00.0", "3b:00.0"); "" when it does not parse.
std::string NormalizePciBus(std::string_view bus);

// The NUMA node of a PCI device from <sysfs_root>/bus/pci/devices/<bus>/numa_node;
// -1 when the file is absent, unreadable or says -1.
int32_t PciNumaNode(const std::string& pci_bus, const std::string& sysfs_root = "/sys");

// The DRM nodes of PCI function `pci_bus` as sysfs lists them
// (<sysfs_root>/bus/pci/devices/<bus>/drm/cardN and renderDN), as /dev/dri
// paths, the card first. Empty when sysfs lists none. The numbers are the
// kernel's: another DRM device (a server's BMC VGA is often card0) shifts
// them, so they cannot be derived from the device's index.
std::vector<std::string> PciDrmNodes(const std::string& pci_bus,
                                     const std::string& sysfs_root = "/sys");

// The text of a fixed-size C char buffer, up to its first NUL or its end.
std::string FixedString(const char* buf, size_t size);

// kUnavailable: "<call> failed with <library> status <code>; <hint>".
Status VendorCallError(std::string_view call, std::string_view library, int64_t code,
                       std::string_view hint);

// The lowest set bit of a node bitmask of `words` 32-bit words; -1 when empty.
int32_t FirstSetBit(const uint32_t* words, size_t count);

// The NVML-style topology level shared by XPU ML, MTML and MX-SML (INTERNAL,
// SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM) as a LinkKind.
enum class PcieLevel : uint8_t { kInternal, kSingle, kMultiple, kHostBridge, kNode, kSystem };
LinkKind LinkKindForLevel(PcieLevel level);

// An out-struct with room to spare: vendors grow their structs between
// driver releases, so every struct handed to a vendor call is zeroed and
// followed by padding; only the leading fields declared in T are read.
template <typename T>
struct Padded {
  T value{};
  unsigned char spare[1024] = {};
};

// What every dlopen'ed binding holds and checks the same way: the open
// library, the sysfs root for NUMA lookups, one lock over the vendor calls,
// the library's name and the operator hint that its errors carry.
class BoundLibrary : public DeviceLibrary {
 public:
  std::string_view LibraryName() const override { return name_; }

 protected:
  // `name` and `hint` must outlive the object (string literals).
  BoundLibrary(std::unique_ptr<DlLibrary> lib, std::string sysfs_root, const char* name,
               const char* hint)
      : lib_(std::move(lib)), sysfs_root_(std::move(sysfs_root)), name_(name), hint_(hint) {}

  // Resolves a required entry point into *out.
  template <typename Fn>
  Status Resolve(Fn** out, const char* symbol) {
    StatusOr<Fn*> fn = lib_->Symbol<Fn>(symbol);
    if (!fn.ok()) {
      return fn.status();
    }
    *out = *fn;
    return Status::Ok();
  }
  // Ok once Init succeeded (ready_), else kFailedPrecondition.
  Status Ready() const;
  // Ok for status 0, else VendorCallError naming `call`.
  Status Check(int64_t code, const char* call) const;
  // A device count from the library, refused above 1024 (a garbage value).
  StatusOr<int32_t> CheckedCount(uint64_t n, const char* call) const;
  // kInternal "<what>; <hint>".
  Status Broken(const std::string& what) const;
  // Health for a library with no health query: true when MemoryUsedMib(index)
  // answers, else its error. REQUIRES: mu_ not held.
  StatusOr<bool> HealthyIfMemoryReads(int32_t index);

  const std::unique_ptr<DlLibrary> lib_;
  const std::string sysfs_root_;
  std::mutex mu_;       // serialises the vendor calls
  bool ready_ = false;  // guarded by mu_

 private:
  const char* const name_;
  const char* const hint_;
};

// Opens the first of `candidates` that loads (empty: the library names of
// `vendor`'s traits) and binds it as `new Binding(library, sysfs_root)`,
// owned by a Ptr. kUnavailable when none loads, as DlLibrary::Open.
template <typename Binding, typename Ptr = DeviceLibraryPtr>
StatusOr<Ptr> OpenBinding(core::Vendor vendor, const std::vector<std::string>& candidates,
                          const std::string& sysfs_root) {
  StatusOr<std::unique_ptr<DlLibrary>> lib =
      DlLibrary::Open(candidates.empty() ? TraitsFor(vendor).libraries : candidates);
  if (!lib.ok()) {
    return lib.status();
  }
  return Ptr(new Binding(std::move(lib).value(), sysfs_root));
}

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_LIBRARY_UTIL_H_
