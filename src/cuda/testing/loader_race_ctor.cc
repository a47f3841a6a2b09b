// A library whose ELF constructor uses the driver through the shim, for the
// probe's "loaderrace" command. The probe dlopens it from a second thread,
// so the constructor runs while that thread holds the dynamic loader's lock
// (glibc runs the constructors of a dlopen inside it). Meanwhile the probe's
// main thread starts a step of the shim's initialisation that needs the same
// lock; the constructor waits until that thread sleeps on it, then looks an
// entry point up by dlsym and calls it.
//
// Environment (set by the probe; without it the constructor does nothing):
//   ACCELPOOL_LOADER_RACE_FD   a pipe: one byte is written when the constructor runs
//   ACCELPOOL_LOADER_RACE_TID  the thread to wait for
//   ACCELPOOL_LOADER_RACE_USE  "cuda" (cuMemAlloc_v2 of 64 MiB) or "nvml"
//                              (nvmlDeviceGetMemoryInfo of device 0)
// Prints "ctor_waited=<0|1> ctor_rc=<rc> ctor_total=<NVML total>" on stdout.
#include <dlfcn.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda/cuda_types.h"

namespace {

void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1'000'000};
  nanosleep(&ts, nullptr);
}

// The state letter of thread `tid` of this process (R, S, D...), '?' when
// it cannot be read.
char ThreadState(long tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return '?';
  }
  char buf[512];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return '?';
  }
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // The command name may hold anything.
  return paren != nullptr && paren[1] == ' ' ? paren[2] : '?';
}

__attribute__((constructor)) void UseTheDriverWhileLoading() {
  const char* fd_text = std::getenv("ACCELPOOL_LOADER_RACE_FD");
  const char* tid_text = std::getenv("ACCELPOOL_LOADER_RACE_TID");
  const char* use = std::getenv("ACCELPOOL_LOADER_RACE_USE");
  if (fd_text == nullptr || tid_text == nullptr || use == nullptr) {
    return;
  }
  char go = 1;
  if (write(std::atoi(fd_text), &go, 1) != 1) {
    return;
  }
  // The main thread spins until it has read the byte, then goes into the
  // shim: asleep from then on means waiting for the loader's lock, which
  // this thread holds. (Unreadable, as under some emulators: a fixed wait.)
  long tid = std::atol(tid_text);
  int waited = 0;
  for (int i = 0; i < 5000 && waited == 0; ++i) {
    char state = ThreadState(tid);
    if (state == '?') {
      SleepMs(200);
      break;
    }
    waited = state == 'S' || state == 'D' ? 1 : 0;
    if (waited == 0) {
      SleepMs(1);
    }
  }
  SleepMs(50);
  int rc = -1;
  unsigned long long total = 0;
  if (std::strcmp(use, "nvml") == 0) {
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    auto info =
        nvml == nullptr
            ? nullptr
            : reinterpret_cast<nvmlDeviceGetMemoryInfoFn>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
    nvmlMemory_t memory{};
    if (info != nullptr) {
      // The fake NVML's handle of device 0 (testing/fake_nvml.cc).
      rc = info(reinterpret_cast<nvmlDevice_t>(uintptr_t{0x100}), &memory);
      total = memory.total;
    }
  } else {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
    auto alloc =
        cuda == nullptr ? nullptr : reinterpret_cast<cuMemAllocFn>(dlsym(cuda, "cuMemAlloc_v2"));
    CUdeviceptr p = 0;
    if (alloc != nullptr) {
      rc = alloc(&p, 64ULL << 20);
    }
  }
  std::printf("ctor_waited=%d ctor_rc=%d ctor_total=%llu\n", waited, rc, total);
  std::fflush(stdout);
}

}  // namespace
