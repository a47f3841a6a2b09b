#include "cuda/elf_lookup.h"

#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
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

// An object linked with --hash-style=sysv has a DT_HASH table and no
// DT_GNU_HASH. The lookup used to report kNoIndex for it, and the shim's
// dlsym(RTLD_NEXT) emulation skipped it: a symbol defined only there was
// not found.
TEST(ElfLookupTest, AnObjectWithOnlyASysvHashTableIsSearched) {
  void* handle = dlopen(ACCELPOOL_SYSV_HASH_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  struct link_map* map = nullptr;
  ASSERT_EQ(dlinfo(handle, RTLD_DI_LINKMAP, &map), 0);
  bool gnu_hash = false;
  bool sysv_hash = false;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    gnu_hash = gnu_hash || d->d_tag == DT_GNU_HASH;
    sysv_hash = sysv_hash || d->d_tag == DT_HASH;
  }
  ASSERT_FALSE(gnu_hash) << "the test object must be linked with --hash-style=sysv";
  ASSERT_TRUE(sysv_hash);
  for (const char* name : {"accelpool_sysv_function", "accelpool_sysv_value"}) {
    SCOPED_TRACE(name);
    void* found = nullptr;
    ASSERT_EQ(FindDefinition(map, name, &found), ElfLookupResult::kFound);
    EXPECT_EQ(found, dlsym(handle, name));
  }
  void* none = nullptr;
  EXPECT_EQ(FindDefinition(map, "accelpool_no_such_symbol", &none), ElfLookupResult::kNotFound);
  EXPECT_EQ(FindDefinition(map, "getpid", &none), ElfLookupResult::kNotFound)
      << "referenced there, not defined";
  EXPECT_EQ(none, nullptr);
  dlclose(handle);
}

}  // namespace
}  // namespace accelpool::cuda
