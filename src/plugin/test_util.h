// Helpers shared by the plugin tests: temp dirs, fake inventories,
// assignment builders and a PodReporter that records.
#ifndef ACCELPOOL_PLUGIN_TEST_UTIL_H_
#define ACCELPOOL_PLUGIN_TEST_UTIL_H_

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "api/assignment_codec.h"
#include "plugin/allocator.h"

namespace accelpool::plugin::testing {

class TempDir {
 public:
  TempDir() {
    // Short paths: unix socket paths are limited to 107 bytes.
    std::string tmpl = "/tmp/ap-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

// MountCalls that mount nothing: each call is recorded as one line, and a
// path "mounted" through it (or put in `mounted`) is a mount point until
// detached. `mount_error` / `detach_error`: the errno those calls fail with
// (0: they succeed). When `dir_at_detach` is set, Detach records whether the
// path still existed (a removal must detach before it deletes).
class FakeMountCalls final : public MountCalls {
 public:
  int Mount(const std::string& source, const std::string& target, const std::string& fstype,
            unsigned long flags, const std::string& data) override {  // NOLINT(runtime/int)
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back("mount " + source + " " + target + " " + fstype + " " + std::to_string(flags) +
                    " " + data);
    if (mount_error != 0) return mount_error;
    mounted.insert(target);
    return 0;
  }
  int Detach(const std::string& target) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back("detach " + target +
                    (std::filesystem::exists(target) ? "" : " (already removed)"));
    if (detach_error != 0) return detach_error;
    mounted.erase(target);
    return 0;
  }
  int IsMountPoint(const std::string& path, bool* is) override {
    std::lock_guard<std::mutex> lock(mu);
    *is = false;
    if (!std::filesystem::exists(path)) return ENOENT;
    *is = mounted.count(path) > 0;
    return 0;
  }

  std::mutex mu;
  std::vector<std::string> calls;
  std::set<std::string> mounted;
  int mount_error = 0;
  int detach_error = 0;
};

inline void WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);
}

// Two NVIDIA GPUs (10 slots each) and an Ascend 910C x16 node (one slot per die).
inline std::string MixedInventory(bool gpu1_healthy = true) {
  return std::string(R"({"version":1,"inventories":[
      {"vendor":"nvidia","count":2,"model":"H200","memory_mib":143771,
       "devices":[{"index":0,"id":"GPU-a","numa":0},{"index":1,"id":"GPU-b","numa":1,"healthy":)") +
         (gpu1_healthy ? "true" : "false") + R"(}]},
      {"vendor":"ascend","profile":"ascend-910c-x16","super_node":"sp-3"}]})";
}

inline api::AssignedDevice Dev(const std::string& id, int32_t index, int32_t slot,
                               int64_t memory = 0, int32_t compute = 0, bool exclusive = true) {
  return {id, index, api::SlotId(id, slot), memory, compute, exclusive};
}

inline api::AssignedContainer Ctr(const std::string& name, const std::string& resource,
                                  core::Vendor vendor, std::vector<api::AssignedDevice> devices,
                                  core::ContainerKind kind = core::ContainerKind::kRegular) {
  return {name, kind, vendor, resource, std::move(devices)};
}

inline PodRef Pod(const std::string& name, const std::string& created = "2026-11-30T02:00:00Z") {
  return {"default", name, "uid-" + name, created};
}

class RecordingReporter : public PodReporter {
 public:
  struct Entry {
    bool ok;
    std::string pod;
    // Allocated so far (Allocated and Failed): the containers' names, each
    // once, and the entries by resource.
    std::vector<std::string> containers;
    std::string message;
    std::string resource;  // Failed: "" when only an Event is written
    std::vector<api::AllocatedResource> allocated = {};
  };
  void Allocated(const PodRef& pod, const std::vector<api::AllocatedResource>& allocated) override {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back({true, pod.Key(), Names(allocated), "", "", allocated});
  }
  void Failed(const std::optional<PodRef>& pod, const std::string& resource,
              const std::string& message,
              const std::vector<api::AllocatedResource>& allocated) override {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(
        {false, pod.has_value() ? pod->Key() : "", Names(allocated), message, resource, allocated});
  }
  std::vector<Entry> entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

  static std::vector<std::string> Names(const std::vector<api::AllocatedResource>& allocated) {
    std::vector<std::string> out;
    for (const api::AllocatedResource& r : allocated) {
      if (std::find(out.begin(), out.end(), r.container) == out.end()) out.push_back(r.container);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace accelpool::plugin::testing

#endif  // ACCELPOOL_PLUGIN_TEST_UTIL_H_
