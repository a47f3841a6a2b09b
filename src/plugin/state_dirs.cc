#include "plugin/state_dirs.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "api/assignment_codec.h"

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
  if (ec) {
    return UnavailableError("cannot create the container state dir " + *path + ": " + ec.message() +
                            "; check that " + root_ + " is mounted writable into the plugin");
  }
  if (created != nullptr) {
    *created = made;
  }
  return path;
}

}  // namespace accelpool::plugin
