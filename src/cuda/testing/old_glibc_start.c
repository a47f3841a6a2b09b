// Lets a test program built on this machine start under any glibc from 2.17
// on, so that the shim tests can run the probe on the C libraries of older
// container images (tests/cuda/old_glibc.sh).
//
// Since glibc 2.34 the start files (Scrt1.o) call __libc_start_main@GLIBC_2.34
// and pass no init function: the new __libc_start_main runs the program's
// constructors itself. Older glibc has only __libc_start_main@GLIBC_2.2.5,
// which runs just the init function it is handed. Linked with
// -Wl,--wrap=__libc_start_main, the start files call this wrapper instead; it
// calls the oldest version and hands it an init function that runs the
// program's constructors, which every glibc does for a caller of that
// version.
#include <stddef.h>

typedef void (*InitFn)(int, char**, char**);
typedef int (*MainFn)(int, char**, char**);

extern InitFn __preinit_array_start[] __attribute__((visibility("hidden")));
extern InitFn __preinit_array_end[] __attribute__((visibility("hidden")));
extern InitFn __init_array_start[] __attribute__((visibility("hidden")));
extern InitFn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);

int accelpool_libc_start_main_2_2_5(MainFn, int, char**, InitFn, void (*)(void), void (*)(void),
                                    void*);
#if defined(__x86_64__)
__asm__(".symver accelpool_libc_start_main_2_2_5,__libc_start_main@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver accelpool_libc_start_main_2_2_5,__libc_start_main@GLIBC_2.17");
#endif

static void RunConstructors(int argc, char** argv, char** envp) {
  for (InitFn* f = __preinit_array_start; f < __preinit_array_end; ++f) {
    (*f)(argc, argv, envp);
  }
  _init();
  for (InitFn* f = __init_array_start; f < __init_array_end; ++f) {
    (*f)(argc, argv, envp);
  }
}

int __wrap___libc_start_main(MainFn main_fn, int argc, char** argv, InitFn init, void (*fini)(void),
                             void (*rtld_fini)(void), void* stack_end) {
  (void)init;  // NULL from glibc 2.34's start files.
  return accelpool_libc_start_main_2_2_5(main_fn, argc, argv, RunConstructors, fini, rtld_fini,
                                         stack_end);
}
