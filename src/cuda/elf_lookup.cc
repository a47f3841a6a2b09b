#include "cuda/elf_lookup.h"

#include <elf.h>

#include <cstdint>

namespace accelpool::cuda {
namespace {

// Own comparison: libc's string functions may be intercepted by a runtime
// that is still initialising when it calls dlsym.
ACCELPOOL_UNINSTRUMENTED bool SameName(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

ACCELPOOL_UNINSTRUMENTED uint32_t GnuHash(const char* name) {
  uint32_t h = 5381;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p != 0; ++p) {
    h = h * 33 + *p;
  }
  return h;
}

// The SysV ELF hash (the System V ABI's DT_HASH function).
ACCELPOOL_UNINSTRUMENTED uint32_t SysvHash(const char* name) {
  uint32_t h = 0;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p != 0; ++p) {
    h = (h << 4) + *p;
    const uint32_t g = h & 0xf0000000u;
    h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

// glibc relocates the dynamic section in place where it is writable (x86-64,
// aarch64); where it is read-only the entries stay relative to the base.
ACCELPOOL_UNINSTRUMENTED uintptr_t Absolute(const struct link_map* map, ElfW(Addr) value) {
  uintptr_t base = static_cast<uintptr_t>(map->l_addr);
  return value < base ? base + value : value;
}

struct Tables {
  const struct link_map* map;
  const ElfW(Sym) * symtab;
  const char* strtab;
  const ElfW(Half) * versym;
};

// Whether symbol `index` is a visible default-version definition of `name`;
// if so, its address (an IFUNC's resolved) goes to *address.
ACCELPOOL_UNINSTRUMENTED bool Defines(const Tables& t, uint32_t index, const char* name,
                                      void** address) {
  const ElfW(Sym)& sym = t.symtab[index];
  const unsigned type = ELF64_ST_TYPE(sym.st_info);
  const unsigned bind = ELF64_ST_BIND(sym.st_info);
  const bool defined = sym.st_shndx != SHN_UNDEF && sym.st_value != 0;
  const bool visible = bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE;
  const bool wanted_type =
      type == STT_FUNC || type == STT_OBJECT || type == STT_GNU_IFUNC || type == STT_NOTYPE;
  const bool default_version = t.versym == nullptr || (t.versym[index] & 0x8000) == 0;
  if (!defined || !visible || !wanted_type || !default_version ||
      !SameName(t.strtab + sym.st_name, name)) {
    return false;
  }
  uintptr_t value = static_cast<uintptr_t>(t.map->l_addr) + sym.st_value;
  if (type == STT_GNU_IFUNC) {
    using Resolver = void* (*)();
    *address = reinterpret_cast<Resolver>(value)();
  } else {
    *address = reinterpret_cast<void*>(value);
  }
  return true;
}

ACCELPOOL_UNINSTRUMENTED ElfLookupResult FindByGnuHash(const Tables& t, const uint32_t* gnu_hash,
                                                       const char* name, void** address) {
  const uint32_t nbuckets = gnu_hash[0];
  const uint32_t symoffset = gnu_hash[1];
  const uint32_t bloom_size = gnu_hash[2];
  const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(gnu_hash + 4);
  const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
  const uint32_t* chain = buckets + nbuckets;
  if (nbuckets == 0) {
    return ElfLookupResult::kNotFound;
  }
  const uint32_t h = GnuHash(name);
  uint32_t index = buckets[h % nbuckets];
  if (index < symoffset) {
    return ElfLookupResult::kNotFound;
  }
  for (;; ++index) {
    const uint32_t entry = chain[index - symoffset];
    if ((entry | 1) == (h | 1) && Defines(t, index, name, address)) {
      return ElfLookupResult::kFound;
    }
    if ((entry & 1) != 0) {
      return ElfLookupResult::kNotFound;
    }
  }
}

// DT_HASH: nbucket, nchain, bucket[nbucket], chain[nchain]; a bucket and
// each chain entry name the next symbol of the chain, 0 (STN_UNDEF) ending
// it. nchain is the number of symbols: an index past it, or a walk longer
// than it (a cycle), ends the search.
ACCELPOOL_UNINSTRUMENTED ElfLookupResult FindBySysvHash(const Tables& t, const uint32_t* hash,
                                                        const char* name, void** address) {
  const uint32_t nbucket = hash[0];
  const uint32_t nchain = hash[1];
  const uint32_t* buckets = hash + 2;
  const uint32_t* chain = buckets + nbucket;
  if (nbucket == 0) {
    return ElfLookupResult::kNotFound;
  }
  uint32_t index = buckets[SysvHash(name) % nbucket];
  for (uint32_t steps = 0; index != STN_UNDEF && index < nchain && steps < nchain; ++steps) {
    if (Defines(t, index, name, address)) {
      return ElfLookupResult::kFound;
    }
    index = chain[index];
  }
  return ElfLookupResult::kNotFound;
}

}  // namespace

ACCELPOOL_UNINSTRUMENTED ElfLookupResult FindDefinition(const struct link_map* map,
                                                        const char* name, void** address) {
  Tables t = {map, nullptr, nullptr, nullptr};
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  for (const ElfW(Dyn)* d = map->l_ld; d != nullptr && d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        t.symtab = reinterpret_cast<const ElfW(Sym)*>(Absolute(map, d->d_un.d_ptr));
        break;
      case DT_STRTAB:
        t.strtab = reinterpret_cast<const char*>(Absolute(map, d->d_un.d_ptr));
        break;
      case DT_GNU_HASH:
        gnu_hash = reinterpret_cast<const uint32_t*>(Absolute(map, d->d_un.d_ptr));
        break;
      case DT_HASH:
        sysv_hash = reinterpret_cast<const uint32_t*>(Absolute(map, d->d_un.d_ptr));
        break;
      case DT_VERSYM:
        t.versym = reinterpret_cast<const ElfW(Half)*>(Absolute(map, d->d_un.d_ptr));
        break;
      default:
        break;
    }
  }
  if (t.symtab == nullptr || t.strtab == nullptr) {
    return ElfLookupResult::kNoIndex;
  }
  // The GNU table where there is one (linkers emit it by default, often
  // alone); the SysV one otherwise (--hash-style=sysv, older toolchains).
  if (gnu_hash != nullptr) {
    return FindByGnuHash(t, gnu_hash, name, address);
  }
  if (sysv_hash != nullptr) {
    return FindBySysvHash(t, sysv_hash, name, address);
  }
  return ElfLookupResult::kNoIndex;
}

}  // namespace accelpool::cuda
