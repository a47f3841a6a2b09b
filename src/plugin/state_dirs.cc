#include "plugin/state_dirs.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>

#include "api/assignment_codec.h"
#include "plugin/file_replace.h"

namespace accelpool::plugin {
namespace {

namespace fs = std::filesystem;

static_assert(kStateMountFlags == (MS_NOSUID | MS_NODEV | MS_NOEXEC));

class SystemCalls final : public MountCalls {
 public:
  int Mount(const std::string& source, const std::string& target, const std::string& fstype,
            unsigned long flags, const std::string& data) override {  // NOLINT(runtime/int)
    return mount(source.c_str(), target.c_str(), fstype.c_str(), flags, data.c_str()) == 0 ? 0
                                                                                           : errno;
  }
  int Detach(const std::string& target) override {
    return umount2(target.c_str(), MNT_DETACH) == 0 ? 0 : errno;
  }
  int IsMountPoint(const std::string& path, bool* is) override {
    *is = false;
    struct stat self = {};
    struct stat parent = {};
    if (lstat(path.c_str(), &self) != 0 || lstat((path + "/..").c_str(), &parent) != 0) {
      return errno;
    }
    *is = S_ISDIR(self.st_mode) && self.st_dev != parent.st_dev;
    return 0;
  }
};

// Detaches `state` when it is a mount point (a missing one is fine).
Status DetachIfMounted(MountCalls* calls, const std::string& state) {
  bool mounted = false;
  int err = calls->IsMountPoint(state, &mounted);
  // Missing, or a path too long to name: nothing was mounted there (a mount
  // takes the same path).
  if (err == ENOENT || err == ENOTDIR || err == ENAMETOOLONG) {
    return Status::Ok();
  }
  if (err == 0 && mounted) {
    err = calls->Detach(state);
  }
  if (err != 0) {
    return UnavailableError("cannot unmount the container state dir " + state + ": " +
                            std::strerror(err) +
                            "; the plugin needs CAP_SYS_ADMIN to remove a capped state dir");
  }
  return Status::Ok();
}

// Removes one container dir: its state/ detached first, so that remove_all
// neither descends into a live tmpfs nor fails on its mount point.
Status RemoveDir(MountCalls* calls, const std::string& dir) {
  ACCELPOOL_RETURN_IF_ERROR(DetachIfMounted(calls, StateDirs::StateSubdir(dir)));
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) {
    return UnavailableError("cannot remove the container state dir " + dir + ": " + ec.message());
  }
  return Status::Ok();
}

// Normal form without a trailing separator ("/a/b/" -> "/a/b"), so that the
// component-wise comparison below is not thrown off by an empty last element.
fs::path Normal(std::string_view p) {
  fs::path n = fs::path(p).lexically_normal();
  if (!n.has_filename() && n.has_parent_path() && n != n.root_path()) {
    n = n.parent_path();
  }
  return n;
}

// The pod uid of a dir we made, "" for any other entry of the root.
std::string UidOf(const fs::path& entry) {
  const std::string name = entry.filename().string();
  const size_t sep = name.find('_');
  if (sep == std::string::npos || !api::CheckPodUid(name.substr(0, sep)).ok() ||
      !api::CheckContainerName(name.substr(sep + 1)).ok()) {
    return "";
  }
  return name.substr(0, sep);
}

// Removes the dirs of the root for which `remove(uid, entry)` holds.
Status RemoveWhere(
    const std::string& root, MountCalls* calls,
    const std::function<bool(const std::string& uid, const fs::directory_entry&)>& remove,
    size_t* removed) {
  size_t n = 0;
  Status first;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) {
    if (removed != nullptr) {
      *removed = 0;
    }
    return ec == std::errc::no_such_file_or_directory
               ? Status::Ok()
               : UnavailableError("cannot list the state root " + root + ": " + ec.message());
  }
  // increment(ec), not a range-for: a readdir that fails would throw, and
  // this runs on the informer's thread (Forget) and in the main loop (Sweep).
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    const std::string uid = UidOf(entry.path());
    std::error_code type_ec;
    if (uid.empty() || entry.symlink_status(type_ec).type() != fs::file_type::directory ||
        !remove(uid, entry)) {
      continue;
    }
    if (Status st = RemoveDir(calls, entry.path().string()); !st.ok()) {
      if (first.ok()) {
        first = st;
      }
      continue;
    }
    ++n;
  }
  if (ec && first.ok()) {
    // The iterator is at its end now; the next sweep lists the root again.
    first = UnavailableError("cannot list the state root " + root + ": " + ec.message());
  }
  if (removed != nullptr) {
    *removed = n;
  }
  return first;
}

}  // namespace

bool IsDirectChild(std::string_view root, std::string_view path) {
  if (root.empty() || path.empty()) {
    return false;
  }
  const fs::path r = Normal(root);
  const fs::path p = Normal(path);
  auto ri = r.begin();
  auto pi = p.begin();
  for (; ri != r.end(); ++ri, ++pi) {
    if (pi == p.end() || *ri != *pi) {
      return false;
    }
  }
  if (pi == p.end()) {
    return false;  // root itself
  }
  const fs::path leaf = *pi;
  return ++pi == p.end() && !leaf.empty() && leaf != "." && leaf != "..";
}

MountCalls* SystemMountCalls() {
  static SystemCalls* const calls = new SystemCalls();  // never destroyed: no exit-time order
  return calls;
}

std::string StateMountData(int64_t size_mib, int64_t inodes) {
  return "size=" + std::to_string(size_mib) + "m,nr_inodes=" + std::to_string(inodes) +
         ",mode=1777";
}

StateDirs::StateDirs(std::string root, bool create)
    : StateDirs(std::move(root), StateDirOptions{.create = create}) {}

StateDirs::StateDirs(std::string root, StateDirOptions options)
    : create_(options.create),
      size_mib_(options.size_mib),
      inodes_(options.inodes),
      calls_(options.calls != nullptr ? options.calls : SystemMountCalls()),
      on_uncapped_(std::move(options.on_uncapped)),
      uncapped_said_(std::make_shared<std::atomic<bool>>(false)) {
  while (root.size() > 1 && root.back() == '/') {
    root.pop_back();
  }
  root_ = std::move(root);
}

void StateDirs::Cap(const std::string& state) const {
  bool mounted = false;
  int err = calls_->IsMountPoint(state, &mounted);
  if (err == 0 && mounted) {
    return;  // capped by an earlier call or run; its files may be in use
  }
  std::error_code ec;
  if (err == 0 && !fs::is_empty(state, ec) && !ec) {
    // Files of a container that runs (made before the cap was on): a tmpfs
    // over them would hide them from its new processes. Left uncapped, and
    // not reported: the pod's next dir is capped.
    return;
  }
  if (err == 0) {
    err = calls_->Mount("tmpfs", state, "tmpfs", kStateMountFlags,
                        StateMountData(size_mib_, inodes_));
  }
  if (err != 0 && on_uncapped_ && !uncapped_said_->exchange(true)) {
    on_uncapped_(UnavailableError("cannot mount a tmpfs of " + std::to_string(size_mib_) +
                                  " MiB on the container state dir " + state + ": " +
                                  std::strerror(err)));
  }
}

StatusOr<std::string> StateDirs::PathFor(const std::string& uid,
                                         const std::string& container) const {
  ACCELPOOL_RETURN_IF_ERROR(api::CheckPodUid(uid).WithPrefix("refusing the state dir"));
  ACCELPOOL_RETURN_IF_ERROR(
      api::CheckContainerName(container).WithPrefix("refusing the state dir"));
  const std::string path = (fs::path(root_) / (uid + "_" + container)).string();
  // Unreachable with the checks above; kept so that a future relaxation of
  // either check cannot turn into a write outside root.
  if (!IsDirectChild(root_, path)) {
    return InvalidArgumentError("refusing the state dir " + path + ": it is not directly under " +
                                root_);
  }
  return path;
}

StatusOr<std::string> StateDirs::Create(const std::string& uid, const std::string& container,
                                        bool* created) const {
  if (created != nullptr) {
    *created = false;
  }
  StatusOr<std::string> path = PathFor(uid, container);
  if (!path.ok() || !create_) {
    return path;
  }
  std::error_code ec;
  const bool made = fs::create_directories(*path, ec);
  // Said at once: when a later step fails, the caller removes the dir this
  // call made, and only that (one that existed is an earlier call's).
  if (created != nullptr) {
    *created = made;
  }
  if (ec) {
    return UnavailableError("cannot create the container state dir " + *path + ": " + ec.message() +
                            "; check that " + root_ + " is mounted writable into the plugin");
  }
  const std::string state = StateSubdir(*path);
  fs::create_directory(state, ec);
  if (ec) {
    return UnavailableError("cannot create the container state dir " + state + ": " + ec.message() +
                            "; check that " + root_ + " is mounted writable into the plugin");
  }
  // The container's processes create the region file in it, and they may
  // run as any user: a root-owned 0755 dir would make the shim fall back to
  // per-process limits (N processes, N caps). The dir belongs to this one
  // container, so it is world-writable, with the sticky bit. Its parent,
  // which holds the read-only limits file, is not mounted. Checked on every
  // call, not only when this call made it: an earlier call may have failed
  // between the mkdir and the chmod.
  constexpr fs::perms kOpen = fs::perms::all | fs::perms::sticky_bit;
  fs::file_status st = fs::symlink_status(state, ec);
  if (ec || st.type() != fs::file_type::directory) {
    return UnavailableError("the container state dir " + state + " is not a directory" +
                            (ec ? ": " + ec.message() : std::string()) + "; remove it");
  }
  if (size_mib_ > 0) {
    Cap(state);
    st = fs::symlink_status(state, ec);  // the tmpfs root, when mounted
    if (ec) {
      return UnavailableError("cannot read the container state dir " + state + ": " + ec.message());
    }
  }
  if ((st.permissions() & fs::perms::mask) != kOpen) {
    fs::permissions(state, kOpen, fs::perm_options::replace, ec);
    if (ec) {
      return UnavailableError("cannot open up the container state dir " + state + ": " +
                              ec.message() + "; check that " + root_ +
                              " is mounted writable into the plugin");
    }
  }
  return path;
}

std::string StateDirs::StateSubdir(const std::string& dir) { return dir + "/state"; }
std::string StateDirs::LimitsFile(const std::string& dir) { return dir + "/limits"; }

Status StateDirs::WriteLimits(const std::string& dir, std::string_view content) const {
  if (!create_) {
    return FailedPreconditionError("the plugin does not make the state dirs (create off)");
  }
  if (!IsDirectChild(root_, dir)) {
    return InvalidArgumentError("refusing the limits file of " + dir +
                                ": it is not directly under " + root_);
  }
  // Unchanged (kubelet's Allocate again for the same container): kept, as
  // replacing a file by rename makes ext4 flush it, a cost on every call.
  // Written whole, then renamed: the mount never shows a partial file.
  bool written = false;
  Status st = ReplaceFileIfChanged(LimitsFile(dir), content, ReplaceOptions(), &written);
  if (!st.ok()) {
    return st.WithPrefix("the limits file (check that " + root_ +
                         " is mounted writable into the plugin)");
  }
  return Status::Ok();
}

Status StateDirs::Remove(const std::string& uid, const std::string& container) const {
  StatusOr<std::string> path = PathFor(uid, container);
  if (!path.ok() || !create_) {
    return path.status();
  }
  return RemoveDir(calls_, *path);
}

Status StateDirs::RemovePod(const std::string& uid, size_t* removed) const {
  if (removed != nullptr) {
    *removed = 0;
  }
  if (!create_ || !api::CheckPodUid(uid).ok()) {
    return Status::Ok();  // never made a dir for it
  }
  return RemoveWhere(
      root_, calls_,
      [&uid](const std::string& of, const fs::directory_entry&) { return of == uid; }, removed);
}

namespace {

bool Stale(const std::set<std::string>& live, fs::file_time_type before, const std::string& uid,
           const fs::directory_entry& entry) {
  std::error_code ec;
  const fs::file_time_type modified = entry.last_write_time(ec);
  return live.count(uid) == 0 && !ec && modified < before;
}

}  // namespace

Status StateDirs::Sweep(const std::set<std::string>& live, fs::file_time_type before,
                        size_t* removed) const {
  if (removed != nullptr) {
    *removed = 0;
  }
  if (!create_) {
    return Status::Ok();
  }
  return RemoveWhere(
      root_, calls_,
      [&](const std::string& uid, const fs::directory_entry& entry) {
        return Stale(live, before, uid, entry);
      },
      removed);
}

StatusOr<std::set<std::string>> StateDirs::Unlisted(const std::set<std::string>& live,
                                                    fs::file_time_type before) const {
  std::set<std::string> out;
  if (!create_) {
    return out;
  }
  Status st = RemoveWhere(
      root_, calls_,
      [&](const std::string& uid, const fs::directory_entry& entry) {
        if (Stale(live, before, uid, entry)) {
          out.insert(uid);
        }
        return false;  // remove nothing
      },
      nullptr);
  if (!st.ok()) {
    return st;
  }
  return out;
}

}  // namespace accelpool::plugin
