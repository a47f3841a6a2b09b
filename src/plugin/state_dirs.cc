#include "plugin/state_dirs.h"

#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>

#include "api/assignment_codec.h"
#include "plugin/file_replace.h"

namespace accelpool::plugin {
namespace {

namespace fs = std::filesystem;

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
    const std::string& root,
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
    std::error_code rm_ec;
    fs::remove_all(entry.path(), rm_ec);
    if (rm_ec) {
      if (first.ok()) {
        first = UnavailableError("cannot remove the container state dir " + entry.path().string() +
                                 ": " + rm_ec.message());
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

StateDirs::StateDirs(std::string root, bool create) : create_(create) {
  while (root.size() > 1 && root.back() == '/') {
    root.pop_back();
  }
  root_ = std::move(root);
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
  const fs::file_status st = fs::symlink_status(state, ec);
  if (ec || st.type() != fs::file_type::directory) {
    return UnavailableError("the container state dir " + state + " is not a directory" +
                            (ec ? ": " + ec.message() : std::string()) + "; remove it");
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
  std::error_code ec;
  fs::remove_all(*path, ec);
  if (ec) {
    return UnavailableError("cannot remove the container state dir " + *path + ": " + ec.message());
  }
  return Status::Ok();
}

Status StateDirs::RemovePod(const std::string& uid, size_t* removed) const {
  if (removed != nullptr) {
    *removed = 0;
  }
  if (!create_ || !api::CheckPodUid(uid).ok()) {
    return Status::Ok();  // never made a dir for it
  }
  return RemoveWhere(
      root_, [&uid](const std::string& of, const fs::directory_entry&) { return of == uid; },
      removed);
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
      root_,
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
      root_,
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
