// A library linked with a SysV hash table only (--hash-style=sysv, no
// DT_GNU_HASH), for elf_lookup_test: the shim's dlsym(RTLD_NEXT) emulation
// must find definitions in such objects too. It also references getpid
// without defining it.
#include <unistd.h>

extern "C" {
__attribute__((visibility("default"))) int accelpool_sysv_value = 7;
}

extern "C" __attribute__((visibility("default"))) int accelpool_sysv_function() {
  return static_cast<int>(getpid()) + accelpool_sysv_value;
}
