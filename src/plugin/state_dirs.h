// StateDirs: the per-container enforcement directories on the host,
// <root>/<pod-uid>_<container>, each holding state/ (mounted read-write into
// the fractional NVIDIA container: libaccelpool-cuda keeps its shared state
// there) and limits (the container's enforcement contract, mounted read-only
// beside the library, where the shim takes it from in preference to the
// environment the pod can extend).
//
// The uid and the container name come from the pod, and the container name
// from an annotation any user can write on their own pod, so every path is
// checked twice before anything is created: both names must be plain
// (api::CheckPodUid, api::CheckContainerName), and the normalised path must be
// a direct child of root. A name like "../../etc" never reaches the filesystem.
//
// Dirs are removed when their pod is gone (PodSync), when an Allocate that
// made them fails, and by a periodic Sweep against the node's pods. Only dirs
// named <plain uid>_<DNS-1123 label> are ever touched, and only when this
// object makes dirs (create): dirs made by someone else are theirs to remove.
//
// Size cap. A container can write into its state/ without limit, and state/
// is on the host's filesystem (under /var/lib), not charged to the pod's
// ephemeral storage: filling it would put the node under DiskPressure and
// have kubelet evict other tenants' pods. With Options::size_mib > 0, Create
// mounts a tmpfs of that size and Options::inodes files on state/ before it
// is handed out (nosuid, nodev, noexec, mode 1777); its pages are charged to
// the memory cgroup of the container that writes them. A state/ that is a
// mount point already (a plugin restarted while its containers run, or a
// second Allocate of the container) is kept as it is: a second tmpfs over it
// would hide the live region from the container's new processes. Where the
// mount fails (EPERM: the plugin is not privileged), state/ stays a plain
// directory, and Options::on_uncapped is called, once per object. Every
// removal detaches (umount2 MNT_DETACH) a state/ that is a mount point first,
// whatever size_mib is: a dir may have been capped by an earlier run.
//
// The object holds its root and options; several instances over one root are
// fine. Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_STATE_DIRS_H_
#define ACCELPOOL_PLUGIN_STATE_DIRS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace accelpool::plugin {

// True when `path`, normalised lexically, is `root` (normalised) plus exactly
// one more component that is neither "." nor "..". Symlinks are not resolved:
// only the plugin writes directly in root.
bool IsDirectChild(std::string_view root, std::string_view path);

// The mount system calls StateDirs makes, behind an interface so that tests
// can see each call without root. Each returns 0 or an errno value.
class MountCalls {
 public:
  virtual ~MountCalls() = default;
  // mount(2).
  virtual int Mount(const std::string& source, const std::string& target, const std::string& fstype,
                    unsigned long flags,  // NOLINT(runtime/int)
                    const std::string& data) = 0;
  // umount2(2) with MNT_DETACH.
  virtual int Detach(const std::string& target) = 0;
  // Whether `path` (a directory) is the root of a mount: its st_dev differs
  // from its parent's. `*is` is left false on an error.
  virtual int IsMountPoint(const std::string& path, bool* is) = 0;
};

// The real calls. Never null; lives for the process.
MountCalls* SystemMountCalls();

// The flags (MS_NOSUID | MS_NODEV | MS_NOEXEC) and data of the tmpfs mount(2)
// that caps state/.
inline constexpr unsigned long kStateMountFlags = 0x2 | 0x4 | 0x8;  // NOLINT(runtime/int)
std::string StateMountData(int64_t size_mib, int64_t inodes);

struct StateDirOptions {
  // `create` false: paths are computed and checked but never made (the dirs
  // are then expected to exist, e.g. made by a runtime hook).
  bool create = true;
  // The tmpfs on each state/: its size in MiB (0: a plain directory, no cap)
  // and its most files (the root dir counts as one).
  int64_t size_mib = 0;
  int64_t inodes = 64;
  // Null: SystemMountCalls(). Must outlive the StateDirs.
  MountCalls* calls = nullptr;
  // Called once per StateDirs (its copies share it), from the first Create
  // that left state/ uncapped because the mount failed; `why` names the dir
  // and the error.
  std::function<void(const Status& why)> on_uncapped = {};
};

class StateDirs {
 public:
  // `create` false: paths are computed and checked but never made (the dirs
  // are then expected to exist, e.g. made by a runtime hook). No size cap.
  explicit StateDirs(std::string root, bool create = true);
  StateDirs(std::string root, StateDirOptions options);

  const std::string& root() const { return root_; }

  // The host dir of one container. kInvalidArgument when the uid or the name
  // is not plain or the path would not be a direct child of root.
  StatusOr<std::string> PathFor(const std::string& uid, const std::string& container) const;

  // PathFor, then makes the dir and its state/, caps state/ with a tmpfs
  // (size_mib > 0; not when state/ is a mount point already, or holds files:
  // they would be hidden), and gives state/ mode 1777 (again when it exists
  // with another mode). A mount that fails leaves state/ a plain directory
  // (on_uncapped), not an error. `*created` (optional) is set
  // true when this call made the dir, also when a later step then failed
  // (the caller removes it), and false when it existed already or create is
  // off. kInvalidArgument as PathFor; kUnavailable when it cannot be made,
  // or state/ is not a directory or cannot be given its mode.
  StatusOr<std::string> Create(const std::string& uid, const std::string& container,
                               bool* created = nullptr) const;

  // The read-write part of a container dir, and its read-only limits file.
  static std::string StateSubdir(const std::string& dir);
  static std::string LimitsFile(const std::string& dir);

  // Writes <dir>/limits (0644) whole, through a rename. `dir` must be a
  // direct child of root (as Create returns). kFailedPrecondition when this
  // object does not make dirs; kUnavailable when it cannot be written.
  Status WriteLimits(const std::string& dir, std::string_view content) const;

  // Removes the dir of one container (a missing dir is fine), detaching its
  // state/ first when that is a mount point. kInvalidArgument as PathFor;
  // kUnavailable when it cannot be detached or removed (a mount that cannot
  // be detached is left whole: removing its files would not free the dir).
  Status Remove(const std::string& uid, const std::string& container) const;

  // Removes every dir of the pod. REQUIRES: the pod is gone (a running
  // container may still use its dir). `*removed` (optional) counts them.
  // kUnavailable naming the first dir that could not be removed (the others
  // are still tried; the next Sweep tries again).
  Status RemovePod(const std::string& uid, size_t* removed = nullptr) const;

  // Removes the dirs whose pod uid is not in `live` and that were last
  // modified before `before`. `live` must come from a list of the node's pods
  // started after `before`: a dir made later may belong to a pod that list
  // does not show yet. A missing root is fine. Errors as RemovePod.
  Status Sweep(const std::set<std::string>& live, std::filesystem::file_time_type before,
               size_t* removed = nullptr) const;

  // The pod uids of the dirs Sweep(live, before) would remove now; removes
  // nothing. Empty when this object does not make dirs. kUnavailable when the
  // root cannot be listed.
  StatusOr<std::set<std::string>> Unlisted(const std::set<std::string>& live,
                                           std::filesystem::file_time_type before) const;

 private:
  // Mounts the tmpfs on `state` unless it is a mount point or holds files.
  void Cap(const std::string& state) const;

  std::string root_;  // without trailing separators
  bool create_;
  int64_t size_mib_ = 0;
  int64_t inodes_ = 64;
  MountCalls* calls_ = nullptr;
  std::function<void(const Status&)> on_uncapped_;
  std::shared_ptr<std::atomic<bool>> uncapped_said_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_STATE_DIRS_H_
