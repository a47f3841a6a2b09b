// A second preloaded interposer, loaded after the shim, that wraps getpid()
// the usual way: dlsym(RTLD_NEXT, "getpid"). If the shim's dlsym resolved
// RTLD_NEXT relative to itself instead of to this library, the wrapper would
// get itself back and recurse until the stack overflows.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>

extern "C" __attribute__((visibility("default"))) pid_t getpid(void) {
  using GetpidFn = pid_t (*)();
  static std::atomic<GetpidFn> real{nullptr};
  GetpidFn fn = real.load();
  if (fn == nullptr) {
    fn = reinterpret_cast<GetpidFn>(dlsym(RTLD_NEXT, "getpid"));
    real.store(fn);
  }
  return fn();
}
