#include "cuda/priority_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace accelpool::cuda {
namespace {

// The file's type and size through the fstat system call: the C library's
// fstat is a GLIBC_2.33 symbol (glibc_compat.h), and on x86-64 and 64-bit
// Arm the kernel's struct stat is the C library's. Where the call is
// missing, the type is taken on trust and the size comes from lseek; the
// size and header checks still apply.
bool FileTypeAndSize(int fd, bool* regular, off_t* size) {
#if defined(SYS_fstat) && (defined(__x86_64__) || defined(__aarch64__))
  struct stat st;
  if (syscall(SYS_fstat, fd, &st) != 0) {
    return false;
  }
  *regular = S_ISREG(st.st_mode);
  *size = st.st_size;
  return true;
#else
  *regular = true;
  *size = lseek(fd, 0, SEEK_END);
  return *size >= 0;
#endif
}

}  // namespace

PriorityLayout* MapPriorityFile(const char* dir, char* error, size_t error_len) {
  char path[kMaxPathLen + 32];
  std::snprintf(path, sizeof(path), "%s/%s", dir, kPriorityFileName);
  // Never created here: the device plugin creates it, and a file the shim
  // made up would hold nothing and count for no one. O_NOFOLLOW: the
  // container could put a link there to any file it can write.
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) {
      std::snprintf(error, error_len, "the priority file %s is missing", path);
    } else if (e == ELOOP) {
      std::snprintf(error, error_len, "the priority file %s is a symbolic link", path);
    } else {
      std::snprintf(error, error_len, "cannot open the priority file %s: %s", path,
                    std::strerror(e));
    }
    return nullptr;
  }
  bool regular = false;
  off_t size = -1;
  if (!FileTypeAndSize(fd, &regular, &size)) {
    std::snprintf(error, error_len, "cannot read the type of the priority file %s: %s", path,
                  std::strerror(errno));
    close(fd);
    return nullptr;
  }
  if (!regular) {
    std::snprintf(error, error_len, "the priority file %s is not a regular file", path);
    close(fd);
    return nullptr;
  }
  if (size != static_cast<off_t>(kPriorityFileSize)) {
    std::snprintf(error, error_len, "the priority file %s has %lld bytes, not %zu", path,
                  static_cast<long long>(size), kPriorityFileSize);  // NOLINT: printf's type.
    close(fd);
    return nullptr;
  }
  void* mem = mmap(nullptr, kPriorityFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_errno = errno;
  close(fd);  // The mapping keeps the file; no lock lives on the descriptor.
  if (mem == MAP_FAILED) {
    std::snprintf(error, error_len, "cannot map the priority file %s: %s", path,
                  std::strerror(map_errno));
    return nullptr;
  }
  auto* layout = static_cast<PriorityLayout*>(mem);
  const uint64_t magic = __atomic_load_n(&layout->magic, __ATOMIC_RELAXED);
  const uint32_t version = __atomic_load_n(&layout->version, __ATOMIC_RELAXED);
  const uint32_t header_size = __atomic_load_n(&layout->size, __ATOMIC_RELAXED);
  if (magic != kPriorityMagic || version != kPriorityLayoutVersion ||
      header_size != kPriorityFileSize) {
    munmap(mem, kPriorityFileSize);
    std::snprintf(error, error_len,
                  "the priority file %s has another header (magic %#llx, version %u, size %u; "
                  "this library reads version %u)",
                  path, static_cast<unsigned long long>(magic),  // NOLINT: printf's type.
                  version, header_size, kPriorityLayoutVersion);
    return nullptr;
  }
  return layout;
}

void UnmapPriorityFile(PriorityLayout* layout) {
  if (layout != nullptr) {
    munmap(static_cast<void*>(layout), kPriorityFileSize);
  }
}

int64_t HoldStepNs(uint64_t hold_until_ns, uint64_t now_ns) {
  if (!HoldsAt(hold_until_ns, now_ns)) {
    return 0;
  }
  const uint64_t left = hold_until_ns - now_ns;
  return left < static_cast<uint64_t>(kHoldStepNs) ? static_cast<int64_t>(left) : kHoldStepNs;
}

}  // namespace accelpool::cuda
