// FakeDriver: a VendorDriver whose devices come from an inventory file
// (inventory_file.h) instead of hardware. Serves any vendor and several at
// once. Health changes are picked up when the file changes (its modification
// time, size or inode: a replaced file counts even within one clock tick) or
// when Reload() is called (the binary calls it on SIGHUP), against what the
// watch last reported, whatever discoveries ran meanwhile. A read that fails
// is tried again at every poll until one succeeds.
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_VENDORS_FAKE_FAKE_DRIVER_H_
#define ACCELPOOL_VENDORS_FAKE_FAKE_DRIVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/driver.h"
#include "vendors/fake/inventory_file.h"

namespace accelpool::vendors::fake {

struct FakeDriverOptions {
  std::string path;  // the inventory file (required)
  std::string node;  // node name used in synthetic ids (required)
  // How often WatchHealth checks the file's modification time. Default 200 ms.
  std::chrono::milliseconds poll = std::chrono::milliseconds(200);
};

class FakeDriver : public VendorDriver {
 public:
  explicit FakeDriver(FakeDriverOptions options);

  // Asks the running WatchHealth to re-read the file now.
  void Reload() { reload_.store(true); }

  // VendorDriver:
  std::string_view Name() const override { return "fake"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override;
  Status WatchHealth(std::stop_token stop, const HealthSink& sink) override;
  StatusOr<ContainerSpec> BuildContainerSpec(
      const std::vector<GrantedDevice>& grants) const override;
  // The file's "used_mib" of every whole device (0 where not given), read
  // now: an edit of the file is the next answer.
  StatusOr<std::map<std::string, int64_t>> MemoryInUse() override;
  // The file's "processes" of every whole device (empty where not given).
  StatusOr<std::map<std::string, std::vector<ProcessMemory>>> MemoryHolders() override;

 private:
  // The file's memory use as it is now.
  StatusOr<MemoryUse> ReadMemoryUse() const;
  // Re-reads the file; on success emits the health differences from the last
  // good read. A file that does not parse is the error, and leaves health as
  // is.
  Status Refresh(const HealthSink& sink);

  // What the watch compares between polls to see that the file changed.
  struct FileStamp {
    bool exists = false;
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = -1;
    int64_t mtime_ns = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  };
  FileStamp Stamp() const;

  const FakeDriverOptions options_;
  std::atomic<bool> reload_{false};

  mutable std::mutex mu_;
  std::vector<core::NodeInventory> last_;  // the file as last read; guarded by mu_
  // The health the watch has reported, from the discovery it started after
  // and its own reads since: a device check's Discover reads the file too,
  // and must not take a change away before the watch reports it. Guarded by
  // mu_.
  std::vector<core::NodeInventory> reported_;
};

}  // namespace accelpool::vendors::fake

#endif  // ACCELPOOL_VENDORS_FAKE_FAKE_DRIVER_H_
