// Helpers shared by the vendor tests: a stand-in for the host's device
// nodes, so that container specs are built against a known /dev, a sysfs
// tree with NUMA nodes, a handle on the fake vendor libraries of
// testlibs/ that sets what they report, and a recorder of the health events
// a driver reports while it is watched.
#ifndef ACCELPOOL_VENDORS_TEST_UTIL_H_
#define ACCELPOOL_VENDORS_TEST_UTIL_H_

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

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

// A sysfs tree in a temp dir with numa_node files for the given buses.
class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ap-sysfs-XXXXXX").string();
    root_ = mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
  }
  ~FakeSysfs() {
    std::error_code ec;
    if (!root_.empty()) {
      std::filesystem::remove_all(root_, ec);
    }
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  void Numa(const std::string& bus, int node) const {
    const std::filesystem::path dir = std::filesystem::path(root_) / "bus/pci/devices" / bus;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "numa_node") << node << "\n";
  }
  // DRM entries (cardN, renderDN, ...) under the function's drm/ folder.
  void Drm(const std::string& bus, const std::vector<std::string>& names) const {
    const std::filesystem::path dir =
        std::filesystem::path(root_) / "bus/pci/devices" / bus / "drm";
    for (const std::string& n : names) {
      std::filesystem::create_directories(dir / n);
    }
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// Discovery through a binding whose fake library was told to fail must be a
// kUnavailable error whose message names every part of `want` (the call,
// the device, the vendor's code, the tool to check with).
inline void ExpectDiscoveryFails(VendorDriver& driver, const std::vector<std::string>& want) {
  auto invs = driver.Discover();
  ASSERT_FALSE(invs.ok());
  EXPECT_EQ(invs.status().code(), StatusCode::kUnavailable);
  for (const std::string& w : want) {
    EXPECT_NE(invs.status().message().find(w), std::string::npos)
        << w << " not in: " << invs.status().message();
  }
}

// Holds a fake vendor library open (the binding's dlopen of the same path
// shares it) and sets what it reports (testlibs/fake_control.h).
class FakeHandle {
 public:
  explicit FakeHandle(const std::string& path) : handle_(dlopen(path.c_str(), RTLD_NOW)) {}
  ~FakeHandle() {
    if (handle_ != nullptr) {
      dlclose(handle_);
    }
  }
  FakeHandle(const FakeHandle&) = delete;
  FakeHandle& operator=(const FakeHandle&) = delete;

  bool ok() const { return handle_ != nullptr; }
  void* Symbol(const char* name) const { return dlsym(handle_, name); }
  void Configure(int count, int fail_device, int fault_device, int init_error) const {
    auto fn =
        reinterpret_cast<void (*)(int, int, int, int)>(dlsym(handle_, "accelpool_fake_configure"));
    ASSERT_NE(fn, nullptr);
    fn(count, fail_device, fault_device, init_error);
  }

 private:
  void* handle_;
};

// Captures what is logged through spdlog's default logger (where the drivers
// log) while it lives. Not for use while a health watch logs from another
// thread: the logger's sink list is changed without a lock.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> Lines() const { return sink_->last_formatted(); }
  // True when one line holds every part of `want`.
  bool Has(const std::vector<std::string>& want) const {
    for (const std::string& line : Lines()) {
      if (std::all_of(want.begin(), want.end(), [&line](const std::string& w) {
            return line.find(w) != std::string::npos;
          })) {
        return true;
      }
    }
    return false;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// Discovery through a binding whose fake library was told to fail device
// `fail` (its index in the library, and in a discovery of all 8) leaves that
// device out and offers the other 7 under the ids they have when all answer,
// with an error logged once that names every part of `want`.
template <typename Fake>
void ExpectDeviceSkipped(VendorDriver& driver, const Fake& fake, int fail,
                         const std::vector<std::string>& want) {
  fake.Configure(8, -1, -1, 0);
  auto all = driver.Discover();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 1u);
  ASSERT_EQ(all->front().devices.size(), 8u);
  std::vector<std::string> others;
  for (const core::Device& d : all->front().devices) {
    if (d.index != fail) others.push_back(d.id);
  }
  fake.Configure(8, fail, -1, 0);
  LogCapture log;
  auto some = driver.Discover();
  fake.Configure(8, -1, -1, 0);
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  ASSERT_EQ(some->size(), 1u);
  std::vector<std::string> ids;
  for (const core::Device& d : some->front().devices) ids.push_back(d.id);
  EXPECT_EQ(ids, others);
  std::string lines;
  for (const std::string& l : log.Lines()) lines += l + "\n";
  EXPECT_TRUE(log.Has(want)) << lines;
}

// Runs driver.WatchHealth() on its own thread from construction until Stop()
// (or destruction) and records the events it reports, as the device plugin
// takes them: a report that a device the plugin serves healthy is healthy
// changes nothing and is not recorded. Devices start healthy, or as
// `served` (the inventories the plugin serves) has them. Health is watched
// by polling or by a library's event thread, so a test cannot know when an
// event lands, only that it should within some time: it changes what the
// device reports, then WaitFor()s the event count instead of sleeping a
// fixed time, and checks the events Stop() returns.
class HealthRecorder {
 public:
  explicit HealthRecorder(VendorDriver& driver, const std::vector<core::NodeInventory>& served = {})
      : unhealthy_(Unhealthy(served)), watcher_([this, &driver](std::stop_token stop) {
          Status st = driver.WatchHealth(stop, [this](const HealthEvent& e) {
            std::lock_guard<std::mutex> lock(mu_);
            if (e.healthy && !unhealthy_.contains(e.device_id)) {
              return;  // already served healthy
            }
            if (e.healthy) {
              unhealthy_.erase(e.device_id);
            } else {
              unhealthy_.insert(e.device_id);
            }
            events_.push_back(e);
          });
          std::lock_guard<std::mutex> lock(mu_);
          status_ = std::move(st);
        }) {}
  // A test that returns early (a failed ASSERT) still stops the watch before
  // the driver it watches goes away, and still checks how it ended.
  ~HealthRecorder() {
    if (watcher_.joinable()) {
      Stop();
    }
  }
  HealthRecorder(const HealthRecorder&) = delete;
  HealthRecorder& operator=(const HealthRecorder&) = delete;

  // Events recorded so far; the watch may add more at any time.
  size_t Count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

  // Polls until `n` events are recorded; false when `timeout` passes first
  // (the caller decides whether that fails the test: some go on to check
  // the count, which says more). The default is generous, as it only bounds
  // a wait for what should come (a loaded machine or ThreadSanitizer slows
  // the watch); a check that nothing comes passes its own short timeout.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Count() < n) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  // Polls until an event says device `id` is `healthy`; false when
  // `timeout` passes first (generous by default, as for WaitFor).
  bool WaitForEvent(const std::string& id, bool healthy,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const HealthEvent& e : events_) {
          if (e.device_id == id && e.healthy == healthy) return true;
        }
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // Stops the watch, waits for WatchHealth() to return and gives the events
  // in the order reported. WatchHealth() returns early only when health
  // cannot be watched, so by default its Status is expected OK; a test that
  // expects otherwise passes false and reads status().
  std::vector<HealthEvent> Stop(bool expect_ok = true) {
    watcher_.request_stop();
    if (watcher_.joinable()) {
      watcher_.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (expect_ok) {
      EXPECT_TRUE(status_.ok()) << status_.ToString();
    }
    return events_;
  }

  // What WatchHealth() returned; meaningful after Stop().
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  static std::set<std::string> Unhealthy(const std::vector<core::NodeInventory>& served) {
    std::set<std::string> out;
    for (const core::NodeInventory& inv : served) {
      for (const core::Device& d : inv.devices) {
        if (!d.healthy) out.insert(d.id);
      }
    }
    return out;
  }

  mutable std::mutex mu_;
  std::set<std::string> unhealthy_;  // device ids, as the plugin serves them; guarded by mu_
  std::vector<HealthEvent> events_;
  Status status_;
  // Last, so that the state above exists before the watch starts.
  std::jthread watcher_;
};

}  // namespace accelpool::vendors::testing

#endif  // ACCELPOOL_VENDORS_TEST_UTIL_H_
