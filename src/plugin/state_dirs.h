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
// The object holds nothing but its root; several instances over one root are
// fine. Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_STATE_DIRS_H_
#define ACCELPOOL_PLUGIN_STATE_DIRS_H_

#include <cstddef>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace accelpool::plugin {

// True when `path`, normalised lexically, is `root` (normalised) plus exactly
// one more component that is neither "." nor "..". Symlinks are not resolved:
// only the plugin writes directly in root.
bool IsDirectChild(std::string_view root, std::string_view path);

class StateDirs {
 public:
  // `create` false: paths are computed and checked but never made (the dirs
  // are then expected to exist, e.g. made by a runtime hook).
  explicit StateDirs(std::string root, bool create = true);

  const std::string& root() const { return root_; }

  // The host dir of one container. kInvalidArgument when the uid or the name
  // is not plain or the path would not be a direct child of root.
  StatusOr<std::string> PathFor(const std::string& uid, const std::string& container) const;

  // PathFor, then makes the dir and its state/, and gives state/ mode 1777
  // (again when it exists with another mode). `*created` (optional) is set
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

  // Removes the dir of one container (a missing dir is fine). kInvalidArgument
  // as PathFor; kUnavailable when it cannot be removed.
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
  std::string root_;  // without trailing separators
  bool create_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_STATE_DIRS_H_
