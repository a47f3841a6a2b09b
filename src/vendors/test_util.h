// Helpers shared by the vendor tests: a stand-in for the host's device
// nodes, so that container specs are built against a known /dev.
#ifndef ACCELPOOL_VENDORS_TEST_UTIL_H_
#define ACCELPOOL_VENDORS_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "vendors/driver.h"

namespace accelpool::vendors::testing {

// A temp dir used as a driver's device_root: Add("/dev/nvidia0") creates
// <root>/dev/nvidia0 (an empty file), so the driver sees that node and no
// other. Removed with everything under it on destruction.
class FakeDevRoot {
 public:
  FakeDevRoot() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ap-dev-XXXXXX").string();
    root_ = mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
  }
  ~FakeDevRoot() {
    std::error_code ec;
    if (!root_.empty()) {
      std::filesystem::remove_all(root_, ec);
    }
  }
  FakeDevRoot(const FakeDevRoot&) = delete;
  FakeDevRoot& operator=(const FakeDevRoot&) = delete;

  // Creates the node `path` ("/dev/davinci3") and its parent directories.
  void Add(const std::string& path) const {
    const std::filesystem::path p = root_ + path;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p).put('\0');
  }
  void Remove(const std::string& path) const { std::filesystem::remove(root_ + path); }

  // Every node `vendor` uses for `count` devices numbered 0..count-1 (or
  // `first`..first+count-1), shared control nodes included.
  void AddVendor(core::Vendor vendor, int32_t count, int32_t first = 0) const {
    const VendorTraits& t = TraitsFor(vendor);
    for (const std::string& n : t.shared_nodes) {
      Add(n);
    }
    for (int32_t i = first; i < first + count; ++i) {
      for (std::string n : t.device_nodes) {
        n.replace(n.find("{minor}"), 7, std::to_string(i));
        Add(n);
      }
    }
  }

  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

}  // namespace accelpool::vendors::testing

#endif  // ACCELPOOL_VENDORS_TEST_UTIL_H_
