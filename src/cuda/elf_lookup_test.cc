#include "cuda/elf_lookup.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

namespace accelpool::cuda {
namespace {

const struct link_map* MapOf(const void* address) {
  Dl_info info;
  struct link_map* map = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) {
    return nullptr;
  }
  return map;
}

TEST(ElfLookupTest, AgreesWithTheLoaderInLibc) {
  void* libc_getpid = dlsym(RTLD_DEFAULT, "getpid");
  ASSERT_NE(libc_getpid, nullptr);
  const struct link_map* libc = MapOf(libc_getpid);
  ASSERT_NE(libc, nullptr);
  // The loader's answer for libc itself: a lookup through libc's own handle.
  // RTLD_DEFAULT would search the executable first, and under a sanitizer
  // that holds interceptors of mmap, strlen and the like, not libc's code.
  void* libc_handle = dlopen(libc->l_name, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc_handle, nullptr) << libc->l_name;
  // Plain functions, an IFUNC (strlen) and a multi-versioned one
  // (pthread_cond_wait: the default version, like dlsym).
  for (const char* name : {"getpid", "mmap", "strlen", "pthread_cond_wait", "dlsym"}) {
    SCOPED_TRACE(name);
    void* found = nullptr;
    ASSERT_EQ(FindDefinition(libc, name, &found), ElfLookupResult::kFound);
    EXPECT_EQ(found, dlsym(libc_handle, name));
  }
  dlclose(libc_handle);
  void* none = nullptr;
  EXPECT_EQ(FindDefinition(libc, "accelpool_no_such_symbol", &none), ElfLookupResult::kNotFound);
  EXPECT_EQ(none, nullptr);
}

TEST(ElfLookupTest, UndefinedReferencesAreNotDefinitions) {
  // This test binary calls getpid but does not define it.
  const struct link_map* self = MapOf(reinterpret_cast<const void*>(&MapOf));
  ASSERT_NE(self, nullptr);
  void* found = nullptr;
  EXPECT_NE(FindDefinition(self, "getpid", &found), ElfLookupResult::kFound);
}

}  // namespace
}  // namespace accelpool::cuda
