// Shared by the fake vendor libraries the binding tests load with dlopen:
// what the test configures through the exported accelpool_fake_configure.
// Each fake is its own shared library, so each has its own copy of this
// state, like the real vendor library it stands in for.
#ifndef ACCELPOOL_VENDORS_TESTLIBS_FAKE_CONTROL_H_
#define ACCELPOOL_VENDORS_TESTLIBS_FAKE_CONTROL_H_

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace accelpool_fake {

// Atomic: a test changes it while the driver's health thread reads it.
struct Control {
  std::atomic<int> count{8};          // devices the library reports
  std::atomic<int> fail_device{-1};   // per-device queries of this index fail
  std::atomic<int> fault_device{-1};  // this device reports a fault in its health query
  std::atomic<int> init_error{0};     // status the init call returns
};

// ACCELPOOL_FAKE_COUNT in the environment sets the starting device count, for
// tests that load a fake into another process (the device plugin binary).
inline Control& State() {
  static Control* const c = [] {
    auto* init = new Control();
    if (const char* n = std::getenv("ACCELPOOL_FAKE_COUNT"); n != nullptr) {
      init->count = std::atoi(n);
    }
    return init;
  }();
  return *c;
}

inline bool Fails(unsigned i) { return static_cast<int>(i) == State().fail_device; }

// Memory processes hold on each device, MiB, as accelpool_fake_used set it;
// -1 (the start): the fake's own idle figure.
inline std::array<std::atomic<long long>, 64>& UsedTable() {     // NOLINT(runtime/int)
  static std::array<std::atomic<long long>, 64>* const t = [] {  // NOLINT(runtime/int)
    auto* a = new std::array<std::atomic<long long>, 64>();      // NOLINT(runtime/int)
    for (auto& v : *a) v = -1;
    return a;
  }();
  return *t;
}
// The figure device i reports: the one set, else `idle`.
inline long long UsedOr(unsigned i, long long idle) {  // NOLINT(runtime/int)
  if (i >= 64) return idle;
  const long long v = UsedTable()[i];  // NOLINT(runtime/int)
  return v >= 0 ? v : idle;
}
inline bool Valid(unsigned i) { return static_cast<int>(i) < State().count; }

// Processes holding memory on the fake's devices, for the libraries that list
// them: added by the test (device -1 clears them), or listed once in the
// environment variable a fake names, "device:pid:mib,...", for a fake loaded
// into another process (the device plugin binary).
struct FakeProcess {
  int device;
  unsigned pid;
  long long mib;  // NOLINT(runtime/int)
};
class ProcessTable {
 public:
  static constexpr int kMax = 64;
  explicit ProcessTable(const char* env) {
    const char* list = env != nullptr ? std::getenv(env) : nullptr;
    for (const char* at = list; at != nullptr && *at != '\0';) {
      int device = 0;
      unsigned pid = 0;
      long long mib = 0;  // NOLINT(runtime/int)
      if (std::sscanf(at, "%d:%u:%lld", &device, &pid, &mib) == 3) Add(device, pid, mib);
      at = std::strchr(at, ',');
      if (at != nullptr) ++at;
    }
  }
  void Add(int device, unsigned pid, long long mib) {  // NOLINT(runtime/int)
    if (device < 0) {
      count_ = 0;
    } else if (count_ < kMax) {
      rows_[count_++] = {device, pid, mib};
    }
  }
  const FakeProcess* begin() const { return rows_; }
  const FakeProcess* end() const { return rows_ + count_; }

 private:
  FakeProcess rows_[kMax] = {};
  int count_ = 0;
};

inline void CopyString(char* dst, unsigned size, const char* src) {
  if (size == 0) return;
  size_t n = std::strlen(src);
  if (n >= size) n = size - 1;
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}

}  // namespace accelpool_fake

#define ACCELPOOL_FAKE_CONTROL_EXPORT                                                            \
  extern "C" __attribute__((visibility("default"))) void accelpool_fake_configure(               \
      int count, int fail_device, int fault_device, int init_error) {                            \
    accelpool_fake::Control& c = accelpool_fake::State();                                        \
    c.count = count;                                                                             \
    c.fail_device = fail_device;                                                                 \
    c.fault_device = fault_device;                                                               \
    c.init_error = init_error;                                                                   \
  }                                                                                              \
  extern "C" __attribute__((visibility("default"))) void accelpool_fake_used(int dev, int mib) { \
    if (dev >= 0 && dev < 64) accelpool_fake::UsedTable()[dev] = mib;                            \
  }

#endif  // ACCELPOOL_VENDORS_TESTLIBS_FAKE_CONTROL_H_
