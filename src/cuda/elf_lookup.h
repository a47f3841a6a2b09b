// FindDefinition: looks a symbol up in one loaded object by reading its ELF
// dynamic symbol table directly, with no allocation and no call into the
// dynamic loader's locking paths.
//
// The shim's dlsym(RTLD_NEXT, ...) emulation needs "the first object after
// the caller that defines `name`". Doing that with dlopen(RTLD_NOLOAD) per
// object would call malloc and intercepted loader functions from inside
// dlsym, which breaks runtimes that resolve their interceptors with
// dlsym(RTLD_NEXT) before they are ready (sanitizers, malloc replacements).
//
// Only the default version of a symbol is returned (hidden versions are
// skipped, as dlsym does); IFUNC symbols are resolved by calling their
// resolver. The GNU hash table (DT_GNU_HASH) is used where an object has
// one, else its SysV hash table (DT_HASH: objects linked with
// --hash-style=sysv). An object with neither (which the loader itself
// could not search) reports kNoIndex.
//
// Thread-safety: reads immutable loader data; safe from any thread.
#ifndef ACCELPOOL_CUDA_ELF_LOOKUP_H_
#define ACCELPOOL_CUDA_ELF_LOOKUP_H_

#include <link.h>

#include "cuda/uninstrumented.h"

namespace accelpool::cuda {

enum class ElfLookupResult { kFound, kNotFound, kNoIndex };

// Looks `name` up among the definitions of the object described by `map`.
ACCELPOOL_UNINSTRUMENTED ElfLookupResult FindDefinition(const struct link_map* map,
                                                        const char* name, void** address);

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_ELF_LOOKUP_H_
