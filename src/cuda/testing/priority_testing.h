// Test helpers that play the device plugin's side of the priority file
// (priority_format.h): create it as the plugin does, write a deadline, read
// a counter, all through pread/pwrite as the plugin does from outside.
//
// Thread-safety: plain functions; concurrent calls on one file are fine (each
// field is written with one 8-byte pwrite).
#ifndef ACCELPOOL_CUDA_TESTING_PRIORITY_TESTING_H_
#define ACCELPOOL_CUDA_TESTING_PRIORITY_TESTING_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "cuda/priority_format.h"

namespace accelpool::cuda::testing {

inline std::string PriorityPath(const std::string& dir) { return dir + "/" + kPriorityFileName; }

// Writes `bytes` bytes of a priority file: the header given, the rest zero.
inline bool WritePriorityFile(const std::string& path, uint64_t magic = kPriorityMagic,
                              uint32_t version = kPriorityLayoutVersion,
                              uint32_t size = kPriorityFileSize, size_t bytes = kPriorityFileSize) {
  PriorityLayout layout{};
  layout.magic = magic;
  layout.version = version;
  layout.size = size;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    return false;
  }
  bool ok = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  size_t header = bytes < sizeof(layout) ? bytes : sizeof(layout);
  ok = ok && pwrite(fd, &layout, header, 0) == static_cast<ssize_t>(header);
  close(fd);
  return ok;
}

inline bool PwriteU64(const std::string& path, size_t offset, uint64_t value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  bool ok = pwrite(fd, &value, sizeof(value), static_cast<off_t>(offset)) ==
            static_cast<ssize_t>(sizeof(value));
  close(fd);
  return ok;
}

inline uint64_t PreadU64(const std::string& path, size_t offset) {
  uint64_t value = ~uint64_t{0};
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (pread(fd, &value, sizeof(value), static_cast<off_t>(offset)) != sizeof(value)) {
      value = ~uint64_t{0};
    }
    close(fd);
  }
  return value;
}

// CLOCK_MONOTONIC, the plugin's and the shim's clock for deadlines.
inline uint64_t MonotonicNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace accelpool::cuda::testing

#endif  // ACCELPOOL_CUDA_TESTING_PRIORITY_TESTING_H_
