// Binds the shim's references into the C library to the oldest symbol
// versions that provide them, so that one build loads into containers of any
// glibc from 2.17 on (UBI 8 has 2.28, Ubuntu 20.04 2.31), not only into those
// at least as new as the build machine's. Without this, a shim built against
// glibc 2.34+ references dlopen@GLIBC_2.34 and friends, and through
// /etc/ld.so.preload every process of an older image would fail to start.
//
// glibc 2.34 moved libdl and libpthread into libc and kept the old versions
// there as compatibility symbols; before 2.34 the same versioned symbols live
// in libdl.so.2 and libpthread.so.0, which the shim therefore lists as
// DT_NEEDED (they are empty stubs on newer systems). Included into every
// translation unit of the shim through -include (src/cuda/CMakeLists.txt);
// cuda_test checks the resulting version references. dlsym is not pinned
// for the shim: it defines its own (the interposer) and finds the real one
// with dlvsym. The test programs that run under older glibc
// (tests/cuda/old_glibc.sh) call dlsym and define ACCELPOOL_GLIBC_PIN_DLSYM.
#ifndef ACCELPOOL_CUDA_GLIBC_COMPAT_H_
#define ACCELPOOL_CUDA_GLIBC_COMPAT_H_

#if defined(__GLIBC__) || defined(__linux__)
#define ACCELPOOL_GLIBC_PIN(sym, ver) __asm__(".symver " #sym "," #sym "@" ver)

#if defined(__x86_64__)
ACCELPOOL_GLIBC_PIN(dladdr, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(dladdr1, "GLIBC_2.3.3");
ACCELPOOL_GLIBC_PIN(dlerror, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(dlopen, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(dlvsym, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(pthread_once, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(pthread_mutex_consistent, "GLIBC_2.12");
ACCELPOOL_GLIBC_PIN(pthread_mutex_trylock, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(pthread_kill, "GLIBC_2.2.5");  // the test programs (signals)
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_init, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_destroy, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_setpshared, "GLIBC_2.2.5");
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_setrobust, "GLIBC_2.12");
#ifdef ACCELPOOL_GLIBC_PIN_DLSYM
ACCELPOOL_GLIBC_PIN(dlsym, "GLIBC_2.2.5");
#endif
#elif defined(__aarch64__)
// 2.17 is the first glibc for 64-bit Arm: every symbol has that version.
ACCELPOOL_GLIBC_PIN(dladdr, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(dladdr1, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(dlerror, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(dlopen, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(dlvsym, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_once, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_mutex_consistent, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_mutex_trylock, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_kill, "GLIBC_2.17");  // the test programs (signals)
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_init, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_destroy, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_setpshared, "GLIBC_2.17");
ACCELPOOL_GLIBC_PIN(pthread_mutexattr_setrobust, "GLIBC_2.17");
#ifdef ACCELPOOL_GLIBC_PIN_DLSYM
ACCELPOOL_GLIBC_PIN(dlsym, "GLIBC_2.17");
#endif
#endif

#undef ACCELPOOL_GLIBC_PIN
#endif

#endif  // ACCELPOOL_CUDA_GLIBC_COMPAT_H_
