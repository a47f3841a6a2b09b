#include "plugin/file_replace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace accelpool::plugin {
namespace fs = std::filesystem;

namespace {

std::string Errno() { return std::strerror(errno); }

// Writes all of `data` to `fd`; false with errno set on failure.
bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return NotFoundError("cannot open " + path + ": " + Errno());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + " is not a regular file");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return OutOfRangeError(path + " is " + std::to_string(st.st_size) + " bytes, more than " +
                           std::to_string(max_bytes));
  }
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = Errno();
      ::close(fd);
      return UnavailableError("reading " + path + " failed: " + why);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      ::close(fd);
      return OutOfRangeError(path + " grew past " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

Status ReplaceFileIfChanged(const std::string& path, std::string_view content,
                            const ReplaceOptions& options, bool* written) {
  *written = false;
  StatusOr<std::string> current = ReadRegularFile(path, static_cast<int64_t>(content.size()));
  if (current.ok() && *current == content) {
    // Same bytes: the file stays (same inode); only its mode is put right.
    std::error_code ec;
    if (fs::status(path, ec).permissions() != options.perms && !ec) {
      fs::permissions(path, options.perms, fs::perm_options::replace, ec);
    }
    return Status::Ok();
  }
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return UnavailableError("cannot create " + tmp + ": " + Errno() +
                            "; check that its directory exists and is mounted writable");
  }
  bool ok = WriteAll(fd, content) && (!options.durable || ::fsync(fd) == 0);
  std::string why = ok ? std::string() : Errno();
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = Errno();
  }
  std::error_code ec;
  if (ok) {
    fs::permissions(tmp, options.perms, fs::perm_options::replace, ec);
    if (!ec) {
      fs::rename(tmp, path, ec);
    }
    if (ec) {
      ok = false;
      why = ec.message();
    }
  }
  if (!ok) {
    fs::remove(tmp, ec);
    return UnavailableError("cannot replace " + path + ": " + why);
  }
  if (options.durable) {
    const std::string dir = fs::path(path).parent_path().string();
    int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  *written = true;
  return Status::Ok();
}

}  // namespace accelpool::plugin
