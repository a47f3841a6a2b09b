// Shared by the fake vendor libraries the binding tests load with dlopen:
// what the test configures through the exported accelpool_fake_configure.
// Each fake is its own shared library, so each has its own copy of this
// state, like the real vendor library it stands in for.
#ifndef ACCELPOOL_VENDORS_TESTLIBS_FAKE_CONTROL_H_
#define ACCELPOOL_VENDORS_TESTLIBS_FAKE_CONTROL_H_

#include <cstdlib>
#include <cstring>

namespace accelpool_fake {

struct Control {
  int count = 8;          // devices the library reports
  int fail_device = -1;   // per-device queries of this index fail
  int fault_device = -1;  // this device reports a fault in its health query
  int init_error = 0;     // status the init call returns
};

// ACCELPOOL_FAKE_COUNT in the environment sets the starting device count, for
// tests that load a fake into another process (the device plugin binary).
inline Control& State() {
  static Control c = [] {
    Control init;
    if (const char* n = std::getenv("ACCELPOOL_FAKE_COUNT"); n != nullptr) {
      init.count = std::atoi(n);
    }
    return init;
  }();
  return c;
}

inline bool Fails(unsigned i) { return static_cast<int>(i) == State().fail_device; }
inline bool Valid(unsigned i) { return static_cast<int>(i) < State().count; }

inline void CopyString(char* dst, unsigned size, const char* src) {
  if (size == 0) return;
  size_t n = std::strlen(src);
  if (n >= size) n = size - 1;
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}

}  // namespace accelpool_fake

#define ACCELPOOL_FAKE_CONTROL_EXPORT                                              \
  extern "C" __attribute__((visibility("default"))) void accelpool_fake_configure( \
      int count, int fail_device, int fault_device, int init_error) {              \
    accelpool_fake::State() = {count, fail_device, fault_device, init_error};      \
  }

#endif  // ACCELPOOL_VENDORS_TESTLIBS_FAKE_CONTROL_H_
