#include "plugin/container_usage.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "plugin/unique_fd.h"

namespace accelpool::plugin {
namespace {

constexpr char kRegionFile[] = "accelpool-cuda.region";

}  // namespace

StatusOr<cuda::RegionUsage> ReadRegionFile(const std::string& state_dir, RegionReadFailure* why) {
  RegionReadFailure ignored = RegionReadFailure::kNone;
  RegionReadFailure& fail = why != nullptr ? *why : ignored;
  fail = RegionReadFailure::kNone;
  const std::string path = state_dir + "/" + kRegionFile;
  UniqueFd dir(open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) {
    if (errno == ENOENT) {
      fail = RegionReadFailure::kMissing;
      return NotFoundError(state_dir + " does not exist");
    }
    fail = RegionReadFailure::kIo;
    return UnavailableError("cannot open " + state_dir + ": " + std::strerror(errno));
  }
  // O_NONBLOCK: a FIFO put there by the container must not hang the caller.
  UniqueFd fd(
      openat(dir.get(), kRegionFile, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      fail = RegionReadFailure::kMissing;
      return NotFoundError(path + " does not exist yet");
    }
    if (errno == ELOOP) {
      fail = RegionReadFailure::kNotRegular;
      return FailedPreconditionError(path + " is a symbolic link; not read");
    }
    fail = RegionReadFailure::kIo;
    return UnavailableError("cannot open " + path + ": " + std::strerror(errno));
  }
  struct stat st = {};
  if (fstat(fd.get(), &st) != 0) {
    fail = RegionReadFailure::kIo;
    return UnavailableError("cannot stat " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    fail = RegionReadFailure::kNotRegular;
    return FailedPreconditionError(path + " is not a regular file; not read");
  }
  constexpr size_t kSize = sizeof(cuda::RegionLayout);
  if (static_cast<size_t>(st.st_size) != kSize) {
    fail = RegionReadFailure::kLayout;
    return FailedPreconditionError(path + " has " + std::to_string(st.st_size) +
                                   " bytes, the region layout " + std::to_string(kSize) +
                                   " (another libaccelpool-cuda version?)");
  }
  std::vector<unsigned char> bytes(kSize);
  size_t got = 0;
  while (got < kSize) {
    const ssize_t n = pread(fd.get(), bytes.data() + got, kSize - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fail = RegionReadFailure::kIo;
      return UnavailableError("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;  // truncated meanwhile
    got += static_cast<size_t>(n);
  }
  // A slot whose owner died (SIGKILL, or an exec) keeps its bytes until
  // another process of the container reclaims it; its dropped liveness lock
  // leaves it out at once.
  int probe_fd = fd.get();
  const cuda::SlotProbe probe = [](int slot, void* ctx) {
    return cuda::ProbeSlotLock(*static_cast<int*>(ctx), slot);
  };
  cuda::RegionUsage usage;
  if (got != kSize ||
      !cuda::ReadRegionUsage(bytes.data(), bytes.size(), &usage, probe, &probe_fd)) {
    fail = RegionReadFailure::kLayout;
    return FailedPreconditionError(path +
                                   " is not an accounting region of this layout (another "
                                   "libaccelpool-cuda version, or overwritten)");
  }
  return usage;
}

}  // namespace accelpool::plugin
