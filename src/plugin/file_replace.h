// Replacing a file that other processes read or map, so that none of them
// ever sees a partial or changed file: the new content is written whole to a
// temporary file in the same directory, then renamed over the old one. A
// process that has the old file open or mapped (a container's bind mount of
// it, a library loaded from it) keeps the old inode and its content; what
// opens the path afterwards gets the new one.
#ifndef ACCELPOOL_PLUGIN_FILE_REPLACE_H_
#define ACCELPOOL_PLUGIN_FILE_REPLACE_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/status.h"

namespace accelpool::plugin {

struct ReplaceOptions {
  std::filesystem::perms perms =
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
      std::filesystem::perms::group_read | std::filesystem::perms::others_read;
  // fsync the file before the rename and the directory after it, so that a
  // crash of the node leaves the old content or the new, never an empty file.
  bool durable = false;
};

// The whole content of the regular file `path`, read with read(2) (a stream
// would throw on some read errors). Refuses anything that is not a regular
// file or is larger than `max_bytes`.
StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes);

// Puts `content` at `path` unless it already holds exactly that (then
// nothing is written, *written = false, and only a mode other than
// `options.perms` is changed). Leaves no temporary file behind on
// failure. The error names the path and the system's reason.
Status ReplaceFileIfChanged(const std::string& path, std::string_view content,
                            const ReplaceOptions& options, bool* written);

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_FILE_REPLACE_H_
