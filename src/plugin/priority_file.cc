#include "plugin/priority_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "cuda/priority_format.h"
#include "plugin/unique_fd.h"

namespace accelpool::plugin {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// pread or pwrite of all `len` bytes at `at`, resumed after EINTR and short
// counts; false at end of file or on an error.
template <typename Byte, typename Io>
bool FullIo(Io io, int fd, Byte* p, size_t len, off_t at) {
  while (len > 0) {
    const ssize_t n = io(fd, p, len, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
    at += n;
  }
  return true;
}

bool FullPread(int fd, void* buf, size_t len, off_t at) {
  return FullIo(pread, fd, static_cast<unsigned char*>(buf), len, at);
}

bool FullPwrite(int fd, const void* buf, size_t len, off_t at) {
  return FullIo(pwrite, fd, static_cast<const unsigned char*>(buf), len, at);
}

cuda::PriorityLayout FreshLayout() {
  cuda::PriorityLayout l;
  std::memset(&l, 0, sizeof(l));
  l.magic = cuda::kPriorityMagic;
  l.version = cuda::kPriorityLayoutVersion;
  l.size = static_cast<uint32_t>(cuda::kPriorityFileSize);
  return l;
}

// Opens the file for pread/pwrite after checking it is a regular file of the
// layout with its header. `flags`: O_RDONLY or O_RDWR.
StatusOr<int> OpenChecked(const std::string& state_dir, int flags) {
  const std::string path = PriorityFilePath(state_dir);
  // O_NONBLOCK: a FIFO put there by the container must not hang the plugin.
  const int fd = open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(path + " does not exist");
    if (errno == ELOOP) return FailedPreconditionError(path + " is a symbolic link; not used");
    return UnavailableError(Errno("cannot open " + path));
  }
  UniqueFd guard(fd);
  struct stat st = {};
  if (fstat(fd, &st) != 0) return UnavailableError(Errno("cannot stat " + path));
  if (!S_ISREG(st.st_mode)) return FailedPreconditionError(path + " is not a regular file");
  if (static_cast<size_t>(st.st_size) != cuda::kPriorityFileSize) {
    return FailedPreconditionError(path + " has " + std::to_string(st.st_size) +
                                   " bytes, the priority layout " +
                                   std::to_string(cuda::kPriorityFileSize));
  }
  cuda::PriorityLayout head;
  if (!FullPread(fd, &head, offsetof(cuda::PriorityLayout, launches), 0)) {
    return UnavailableError(Errno("cannot read " + path));
  }
  if (head.magic != cuda::kPriorityMagic || head.version != cuda::kPriorityLayoutVersion ||
      head.size != cuda::kPriorityFileSize) {
    return FailedPreconditionError(path + " does not hold the priority layout (header)");
  }
  return guard.release();
}

Status CheckOrdinal(int ordinal) {
  if (ordinal < 0 || ordinal >= cuda::kMaxDevices) {
    return InvalidArgumentError("CUDA ordinal " + std::to_string(ordinal) + " is out of range");
  }
  return Status::Ok();
}

// The 8-byte field of `ordinal` at offset(ordinal).
StatusOr<uint64_t> ReadField(const std::string& state_dir, int ordinal, size_t (*offset)(int)) {
  ACCELPOOL_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  StatusOr<int> fd = OpenChecked(state_dir, O_RDONLY);
  if (!fd.ok()) return fd.status();
  UniqueFd guard(*fd);
  uint64_t v = 0;
  if (!FullPread(*fd, &v, sizeof(v), static_cast<off_t>(offset(ordinal)))) {
    return UnavailableError(Errno("cannot read " + state_dir + "/" + cuda::kPriorityFileName));
  }
  return v;
}

}  // namespace

std::string PriorityFilePath(const std::string& state_dir) {
  return state_dir + "/" + cuda::kPriorityFileName;
}

Status EnsurePriorityFile(const std::string& state_dir) {
  StatusOr<int> existing = OpenChecked(state_dir, O_RDONLY);
  if (existing.ok()) {
    close(*existing);
    return Status::Ok();  // a running container may map it: kept
  }
  const std::string path = PriorityFilePath(state_dir);
  UniqueFd dir(open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) return UnavailableError(Errno("cannot open " + state_dir));
  // The dir is writable by the container: a fresh name, created exclusively
  // (O_EXCL never follows a link put there), then renamed over the path.
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    tmp = std::string(".") + cuda::kPriorityFileName + "." + std::to_string(rd()) + ".tmp";
    fd = openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return UnavailableError(Errno("cannot create a file in " + state_dir));
  UniqueFd file(fd);
  const cuda::PriorityLayout fresh = FreshLayout();
  // fchmod: the container may run as any user, and umask must not narrow it.
  if (fchmod(fd, 0666) != 0 || !FullPwrite(fd, &fresh, sizeof(fresh), 0) ||
      renameat(dir.get(), tmp.c_str(), dir.get(), cuda::kPriorityFileName) != 0) {
    const std::string why = Errno("cannot write " + path);
    unlinkat(dir.get(), tmp.c_str(), 0);
    return UnavailableError(why);
  }
  return Status::Ok();
}

StatusOr<uint64_t> ReadLaunches(const std::string& state_dir, int ordinal) {
  return ReadField(state_dir, ordinal, cuda::LaunchesOffset);
}

StatusOr<uint64_t> ReadHold(const std::string& state_dir, int ordinal) {
  return ReadField(state_dir, ordinal, cuda::HoldOffset);
}

Status WriteHold(const std::string& state_dir, int ordinal, uint64_t hold_until_ns) {
  ACCELPOOL_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  StatusOr<int> fd = OpenChecked(state_dir, O_RDWR);
  if (!fd.ok()) return fd.status();
  UniqueFd guard(*fd);
  if (!FullPwrite(*fd, &hold_until_ns, sizeof(hold_until_ns),
                  static_cast<off_t>(cuda::HoldOffset(ordinal)))) {
    return UnavailableError(Errno("cannot write " + PriorityFilePath(state_dir)));
  }
  return Status::Ok();
}

}  // namespace accelpool::plugin
