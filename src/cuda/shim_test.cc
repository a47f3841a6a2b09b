// End-to-end tests of libaccelpool-cuda: the probe program runs with the shim
// preloaded against the fake driver, reaching it through every hook path.
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cuda/priority_format.h"
#include "cuda/shared_region.h"
#include "cuda/testing/driver_api.h"
#include "cuda/testing/priority_testing.h"
#include "cuda/testing/subprocess.h"

namespace accelpool::cuda {
namespace {

using testing::ChildProcess;
using testing::ParseKeyValues;
using testing::ProcessResult;
using Env = std::map<std::string, std::string>;

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kPage = 2 * kMiB;
constexpr uint64_t kFakeDeviceBytes = 80ULL << 30;

#ifdef ACCELPOOL_SANITIZE_BUILD
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif

// Only where the subject is timing: an instrumented shim and probe run the
// same paths several times slower, so the plain build measures those.
#define SKIP_UNDER_SANITIZER()                                                            \
  do {                                                                                    \
    if (kSanitizerBuild) {                                                                \
      GTEST_SKIP() << "a timing test; instrumented code runs slower, so the plain build " \
                      "runs it";                                                          \
    }                                                                                     \
  } while (0)

extern "C" void __asan_init() __attribute__((weak));

// LD_PRELOAD for the shim. In a sanitizer build the shim and the probe are
// instrumented, and the sanitizer runtime must be loaded before either.
std::string ShimPreload(const std::string& shim = ACCELPOOL_SHIM_PATH) {
  std::string preload;
  Dl_info info;
  if (kSanitizerBuild && __asan_init != nullptr &&
      dladdr(reinterpret_cast<void*>(&__asan_init), &info) != 0 && info.dli_fname != nullptr) {
    preload = std::string(info.dli_fname) + ":";
  }
  return preload + shim;
}

// The probe program: the one built beside these tests, or the one named by
// ACCELPOOL_TEST_PROBE, which tests/cuda/old_glibc.sh sets to a build of it
// that runs on an older C library.
std::string ProbePath() {
  const char* probe = std::getenv("ACCELPOOL_TEST_PROBE");
  return probe != nullptr && *probe != '\0' ? probe : ACCELPOOL_PROBE_PATH;
}

ProcessResult Probe(const std::vector<std::string>& args, Env env, bool preload = true) {
  env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  if (preload) {
    env["LD_PRELOAD"] = ShimPreload();
  }
  std::vector<std::string> argv = {ProbePath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::Run(argv, env);
}

std::map<std::string, std::string> MustRun(const std::vector<std::string>& args, const Env& env) {
  ProcessResult r = Probe(args, env);
  EXPECT_EQ(r.exit_code, 0) << "stderr: " << r.err << "\nstdout: " << r.out;
  return ParseKeyValues(r.out);
}

uint64_t U(const std::map<std::string, std::string>& kv, const std::string& key) {
  auto it = kv.find(key);
  EXPECT_NE(it, kv.end()) << "missing " << key;
  return it == kv.end() ? 0 : std::stoull(it->second);
}

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/accelpool-shim-XXXXXX";
    path_ = mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(path_, ignored);
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The device plugin mounts the container's limits read-only beside the
// library (<library>.limits); a pod's own env, which admission cannot see in
// full (envFrom), must not lift them.
TEST(ShimTest, TheDevicePluginsLimitsFileWinsOverTheEnvironment) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string shim = dir.path() + "/libaccelpool-cuda.so";
  std::filesystem::copy_file(ACCELPOOL_SHIM_PATH, shim);
  auto run = [&](const Env& extra) {
    Env env = extra;
    env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
    env["LD_PRELOAD"] = ShimPreload(shim);
    return testing::Run({ProbePath(), "procaddr", "fill", "alloc", std::to_string(64 * kMiB)}, env);
  };
  {
    std::ofstream limits(shim + ".limits");
    limits << "ACCELPOOL_CUDA_MEMORY_LIMIT_0=1024\nCUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"
           << "no equals sign here\n\nACCELPOOL_CUDA_COMPUTE_LIMIT=25";
  }
  ProcessResult r =
      run({{"ACCELPOOL_CUDA_DISABLE", "1"}, {"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "81920"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "allocated"), 1024 * kMiB) << "the file's cap, not the env's";
  EXPECT_NE(r.err.find("ignoring ACCELPOOL_CUDA_"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(shim + ".limits sets this container's limits"), std::string::npos) << r.err;

  // The same values in the env as in the file: nothing to warn about.
  r = run({{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "1024"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "allocated"), 1024 * kMiB);
  EXPECT_EQ(r.err.find("ignoring"), std::string::npos) << r.err;

  // Without the file, the environment is the contract, as before.
  std::filesystem::remove(shim + ".limits");
  r = run({{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "2048"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "allocated"), 2048 * kMiB);
  std::filesystem::remove(shim);
}

// A limits file that cannot be read (a directory where the runtime created
// the mount point of a missing file, say) is no contract: like one that
// cannot be opened, it is reported once and the environment applies. It was
// read as an empty file: no limits, and the environment's ignored.
TEST(ShimTest, AnUnreadableLimitsFileIsReportedAndTheEnvironmentApplies) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string shim = dir.path() + "/libaccelpool-cuda.so";
  std::filesystem::copy_file(ACCELPOOL_SHIM_PATH, shim);
  ASSERT_TRUE(std::filesystem::create_directory(shim + ".limits"));
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "2048"},
             {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
             {"LD_PRELOAD", ShimPreload(shim)}};
  ProcessResult r =
      testing::Run({ProbePath(), "procaddr", "fill", "alloc", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "allocated"), 2048 * kMiB) << r.err;
  EXPECT_EQ(CountLines(r.err, "cannot read the limits file " + shim + ".limits"), 1) << r.err;
  EXPECT_EQ(r.err.find("ignoring ACCELPOOL_CUDA_"), std::string::npos) << r.err;
  std::filesystem::remove(shim + ".limits");
  std::filesystem::remove(shim);
}

TEST(ShimTest, LibraryNeedsNoLibstdcxx) {
  std::ifstream f(ACCELPOOL_SHIM_PATH, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(data.size(), sizeof(Elf64_Ehdr));
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data.data());
  auto* sh = reinterpret_cast<const Elf64_Shdr*>(data.data() + eh->e_shoff);
  std::vector<std::string> needed;
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNAMIC) {
      continue;
    }
    const char* strtab = data.data() + sh[sh[i].sh_link].sh_offset;
    auto* dyn = reinterpret_cast<const Elf64_Dyn*>(data.data() + sh[i].sh_offset);
    for (size_t j = 0; j < sh[i].sh_size / sizeof(Elf64_Dyn); ++j) {
      if (dyn[j].d_tag == DT_NEEDED) {
        needed.emplace_back(strtab + dyn[j].d_un.d_val);
      }
    }
  }
  ASSERT_FALSE(needed.empty());
  for (const std::string& lib : needed) {
    EXPECT_EQ(lib.find("libstdc++"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libcuda"), std::string::npos) << "the driver is opened lazily";
  }
}

// Through /etc/ld.so.preload the shim is loaded into every process of a
// container, whatever its image: a version reference newer than the oldest
// supported glibc (2.17) would stop every process of an older image from
// starting. glibc_compat.h pins the references; this reads them back.
TEST(ShimTest, LibraryLoadsOnGlibc217AndLater) {
  std::ifstream f(ACCELPOOL_SHIM_PATH, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(data.size(), sizeof(Elf64_Ehdr));
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data.data());
  auto* sh = reinterpret_cast<const Elf64_Shdr*>(data.data() + eh->e_shoff);
  std::vector<std::string> needed;
  std::vector<std::string> versions;
  for (int i = 0; i < eh->e_shnum; ++i) {
    const char* strtab = data.data() + sh[sh[i].sh_link].sh_offset;
    if (sh[i].sh_type == SHT_DYNAMIC) {
      auto* dyn = reinterpret_cast<const Elf64_Dyn*>(data.data() + sh[i].sh_offset);
      for (size_t j = 0; j < sh[i].sh_size / sizeof(Elf64_Dyn); ++j) {
        if (dyn[j].d_tag == DT_NEEDED) {
          needed.emplace_back(strtab + dyn[j].d_un.d_val);
        }
      }
    }
    if (sh[i].sh_type == SHT_GNU_verneed) {
      const char* p = data.data() + sh[i].sh_offset;
      for (;;) {
        auto* vn = reinterpret_cast<const Elf64_Verneed*>(p);
        const char* q = p + vn->vn_aux;
        for (int k = 0; k < vn->vn_cnt; ++k) {
          auto* aux = reinterpret_cast<const Elf64_Vernaux*>(q);
          versions.emplace_back(strtab + aux->vna_name);
          q += aux->vna_next;
        }
        if (vn->vn_next == 0) {
          break;
        }
        p += vn->vn_next;
      }
    }
  }
  ASSERT_FALSE(versions.empty());
  for (const std::string& v : versions) {
    SCOPED_TRACE(v);
    if (v.rfind("GLIBC_", 0) != 0) {
      continue;  // GLIBC_PRIVATE would fail too, and is never referenced.
    }
    int major = 0;
    int minor = 0;
    ASSERT_EQ(std::sscanf(v.c_str(), "GLIBC_%d.%d", &major, &minor), 2);
    EXPECT_TRUE(major < 2 || (major == 2 && minor <= 17)) << "newer than glibc 2.17";
  }
  // Before glibc 2.34 the pinned dl* and pthread_* symbols live there.
  EXPECT_NE(std::find(needed.begin(), needed.end(), "libdl.so.2"), needed.end());
  EXPECT_NE(std::find(needed.begin(), needed.end(), "libpthread.so.0"), needed.end());
}

// The whole suite also runs on the C libraries of older images
// (tests/cuda/old_glibc.sh, which names the version it expects): this checks
// that the probe really runs on that library, and that the shim is loaded
// into it and interposes dlsym there.
TEST(ShimTest, TheProbeRunsOnTheCLibraryUnderTestWithTheShimLoaded) {
  const char* expected = std::getenv("ACCELPOOL_TEST_EXPECT_GLIBC");
  auto kv = MustRun({"direct", "libc"}, {});
  EXPECT_EQ(kv["glibc"], expected != nullptr ? expected : gnu_get_libc_version());
  EXPECT_EQ(kv["dlsym_from"], "libaccelpool-cuda.so");
  ProcessResult bare = Probe({"direct", "libc"}, {}, /*preload=*/false);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_NE(ParseKeyValues(bare.out)["dlsym_from"], "libaccelpool-cuda.so");
}

TEST(ShimTest, EveryHookPathStopsAtTheCapWithOutOfMemory) {
  const uint64_t cap = 1024 * kMiB;
  // procaddr13: the fake hands out a distinct cuMemAlloc for CUDA 13, which
  // must get a hook slot of its own.
  for (const char* path :
       {"direct", "dlsym", "procaddr", "procaddr_ptds", "procaddr_v1", "procaddr13"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "fill", "alloc", std::to_string(64 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "allocated"), cap);
    EXPECT_EQ(U(kv, "first_error"), 2u) << "CUDA_ERROR_OUT_OF_MEMORY";
    EXPECT_EQ(U(kv, "device_used"), cap) << "truth: the driver's own count agrees";
    EXPECT_EQ(U(kv, "after_free_device_used"), 0u);
    EXPECT_EQ(U(kv, "second_allocated"), cap) << "freeing returns the whole budget";
  }
}

TEST(ShimTest, EveryAllocationApiAndSizeIsChargedAtPageGranularity) {
  const uint64_t cap = 1024 * kMiB;
  struct Case {
    const char* api;
    uint64_t chunk;
  };
  const Case cases[] = {
      {"alloc", 1 * kMiB},          {"alloc", 2 * kMiB},        {"alloc", (8 * kMiB) + 1},
      {"alloc", (8 * kMiB) - 1},    {"pitch", 64 * kMiB},       {"managed", 64 * kMiB},
      {"pool", 64 * kMiB},          {"array", 64 * kMiB},       {"mipmap", 64 * kMiB},
      {"vmm", 64 * kMiB},           {"ipc", 64 * kMiB},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.api << " " << c.chunk);
    auto kv = MustRun({"procaddr", "fill", c.api, std::to_string(c.chunk)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    uint64_t charged = (c.chunk + kPage - 1) / kPage * kPage;
    uint64_t count = cap / charged;
    EXPECT_EQ(U(kv, "count"), count);
    EXPECT_EQ(U(kv, "allocated"), count * c.chunk);
    EXPECT_EQ(U(kv, "first_error"), 2u);
    if (std::string(c.api) != "ipc") {  // Imports hold the exporter's memory.
      EXPECT_EQ(U(kv, "device_used"), count * charged);
    }
    EXPECT_EQ(U(kv, "second_allocated"), count * c.chunk);
  }
}

// cuMemAlloc and cuMemAllocManaged of zero bytes fail with the driver's
// CUDA_ERROR_INVALID_VALUE; at the cap they got CUDA_ERROR_OUT_OF_MEMORY,
// the shim having charged a page first.
TEST(ShimTest, AZeroByteAllocationGetsTheDriversErrorEvenAtTheCap) {
  for (const char* fill : {"0", "67108864"}) {
    SCOPED_TRACE(fill);
    auto kv = MustRun({"procaddr", "zeroalloc", fill}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
    EXPECT_EQ(U(kv, "zero_rc"), 1u) << "CUDA_ERROR_INVALID_VALUE";
    EXPECT_EQ(U(kv, "managed_zero_rc"), 1u);
    EXPECT_EQ(U(kv, "free"), 64 * kMiB - std::stoull(fill)) << "nothing charged for them";
  }
}

// The fake pool reserves 32 MiB segments shared by requests up to 32 MiB
// (512-byte aligned) and a 2 MiB-rounded segment per larger request.
TEST(ShimTest, StreamOrderedAllocationsAreChargedWhatThePoolReserves) {
  struct Case {
    const char* path;
    uint64_t cap_mib;
    uint64_t chunk;
    uint64_t count;  // Allocations that fit: reserve, not 2 MiB per call.
  };
  const Case cases[] = {
      {"procaddr", 64, 4096, 2 * (32 * kMiB / 4096)},
      {"procaddr_ptds", 64, 1 * kMiB, 64},
      {"direct", 1024, 3 * kMiB, 32 * 10},  // Ten 3 MiB blocks per 32 MiB segment.
      {"dlsym", 1024, 64 * kMiB, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.path << " " << c.chunk);
    auto kv = MustRun({c.path, "fill", "async", std::to_string(c.chunk)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", std::to_string(c.cap_mib)}});
    EXPECT_EQ(U(kv, "count"), c.count) << "no early OOM";
    EXPECT_EQ(U(kv, "first_error"), 2u);
    EXPECT_EQ(U(kv, "device_used"), c.cap_mib * kMiB) << "the pool reserved exactly the cap";
    EXPECT_EQ(U(kv, "after_free_device_used"), 0u);
    EXPECT_EQ(U(kv, "second_allocated"), c.count * c.chunk) << "freeing returns the budget";
  }
}

TEST(ShimTest, UnreadablePoolIsChargedPerAllocation) {
  for (const char* failing : {"cuMemPoolGetAttribute", "cuDeviceGetMemPool"}) {
    SCOPED_TRACE(failing);
    Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}, {"FAKECUDA_FAIL", failing}};
    auto kv = MustRun({"procaddr", "fill", "async", std::to_string(kMiB)}, env);
    EXPECT_EQ(U(kv, "count"), 32u) << "1 MiB charged as a 2 MiB page, as before";
    EXPECT_EQ(U(kv, "first_error"), 2u);
    EXPECT_EQ(U(kv, "second_allocated"), 32 * kMiB);
  }
}

TEST(ShimTest, MemoryAPoolKeepsStaysChargedForTheContainerUntilTrimmed) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Env shared = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}};
  Env env = shared;
  env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  env["LD_PRELOAD"] = ShimPreload();
  // PyTorch's cudaMallocAsync backend sets the release threshold to UINT64_MAX.
  ChildProcess holder;
  ASSERT_TRUE(
      holder.Start({ProbePath(), "direct", "poolhold", std::to_string(512 * kMiB), "max"}, env));
  auto held = ParseKeyValues(holder.ReadLine(30000));
  ASSERT_EQ(U(held, "rc"), 0u);
  ASSERT_EQ(U(held, "free_rc"), 0u);
  EXPECT_EQ(U(held, "reserved"), 512 * kMiB) << "the pool kept the freed block";
  EXPECT_EQ(U(held, "free"), 512 * kMiB);

  auto kv = MustRun({"direct", "meminfo"}, shared);
  EXPECT_EQ(U(kv, "free"), 512 * kMiB) << "another process sees the kept memory";
  kv = MustRun({"direct", "alloc", std::to_string(600 * kMiB)}, shared);
  EXPECT_EQ(U(kv, "rc"), 2u) << "512 kept + 600 > 1024";

  ASSERT_TRUE(holder.Write("trim\n"));
  auto trimmed = ParseKeyValues(holder.ReadLine(30000));
  EXPECT_EQ(U(trimmed, "trim_rc"), 0u);
  EXPECT_EQ(U(trimmed, "reserved"), 0u);
  EXPECT_EQ(U(trimmed, "free"), 1024 * kMiB);
  kv = MustRun({"direct", "meminfo"}, shared);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB) << "the trim returned the charge at once";
  holder.CloseStdin();
  EXPECT_EQ(holder.Wait(10000).exit_code, 0);

  // A release the shim does not see happen (here a lowered threshold; on a
  // real driver, the next synchronisation) is uncharged by a memory query.
  ChildProcess lowering;
  ASSERT_TRUE(
      lowering.Start({ProbePath(), "direct", "poolhold", std::to_string(512 * kMiB), "max"}, env));
  held = ParseKeyValues(lowering.ReadLine(30000));
  ASSERT_EQ(U(held, "free"), 512 * kMiB);
  ASSERT_TRUE(lowering.Write("lower\n"));
  auto lowered = ParseKeyValues(lowering.ReadLine(30000));
  EXPECT_EQ(U(lowered, "set_rc"), 0u);
  EXPECT_EQ(U(lowered, "reserved"), 0u);
  EXPECT_EQ(U(lowered, "free"), 1024 * kMiB) << "cuMemGetInfo re-read the pool";
  kv = MustRun({"direct", "meminfo"}, shared);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB);
  lowering.CloseStdin();
  EXPECT_EQ(lowering.Wait(10000).exit_code, 0);

  // Nor does that release stand in the way of the next allocation of
  // another kind: refused at the cap, the charge is tried again on the pool
  // re-read.
  ChildProcess allocating;
  ASSERT_TRUE(allocating.Start(
      {ProbePath(), "direct", "poolhold", std::to_string(512 * kMiB), "max"}, env));
  held = ParseKeyValues(allocating.ReadLine(30000));
  ASSERT_EQ(U(held, "free"), 512 * kMiB);
  ASSERT_TRUE(allocating.Write("lower_alloc " + std::to_string(600 * kMiB) + "\n"));
  auto after = ParseKeyValues(allocating.ReadLine(30000));
  EXPECT_EQ(U(after, "set_rc"), 0u);
  EXPECT_EQ(U(after, "alloc_rc"), 0u) << "512 released + 600 fits under 1024";
  allocating.CloseStdin();
  EXPECT_EQ(allocating.Wait(10000).exit_code, 0);

  // With the default threshold (0) the pool gives freed memory back.
  kv = MustRun({"direct", "poolhold", std::to_string(512 * kMiB), "0"}, shared);
  EXPECT_EQ(U(kv, "reserved"), 0u);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB);
}

TEST(ShimTest, AsyncGrowthPastTheCapIsUndoneAndReturnsOutOfMemory) {
  for (const char* path : {"direct", "dlsym"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "poolover", std::to_string(192 * kMiB), std::to_string(128 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "256"}});
    EXPECT_EQ(U(kv, "rc1"), 0u);
    EXPECT_EQ(U(kv, "rc2"), 2u) << "exactly CUDA_ERROR_OUT_OF_MEMORY";
    EXPECT_EQ(U(kv, "p2"), 0u);
    EXPECT_EQ(U(kv, "reserved"), 192 * kMiB) << "the refused growth was trimmed away";
    EXPECT_EQ(U(kv, "device_used"), 192 * kMiB);
    EXPECT_EQ(U(kv, "free"), 64 * kMiB) << "the refused call left nothing charged";
    EXPECT_EQ(U(kv, "freed_reserved"), 192 * kMiB) << "threshold max: kept";
    EXPECT_EQ(U(kv, "freed_free"), 64 * kMiB) << "and still charged";
    EXPECT_EQ(U(kv, "trimmed_reserved"), 0u);
    EXPECT_EQ(U(kv, "trimmed_free"), 256 * kMiB);
    EXPECT_EQ(U(kv, "trimmed_device_used"), 0u);
  }
}

// Graph memory nodes are backed by the device's graph pool, which maps
// memory when a graph is uploaded or first launched. The fake's graph here
// allocates the given size in two halves inside a child graph.
// A real driver completes a stream-ordered free when the host synchronises;
// until then a trim keeps its memory. The refused growth was freed and the
// pool trimmed at once: the growth stayed reserved and uncharged, and with
// the threshold at UINT64_MAX every later allocation, even one served from
// memory the pool held, was refused until the host synchronised.
TEST(ShimTest, AfterARefusedGrowthThePoolServesWhatItHolds) {
  for (const char* path : {"direct", "procaddr_ptds"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "pooldefer", std::to_string(20 * kMiB), "3"},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
    EXPECT_EQ(U(kv, "held"), 2u) << "two 32 MiB segments fit";
    EXPECT_EQ(U(kv, "refused_rc"), 2u);
    EXPECT_EQ(U(kv, "reserved"), 64 * kMiB) << "the refused growth was released";
    EXPECT_EQ(U(kv, "again_rc"), 0u) << "10 MiB from a segment the pool holds";
    EXPECT_EQ(U(kv, "free"), 0u);
  }
}

// A pool gives memory back unseen (the default pool's threshold 0, at the
// host's synchronisation); its charge goes at the next re-read. A growth of
// another pool past the cap re-reads the device's pools before refusing,
// as every other charge does. (It refused for the stale charge: a false OOM
// where cuMemAlloc of the same size succeeded.)
TEST(ShimTest, APoolGrowthPastTheCapReReadsTheDevicesOtherPoolsFirst) {
  for (const char* path : {"direct", "procaddr_ptds"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "poolsync", std::to_string(768 * kMiB), std::to_string(512 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "free_rc"), 0u);
    EXPECT_EQ(U(kv, "sync_rc"), 0u);
    EXPECT_EQ(U(kv, "create_rc"), 0u);
    EXPECT_EQ(U(kv, "pool_rc"), 0u) << "refused for memory the default pool gave back";
    EXPECT_EQ(U(kv, "free"), 512 * kMiB);
    EXPECT_EQ(U(kv, "device_used"), 512 * kMiB);
    EXPECT_EQ(U(kv, "alloc_rc"), 0u);
    EXPECT_EQ(U(kv, "end_free"), 1024 * kMiB);
  }
}

// A graph launch the compute share holds back maps nothing while it waits:
// its memory is charged after the admission, not before (a charge during
// the wait refused the container's other processes near the cap).
TEST(ShimTest, AGraphLaunchWaitingForItsComputeShareHoldsNoMemory) {
  auto kv = MustRun({"direct", "graphwait"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                                              {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "10"}});
  EXPECT_EQ(U(kv, "instantiate_rc"), 0u);
  EXPECT_EQ(U(kv, "launch_rc"), 0u);
  ASSERT_EQ(U(kv, "read_during_wait"), 1u) << "waited " << U(kv, "waited_ms") << " ms";
  EXPECT_EQ(U(kv, "free_during_wait"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free_after"), 512 * kMiB) << "the graph pool's reserve, once mapped";
}

// A measured graph launch records its start event after its memory hold,
// right before the launch: the hold's own time is not measured as the
// graph's device time, and a launch refused for memory records no event.
TEST(ShimTest, AGraphLaunchRecordsItsStartEventAfterItsMemoryHold) {
  const Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}};
  for (const char* path : {"direct", "procaddr_ptds"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "graphorder", std::to_string(512 * kMiB)}, env);
    EXPECT_EQ(U(kv, "launch_rc"), 0u);
    ASSERT_EQ(U(kv, "held"), 1u) << "the launch read no graph pool: no memory hold seen";
    EXPECT_EQ(U(kv, "records_at_hold"), 0u) << "the start event was recorded before the hold";
    EXPECT_EQ(U(kv, "records"), 2u) << "a new key's launch is measured: start and end";
    EXPECT_EQ(U(kv, "free"), 512 * kMiB);

    kv = MustRun({path, "graphorder", std::to_string(1536 * kMiB)}, env);
    EXPECT_EQ(U(kv, "launch_rc"), 2u) << "exactly CUDA_ERROR_OUT_OF_MEMORY";
    ASSERT_EQ(U(kv, "held"), 1u);
    EXPECT_EQ(U(kv, "records"), 0u) << "a launch refused for memory recorded an event";
    EXPECT_EQ(U(kv, "free"), 1024 * kMiB);
  }
}

TEST(ShimTest, GraphMemoryIsChargedWhenMappedAndRefusedPastTheCap) {
  const Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}};
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    for (const char* how : {"launch", "upload", "params"}) {
      SCOPED_TRACE(::testing::Message() << path << " " << how);
      auto kv = MustRun({path, "graphmem", std::to_string(768 * kMiB), "0", how}, env);
      EXPECT_EQ(U(kv, "instantiate_rc"), 0u);
      EXPECT_EQ(U(kv, "mapped_free"), 256 * kMiB) << "the graph pool's reserve is charged";
      EXPECT_EQ(U(kv, "reserved"), 768 * kMiB);
      EXPECT_EQ(U(kv, "alloc_512_rc"), 2u) << "graph memory counts against other allocations";
      EXPECT_EQ(U(kv, "relaunch_rc"), 0u);
      EXPECT_EQ(U(kv, "relaunch_free"), 256 * kMiB) << "a relaunch reuses the mapped memory";
      EXPECT_EQ(U(kv, "destroyed_free"), 256 * kMiB) << "the pool keeps it until trimmed";
      EXPECT_EQ(U(kv, "trimmed_free"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "trimmed_device_used"), 0u);

      kv = MustRun({path, "graphmem", std::to_string(1536 * kMiB), "0", how}, env);
      EXPECT_EQ(U(kv, std::string(how) == "params" ? "instantiate_rc" : "map_rc"), 2u)
          << "exactly CUDA_ERROR_OUT_OF_MEMORY";
      EXPECT_EQ(U(kv, "reserved"), 0u) << "refused before the driver mapped anything";
      EXPECT_EQ(U(kv, "mapped_free"), 1024 * kMiB) << "and nothing left charged";
      if (std::string(how) == "params") {
        EXPECT_EQ(U(kv, "result_out"), 1u);
      }
    }
  }
  // With a compute share as well, the launch goes through admission too.
  auto both = MustRun({"procaddr_ptds", "graphmem", std::to_string(768 * kMiB), "0", "launch"},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                       {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}});
  EXPECT_EQ(U(both, "map_rc"), 0u);
  EXPECT_EQ(U(both, "mapped_free"), 256 * kMiB);
  EXPECT_EQ(U(both, "trimmed_free"), 1024 * kMiB);
  // 512 MiB held by cuMemAlloc leaves no room for a 600 MiB graph.
  auto kv = MustRun({"procaddr", "graphmem", std::to_string(600 * kMiB), std::to_string(512 * kMiB),
                     "launch"},
                    env);
  EXPECT_EQ(U(kv, "first_rc"), 0u);
  EXPECT_EQ(U(kv, "map_rc"), 2u);
  EXPECT_EQ(U(kv, "mapped_free"), 512 * kMiB);
}

TEST(ShimTest, GraphAllocationsThatOutliveTheirLaunchStopAtTheCap) {
  for (const char* path : {"direct", "procaddr_ptds"}) {
    SCOPED_TRACE(path);
    auto out = Probe({path, "graphfill", std::to_string(64 * kMiB)},
                     {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    ASSERT_EQ(out.exit_code, 0) << out.err;
    for (const char* round : {"round=0 ", "round=1 "}) {
      SCOPED_TRACE(round);
      EXPECT_NE(out.out.find(std::string(round) + "count=16 first_error=2 device_used=" +
                             std::to_string(1024 * kMiB)),
                std::string::npos)
          << out.out;
      EXPECT_NE(out.out.find(std::string(round) + "freed_free=0"), std::string::npos)
          << "freed graph allocations stay in the pool: still charged";
      EXPECT_NE(out.out.find(std::string(round) + "trimmed_free=" + std::to_string(1024 * kMiB) +
                             " trimmed_device_used=0"),
                std::string::npos)
          << out.out;
    }
  }
}

// Two graphs' first launches on one device overlap (as two threads'
// would): the fake runs graph B's launch, or a memory query, inside graph A's
// launch. Each must see A's room as held once, and the idle memory of the
// graph pool may back only one of them.
TEST(ShimTest, OverlappingGraphLaunchesShareTheCapCorrectly) {
  const Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}};
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    // A (512 MiB) has mapped and not yet returned when B (400 MiB) is held:
    // 912 MiB fit under 1024 MiB; A's memory must not count twice meanwhile.
    auto kv = MustRun({path, "graphrace", "after", "0", "0", std::to_string(512 * kMiB),
                       std::to_string(400 * kMiB)},
                      env);
    EXPECT_EQ(U(kv, "a_rc"), 0u);
    EXPECT_EQ(U(kv, "b_rc"), 0u) << "refused: A's mapping counted twice";
    EXPECT_EQ(U(kv, "reserved"), 912 * kMiB);
    EXPECT_EQ(U(kv, "free"), 112 * kMiB);

    kv = MustRun({path, "graphrace", "query", "0", "0", std::to_string(512 * kMiB), "0"}, env);
    EXPECT_EQ(U(kv, "a_rc"), 0u);
    EXPECT_EQ(U(kv, "free_inside"), 512 * kMiB) << "a query while A's hold is out";
    EXPECT_EQ(U(kv, "free"), 512 * kMiB);

    // 512 MiB idle in the graph pool, 256 MiB by cuMemAlloc. A (512 MiB) is
    // held against the idle memory; B (512 MiB), held before A maps, cannot
    // count on the same idle memory: it needs 512 MiB more and is refused.
    kv = MustRun(
        {path, "graphrace", "before", std::to_string(512 * kMiB), std::to_string(256 * kMiB),
         std::to_string(512 * kMiB), std::to_string(512 * kMiB)},
        env);
    EXPECT_EQ(U(kv, "idle_rc"), 0u);
    EXPECT_EQ(U(kv, "first_rc"), 0u);
    EXPECT_EQ(U(kv, "a_rc"), 0u);
    EXPECT_EQ(U(kv, "b_rc"), 2u) << "both graphs counted on the same idle memory";
    EXPECT_LE(U(kv, "device_used"), 1024 * kMiB) << "the driver mapped past the cap";
    EXPECT_EQ(U(kv, "free"), 256 * kMiB);
  }
}

// A trim that lands between a launch's mapping and the shim's bookkeeping
// after it must not leave the graph taken for mapped: its next launch maps
// the memory anew and has to be held (here: refused).
TEST(ShimTest, AGraphTrimmedDuringItsLaunchIsHeldAgain) {
  auto kv =
      MustRun({"procaddr", "graphtrimrace", std::to_string(768 * kMiB), std::to_string(512 * kMiB)},
              {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  EXPECT_EQ(U(kv, "launch_rc"), 0u);
  EXPECT_EQ(U(kv, "trim_rc"), 0u);
  EXPECT_EQ(U(kv, "trimmed_reserved"), 0u);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "first_rc"), 0u);
  EXPECT_EQ(U(kv, "relaunch_rc"), 2u) << "768 MiB more does not fit beside 512 MiB";
  EXPECT_EQ(U(kv, "device_used"), 512 * kMiB);
  EXPECT_EQ(U(kv, "relaunch_free"), 512 * kMiB);
}

// Captured, a stream-ordered allocation is a memory node: not charged at
// capture but when the graph maps it, so it is counted once. Both
// instantiation ABIs (CUDA 12/13 and, through cuGetProcAddress at 11.8, the
// CUDA 11 one) record the graph.
TEST(ShimTest, CapturedAllocationsAreChargedWhenTheGraphRuns) {
  const Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}};
  auto kv = MustRun({"procaddr", "capturealloc", std::to_string(2048 * kMiB)}, env);
  EXPECT_EQ(U(kv, "capture_rc"), 0u);
  EXPECT_EQ(U(kv, "capture_free"), 1024 * kMiB) << "nothing charged at capture";
  EXPECT_EQ(U(kv, "capture_free_rc"), 0u);
  for (const char* how : {"flags", "v2"}) {
    for (const char* kept : {"kept", "freed"}) {
      SCOPED_TRACE(::testing::Message() << how << " " << kept);
      kv = MustRun({"procaddr", "capturegraph", std::to_string(768 * kMiB), how, kept}, env);
      EXPECT_EQ(U(kv, "captured_free"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "instantiate_rc"), 0u);
      EXPECT_EQ(U(kv, "map_rc"), 0u);
      EXPECT_EQ(U(kv, "mapped_free"), 256 * kMiB) << "charged once, when the graph ran";
      EXPECT_EQ(U(kv, "trimmed_free"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "trimmed_device_used"), 0u);
      kv = MustRun({"procaddr", "capturegraph", std::to_string(1536 * kMiB), how, kept}, env);
      EXPECT_EQ(U(kv, "map_rc"), 2u) << "the launch is refused with OUT_OF_MEMORY";
      EXPECT_EQ(U(kv, "mapped_free"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "trimmed_device_used"), 0u) << "and the driver mapped nothing";
    }
  }
}

// A free on a capturing stream only adds a free node to the graph being
// captured: the block stays allocated until that graph runs. A block
// charged on its own (here: the pool cannot be named) was uncharged at
// once, and the container could allocate as much again past its cap.
TEST(ShimTest, AFreeCapturedIntoAGraphKeepsItsCharge) {
  auto kv =
      MustRun({"direct", "capturefree", std::to_string(512 * kMiB)},
              {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"FAKECUDA_FAIL", "cuDeviceGetMemPool"}});
  EXPECT_EQ(U(kv, "alloc_rc"), 0u);
  EXPECT_EQ(U(kv, "allocated_free"), 512 * kMiB);
  EXPECT_EQ(U(kv, "free_rc"), 0u);
  EXPECT_GE(U(kv, "driver_used"), 512 * kMiB) << "the captured free freed nothing";
  EXPECT_EQ(U(kv, "captured_free"), 512 * kMiB) << "uncharged while the block is allocated";
  EXPECT_EQ(U(kv, "over_rc"), 2u) << "allocated past the cap";
}

TEST(ShimTest, AnUnreadableGraphIsLaunchedWithOneWarning) {
  ProcessResult r = Probe({"procaddr", "graphmem", std::to_string(768 * kMiB), "0", "launch"},
                          {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                           {"FAKECUDA_FAIL", "cuGraphGetNodes"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = ParseKeyValues(r.out);
  EXPECT_EQ(U(kv, "map_rc"), 0u) << "the application keeps working";
  EXPECT_EQ(CountLines(r.err, "cannot read a graph's memory nodes"), 1) << r.err;
}

// A pool says where it lives (CU_MEMPOOL_ATTR_LOCATION_TYPE/_ID, CUDA 13
// drivers): host memory is never charged, and a pool on another device is
// charged to that device, not to the caller's current one.
TEST(ShimTest, APoolIsChargedWhereItsMemoryLives) {
  auto kv = MustRun({"procaddr", "poolwhere", "host", std::to_string(1024 * kMiB)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
  EXPECT_EQ(U(kv, "create_rc"), 0u);
  EXPECT_EQ(U(kv, "rc"), 0u) << "1 GiB of host memory under a 64 MiB device cap";
  EXPECT_EQ(U(kv, "free0"), 64 * kMiB);
  EXPECT_EQ(U(kv, "destroy_rc"), 0u);

  const Env per_device = {{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "1024"},
                          {"ACCELPOOL_CUDA_MEMORY_LIMIT_1", "256"}};
  kv = MustRun({"dlsym", "poolwhere", "dev1", std::to_string(512 * kMiB)}, per_device);
  EXPECT_EQ(U(kv, "rc"), 2u) << "device 1's cap applies, though device 0 is current";
  EXPECT_EQ(U(kv, "free0"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free1"), 256 * kMiB);
  kv = MustRun({"dlsym", "poolwhere", "dev1", std::to_string(128 * kMiB)}, per_device);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "free0"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free1"), 128 * kMiB);
  EXPECT_EQ(U(kv, "destroyed_free0"), 1024 * kMiB);

  // A location type newer than the shim (CUDA 13.4 adds a device's locality
  // domain) is not taken for host memory: the current device is charged.
  kv = MustRun({"procaddr", "poolwhere", "newtype", std::to_string(1024 * kMiB)},
               {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
  EXPECT_EQ(U(kv, "create_rc"), 0u);
  EXPECT_EQ(U(kv, "rc"), 2u) << "device memory of an unknown location type escaped the cap";
  EXPECT_EQ(U(kv, "free0"), 64 * kMiB);

  // Past the 32 pools tracked by reserve, a pool is charged per allocation,
  // still where it lives: nothing for a host pool, device 1 for its pool.
  kv = MustRun({"dlsym", "poolwhere", "host", std::to_string(1024 * kMiB), "32"},
               {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
  EXPECT_EQ(U(kv, "fillers"), 32u);
  EXPECT_EQ(U(kv, "rc"), 0u) << "the 33rd pool, of host memory, charged to device 0";
  EXPECT_EQ(U(kv, "free0"), 64 * kMiB);
  kv = MustRun({"dlsym", "poolwhere", "dev1", std::to_string(128 * kMiB), "32"}, per_device);
  EXPECT_EQ(U(kv, "fillers"), 32u);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "free0"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free1"), 128 * kMiB);
  EXPECT_EQ(U(kv, "destroyed_free0"), 1024 * kMiB);

  // A driver that cannot say where a pool lives: CUDA 13.0's cuda.h has no
  // CU_MEMPOOL_ATTR_LOCATION_TYPE/_ID, so a 580 driver may refuse them. The
  // shim learned the location when the pool was created, on every path.
  Env old_driver = per_device;
  old_driver["FAKECUDA_FAIL"] = "cuMemPoolGetAttribute.location";
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    kv = MustRun({path, "poolwhere", "dev1", std::to_string(128 * kMiB)}, old_driver);
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "free0"), 1024 * kMiB) << "device 1's pool charged to device 0";
    EXPECT_EQ(U(kv, "free1"), 128 * kMiB);
    EXPECT_EQ(U(kv, "destroyed_free0"), 1024 * kMiB);
    kv = MustRun({path, "poolwhere", "host", std::to_string(1024 * kMiB)},
                 {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"},
                  {"FAKECUDA_FAIL", "cuMemPoolGetAttribute.location"}});
    EXPECT_EQ(U(kv, "rc"), 0u) << "host memory charged to device 0";
    EXPECT_EQ(U(kv, "free0"), 64 * kMiB);
  }
  // Nor can it say for a location type the shim does not know: the current
  // device is charged, as for a pool the shim did not see created.
  kv = MustRun(
      {"procaddr", "poolwhere", "newtype", std::to_string(1024 * kMiB)},
      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}, {"FAKECUDA_FAIL", "cuMemPoolGetAttribute.location"}});
  EXPECT_EQ(U(kv, "rc"), 2u);
  EXPECT_EQ(U(kv, "free0"), 64 * kMiB);
}

// Only host locations are host memory: device memory of a location type
// newer than the shim, from cuMemCreate or a graph memory node, is charged
// to the current device like a pool of such a type. It went uncharged.
TEST(ShimTest, DeviceMemoryOfANewerLocationTypeIsCharged) {
  for (const char* how : {"vmm", "graph"}) {
    SCOPED_TRACE(how);
    auto kv = MustRun({"procaddr", "newlocation", how, std::to_string(128 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
    EXPECT_EQ(U(kv, "rc"), 2u) << "128 MiB of device memory under a 64 MiB cap";
    EXPECT_EQ(U(kv, "free"), 64 * kMiB);
    EXPECT_EQ(U(kv, "device_used"), 0u);
    kv = MustRun({"procaddr", "newlocation", how, std::to_string(32 * kMiB)},
                 {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "free"), 32 * kMiB) << "charged";
    EXPECT_EQ(U(kv, "after_free"), 64 * kMiB) << "and returned";
  }
}

TEST(ShimTest, DestroyingAPoolReturnsItsCharge) {
  auto kv = MustRun({"dlsym", "poolcustom", std::to_string(100 * kMiB)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  EXPECT_EQ(U(kv, "create_rc"), 0u);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "kept_free"), 1024 * kMiB - 100 * kMiB);
  EXPECT_EQ(U(kv, "destroy_rc"), 0u);
  EXPECT_EQ(U(kv, "destroyed_free"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "device_used"), 0u);
}

// cuMemPoolDestroy of a pool whose blocks are still allocated returns at
// once; the driver frees the pool's memory, what it kept included, once
// they are freed. Its charge stays until then. (It was returned at the
// destroy, and the container could allocate past its cap.)
TEST(ShimTest, APoolDestroyedWithLiveBlocksStaysChargedUntilTheyAreFreed) {
  const uint64_t cap = 1024 * kMiB;
  struct Case {
    const char* path;
    uint64_t kept;
  };
  for (const Case& c :
       {Case{"direct", 0}, Case{"dlsym", 0}, Case{"procaddr", 0}, Case{"direct", 100 * kMiB}}) {
    SCOPED_TRACE(::testing::Message() << c.path << " " << c.kept);
    auto kv =
        MustRun({c.path, "pooldestroylive", std::to_string(800 * kMiB), std::to_string(c.kept)},
                {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "create_rc"), 0u);
    EXPECT_EQ(U(kv, "rc"), 0u);
    const uint64_t held = 800 * kMiB + c.kept;
    EXPECT_EQ(U(kv, "held_free"), cap - held);
    EXPECT_EQ(U(kv, "destroy_rc"), 0u);
    EXPECT_EQ(U(kv, "destroyed_used"), held) << "the driver keeps the pool's memory";
    EXPECT_EQ(U(kv, "destroyed_free"), cap - held) << "and it stays charged";
    EXPECT_EQ(U(kv, "over_rc"), 2u) << "800 MiB more would pass the cap";
    EXPECT_EQ(U(kv, "free_rc"), 0u);
    EXPECT_EQ(U(kv, "freed_used"), 0u) << "the last block's free frees the pool";
    EXPECT_EQ(U(kv, "freed_free"), cap);
    EXPECT_EQ(U(kv, "again_rc"), 0u);
  }
}

// The fake runs an allocation inside the real free, after the address is
// released: the interleaving of two threads racing for one address.
TEST(ShimTest, AnAddressReusedDuringItsFreeKeepsBothChargesRight) {
  const uint64_t chunk = 32 * kMiB;
  struct Case {
    const char* api;
    const char* fail;  // Fake entry point made to fail: async falls back per allocation.
  };
  for (const Case& c : {Case{"alloc", ""}, Case{"array", ""}, Case{"ipc", ""},
                        Case{"async", "cuMemPoolGetAttribute"}, Case{"async", ""}}) {
    SCOPED_TRACE(::testing::Message() << c.api << " " << c.fail);
    auto kv = MustRun({"direct", "freerace", c.api, std::to_string(chunk)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}, {"FAKECUDA_FAIL", c.fail}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "rc2"), 0u);
    EXPECT_EQ(U(kv, "same_address"), 1u) << "the interleaving happened";
    EXPECT_EQ(U(kv, "free_mid"), 64 * kMiB - chunk) << "only the new block is charged";
    EXPECT_EQ(U(kv, "free_after"), 64 * kMiB) << "no charge leaked";
    EXPECT_EQ(U(kv, "device_used"), 0u);
  }
}

// Memory freed where the shim does not see it (a reset that bypasses the
// hooks; cudaDeviceReset is seen, see below) leaves its record behind. An
// allocation the driver then gives the same address replaces the stale
// record: it is charged and the stale charge returned. It went uncharged,
// and its free returned the stale charge.
TEST(ShimTest, AnAllocationAtTheAddressOfAStaleRecordIsCharged) {
  ProcessResult r =
      Probe({"direct", "resetalloc", std::to_string(32 * kMiB), std::to_string(96 * kMiB)},
            {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = ParseKeyValues(r.out);
  EXPECT_EQ(U(kv, "reset_rc"), 0u);
  EXPECT_EQ(U(kv, "rc2"), 0u);
  EXPECT_EQ(U(kv, "same_address"), 1u) << "the interleaving happened";
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB - 96 * kMiB) << "the new block is charged, the stale not";
  EXPECT_EQ(U(kv, "freed_free"), 1024 * kMiB);
  EXPECT_EQ(CountLines(r.err, "handed out again"), 1) << r.err;
}

// cudaDeviceReset (cuDevicePrimaryCtxReset) frees what the device's primary
// context holds: its records and charges go with it, so the container can
// allocate up to its cap again but for what the reset leaves (here a mapped
// cuMemCreate handle, which belongs to no context). (They stayed charged
// until the process exited unless an allocation got the same address again.)
TEST(ShimTest, ADeviceResetReturnsTheChargesOfEverythingItFreed) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "resetcap", std::to_string(256 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "256"}});
    EXPECT_EQ(U(kv, "alloc_rc"), 0u);
    EXPECT_EQ(U(kv, "create_rc"), 0u);
    EXPECT_EQ(U(kv, "map_rc"), 0u);
    EXPECT_EQ(U(kv, "ipc_rc"), 0u);
    EXPECT_EQ(U(kv, "async_rc"), 0u);
    EXPECT_LT(U(kv, "held"), 64 * kMiB) << "all four are charged";
    EXPECT_EQ(U(kv, "reset_rc"), 0u);
    EXPECT_EQ(U(kv, "reset_used"), 64 * kMiB) << "the fake keeps the cuMemCreate handle";
    EXPECT_EQ(U(kv, "reset_free"), 192 * kMiB) << "and the shim its charge, only that";
    EXPECT_EQ(U(kv, "all_rc"), 0u) << "the rest of the cap is free again";
    EXPECT_EQ(U(kv, "all_free"), 0u);
  }
}

// A primary context reset frees neither the memory of a context made with
// cuCtxCreate, nor a pool made with cuMemPoolCreate and its blocks, nor a
// cuMemCreate handle: they keep their charges until their own frees. (The
// reset returned every charge of the device, and the container could
// allocate past its cap by what those still held.)
TEST(ShimTest, ACreatedContextAndPoolKeepTheirChargesThroughAReset) {
  const uint64_t unit = 64 * kMiB;
  const uint64_t cap = 1024 * kMiB;
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "resetkeeps", std::to_string(unit)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(U(kv, "rc" + std::to_string(i)), 0u) << i;
    }
    EXPECT_EQ(U(kv, "map_rc"), 0u);
    EXPECT_EQ(U(kv, "held_free"), cap - 7 * unit);
    EXPECT_EQ(U(kv, "reset_rc"), 0u);
    EXPECT_EQ(U(kv, "reset_used"), 4 * unit) << "the fake frees the primary context's three";
    EXPECT_EQ(U(kv, "reset_free"), cap - 4 * unit) << "the survivors stay charged";
    EXPECT_NE(U(kv, "stale_rc"), 0u);
    EXPECT_NE(U(kv, "stale_async_rc"), 0u);
    EXPECT_NE(U(kv, "stale_array_rc"), 0u);
    EXPECT_EQ(U(kv, "stale_free"), cap - 4 * unit) << "nothing is returned twice";
    EXPECT_EQ(U(kv, "over_rc"), 2u);
    EXPECT_EQ(U(kv, "rest_rc"), 0u);
    EXPECT_EQ(U(kv, "rest_free"), 0u);
    EXPECT_EQ(U(kv, "mine_rc"), 0u);
    EXPECT_EQ(U(kv, "mine_array_rc"), 0u);
    EXPECT_EQ(U(kv, "mine_freed"), 2 * unit) << "the created context's memory, at its frees";
    EXPECT_EQ(U(kv, "pooled_rc"), 0u);
    EXPECT_EQ(U(kv, "pooled_freed"), 3 * unit) << "the created pool's, at its block's free";
    EXPECT_EQ(U(kv, "release_rc"), 0u);
    EXPECT_EQ(U(kv, "handle_freed"), 4 * unit) << "the handle's, at its release";
    EXPECT_EQ(U(kv, "final_used"), 0u);
  }
}

// The measurement events of a context die with it (cuCtxDestroy, or the
// primary context's reset): the shim makes no call on them afterwards, even
// on launches still measured when the context ended, or when a new context
// gets the dead one's handle. (They were queried and destroyed on dangling
// handles.)
TEST(ShimTest, AnEndedContextsEventsAreNeverUsedAgain) {
  for (const char* how : {"destroy", "reset"}) {
    SCOPED_TRACE(how);
    auto kv =
        MustRun({"direct", "ctxevents", how, "100"}, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}});
    EXPECT_EQ(U(kv, "end_rc"), 0u);
    if (std::string(how) == "destroy") {
      EXPECT_EQ(U(kv, "same_handle"), 1u) << "the fake reuses the handle";
    }
    EXPECT_EQ(U(kv, "unknown_event_calls"), 0u);
  }
}

// A context destroyed where the shim does not see it (as a green context's
// destroy is) with measured launches in flight, its handle then reused: the
// dead events are never destroyed (the pair of a failed query was, and the
// free pairs of that context were recorded again, then destroyed), and the
// new context is measured with events of its own.
TEST(ShimTest, EventsOfAContextEndedUnseenAreNeverDestroyed) {
  auto kv = MustRun({"direct", "ctxunseen", "100"}, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}});
  EXPECT_EQ(U(kv, "end_rc"), 0u);
  ASSERT_EQ(U(kv, "same_handle"), 1u) << "the fake reuses the handle";
  EXPECT_EQ(U(kv, "unknown_event_destroys"), 0u);
  EXPECT_GT(U(kv, "records_after"), 0u) << "the new context is measured";
}

// Five contexts that each had 64 measured launches in flight (at 99 %, so
// that the queue fills) keep their event pairs free for later; a sixth
// context still gets pairs (before, every pair the process may make was
// taken, and its launches were never measured: charged the bucket's prior
// for good).
TEST(ShimTest, AContextMadeAfterOthersHeldEveryEventPairIsStillMeasured) {
  auto kv = MustRun({"direct", "ctxhoard", "5", "100"}, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "99"}});
  EXPECT_GT(U(kv, "last_context_records"), 0u);
}

// A context destroyed by one thread whose handle a new context on another
// device gets: a thread that launched in the old one charges the new one's
// launches to the new device. (Each thread's cached context -> device answer
// was dropped only by the destroying thread, so the launches went to the old
// device's bucket until the 256th.)
TEST(ShimTest, AContextHandleReusedOnAnotherDeviceIsChargedThere) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto kv = MustRun({"direct", "ctxreusedev", "16"}, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"},
                                                      {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}});
  EXPECT_EQ(U(kv, "destroy_rc"), 0u);
  ASSERT_EQ(U(kv, "same_handle"), 1u) << "the fake reuses the handle";
  SharedRegion region;
  char error[256] = {};
  ASSERT_TRUE(region.OpenFile(dir.path().c_str(), error, sizeof(error))) << error;
  for (int device : {0, 1}) {
    TokenBucketState* st = region.LockBucket(device);
    ASSERT_NE(st, nullptr);
    EXPECT_TRUE(st->initialized) << "device " << device << "'s bucket charged";
    region.UnlockBucket(device);
  }
}

// cuCtxDestroy of a created context frees the memory the context owned
// (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, arrays, IPC imports)
// without a free the shim sees: its charges are returned once the driver
// has destroyed it, also where it is not the current context, so that the
// container can allocate up to its cap again. Stream-ordered and cuMemCreate memory
// belong to no context and stay charged, as does the primary context's; a
// destroy the driver refuses returns nothing, and a later free of a freed
// block returns nothing twice. (All of it stayed charged until the process
// exited: a process creating and destroying contexts in a loop ran out.)
TEST(ShimTest, ADestroyedContextsMemoryIsUncharged) {
  const uint64_t unit = 64 * kMiB;
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv =
        MustRun({path, "ctxmem", std::to_string(unit)}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "kept_rc"), 0u);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(U(kv, "rc" + std::to_string(i)), 0u) << i;
    }
    EXPECT_EQ(U(kv, "held_free"), 1024 * kMiB - 2 * unit - 8 * unit) << "all of it is charged";
    EXPECT_EQ(U(kv, "failed_rc"), 801u);
    EXPECT_EQ(U(kv, "failed_free"), U(kv, "held_free")) << "a refused destroy frees nothing";
    EXPECT_NE(U(kv, "primary_rc"), 0u) << "the fake refuses a primary context's handle";
    EXPECT_EQ(U(kv, "primary_free"), U(kv, "held_free"));
    EXPECT_EQ(U(kv, "destroy_rc"), 0u);
    EXPECT_EQ(U(kv, "destroyed_free"), 1024 * kMiB - 2 * unit - 2 * unit)
        << "the primary context's memory, the pool's and the cuMemCreate handle stay charged";
    EXPECT_EQ(U(kv, "device_used"), 4 * unit) << "as the driver keeps them";
    EXPECT_NE(U(kv, "stale_free_rc"), 0u);
    EXPECT_NE(U(kv, "stale_array_rc"), 0u);
    EXPECT_NE(U(kv, "stale_close_rc"), 0u);
    EXPECT_EQ(U(kv, "stale_free"), U(kv, "destroyed_free")) << "nothing is returned twice";
    EXPECT_EQ(U(kv, "rest_rc"), 0u) << "the rest of the cap can be allocated";
    EXPECT_EQ(U(kv, "full_free"), 0u);
    EXPECT_EQ(U(kv, "kept_free_rc"), 0u);
    EXPECT_EQ(U(kv, "kept_freed"), 2 * unit);
  }
}

// The last release of a primary context resets it, and the memory it owned
// goes (cuDevicePrimaryCtxRelease). Retain/allocate/release cycles, many
// times over the cap in all, keep nothing charged but what is still held:
// the memory of a created context, a pool's and a cuMemCreate handle's.
TEST(ShimTest, APrimaryContextsLastReleaseUnchargesItsMemory) {
  const uint64_t unit = 64 * kMiB;
  const uint64_t cap = 1024 * kMiB;
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "primaryrelease", std::to_string(unit)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(U(kv, "base_rc" + std::to_string(i)), 0u) << i;
    }
    const uint64_t base_free = cap - 3 * unit;
    EXPECT_EQ(U(kv, "base_free"), base_free);
    EXPECT_NE(U(kv, "unretained_rc"), 0u) << "the fake refuses a release without a retain";
    EXPECT_EQ(U(kv, "unretained_free"), base_free);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(U(kv, "rc" + std::to_string(i)), 0u) << i;
    }
    EXPECT_EQ(U(kv, "same_handle"), 1u);
    EXPECT_EQ(U(kv, "held_free"), base_free - 6 * unit);
    EXPECT_EQ(U(kv, "first_rc"), 0u);
    EXPECT_EQ(U(kv, "kept_free"), base_free - 6 * unit) << "a reference is left: all stays";
    EXPECT_EQ(U(kv, "refused_rc"), 801u);
    EXPECT_EQ(U(kv, "refused_free"), base_free - 6 * unit) << "a refused release frees nothing";
    EXPECT_EQ(U(kv, "last_rc"), 0u);
    EXPECT_EQ(U(kv, "released_free"), base_free)
        << "the created context's, the pool's and the cuMemCreate handle's memory stay charged";
    EXPECT_EQ(U(kv, "device_used"), 3 * unit) << "as the driver keeps them";
    EXPECT_NE(U(kv, "stale_free_rc"), 0u);
    EXPECT_NE(U(kv, "stale_array_rc"), 0u);
    EXPECT_NE(U(kv, "stale_close_rc"), 0u);
    EXPECT_EQ(U(kv, "stale_free"), base_free) << "nothing is returned twice";
    EXPECT_EQ(U(kv, "cycles_ok"), 40u) << "80 x 64 MiB through a 1 GiB cap";
    EXPECT_EQ(U(kv, "cycles_free"), base_free);
    EXPECT_EQ(U(kv, "unknown_retain_rc"), 0u);
    EXPECT_EQ(U(kv, "unknown_alloc_rc"), 0u);
    EXPECT_EQ(U(kv, "unknown_rc"), 0u);
    EXPECT_EQ(U(kv, "unknown_free"), base_free - unit)
        << "the state cannot be read: the charges stay (the safe side)";
  }
}

// A context created while another is being destroyed may get its handle
// (the driver is done with it before the destroy returns): what the new
// context allocates meanwhile keeps its charge, and goes when it is
// destroyed in turn.
TEST(ShimTest, AContextGivenADestroyedOnesHandleKeepsItsCharges) {
  const uint64_t unit = 64 * kMiB;
  auto kv = MustRun({"direct", "ctxreuse", std::to_string(unit)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  EXPECT_EQ(U(kv, "create_rc"), 0u);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "held_free"), 1024 * kMiB - unit);
  EXPECT_EQ(U(kv, "destroy_rc"), 0u);
  EXPECT_EQ(U(kv, "same_handle"), 1u) << "the interleaving happened";
  EXPECT_EQ(U(kv, "inner_rc"), 0u);
  EXPECT_EQ(U(kv, "after_free"), 1024 * kMiB - 2 * unit) << "only the destroyed one's goes";
  EXPECT_EQ(U(kv, "again_rc"), 0u);
  EXPECT_EQ(U(kv, "final_free"), 1024 * kMiB);
}

// Memory allocated while a green context's CUcontext is current is the
// primary context's and outlives the green context, yet its record carries
// the green context's handle. A context created later with that handle
// value, through any of cuCtxCreate's ABIs and hook paths, owns none of it:
// its destroy returns its own memory's charge only. (The first such destroy
// returned the green block's charge too, and the container could exceed
// its cap.)
TEST(ShimTest, ANewContextDoesNotTakeRecordsCarryingItsHandle) {
  const uint64_t unit = 64 * kMiB;
  const uint64_t cap = 1024 * kMiB;
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "ctxbirth", std::to_string(unit)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "green_current"), 1u);
    EXPECT_EQ(U(kv, "green_rc"), 0u);
    EXPECT_EQ(U(kv, "green_free"), cap - unit);
    for (int abi = 2; abi <= 4; ++abi) {
      SCOPED_TRACE(abi);
      std::string v = "v" + std::to_string(abi) + "_";
      EXPECT_EQ(U(kv, v + "create_rc"), 0u);
      EXPECT_EQ(U(kv, v + "same_handle"), 1u) << "the fake gave the green context's handle";
      EXPECT_EQ(U(kv, v + "alloc_rc"), 0u);
      EXPECT_EQ(U(kv, v + "held_free"), cap - 2 * unit);
      EXPECT_EQ(U(kv, v + "destroy_rc"), 0u);
      EXPECT_EQ(U(kv, v + "free"), cap - unit) << "the green context's block stays charged";
    }
    EXPECT_EQ(U(kv, "kept_free_rc"), 0u);
    EXPECT_EQ(U(kv, "final_free"), cap) << "its own free returns it, once";
    EXPECT_EQ(U(kv, "device_used"), 0u);
  }
}

TEST(ShimTest, AFailedFreeKeepsItsCharge) {
  struct Case {
    const char* api;
    const char* entry;
  };
  for (const Case& c : {Case{"alloc", "cuMemFree_v2"}, Case{"array", "cuArrayDestroy"},
                        Case{"ipc", "cuIpcCloseMemHandle"}}) {
    SCOPED_TRACE(c.api);
    auto kv = MustRun({"direct", "freefail", c.api, c.entry, std::to_string(32 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "failed_free_rc"), 801u) << "the driver's error passes through";
    EXPECT_EQ(U(kv, "free_mid"), 32 * kMiB) << "still allocated, still charged";
    EXPECT_EQ(U(kv, "free_after"), 64 * kMiB);
  }
}

TEST(ShimTest, AnImportOfMemoryExportedInTheSameContainerIsNotChargedTwice) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "ipcself", std::to_string(256 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "get_rc"), 0u);
    EXPECT_EQ(U(kv, "open_rc"), 0u);
    EXPECT_EQ(U(kv, "charged_alloc"), 256 * kMiB);
    EXPECT_EQ(U(kv, "charged_import"), 0u) << "the exporter's allocation already counts";
    EXPECT_EQ(U(kv, "close_rc"), 0u);
    EXPECT_EQ(U(kv, "returned"), 1u);
  }
}

// The driver counts opens of a handle already open in the context and
// returns the same pointer: the second open maps nothing (and must not be
// refused near the cap), the first close unmaps nothing.
TEST(ShimTest, AHandleOpenedTwiceIsChargedOnceUntilItsLastClose) {
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    ProcessResult r = Probe({path, "ipctwice", std::to_string(48 * kMiB)},
                            {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto kv = ParseKeyValues(r.out);
    EXPECT_EQ(U(kv, "rc1"), 0u);
    EXPECT_EQ(U(kv, "free1"), 16 * kMiB);
    EXPECT_EQ(U(kv, "rc2"), 0u) << "the second open costs nothing";
    EXPECT_EQ(U(kv, "same"), 1u);
    EXPECT_EQ(U(kv, "free2"), 16 * kMiB);
    EXPECT_EQ(U(kv, "close1_rc"), 0u);
    EXPECT_EQ(U(kv, "closed_once"), 16 * kMiB) << "still mapped, still charged";
    EXPECT_EQ(U(kv, "close2_rc"), 0u);
    EXPECT_EQ(U(kv, "closed_twice"), 64 * kMiB);
    EXPECT_EQ(r.err.find("handed out again"), std::string::npos) << r.err;
  }
}

// Two threads open one handle at once: the driver gives both the same
// pointer and counts two references. Both used to miss each other's record
// and charge; the second record replaced the first as a stale one, so one
// record stood for two references, and the first close returned the charge
// while the driver still mapped the memory (near the cap, the second charge
// was refused instead, and an import that cost nothing more failed). The
// second open now takes a reference on the first one's record.
TEST(ShimTest, AHandleOpenedByTwoThreadsAtOnceIsChargedOnceUntilItsLastClose) {
  struct Case {
    const char* limit_mib;
    uint64_t held;
    uint64_t opened;  // Free memory with both open, and after the first close.
  };
  for (const Case& c : {Case{"128", 0, 80 * kMiB}, Case{"64", 0, 16 * kMiB},
                        // Refused at the cap, but the other thread's open
                        // already holds the mapping: it counts, past the cap.
                        Case{"64", 32 * kMiB, 0}}) {
    SCOPED_TRACE(std::string(c.limit_mib) + " MiB, " + std::to_string(c.held) + " held");
    const uint64_t limit = std::stoull(c.limit_mib) * kMiB;
    ProcessResult r =
        Probe({"direct", "ipcrace", std::to_string(48 * kMiB), std::to_string(c.held)},
              {{"ACCELPOOL_CUDA_MEMORY_LIMIT", c.limit_mib}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto kv = ParseKeyValues(r.out);
    EXPECT_EQ(U(kv, "hold_rc"), 0u);
    EXPECT_EQ(U(kv, "rc1"), 0u);
    EXPECT_EQ(U(kv, "rc2"), 0u);
    EXPECT_EQ(U(kv, "same"), 1u);
    EXPECT_EQ(U(kv, "opened"), c.opened);
    EXPECT_EQ(U(kv, "close1_rc"), 0u);
    EXPECT_EQ(U(kv, "closed_once"), c.opened) << "still mapped, still charged";
    EXPECT_EQ(U(kv, "close2_rc"), 0u);
    EXPECT_EQ(U(kv, "closed_twice"), limit - c.held);
    EXPECT_EQ(r.err.find("handed out again"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("past the container's cap") != std::string::npos, c.held != 0) << r.err;
  }
}

TEST(ShimTest, AMipmappedArrayIsChargedEveryLevel) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "mipmaplevels"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "charged"), 22 * kMiB) << "16 + 4 + 1 MiB, rounded up to the 2 MiB page";
    EXPECT_EQ(U(kv, "destroy_rc"), 0u);
    EXPECT_EQ(U(kv, "returned"), 1u);
  }
}

// Depth is the layer count of a layered array and the face count of a
// cubemap: every level has all of them. Halving it too charged 146 MiB of
// the 168 a layered array takes, and 110 of a cubemap's 126.
TEST(ShimTest, ALayeredOrCubemapMipmappedArrayIsChargedEveryLayerAtEveryLevel) {
  auto kv = MustRun({"direct", "mipmaplevels"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  EXPECT_EQ(U(kv, "layered_rc"), 0u);
  EXPECT_EQ(U(kv, "layered_charged"), 168 * kMiB) << "8 layers of 16 + 4 + 1 MiB";
  EXPECT_EQ(U(kv, "layered_returned"), 1u);
  EXPECT_EQ(U(kv, "cubemap_rc"), 0u);
  EXPECT_EQ(U(kv, "cubemap_charged"), 126 * kMiB) << "6 faces of 16 + 4 + 1 MiB";
  EXPECT_EQ(U(kv, "cubemap_returned"), 1u);
}

// A sparse or deferred-mapping array is backed by cuMemCreate handles mapped
// into it later, charged there: the array itself is not charged.
TEST(ShimTest, ArraysBackedLaterByHandlesAreNotChargedThemselves) {
  auto kv = MustRun({"direct", "backedlater", std::to_string(128 * kMiB)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
  for (const char* kind : {"sparse", "deferred"}) {
    SCOPED_TRACE(kind);
    EXPECT_EQ(U(kv, std::string(kind) + "_rc"), 0u) << "refused at the cap";
    EXPECT_EQ(U(kv, std::string(kind) + "_free"), 64 * kMiB);
    EXPECT_EQ(U(kv, std::string(kind) + "_mip_rc"), 0u);
    EXPECT_EQ(U(kv, std::string(kind) + "_mip_free"), 64 * kMiB);
  }
  EXPECT_EQ(U(kv, "plain_rc"), 2u) << "an ordinary array is still charged";
  EXPECT_EQ(U(kv, "plain_mip_rc"), 2u);
  EXPECT_EQ(U(kv, "after_free"), 64 * kMiB);
}

// A sparse array is backed by cuMemCreate handles mapped into it
// (cuMemMapArrayAsync), which the shim did not hook: a handle mapped there
// and then released, as a tile pool is, was uncharged while the array still
// held its memory. It stays charged until the process ends: an unmap names
// no handle, so the shim cannot tell when its last array mapping goes.
TEST(ShimTest, AHandleMappedIntoASparseArrayStaysCharged) {
  for (const char* path : {"direct", "dlsym", "procaddr", "procaddr_ptds"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "arraymap", std::to_string(512 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "create_rc"), 0u);
    EXPECT_EQ(U(kv, "array_rc"), 0u);
    EXPECT_EQ(U(kv, "map_rc"), 0u);
    EXPECT_EQ(U(kv, "release_rc"), 0u);
    EXPECT_EQ(U(kv, "driver_used"), 512 * kMiB) << "the array holds the memory";
    EXPECT_EQ(U(kv, "released_free"), 512 * kMiB) << "uncharged while the array holds it";
    EXPECT_EQ(U(kv, "over_rc"), 2u) << "allocated past the cap";
    EXPECT_EQ(U(kv, "unmap_rc"), 0u);
    EXPECT_EQ(U(kv, "unmapped_driver_used"), 0u);
    EXPECT_EQ(U(kv, "unmapped_free"), 512 * kMiB) << "charged until the process ends";
    EXPECT_EQ(U(kv, "again_rc"), 0u);
    EXPECT_EQ(U(kv, "again_free"), 256 * kMiB) << "a new handle is charged beside the kept one";
  }
  // A driver that gives the freed handle's value to the next cuMemCreate: the
  // new handle is charged all the same (the kept record gives way).
  auto kv = MustRun({"direct", "arraymap", std::to_string(512 * kMiB)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"FAKE_CUDA_REUSE_HANDLES", "1"}});
  EXPECT_EQ(U(kv, "reused"), 1u);
  EXPECT_EQ(U(kv, "again_rc"), 0u);
  EXPECT_EQ(U(kv, "again_free"), 256 * kMiB) << "the reused handle value is charged";
}

TEST(ShimTest, AFailedReleaseKeepsTheHandleCharged) {
  auto kv = MustRun({"direct", "relfail", std::to_string(32 * kMiB)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "64"}});
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "unmapped_release_rc"), 801u) << "the driver's error passes through";
  EXPECT_EQ(U(kv, "free_unmapped"), 32 * kMiB) << "the handle still exists, still charged";
  EXPECT_EQ(U(kv, "mapped_release_rc"), 801u);
  EXPECT_EQ(U(kv, "free_after_unmap"), 32 * kMiB) << "never released: unmapping frees nothing";
  EXPECT_EQ(U(kv, "release_rc"), 0u);
  EXPECT_EQ(U(kv, "free_after"), 64 * kMiB);
}

TEST(ShimTest, IpcImportIsChargedToTheDeviceThatHoldsIt) {
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}};
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    // The importer runs on device 0; the memory lives on device 1.
    auto kv = MustRun({path, "ipcdev", std::to_string(512 * kMiB), "1"}, env);
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "free0"), 1024 * kMiB) << "not the importer's current device";
    EXPECT_EQ(U(kv, "free1"), 512 * kMiB) << "the exporter's device";
    EXPECT_EQ(U(kv, "close_rc"), 0u);
    EXPECT_EQ(U(kv, "closed_free0"), 1024 * kMiB);
    EXPECT_EQ(U(kv, "closed_free1"), 1024 * kMiB);
  }
  // Without the pointer attribute: the current device, as before.
  env["FAKECUDA_FAIL"] = "cuPointerGetAttribute";
  auto kv = MustRun({"direct", "ipcdev", std::to_string(512 * kMiB), "1"}, env);
  EXPECT_EQ(U(kv, "free0"), 512 * kMiB);
  EXPECT_EQ(U(kv, "free1"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "closed_free0"), 1024 * kMiB);
}

// The driver allocates from the current pool of the stream's device, not
// the current context's: that pool is charged, by cuStreamGetDevice or, on
// drivers before 12.8, by the device of cuStreamGetCtx's context. Charging
// the current device's pool charged nothing at all (its reserve never grew).
TEST(ShimTest, AStreamOrderedAllocationIsChargedToTheStreamsDevice) {
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}};
  for (const char* fail : {"", "cuStreamGetDevice"}) {
    SCOPED_TRACE(fail);
    env["FAKECUDA_FAIL"] = fail;
    for (const char* path : {"direct", "procaddr", "procaddr_ptds"}) {
      SCOPED_TRACE(path);
      auto kv = MustRun({path, "asyncdev", std::to_string(256 * kMiB)}, env);
      EXPECT_EQ(U(kv, "create_rc"), 0u);
      EXPECT_EQ(U(kv, "rc"), 0u);
      EXPECT_EQ(U(kv, "free0"), 1024 * kMiB) << "not the current context's device";
      EXPECT_EQ(U(kv, "free1"), 768 * kMiB) << "the stream's device";
      EXPECT_EQ(U(kv, "free_rc"), 0u);
      EXPECT_EQ(U(kv, "freed_free0"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "freed_free1"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "current"), 1u) << "the caller's context stays current";
    }
  }
  // Past the cap of the stream's device: refused.
  env["FAKECUDA_FAIL"] = "";
  auto kv = MustRun({"direct", "asyncdev", std::to_string(2048 * kMiB)}, env);
  EXPECT_EQ(U(kv, "rc"), 2u);
  EXPECT_EQ(U(kv, "free1"), 1024 * kMiB);
}

// cuMemAllocFromPoolAsync with no current context (a thread that never
// made one current, launching on a stream it was given) passed through
// uncharged: its device was the current context's. It is the pool's, and
// else the stream's, as for cuMemAllocAsync.
TEST(ShimTest, AnAllocationFromAPoolWithoutACurrentContextIsCharged) {
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}};
  for (const char* fail : {"", "cuStreamGetDevice"}) {
    SCOPED_TRACE(fail);
    env["FAKECUDA_FAIL"] = fail;
    for (const char* path : {"direct", "procaddr"}) {
      SCOPED_TRACE(path);
      auto kv = MustRun({path, "poolnoctx", std::to_string(256 * kMiB)}, env);
      EXPECT_EQ(U(kv, "create_rc"), 0u);
      EXPECT_EQ(U(kv, "pool_rc"), 0u);
      EXPECT_EQ(U(kv, "none"), 1u) << "no context was current";
      EXPECT_EQ(U(kv, "rc"), 0u);
      EXPECT_EQ(U(kv, "free0"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "free1"), 768 * kMiB) << "the pool's device is charged";
      EXPECT_EQ(U(kv, "free_rc"), 0u);
      EXPECT_EQ(U(kv, "freed_free1"), 1024 * kMiB);
    }
  }
}

// cudaDeviceSetLimit(cudaLimitMallocHeapSize, n) makes the driver reserve
// the device malloc heap: its growth is charged, refused past the cap, and
// returned when it shrinks or its context ends. It was not hooked: a heap
// of any size went past the cap.
TEST(ShimTest, TheMallocHeapIsChargedAndReturned) {
  for (const char* path : {"direct", "dlsym", "procaddr", "procaddr_abi"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "heaplimit", std::to_string(256 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    const uint64_t before = U(kv, "before");
    EXPECT_EQ(before, 8 * kMiB) << "the fake's default heap";
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "grown_free"), 768 * kMiB) << "the growth, not the default heap";
    EXPECT_EQ(U(kv, "over_rc"), 2u) << "CUDA_ERROR_OUT_OF_MEMORY past the cap";
    EXPECT_EQ(U(kv, "over_free"), 768 * kMiB);
    EXPECT_EQ(U(kv, "over_heap"), before + 256 * kMiB) << "the refused call changed nothing";
    EXPECT_EQ(U(kv, "shrink_rc"), 0u);
    EXPECT_EQ(U(kv, "shrunk_free"), 896 * kMiB);
    EXPECT_EQ(U(kv, "back_rc"), 0u);
    EXPECT_EQ(U(kv, "back_free"), 1024 * kMiB);
    EXPECT_EQ(U(kv, "stack_rc"), 0u);
    EXPECT_EQ(U(kv, "stack_free"), 1024 * kMiB) << "the stack size is not charged";
    EXPECT_EQ(U(kv, "ctx_rc"), 0u);
    EXPECT_EQ(U(kv, "ctx_free"), 768 * kMiB);
    EXPECT_EQ(U(kv, "destroy_rc"), 0u);
    EXPECT_EQ(U(kv, "destroyed_free"), 1024 * kMiB) << "the heap went with its context";
    EXPECT_EQ(U(kv, "primary_rc"), 0u);
    EXPECT_EQ(U(kv, "primary_free"), 768 * kMiB);
    EXPECT_EQ(U(kv, "reset_rc"), 0u);
    EXPECT_EQ(U(kv, "reset_free"), 1024 * kMiB) << "a reset restores the default heap";
    EXPECT_EQ(U(kv, "reset_heap"), before);
  }
}

TEST(ShimTest, ConcurrentThreadsNeverExceedTheCapAndLeaveNothingCharged) {
  // 8 threads each holding 64 MiB for a moment against a 128 MiB cap.
  auto kv = MustRun({"procaddr", "threads", "8", "500"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "128"}});
  EXPECT_LE(U(kv, "peak"), 128 * kMiB);
  EXPECT_GT(U(kv, "refused"), 0u) << "the cap was reached";
  EXPECT_EQ(U(kv, "other_errors"), 0u);
  EXPECT_EQ(U(kv, "free"), 128 * kMiB) << "every charge was returned";
  EXPECT_EQ(U(kv, "device_used"), 0u);
}

TEST(ShimTest, MemoryQueriesReportTheCapAndGuardNullArguments) {
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "1024"}};
  auto kv = MustRun({"dlsym", "alloc", std::to_string(100 * kMiB)}, env);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "total"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free"), 924 * kMiB);
  kv = MustRun({"direct", "meminfo"}, env);
  EXPECT_EQ(U(kv, "total"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "null_free_rc"), 0u);
  EXPECT_EQ(U(kv, "total_only"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "null_both_rc"), 0u);
  EXPECT_EQ(U(kv, "device_total"), 1024 * kMiB);
  // Over-large cap: reports physical memory, never more.
  kv = MustRun({"direct", "meminfo"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "999999999"}});
  EXPECT_EQ(U(kv, "total"), kFakeDeviceBytes);
  EXPECT_EQ(U(kv, "device_total"), kFakeDeviceBytes);
  // Unlimited: the driver's own answers, NULL handling included.
  kv = MustRun({"direct", "meminfo"}, {});
  EXPECT_EQ(U(kv, "total"), kFakeDeviceBytes);
  EXPECT_EQ(U(kv, "null_free_rc"), 1u) << "the fake driver rejects NULL itself";
}

TEST(ShimTest, NvmlReportsTheCap) {
  auto kv = MustRun({"dlsym", "nvml"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "2048"}});
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "total"), 2048 * kMiB);
  EXPECT_EQ(U(kv, "used"), 0u) << "the container has allocated nothing";
  EXPECT_EQ(U(kv, "free"), 2048 * kMiB);
  EXPECT_EQ(U(kv, "total2"), 2048 * kMiB);
  EXPECT_EQ(U(kv, "free2"), 2048 * kMiB);
  kv = MustRun({"dlsym", "nvml"}, {});
  EXPECT_EQ(U(kv, "total"), kFakeDeviceBytes) << "unlimited: untouched";
}

// The context reserve is charged at a process's first allocation on a
// device; until then the memory queries leave it out of what is free, so
// that allocating all that shows fits. (A fresh process saw the reserve as
// free, and an allocation of all of it was refused.)
TEST(ShimTest, MemoryQueriesLeaveOutTheContextReserveStillToBeCharged) {
  const Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                   {"ACCELPOOL_CUDA_CONTEXT_RESERVE_MIB", "256"}};
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "allfree"}, env);
    EXPECT_EQ(U(kv, "info_rc"), 0u);
    EXPECT_EQ(U(kv, "free"), 768 * kMiB) << "the reserve shown as free";
    EXPECT_EQ(U(kv, "rc"), 0u) << "all that showed free was refused";
    EXPECT_EQ(U(kv, "after"), 0u) << "the reserve left out twice once charged";
    EXPECT_EQ(U(kv, "total"), 1024 * kMiB);
  }
  auto kv = MustRun({"dlsym", "nvml"}, env);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "total"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "free"), 768 * kMiB) << "NVML showed the reserve as free";
  EXPECT_EQ(U(kv, "used"), 256 * kMiB);
  EXPECT_EQ(U(kv, "free2"), 768 * kMiB);
}

// A launcher that gives each worker one GPU (CUDA_VISIBLE_DEVICES=$LOCAL_RANK)
// makes every worker's GPU its device 0, while the container's caps, compute
// buckets and usage are numbered by the plugin's grant, whose UUIDs it
// lists. The shim maps each CUDA ordinal, and each NVML device, to the
// container's index by UUID. (Both GPUs were charged to the container's
// device 0, against its cap and its bucket, and NVML went by its own index.)
TEST(ShimTest, AProcessesDevicesAreTheContainersDevicesOfTheSameUuid) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // The container's device 0 is the fake's device 1, its device 1 the fake's device 0.
  const Env shared = {
      {"ACCELPOOL_CUDA_DEVICE_UUIDS", std::string(kFakeDeviceUuids[1]) + "," + kFakeDeviceUuids[0]},
      {"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "1024"},
      {"ACCELPOOL_CUDA_MEMORY_LIMIT_1", "256"},
      {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}};
  Env worker = shared;  // Sees only the container's device 1, as its device 0.
  worker["CUDA_VISIBLE_DEVICES"] = kFakeDeviceUuids[0];
  Env other = shared;  // Sees only the container's device 0.
  other["CUDA_VISIBLE_DEVICES"] = kFakeDeviceUuids[1];
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "alloc", std::to_string(512 * kMiB)}, worker);
    EXPECT_EQ(U(kv, "rc"), 2u) << "its device's cap is 256 MiB";
    EXPECT_EQ(U(kv, "total"), 256 * kMiB);
    kv = MustRun({path, "alloc", std::to_string(512 * kMiB)}, other);
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "total"), 1024 * kMiB);
  }

  Env held = worker;
  held["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  held["LD_PRELOAD"] = ShimPreload();
  ChildProcess holder;
  ASSERT_TRUE(holder.Start({ProbePath(), "direct", "hold", std::to_string(128 * kMiB)}, held));
  ASSERT_EQ(U(ParseKeyValues(holder.ReadLine(30000)), "rc"), 0u);
  auto kv = MustRun({"direct", "meminfo"}, worker);
  EXPECT_EQ(U(kv, "free"), 128 * kMiB) << "the holder's device";
  kv = MustRun({"direct", "meminfo"}, other);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB) << "the container's other device is untouched";
  // NVML numbers the devices its own way (here the fake's order).
  kv = MustRun({"dlsym", "nvml", "0"}, shared);
  EXPECT_EQ(U(kv, "total"), 256 * kMiB) << "NVML device 0 is the container's device 1";
  EXPECT_EQ(U(kv, "used"), 128 * kMiB);
  kv = MustRun({"dlsym", "nvml", "1"}, shared);
  EXPECT_EQ(U(kv, "total"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "used"), 0u);
  holder.CloseStdin();
  EXPECT_EQ(holder.Wait(10000).exit_code, 0);

  // The worker's launches draw from its device's compute bucket.
  Env computing = worker;
  computing["ACCELPOOL_CUDA_COMPUTE_LIMIT"] = "50";
  MustRun({"direct", "prilaunch", "0", "kernel", "5"}, computing);
  std::ifstream f(dir.path() + "/" + kRegionFileName, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), sizeof(RegionLayout));
  const auto* layout = reinterpret_cast<const RegionLayout*>(bytes.data());
  EXPECT_TRUE(layout->buckets[1].state.initialized);
  EXPECT_FALSE(layout->buckets[0].state.initialized);

  // A device the list does not name keeps its ordinal, with one warning.
  Env unlisted = worker;
  unlisted["ACCELPOOL_CUDA_DEVICE_UUIDS"] = kFakeDeviceUuids[1];
  ProcessResult r = Probe({"direct", "alloc", std::to_string(512 * kMiB)}, unlisted);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "rc"), 0u) << "device 0's cap, 1024 MiB";
  EXPECT_EQ(CountLines(r.err, "is not among the container's devices"), 1) << r.err;
}

// The test's own environment reaches the probe only where the test does not
// set the variable: a CI machine that sets CUDA_VISIBLE_DEVICES (or a fake
// library's knob) must not decide which device a probe sees. Two entries of
// one name gave the parent's, which getenv finds first.
TEST(ShimTest, AVariableTheTestSetsIsNotShadowedByTheTestsOwnEnvironment) {
  struct Restore {
    std::string name;
    std::optional<std::string> was;
    ~Restore() {
      if (was.has_value()) {
        setenv(name.c_str(), was->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  };
  auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return Restore{name, v != nullptr ? std::optional<std::string>(v) : std::nullopt};
  };
  Restore cvd = saved("CUDA_VISIBLE_DEVICES");
  Restore used = saved("FAKENVML_USED_MIB");
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  setenv("FAKENVML_USED_MIB", "81000", 1);
  const Env env = {
      {"ACCELPOOL_CUDA_DEVICE_UUIDS", std::string(kFakeDeviceUuids[1]) + "," + kFakeDeviceUuids[0]},
      {"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "1024"},
      {"ACCELPOOL_CUDA_MEMORY_LIMIT_1", "256"},
      {"CUDA_VISIBLE_DEVICES", kFakeDeviceUuids[0]}};
  auto kv = MustRun({"direct", "alloc", std::to_string(512 * kMiB)}, env);
  EXPECT_EQ(U(kv, "rc"), 2u) << "the fake's device 0 is the container's device 1, capped at 256";
  EXPECT_EQ(U(kv, "total"), 256 * kMiB);
  kv = MustRun({"dlsym", "nvml"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "2048"}});
  EXPECT_EQ(U(kv, "free"), 2048 * kMiB) << "the card's default used figure, not the parent's";
}

// Like cuMemGetInfo: what is left of the cap, but never more than the card
// has free. It reported the whole cap while other tenants held all but 1 GiB.
TEST(ShimTest, NvmlFreeMemoryNeverExceedsWhatTheCardHasFree) {
  const uint64_t card_used = kFakeDeviceBytes - 1024 * kMiB;
  auto kv = MustRun({"dlsym", "nvml"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "2048"},
                                        {"FAKENVML_USED_MIB", std::to_string(card_used / kMiB)}});
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "total"), 2048 * kMiB);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB) << "the card's free memory";
  EXPECT_EQ(U(kv, "used"), 1024 * kMiB) << "used + free = total";
  EXPECT_EQ(U(kv, "rc2"), 0u);
  EXPECT_EQ(U(kv, "total2"), 2048 * kMiB);
  EXPECT_EQ(U(kv, "free2"), 1024 * kMiB);
  EXPECT_EQ(U(kv, "used2"), 1024 * kMiB);
  // With room on the card, the cap's figures as before.
  kv = MustRun({"dlsym", "nvml"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "2048"},
                                   {"FAKENVML_USED_MIB", std::to_string(70 * 1024)}});
  EXPECT_EQ(U(kv, "free"), 2048 * kMiB);
  EXPECT_EQ(U(kv, "used"), 0u);
}

TEST(ShimTest, SymbolResolutionThroughBothHookPaths) {
  auto on = MustRun({"dlsym", "symbols"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  for (const char* key :
       {"dlsym_memalloc_hooked", "dlsym_unknown_passthrough", "dlsym_gpa_hooked",
        "procaddr_memalloc_hooked", "procaddr13_memalloc_hooked", "procaddr_legacy_passthrough",
        "procaddr_ptsz_launch_hooked", "procaddr_graph_hooked", "procaddr_unknown_passthrough",
        "procaddr_self_hooked", "dlsym_gpa_ptsz_hooked", "procaddr_self_ptsz_is_the_hook",
        "ptsz_launch_hooked", "ptsz_launch_is_per_thread", "ptsz_memalloc_hooked"}) {
    EXPECT_EQ(U(on, key), 1u) << key;
  }
  EXPECT_EQ(U(on, "procaddr_missing_rc"), 500u) << "driver errors pass through";
  EXPECT_EQ(U(on, "status"), 1u) << "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND";
  // Limits off: the driver's own functions are handed out (zero overhead).
  auto off = MustRun({"dlsym", "symbols"}, {});
  EXPECT_EQ(U(off, "dlsym_memalloc_hooked"), 0u);
  EXPECT_EQ(U(off, "procaddr_memalloc_hooked"), 0u);
  EXPECT_EQ(U(off, "procaddr_graph_hooked"), 0u);
}

TEST(ShimTest, MalformedOrMissingValuesMeanNoLimitWithOneWarning) {
  ProcessResult r = Probe({"direct", "fill", "alloc", std::to_string(4096 * kMiB)},
                          {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "lots"},
                           {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "-3"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = ParseKeyValues(r.out);
  EXPECT_EQ(U(kv, "allocated"), kFakeDeviceBytes) << "no cap: the whole fake device";
  EXPECT_EQ(CountLines(r.err, "ignoring ACCELPOOL_CUDA_MEMORY_LIMIT="), 1) << r.err;
  EXPECT_EQ(CountLines(r.err, "ignoring ACCELPOOL_CUDA_COMPUTE_LIMIT="), 1) << r.err;
  // Nothing set at all: silent.
  r = Probe({"direct", "meminfo"}, {});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
}

TEST(ShimTest, RtldNextIsResolvedRelativeToTheCaller) {
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
             {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
             {"LD_PRELOAD", ShimPreload() + ":" + ACCELPOOL_NEXT_INTERPOSER_PATH}};
  // The shim calls getpid() when it claims its accounting slot; the wrapper
  // behind it must reach libc, not itself.
  ProcessResult r = testing::Run({ProbePath(), "direct", "alloc", "1048576"}, env);
  EXPECT_EQ(r.exit_code, 0) << "signal " << r.signal << " stderr " << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "rc"), 0u);
}

TEST(ShimTest, CoexistsWithASanitizerRuntimePreloadedFirst) {
  if (std::getenv("ACCELPOOL_TEST_EXPECT_GLIBC") != nullptr) {
    GTEST_SKIP() << "this machine's sanitizer runtime needs its own glibc, not the older one "
                    "under test; the plain run of this suite covers it";
  }
  // A sanitizer runtime resolves its interceptors with dlsym(RTLD_NEXT) while
  // it initialises, before libc's string functions and __tls_get_addr are
  // usable through it: the shim's dlsym must not touch any of them.
  std::string asan;
#if defined(__x86_64__)
#define ACCELPOOL_MULTIARCH "x86_64-linux-gnu"
#elif defined(__aarch64__)
#define ACCELPOOL_MULTIARCH "aarch64-linux-gnu"
#endif
  for (const char* path :
       {"/lib/" ACCELPOOL_MULTIARCH "/libasan.so.8",
        "/usr/lib/" ACCELPOOL_MULTIARCH "/libasan.so.8",
        "/lib/" ACCELPOOL_MULTIARCH "/libasan.so.6", "/usr/lib64/libasan.so.8"}) {
    if (access(path, R_OK) == 0) {
      asan = path;
      break;
    }
  }
  if (asan.empty()) {
    GTEST_SKIP() << "no libasan on this machine (install libasan8 to run this test)";
  }
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
             {"ASAN_OPTIONS", "detect_leaks=0"},
             {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
             {"LD_PRELOAD", asan + ":" + ACCELPOOL_SHIM_PATH}};
  ProcessResult r =
      testing::Run({ProbePath(), "procaddr", "fill", "alloc", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(r.exit_code, 0) << "signal " << r.signal << " stderr " << r.err;
  EXPECT_EQ(U(ParseKeyValues(r.out), "allocated"), 1024 * kMiB) << "and the cap still holds";
}

TEST(ShimTest, DisableTurnsEverythingOff) {
  auto kv = MustRun({"procaddr", "fill", "alloc", std::to_string(4096 * kMiB)},
                    {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"ACCELPOOL_CUDA_DISABLE", "1"}});
  EXPECT_EQ(U(kv, "allocated"), kFakeDeviceBytes);
}

TEST(ShimTest, ProcessesOfAContainerShareOneCapAndAKilledOneIsReclaimed) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}};
  env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  env["LD_PRELOAD"] = ShimPreload();
  ChildProcess holder;
  ASSERT_TRUE(holder.Start({ProbePath(), "direct", "hold", std::to_string(700 * kMiB)}, env));
  auto held = ParseKeyValues(holder.ReadLine(30000));
  ASSERT_EQ(U(held, "held"), 700 * kMiB);

  Env shared = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}};
  auto kv = MustRun({"direct", "alloc", std::to_string(400 * kMiB)}, shared);
  EXPECT_EQ(U(kv, "rc"), 2u) << "700 + 400 > 1024 across processes";
  EXPECT_EQ(U(kv, "free"), 324 * kMiB);
  kv = MustRun({"procaddr", "alloc", std::to_string(300 * kMiB)}, shared);
  EXPECT_EQ(U(kv, "rc"), 0u);
  EXPECT_EQ(U(kv, "free"), 24 * kMiB) << "both processes' usage is counted";

  holder.Kill(SIGKILL);
  ProcessResult hr = holder.Wait(10000);
  EXPECT_EQ(hr.signal, SIGKILL);
  kv = MustRun({"direct", "meminfo"}, shared);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB) << "no stale usage from the killed process";
  kv = MustRun({"dlsym", "alloc", std::to_string(1000 * kMiB)}, shared);
  EXPECT_EQ(U(kv, "rc"), 0u) << "the killed process' 700 MiB was reclaimed";
}

// The device plugin reports a container's usage from the region file's bytes,
// without its locks (src/cuda/region_format.h): what a process of the
// container holds shows there while it runs, and leaves when it exits.
TEST(ShimTest, TheRegionFileShowsWhatTheContainersProcessesHold) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}};
  env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  env["LD_PRELOAD"] = ShimPreload();
  // As the device plugin reads it: the bytes, and each marked slot's
  // liveness lock tested on the file (this process holds none).
  auto read = [&](RegionUsage* raw = nullptr) {
    const std::string path = dir.path() + "/" + kRegionFileName;
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    RegionUsage u;
    EXPECT_TRUE(ReadRegionUsage(
        bytes.data(), bytes.size(), &u,
        [](int slot, void* ctx) { return ProbeSlotLock(*static_cast<int*>(ctx), slot); }, &fd))
        << bytes.size() << " bytes";
    if (raw != nullptr) {
      EXPECT_TRUE(ReadRegionUsage(bytes.data(), bytes.size(), raw));
    }
    close(fd);
    return u;
  };
  ChildProcess holder;
  ASSERT_TRUE(holder.Start({ProbePath(), "direct", "hold", std::to_string(700 * kMiB)}, env));
  auto held = ParseKeyValues(holder.ReadLine(30000));
  ASSERT_EQ(U(held, "held"), 700 * kMiB);
  RegionUsage u = read();
  EXPECT_EQ(u.processes, 1);
  EXPECT_EQ(u.gone, 0) << "the shim marks its slot and holds the slot's lock";
  // The charge is the allocation plus the context's own reserve, if any: at
  // least what the process holds, within the cap.
  EXPECT_GE(u.used_bytes[0], 700 * kMiB);
  EXPECT_LE(u.used_bytes[0], 1024 * kMiB);
  EXPECT_EQ(u.used_bytes[1], 0u);
  const uint64_t first = u.used_bytes[0];
  // Killed by SIGKILL, it runs no cleanup, and no process of the container
  // touches the region after it: its bytes stay, the outside view leaves it
  // out at once. (One process at a time: under qemu-user, the Arm64 run, a
  // process's own start time is emulated, and a second live process could
  // take the first for a reused PID and reclaim its slot.)
  holder.Kill(SIGKILL);
  holder.Wait(10000);
  RegionUsage raw;
  u = read(&raw);
  EXPECT_EQ(raw.processes, 1) << "nothing reclaimed the killed process's slot yet";
  EXPECT_EQ(raw.used_bytes[0], first);
  EXPECT_EQ(u.processes, 0);
  EXPECT_EQ(u.gone, 1);
  EXPECT_EQ(u.used_bytes[0], 0u);
  // The next process reclaims the dead slot and holds its own.
  ChildProcess next;
  ASSERT_TRUE(next.Start({ProbePath(), "direct", "hold", std::to_string(200 * kMiB)}, env));
  ASSERT_EQ(U(ParseKeyValues(next.ReadLine(30000)), "held"), 200 * kMiB);
  u = read(&raw);
  EXPECT_EQ(raw.processes, 1);
  EXPECT_EQ(u.processes, 1);
  EXPECT_EQ(u.gone, 0);
  EXPECT_GE(u.used_bytes[0], 200 * kMiB);
  EXPECT_LT(u.used_bytes[0], first);
  next.CloseStdin();
  EXPECT_EQ(next.Wait(10000).exit_code, 0);
  u = read();
  EXPECT_EQ(u.processes, 0);
  EXPECT_EQ(u.used_bytes[0], 0u);
}

// torch.cuda.graph captures in global mode by default. Meanwhile a thread
// that is not in relaxed mode may not query an event: the query fails and
// the capture is invalidated. With a compute share, the shim queries its
// measurement events on the launches of every thread, so a thread launching
// on another stream during the capture broke it. The shim queries in
// relaxed mode, which is legal for events never recorded in a capture.
TEST(ShimTest, MeasuringLaunchesDoesNotBreakAnotherThreadsGlobalCapture) {
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "capturerace", "300"}, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}});
    EXPECT_EQ(U(kv, "begin_rc"), 0u);
    EXPECT_EQ(U(kv, "end_rc"), 0u) << "901: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    EXPECT_GT(U(kv, "launches"), 8u) << "too few launches to harvest a measurement";
    EXPECT_EQ(U(kv, "failed_launches"), 0u);
    // Without a limit the shim adds no query: the fake's capture holds.
    kv = MustRun({path, "capturerace", "100"}, {});
    EXPECT_EQ(U(kv, "end_rc"), 0u);
  }
}

// The shim initialises on a process's first driver lookup. Made from 32
// threads at once (a framework's worker threads starting together), every
// thread gets the same hooks and the cap holds across them.
TEST(ShimTest, ConcurrentFirstLookupsInitialiseOnceAndAllGetTheHooks) {
  for (int round = 0; round < 5; ++round) {
    auto kv = MustRun({"dlsym", "initrace", "32"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                                                    {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}});
    EXPECT_EQ(U(kv, "same"), 32u);
    EXPECT_EQ(U(kv, "hooked"), 32u);
    EXPECT_EQ(U(kv, "allocated"), 1024 * kMiB);
  }
}

// glibc runs a dlopened library's constructors with the loader's lock held,
// and dlopen, dlsym, dlvsym and dladdr all take that lock. A constructor that
// looks a driver entry point up (or calls one) while another thread is in
// the middle of a step of the shim's initialisation must neither wait for
// that thread while it waits for the lock (both hang) nor get the driver's
// function unhooked: the probe's constructor waits until the other thread
// sleeps on the lock inside the step, for each step (resolving the real
// dlsym, the environment and limits file, the driver, NVML). A hang is a
// failure, not a stuck suite: the child is killed at the timeout.
TEST(ShimTest, AConstructorUsingTheDriverWhileAnotherThreadInitialisesDoesNotDeadlock) {
  const bool emulated = std::getenv("ACCELPOOL_TEST_EXEC_WRAPPER") != nullptr;
  for (const char* first : {"dlsym", "init", "cuda", "nvml"}) {
    SCOPED_TRACE(first);
    Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
               {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
               {"LD_PRELOAD", ShimPreload()}};
    ProcessResult r = testing::Run(
        {ProbePath(), "direct", "loaderrace", first, ACCELPOOL_LOADER_RACE_LIB_PATH}, env, 20000);
    ASSERT_EQ(r.signal, 0) << "killed at the timeout: the constructor and the initialising "
                              "thread waited for each other\nstderr: "
                           << r.err << "\nstdout: " << r.out;
    ASSERT_EQ(r.exit_code, 0) << "stderr: " << r.err << "\nstdout: " << r.out;
    auto kv = ParseKeyValues(r.out);
    EXPECT_EQ(U(kv, "signalled"), 1u);
    EXPECT_EQ(U(kv, "loaded"), 1u);
    if (!emulated) {  // qemu-user may not show the thread's state: then a fixed wait.
      EXPECT_EQ(U(kv, "ctor_waited"), 1u) << "the window was not hit";
    }
    EXPECT_EQ(U(kv, "primed_rc"), 0u);
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "ctor_rc"), 0u);
    if (std::string(first) == "nvml") {
      // Both threads see the cap through NVML; 64 MiB was allocated before.
      EXPECT_EQ(U(kv, "nvml_total"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "ctor_total"), 1024 * kMiB);
      EXPECT_EQ(U(kv, "free"), 960 * kMiB);
    } else {
      // Both allocations went through the hooks and are charged.
      EXPECT_EQ(U(kv, "free"), 896 * kMiB);
    }
  }
}

// VMM: one cuMemCreate handle mapped at two addresses is charged once
// (charging mappings is the double count behind false OOMs elsewhere), and
// returned when it is released and unmapped, in either order.
TEST(ShimTest, AHandleMappedTwiceIsChargedOnceAndReturnedWhenGone) {
  for (const char* path : {"direct", "procaddr_abi"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "vmmtwice", std::to_string(64 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "create_rc"), 0u);
    EXPECT_EQ(U(kv, "created"), 960 * kMiB);
    EXPECT_EQ(U(kv, "mapped_twice"), 960 * kMiB) << "a second mapping charged again";
    EXPECT_EQ(U(kv, "one_unmapped"), 960 * kMiB);
    EXPECT_EQ(U(kv, "released_one_mapped"), 960 * kMiB) << "still mapped: still held";
    EXPECT_EQ(U(kv, "all_gone"), 1024 * kMiB);
    EXPECT_EQ(U(kv, "segment_mapped"), 960 * kMiB);
    EXPECT_EQ(U(kv, "segment_unmapped"), 960 * kMiB) << "not released yet: still held";
    EXPECT_EQ(U(kv, "segment_released"), 1024 * kMiB);
  }
}

// The last unmap of a released handle frees it, and the driver may hand its
// value to another thread's cuMemCreate before that unmap returns. The new
// handle is charged and the freed one returned once. (Settled after the
// unmap, the freed handle's record was still there: the new one's record
// could not be made, so its charge was returned, and then the freed one's
// too: the new handle's memory escaped the cap.) An unmap that fails frees
// nothing: the handle stays charged.
TEST(ShimTest, AHandleFreedByItsLastUnmapGivesWayToANewHandleWithItsValue) {
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "vmmunmap", std::to_string(512 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"FAKE_CUDA_REUSE_HANDLES", "1"}});
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "map_rc"), 0u);
    EXPECT_EQ(U(kv, "release_rc"), 0u);
    EXPECT_EQ(U(kv, "unmap_rc"), 0u);
    EXPECT_EQ(U(kv, "create2_rc"), 0u);
    EXPECT_EQ(U(kv, "reused"), 1u) << "the fake did not hand out the freed value";
    EXPECT_EQ(U(kv, "device_used"), 512 * kMiB);
    EXPECT_EQ(U(kv, "raced_free"), 512 * kMiB) << "the new handle is not charged";
    EXPECT_EQ(U(kv, "over_rc"), 2u) << "allocated past the cap";
    EXPECT_EQ(U(kv, "second_released"), 1024 * kMiB);
    EXPECT_EQ(U(kv, "again_rc"), 0u);
    EXPECT_EQ(U(kv, "failed_unmap_rc"), 801u) << "the driver's error passes through";
    EXPECT_EQ(U(kv, "failed_free"), 512 * kMiB) << "still mapped: still charged";
    EXPECT_EQ(U(kv, "unmap_again_rc"), 0u);
    EXPECT_EQ(U(kv, "all_free"), 1024 * kMiB);
    // Released by another thread while its last unmap fails: still mapped,
    // still charged (the release took the record the unmap had dropped to no
    // mapping, and uncharged a live handle).
    EXPECT_EQ(U(kv, "third_rc"), 0u);
    EXPECT_EQ(U(kv, "raced_release_rc"), 0u);
    EXPECT_EQ(U(kv, "raced_unmap_rc"), 801u);
    EXPECT_EQ(U(kv, "raced_failed_free"), 512 * kMiB) << "a live handle uncharged";
    EXPECT_EQ(U(kv, "raced_unmap_again_rc"), 0u);
    EXPECT_EQ(U(kv, "raced_all_free"), 1024 * kMiB);
    // Released by one thread while its last unmap succeeds, its value handed
    // to a third thread's cuMemCreate meanwhile: that handle is charged (it
    // went untracked), the freed one is not.
    EXPECT_EQ(U(kv, "fourth_rc"), 0u);
    EXPECT_EQ(U(kv, "rc_release"), 0u);
    EXPECT_EQ(U(kv, "rc_create"), 0u);
    EXPECT_EQ(U(kv, "rc_reused"), 1u) << "the fake did not hand out the freed value";
    EXPECT_EQ(U(kv, "rc_unmap_rc"), 0u);
    EXPECT_EQ(U(kv, "rc_held_free"), 512 * kMiB) << "the new handle is charged, the old one not";
    EXPECT_EQ(U(kv, "rc_all_free"), 1024 * kMiB);
  }
}

// UCX, mscclpp and SGLang look up the handle of a mapped address with
// cuMemRetainAllocationHandle and release it again. That release drops the
// retained reference only: the application still owns the handle, so
// unmapping it frees nothing, and mapped again it is still charged. (The
// release was taken for the creator's: the unmap uncharged the handle, and
// it was used again uncounted.)
TEST(ShimTest, ARetainedHandleReleasedAgainStaysChargedUntilItsOwnRelease) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun({path, "vmmretain", std::to_string(64 * kMiB)},
                      {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
    EXPECT_EQ(U(kv, "create_rc"), 0u);
    EXPECT_EQ(U(kv, "mapped"), 896 * kMiB);
    EXPECT_EQ(U(kv, "retain_rc"), 0u);
    EXPECT_EQ(U(kv, "same"), 1u);
    EXPECT_EQ(U(kv, "query_release_rc"), 0u);
    EXPECT_EQ(U(kv, "queried"), 896 * kMiB);
    EXPECT_EQ(U(kv, "unmapped"), 896 * kMiB) << "the application still owns the handle";
    EXPECT_EQ(U(kv, "remap_rc"), 0u);
    EXPECT_EQ(U(kv, "remapped"), 896 * kMiB);
    EXPECT_EQ(U(kv, "release_rc"), 0u);
    EXPECT_EQ(U(kv, "released"), 960 * kMiB) << "returned once: the other handle still counts";
    EXPECT_EQ(U(kv, "device_used"), 64 * kMiB) << "the driver freed it too";
    EXPECT_EQ(U(kv, "all_released"), 1024 * kMiB);
  }
}

// PyTorch's DataLoader forks workers from a process that holds device
// memory. A forked child starts with no charges and a slot of its own; its
// normal exit returns what it charged and leaves the parent's charge alone.
TEST(ShimTest, AForkedChildGetsItsOwnSlotAndLeavesTheParentsCharge) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  for (const char* path : {"direct", "procaddr"}) {
    SCOPED_TRACE(path);
    auto kv = MustRun(
        {path, "forkalloc", std::to_string(256 * kMiB)},
        {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}, {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}});
    EXPECT_EQ(U(kv, "parent_rc"), 0u);
    EXPECT_EQ(U(kv, "parent_free"), 768 * kMiB);
    EXPECT_EQ(U(kv, "child_rc"), 0u);
    EXPECT_EQ(U(kv, "child_free"), 512 * kMiB) << "the parent's charge counts in the child";
    EXPECT_EQ(U(kv, "child_after_free"), 768 * kMiB);
    EXPECT_EQ(U(kv, "child_exit"), 0u);
    EXPECT_EQ(U(kv, "after_child"), 768 * kMiB) << "the child's exit took the parent's charge";
    EXPECT_EQ(U(kv, "after_parent_free"), 1024 * kMiB);
  }
}

// A fork while another thread holds the hook-slot lock (inside a
// cuGetProcAddress) left the child's copy of the lock held by no thread: the
// child's first lookup hung. Each child here looks up once while the
// parent's other thread looks up without pause.
TEST(ShimTest, AForkWhileAnotherThreadBindsAHookLeavesTheChildUsable) {
  auto kv = MustRun({"procaddr", "forkbind", "1000"}, {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
  EXPECT_EQ(U(kv, "hung"), 0u) << "after " << U(kv, "forks") << " forks";
  EXPECT_EQ(U(kv, "forks"), 1000u);
}

// The same with task priority as the only thing on: no limit opens the
// region, yet the hooks are bound (under the same lock). The fork handlers
// were registered only with the region, and such a child hung.
TEST(ShimTest, AForkWhileAnotherThreadBindsAHookLeavesTheChildUsableWithOnlyAPriority) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_TRUE(testing::WritePriorityFile(testing::PriorityPath(dir.path())));
  auto kv = MustRun({"procaddr", "forkbind", "1000"}, {{"ACCELPOOL_CUDA_PRIORITY", "high"},
                                                       {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}});
  EXPECT_EQ(U(kv, "hung"), 0u) << "after " << U(kv, "forks") << " forks";
  EXPECT_EQ(U(kv, "forks"), 1000u);
}

// exit() where the shim's locks may be held: from a signal handler that
// interrupted a hook (here the first charge, which waits for the region's
// mutex with the shim's memory lock held), and at a normal exit while
// another process holds the region's mutex. Waiting for either lock at exit
// hung the process for good (the first case for ever, on its own lock). Now
// the slot's release is skipped, and the container reclaims the slot once
// the process is gone.
TEST(ShimTest, AnExitWhileTheShimsLocksAreHeldDoesNotHang) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                   {"ACCELPOOL_CUDA_STATE_DIR", dir.path()},
                   {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
                   {"LD_PRELOAD", ShimPreload()}};
  SharedRegion region;
  {
    ChildProcess child;
    ASSERT_TRUE(
        child.Start({ProbePath(), "direct", "exitinhook", std::to_string(256 * kMiB)}, env));
    ASSERT_EQ(U(ParseKeyValues(child.ReadLine(30000)), "free"), 1024 * kMiB);
    char error[256] = {};
    ASSERT_TRUE(region.OpenFile(dir.path().c_str(), error, sizeof(error))) << error;
    ASSERT_TRUE(region.Lock());
    ASSERT_TRUE(child.Write("go\n"));
    ProcessResult r = child.Wait(5000);
    region.Unlock();
    EXPECT_EQ(r.exit_code, 7) << "hung inside exit() (killed: signal " << r.signal << ")\n"
                              << r.out << r.err;
  }
  {
    ChildProcess holder;
    ASSERT_TRUE(holder.Start({ProbePath(), "direct", "hold", std::to_string(256 * kMiB)}, env));
    ASSERT_EQ(U(ParseKeyValues(holder.ReadLine(30000)), "held"), 256 * kMiB);
    EXPECT_EQ(region.Used(0), 256 * kMiB);
    ASSERT_TRUE(region.Lock());
    holder.CloseStdin();
    ProcessResult r = holder.Wait(5000);
    region.Unlock();
    EXPECT_EQ(r.exit_code, 0) << "hung inside exit() (killed: signal " << r.signal << ")";
  }
  EXPECT_EQ(region.Used(0), 0u) << "the exited process's slot is reclaimed";
  EXPECT_EQ(region.SlotsInUse(), 0);
}

TEST(ShimTest, AProcessThatExecsItselfLeavesOneSlot) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Env env = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
             {"ACCELPOOL_CUDA_STATE_DIR", dir.path()},
             {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
             {"LD_PRELOAD", ShimPreload()}};
  ChildProcess child;
  ASSERT_TRUE(child.Start({ProbePath(), "direct", "reexec", std::to_string(300 * kMiB)}, env));
  auto held = ParseKeyValues(child.ReadLine(30000));
  ASSERT_EQ(U(held, "held"), 300 * kMiB) << "the exec'd image allocated too";
  SharedRegion region;
  char error[256] = {};
  ASSERT_TRUE(region.OpenFile(dir.path().c_str(), error, sizeof(error))) << error;
  EXPECT_EQ(region.SlotsInUse(), 1) << "the pre-exec slot was freed";
  EXPECT_EQ(region.Used(0), 300 * kMiB) << "only the live image's memory is charged";
  child.CloseStdin();
  EXPECT_EQ(child.Wait(10000).exit_code, 0);
  EXPECT_EQ(region.SlotsInUse(), 0);
}

// A process that allocates and then execs into a program that never
// allocates: the old image's charge goes, whether the new image uses CUDA
// (it frees the slot at its start) or not at all (its lock went at the exec
// and it does not map the region: the others reclaim it). (It stayed until
// the process exited.)
TEST(ShimTest, AnImageReplacedByExecLeavesNoChargeBehind) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Env shared = {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                      {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}};
  Env env = shared;
  env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  env["LD_PRELOAD"] = ShimPreload();

  // Into a program that never touches CUDA: cat, which echoes stdin.
  ChildProcess cat;
  ASSERT_TRUE(
      cat.Start({ProbePath(), "direct", "execinto", std::to_string(300 * kMiB), "/bin/cat"}, env));
  auto allocated = ParseKeyValues(cat.ReadLine(30000));
  ASSERT_EQ(U(allocated, "rc"), 0u);
  EXPECT_EQ(U(allocated, "free"), 1024 * kMiB - 300 * kMiB);
  ASSERT_TRUE(cat.Write("execed\n"));
  ASSERT_EQ(cat.ReadLine(30000), "execed") << "cat runs in the same process";
  auto kv = MustRun({"direct", "meminfo"}, shared);
  EXPECT_EQ(U(kv, "free"), 1024 * kMiB) << "the replaced image's charge is reclaimed";
  cat.CloseStdin();
  EXPECT_EQ(cat.Wait(10000).exit_code, 0);

  // Into one that starts the shim but never allocates (it only asks).
  ProcessResult r = Probe(
      {"direct", "execinto", std::to_string(300 * kMiB), ProbePath(), "direct", "meminfo"}, shared);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string after = r.out.substr(r.out.find('\n') + 1);
  EXPECT_EQ(U(ParseKeyValues(after), "free"), 1024 * kMiB)
      << "the new image frees the old one's slot at its start";
}

struct LaunchFigures {
  double share;
  uint64_t launches;
  uint64_t event_records;
};

LaunchFigures RunLaunch(const std::string& path, const std::string& api, int kernel_us,
                        int millis, const Env& env, int kernel_us_after_half = 0) {
  std::vector<std::string> args = {path, "launch", api, std::to_string(kernel_us),
                                   std::to_string(millis)};
  if (kernel_us_after_half > 0) {
    args.push_back(std::to_string(kernel_us_after_half));
  }
  auto kv = MustRun(args, env);
  std::printf("%s %s: busy_ns=%s elapsed_ns=%s launches=%s event_records=%s\n", path.c_str(),
              api.c_str(), kv["busy_ns"].c_str(), kv["elapsed_ns"].c_str(),
              kv["launches"].c_str(), kv["event_records"].c_str());
  double busy = static_cast<double>(U(kv, "busy_ns"));
  double elapsed = static_cast<double>(U(kv, "elapsed_ns"));
  return {elapsed > 0 ? busy / elapsed : 0, U(kv, "launches"), U(kv, "event_records")};
}

TEST(ShimTest, ComputeShareIsACeilingOnEveryLaunchPath) {
  SKIP_UNDER_SANITIZER();
  const int millis = 1000;
  const int kernel_us = 1000;
  // Ceiling from throttle.h: share + (capacity + one kernel) / window, plus
  // one more kernel admitted before the first measurement settles.
  const double slack = (0.25 * 50.0 + 2.0 * kernel_us / 1000.0) / millis;
  struct Case {
    const char* path;
    const char* api;
  };
  // The deprecated cuLaunch, cuLaunchGrid and cuLaunchGridAsync (still
  // exported and declared) ran unthrottled.
  for (const Case& c :
       {Case{"direct", "kernel"}, Case{"procaddr", "ex"}, Case{"procaddr_ptds", "kernel"},
        Case{"dlsym", "coop"}, Case{"procaddr", "graph"}, Case{"direct", "cu"},
        Case{"procaddr", "grid"}, Case{"dlsym", "gridasync"}}) {
    SCOPED_TRACE(::testing::Message() << c.path << " " << c.api);
    LaunchFigures f = RunLaunch(c.path, c.api, kernel_us, millis,
                                {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}});
    EXPECT_LE(f.share, 0.25 + slack);
    EXPECT_GE(f.share, 0.10) << "throttled, not starved";
  }
  LaunchFigures free_run = RunLaunch("direct", "kernel", kernel_us, millis, {});
  EXPECT_GE(free_run.share, 0.8) << "without a limit the fake device stays busy";
}

// NVIDIA's cuda.bindings (12.9-13.x) asks cuGetProcAddress for each entry at
// the version of its default ABI, whatever the stream mode, with a NULL
// status pointer: cuLaunchKernel at 4000 with per-thread default streams
// (CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1), which is below the _ptsz
// ABI (7000). Whatever pointer the driver hands out for that is a launch
// entry point and must be throttled, and every allocation path still capped.
TEST(ShimTest, EntriesAskedAtTheirFirstAbiVersionAreHookedInEitherStreamMode) {
  SKIP_UNDER_SANITIZER();
  const int millis = 1000;
  const int kernel_us = 1000;
  const double slack = (0.25 * 50.0 + 2.0 * kernel_us / 1000.0) / millis;
  for (const char* path : {"procaddr_abi", "procaddr_abi_ptds"}) {
    SCOPED_TRACE(path);
    for (const char* api : {"kernel", "ex", "coop", "graph"}) {
      SCOPED_TRACE(api);
      LaunchFigures f =
          RunLaunch(path, api, kernel_us, millis, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}});
      EXPECT_LE(f.share, 0.25 + slack);
      EXPECT_GE(f.share, 0.10) << "throttled, not starved";
    }
    for (const char* api : {"alloc", "async", "vmm"}) {
      SCOPED_TRACE(api);
      auto kv = MustRun({path, "fill", api, std::to_string(64 * kMiB)},
                        {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}});
      EXPECT_EQ(U(kv, "allocated"), 1024 * kMiB);
    }
  }
}

TEST(ShimTest, ComputeShareHoldsWhenHalfTheMeasurementsSpanAnotherContext) {
  SKIP_UNDER_SANITIZER();
  // The fake puts another context's time-slice (2x the kernel) before half
  // of the launches, so an event pair around one of them measures 3x. Per-
  // launch settling with the raw measurement admitted ~13% at a 25% cap.
  const int millis = 2000;
  struct Case {
    const char* path;
    const char* api;
  };
  for (const Case& c : {Case{"direct", "kernel"}, Case{"procaddr", "graph"}}) {
    SCOPED_TRACE(::testing::Message() << c.path << " " << c.api);
    LaunchFigures f = RunLaunch(c.path, c.api, 1000, millis,
                                {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"},
                                 {"FAKECUDA_FOREIGN", "0.5,3"}});
    EXPECT_NEAR(f.share, 0.25, 0.02);
  }
}

TEST(ShimTest, OnlyAFewLaunchesAreMeasured) {
  SKIP_UNDER_SANITIZER();
  // One key, 20 us kernels: after warm-up 1 launch in 32 is measured (two
  // event records), plus the process-wide floor of one in 32.
  LaunchFigures f =
      RunLaunch("direct", "kernel", 20, 2000, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}});
  ASSERT_GT(f.launches, 5000u);
  double records_per_launch =
      static_cast<double>(f.event_records) / static_cast<double>(f.launches);
  EXPECT_LE(records_per_launch, 2.0 / 32 + 0.02) << "about 1 launch in 32 measured";
  EXPECT_NEAR(f.share, 0.25, 0.02);
}

TEST(ShimTest, AKernelThatGetsLongerIsRepricedWithinOneWindowTurnover) {
  SKIP_UNDER_SANITIZER();
  // 250 us kernels become 1 ms at half-time under the same key. Until the
  // key's window turns over they run priced at the old length, 0.75 ms short
  // each. The cost table alone reprices within 110 launches (unit-tested,
  // where each measurement is recorded at once). In the shim a measurement
  // reaches the table when its pair is harvested, up to kHarvestEvery (8)
  // launches later, and the sample interval only shrinks (32 -> 1, six
  // steps) as measurements arrive: up to 6 x 8 launches more. Ceiling: the
  // share, the bucket's capacity, two kernels and 158 x 0.75 ms.
  // (Measured: 0.273-0.278 on x86-64 and under qemu-aarch64.)
  const int millis = 3000;
  const int lagging_launches = 110 + 6 * 8;
  LaunchFigures f =
      RunLaunch("direct", "kernel", 250, millis, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}}, 1000);
  EXPECT_LE(f.share, 0.25 + (12.5 + 2.0 + lagging_launches * 0.75) / millis);
  EXPECT_GE(f.share, 0.22);
}

TEST(ShimTest, LaunchesIntoACapturingStreamPassThrough) {
  // Captured launches do not run: never throttled, never measured.
  LaunchFigures f =
      RunLaunch("direct", "capture", 1000, 300, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "10"}});
  EXPECT_GT(f.launches, 10'000u) << "at 10% and 1 ms a throttled loop gets ~40";
  EXPECT_EQ(f.event_records, 0u);
}

// A measured kernel that can only finish after a later launch of the same
// process: one thread driving two GPUs through an all-reduce, a spin-wait
// released by a later kernel, cuStreamWaitValue32. The launches after it
// must get through to the one that releases it: those on another stream
// because their own measurements complete, those queued behind it on its
// stream because the in-flight wait gives up. They hung for good once 64
// launches were past it. The probe runs under a watchdog (the timeout).
TEST(ShimTest, AMeasuredKernelWaitingOnALaterLaunchDoesNotHangTheProcess) {
  const Env env = {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"},
                   {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
                   {"LD_PRELOAD", ShimPreload()}};
  for (const char* where : {"other", "same"}) {
    SCOPED_TRACE(where);
    ProcessResult r = testing::Run({ProbePath(), "direct", "gate", where, "200"}, env, 20000);
    ASSERT_EQ(r.exit_code, 0) << "hung (killed by the watchdog: signal " << r.signal
                              << ")\nstderr: " << r.err << "\nstdout: " << r.out;
    auto kv = ParseKeyValues(r.out);
    EXPECT_EQ(U(kv, "gate_rc"), 0u);
    EXPECT_EQ(U(kv, "rc"), 0u);
    EXPECT_EQ(U(kv, "release_rc"), 0u);
  }
}

TEST(ShimTest, EachLaunchIsChargedToTheDeviceOfTheCurrentContext) {
  SKIP_UNDER_SANITIZER();
  // One thread alternates cuCtxSetCurrent between the fake's two devices:
  // each device's bucket admits 25%, so the fake (one timeline for both)
  // runs 50%. A device cached across a context switch would charge one
  // bucket for both and run 25%.
  const int millis = 1500;
  LaunchFigures f =
      RunLaunch("direct", "twoctx", 1000, millis, {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}});
  EXPECT_NEAR(f.share, 0.50, 0.04);
}

// A launch runs in its stream's context: a context-less CUkernel
// (cuLibraryGetKernel) may be launched into a stream of another device than
// the current one, or with no context current at all. Without one such
// launches ran unthrottled; with device 0's current, those into a stream of
// device 1 were charged to device 0's bucket, and their timing events (made
// in device 0's context) failed to record on that stream.
TEST(ShimTest, ALaunchIsChargedToTheDeviceOfItsStream) {
  SKIP_UNDER_SANITIZER();
  const Env env = {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}};
  auto share = [](std::map<std::string, std::string>& kv) {
    const double elapsed = static_cast<double>(U(kv, "elapsed_ns"));
    return elapsed > 0 ? static_cast<double>(U(kv, "busy_ns")) / elapsed : 0;
  };
  const double slack = (0.25 * 50.0 + 2.0) / 1000;  // As ComputeShareIsACeilingOnEveryLaunchPath.
  // The last one on a driver without cuStreamGetDevice (before CUDA 12.8):
  // the device is read with the stream's context pushed.
  struct Case {
    const char* api;
    const char* failing;
  };
  for (const Case& c :
       {Case{"kernel", ""}, Case{"graph", ""}, Case{"gridasync", "cuStreamGetDevice"}}) {
    SCOPED_TRACE(c.api);
    Env e = env;
    e["FAKECUDA_FAIL"] = c.failing;
    auto kv = MustRun({"direct", "streamlaunch", c.api, "1000", "1000", "none"}, e);
    EXPECT_LE(share(kv), 0.25 + slack) << "throttled without a current context";
    EXPECT_GE(share(kv), 0.10) << "throttled, not starved";
    EXPECT_GT(U(kv, "event_records"), 0u) << "measured";
    EXPECT_EQ(U(kv, "foreign_event_records"), 0u) << "events made in the stream's context";
  }
  // Every other launch into device 1's stream, the rest into device 0's
  // stream 0: each device's bucket admits 25%, 50% of busy time in all;
  // one bucket charged for both admitted 25%.
  for (const char* api : {"kernel", "ex"}) {
    SCOPED_TRACE(api);
    auto kv = MustRun({"procaddr", "streamlaunch", api, "1000", "1500", "other"}, env);
    EXPECT_NEAR(share(kv), 0.50, 0.04);
    EXPECT_EQ(U(kv, "foreign_event_records"), 0u) << "events made in the stream's context";
  }
}

TEST(ShimTest, TwoProcessesOfOneContainerShareOneComputeBucket) {
  SKIP_UNDER_SANITIZER();
  TempDir dir;
  Env env = {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "30"},
             {"ACCELPOOL_CUDA_STATE_DIR", dir.path()},
             {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
             {"LD_PRELOAD", ShimPreload()}};
  ChildProcess a;
  ChildProcess b;
  std::vector<std::string> args = {ProbePath(), "direct", "launch", "kernel", "1000", "1500"};
  ASSERT_TRUE(a.Start(args, env));
  ASSERT_TRUE(b.Start(args, env));
  a.CloseStdin();
  b.CloseStdin();
  auto ra = ParseKeyValues(a.Wait(30000).out);
  auto rb = ParseKeyValues(b.Wait(30000).out);
  double busy = static_cast<double>(U(ra, "busy_ns") + U(rb, "busy_ns"));
  // The bucket serves the union of both runs (CLOCK_MONOTONIC is system-wide).
  uint64_t first = std::min(U(ra, "start_ns"), U(rb, "start_ns"));
  uint64_t last = std::max(U(ra, "start_ns") + U(ra, "elapsed_ns"),
                           U(rb, "start_ns") + U(rb, "elapsed_ns"));
  double window = static_cast<double>(last - first);
  ASSERT_GT(window, 0);
  // Ceiling: share + (capacity + two 1 ms kernels per process) / window.
  EXPECT_LE(busy / window, 0.30 + (0.30 * 50e6 + 4 * 1e6) / window) << "one cap for both";
  EXPECT_GT(U(ra, "launches"), 0u);
  EXPECT_GT(U(rb, "launches"), 0u);
}

// --- Task priority (priority_format.h). The tests play the device plugin:
// they create the priority file, write deadlines and read counters.

using testing::MonotonicNowNs;
using testing::PreadU64;
using testing::PriorityPath;
using testing::PwriteU64;
using testing::WritePriorityFile;

constexpr uint64_t kMsNs = 1'000'000;
constexpr char kHeldLine[] = "waits: a high-priority container on the same GPU is busy";
constexpr char kNoPriorityLine[] = "the container runs without task priority";

// A probe that must be waiting before a test moves its deadline starts
// while its device is held this far ahead (under kMaxHoldAheadNs), and the
// test waits up to kProbeWaitsMs for its launch to say that it waits. Both
// are far beyond what starting the probe, the shim and the fake driver takes,
// even on a loaded machine or in the sanitizer build; the deadline outlasts
// the wait, so a probe given up on is still held, not run.
constexpr uint64_t kHeldUntilWaitingNs = 30'000 * kMsNs;
constexpr int kProbeWaitsMs = 20'000;

// Starts the probe with `args` and `env` (the shim preloaded) in `child`
// after writing `hold` as device `device`'s deadline in `file`; succeeds
// once the probe's launch on that device says it waits.
::testing::AssertionResult StartWaiting(ChildProcess& child, const std::string& file, int device,
                                        uint64_t hold, std::vector<std::string> args, Env env) {
  if (!PwriteU64(file, HoldOffset(device), hold)) {
    return ::testing::AssertionFailure() << "cannot write the deadline";
  }
  env["LD_LIBRARY_PATH"] = ACCELPOOL_FAKE_DRIVER_DIR;
  env["LD_PRELOAD"] = ShimPreload();
  args.insert(args.begin(), ProbePath());
  if (!child.Start(args, env)) {
    return ::testing::AssertionFailure() << "cannot start the probe";
  }
  child.CloseStdin();
  const std::string waits = "a launch on device " + std::to_string(device) + " waits";
  if (!child.WaitForStderr(waits, kProbeWaitsMs)) {
    ProcessResult r = child.Wait(0);
    return ::testing::AssertionFailure() << "no launch said it waits: " << r.err << r.out;
  }
  return ::testing::AssertionSuccess();
}

Env PriorityEnv(const TempDir& dir, const char* priority, const Env& extra = {}) {
  Env env = extra;
  env["ACCELPOOL_CUDA_PRIORITY"] = priority;
  env["ACCELPOOL_CUDA_STATE_DIR"] = dir.path();
  return env;
}

// A high-priority container adds each launch to its device's counter, on
// every hook path and launch API, whether or not a share or a cap is on.
TEST(ShimTest, AHighPriorityContainerCountsItsLaunchesPerDevice) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = PriorityPath(dir.path());
  ASSERT_TRUE(WritePriorityFile(file));
  const Env env = PriorityEnv(dir, "high");
  uint64_t want = 0;
  for (const char* path : {"direct", "dlsym", "procaddr", "procaddr_ptds", "procaddr_abi_ptds"}) {
    for (const char* api : {"kernel", "ex", "coop", "graph", "cu", "grid", "gridasync"}) {
      SCOPED_TRACE(::testing::Message() << path << " " << api);
      MustRun({path, "prilaunch", "0", api, "5"}, env);
      want += 5;
      EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), want);
    }
  }
  EXPECT_EQ(PreadU64(file, LaunchesOffset(1)), 0u) << "nothing ran on device 1";
  MustRun({"procaddr", "prilaunch", "1", "kernel", "7"}, env);
  EXPECT_EQ(PreadU64(file, LaunchesOffset(1)), 7u) << "counted for the current context's device";
  EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), want);

  // Launches into a capturing stream run nothing: not counted.
  MustRun({"direct", "prilaunch", "0", "capture", "9"}, env);
  MustRun({"procaddr", "prilaunch", "0", "capturegraph", "9"}, env);
  EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), want);

  // With a compute share, or a memory cap (a graph launch's memory path).
  for (const Env& extra : {Env{{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}},
                           Env{{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}}}) {
    SCOPED_TRACE(extra.begin()->first);
    for (const char* api : {"kernel", "graph"}) {
      MustRun({"procaddr", "prilaunch", "0", api, "3"}, PriorityEnv(dir, "high", extra));
      want += 3;
      EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), want) << api;
    }
  }
  // HAMi's variable, 0 = high.
  MustRun({"direct", "prilaunch", "0", "kernel", "2"},
          {{"CUDA_TASK_PRIORITY", "0"}, {"ACCELPOOL_CUDA_STATE_DIR", dir.path()}});
  EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), want + 2);
}

// A low-priority container's launch waits while the plugin's deadline for
// its device holds, re-reading it as it waits, and only then. Timing is
// checked from below only: a launch returns after the deadline it waited
// for, and one that must not wait does not log that it did. A probe whose
// deadline the test moves starts held far ahead and is waiting (it says so)
// before the test writes the deadline it checks: how long the process takes
// to start and reach its launch is no part of what is measured.
TEST(ShimTest, ALowPriorityLaunchWaitsWhileItsDeviceIsHeld) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = PriorityPath(dir.path());
  ASSERT_TRUE(WritePriorityFile(file));
  const Env env = PriorityEnv(dir, "low", {{"ACCELPOOL_CUDA_LOG_LEVEL", "info"}});

  // Every launch API waits while its device is held, then for a deadline
  // brought to 300 ms ahead; so it does with a compute share or a memory
  // cap on; and it says so once.
  struct Held {
    const char* path;
    const char* api;
    Env extra;
  };
  for (const Held& h : {Held{"direct", "kernel", {}}, Held{"dlsym", "ex", {}},
                        Held{"procaddr_ptds", "coop", {}}, Held{"procaddr", "graph", {}},
                        Held{"direct", "kernel", {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"}}},
                        Held{"procaddr", "graph", {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"}}}}) {
    SCOPED_TRACE(::testing::Message() << h.path << " " << h.api << " " << h.extra.size());
    Env e = env;
    e.insert(h.extra.begin(), h.extra.end());
    ChildProcess child;
    ASSERT_TRUE(StartWaiting(child, file, 0, MonotonicNowNs() + kHeldUntilWaitingNs,
                             {h.path, "prilaunch", "0", h.api, "3"}, e));
    const uint64_t written = MonotonicNowNs();
    const uint64_t deadline = written + 300 * kMsNs;
    ASSERT_TRUE(PwriteU64(file, HoldOffset(0), deadline));
    ProcessResult r = child.Wait(30000);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    auto kv = ParseKeyValues(r.out);
    EXPECT_GE(U(kv, "end_ns"), deadline) << "returned before the deadline passed";
    EXPECT_GE(U(kv, "end_ns") - written, 200 * kMsNs);
    EXPECT_EQ(CountLines(r.err, kHeldLine), 1) << r.err;
    EXPECT_NE(r.err.find("a launch on device 0 waits"), std::string::npos) << r.err;
  }

  // The plugin renews the deadline while the launch waits: it waits for the
  // new one. (The first deadline leaves the renewal 350 ms of slack.)
  {
    ChildProcess child;
    ASSERT_TRUE(StartWaiting(child, file, 0, MonotonicNowNs() + kHeldUntilWaitingNs,
                             {"direct", "prilaunch", "0", "kernel", "1"}, env));
    const uint64_t first = MonotonicNowNs() + 500 * kMsNs;
    const uint64_t renewed = first + 300 * kMsNs;
    ASSERT_TRUE(PwriteU64(file, HoldOffset(0), first));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    ASSERT_TRUE(PwriteU64(file, HoldOffset(0), renewed));
    ProcessResult r = child.Wait(30000);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GE(U(ParseKeyValues(r.out), "end_ns"), renewed) << "the renewed deadline holds";
  }
  // The plugin clears a deadline 30 s ahead once the high-priority container
  // is idle: the launch goes then, long before that deadline.
  {
    const uint64_t far = MonotonicNowNs() + 30'000 * kMsNs;
    ChildProcess child;
    ASSERT_TRUE(
        StartWaiting(child, file, 0, far, {"direct", "prilaunch", "0", "kernel", "1"}, env));
    ASSERT_TRUE(PwriteU64(file, HoldOffset(0), 0));
    ProcessResult r = child.Wait(40000);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LT(U(ParseKeyValues(r.out), "end_ns"), far);
    EXPECT_EQ(CountLines(r.err, kHeldLine), 1) << "it was held until then: " << r.err;
  }

  // What does not hold a launch on device 0: no deadline, one in the past,
  // one further ahead than kMaxHoldAheadNs, another device's deadline, and
  // any deadline for a launch into a capturing stream.
  struct Free {
    const char* name;
    uint64_t hold0_from_now_ms;  // 0: write 0.
    bool past;
    uint64_t hold1_from_now_ms;
    const char* api;
  };
  for (const Free& f :
       {Free{"no deadline", 0, false, 0, "kernel"}, Free{"in the past", 1000, true, 0, "kernel"},
        Free{"more than 60 s ahead", 61'000, false, 0, "kernel"},
        Free{"far past 60 s", 3'600'000, false, 0, "graph"},
        Free{"device 1 held", 0, false, 30'000, "kernel"},
        Free{"captured kernel", 30'000, false, 0, "capture"},
        Free{"captured graph", 30'000, false, 0, "capturegraph"}}) {
    SCOPED_TRACE(f.name);
    const uint64_t now = MonotonicNowNs();
    uint64_t hold0 = 0;
    if (f.hold0_from_now_ms != 0) {
      hold0 = f.past ? now - f.hold0_from_now_ms * kMsNs : now + f.hold0_from_now_ms * kMsNs;
    }
    ASSERT_TRUE(PwriteU64(file, HoldOffset(0), hold0));
    ASSERT_TRUE(PwriteU64(file, HoldOffset(1),
                          f.hold1_from_now_ms != 0 ? now + f.hold1_from_now_ms * kMsNs : 0));
    ProcessResult r = Probe({"procaddr", "prilaunch", "0", f.api, "3"}, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(CountLines(r.err, kHeldLine), 0) << r.err;
    EXPECT_LT(U(ParseKeyValues(r.out), "end_ns") - now, 10'000 * kMsNs);
  }
  // Device 1's own deadline holds a launch on device 1.
  ASSERT_TRUE(PwriteU64(file, HoldOffset(0), 0));
  ChildProcess child;
  ASSERT_TRUE(StartWaiting(child, file, 1, MonotonicNowNs() + kHeldUntilWaitingNs,
                           {"direct", "prilaunch", "1", "kernel", "1"}, env));
  const uint64_t deadline1 = MonotonicNowNs() + 300 * kMsNs;
  ASSERT_TRUE(PwriteU64(file, HoldOffset(1), deadline1));
  ProcessResult r = child.Wait(30000);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(U(ParseKeyValues(r.out), "end_ns"), deadline1);
  EXPECT_NE(r.err.find("a launch on device 1 waits"), std::string::npos) << r.err;
}

// A busy device held twice during one run: each hold stops the launches
// (the fake device idles), and the process says so once.
TEST(ShimTest, ALowPriorityProcessIsHeldEachTimeAndLogsOnce) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = PriorityPath(dir.path());
  ASSERT_TRUE(WritePriorityFile(file));
  const Env env = PriorityEnv(dir, "low", {{"ACCELPOOL_CUDA_LOG_LEVEL", "info"}});
  // The run starts held: its first launch waits, says so, and the test then
  // lets it go; so the two holds after that fall inside the run however
  // slowly the process starts. They end about 800 ms after it is let go;
  // the run launches for 4 s from just before its first launch, so the
  // holds fall inside it while it was held at the start for under 3 s
  // (checked below: milliseconds, unless the machine stalls).
  ChildProcess child;
  ASSERT_TRUE(StartWaiting(child, file, 0, MonotonicNowNs() + kHeldUntilWaitingNs,
                           {"direct", "launch", "kernel", "1000", "4000"}, env));
  const uint64_t let_go = MonotonicNowNs();
  ASSERT_TRUE(PwriteU64(file, HoldOffset(0), 0));
  for (int hold = 0; hold < 2; ++hold) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(PwriteU64(file, HoldOffset(0), MonotonicNowNs() + 200 * kMsNs));
  }
  ProcessResult r = child.Wait(30000);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = ParseKeyValues(r.out);
  EXPECT_EQ(CountLines(r.err, kHeldLine), 1) << r.err;
  // The device idled from the run's start until it was let go, and then for
  // most of the two holds of 200 ms (one alone leaves it idle for less than
  // the 250 ms asked).
  const uint64_t held_at_start = let_go - U(kv, "start_ns");
  ASSERT_LT(held_at_start, 3000 * kMsNs) << "the holds may have fallen after the run";
  EXPECT_LE(U(kv, "busy_ns") + held_at_start + 250 * kMsNs, U(kv, "elapsed_ns"))
      << "busy " << kv["busy_ns"] << " of " << kv["elapsed_ns"] << ", held " << held_at_start
      << " at the start";
}

// A priority file that is missing or not the plugin's (wrong size, another
// header, a link, a directory) is reported once, and the container runs
// without task priority: launches are neither counted nor held.
TEST(ShimTest, AMissingOrMalformedPriorityFileIsReportedOnceAndLaunchesRun) {
  struct Case {
    const char* name;
    const char* reason;
  };
  for (const Case& c : {Case{"missing", "is missing"}, Case{"short", "has 100 bytes, not 272"},
                        Case{"magic", "has another header"}, Case{"symlink", "is a symbolic link"},
                        Case{"directory", "cannot open the priority file"}}) {
    for (const char* priority : {"high", "low"}) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << priority);
      TempDir dir;
      ASSERT_FALSE(dir.path().empty());
      const std::string file = PriorityPath(dir.path());
      const std::string name = c.name;
      // A sound file elsewhere, holding device 0, that a link points to.
      const std::string target = dir.path() + "/elsewhere";
      ASSERT_TRUE(WritePriorityFile(target));
      ASSERT_TRUE(PwriteU64(target, HoldOffset(0), MonotonicNowNs() + 30'000 * kMsNs));
      if (name == "short") {
        ASSERT_TRUE(WritePriorityFile(file, kPriorityMagic, kPriorityLayoutVersion,
                                      kPriorityFileSize, 100));
      } else if (name == "magic") {
        ASSERT_TRUE(WritePriorityFile(file, kPriorityMagic + 1));
      } else if (name == "symlink") {
        ASSERT_EQ(symlink(target.c_str(), file.c_str()), 0);
      } else if (name == "directory") {
        ASSERT_TRUE(std::filesystem::create_directory(file));
      }
      ProcessResult r = Probe({"direct", "prilaunch", "0", "kernel", "3"},
                              PriorityEnv(dir, priority, {{"ACCELPOOL_CUDA_LOG_LEVEL", "info"}}));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(CountLines(r.err, kNoPriorityLine), 1) << r.err;
      EXPECT_NE(r.err.find(c.reason), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("restart the pod"), std::string::npos) << r.err;
      EXPECT_EQ(CountLines(r.err, kHeldLine), 0) << r.err;
      EXPECT_EQ(PreadU64(target, LaunchesOffset(0)), 0u) << "the link's target is not counted";
    }
  }
  // Task priority without a state dir: nowhere to find the file.
  ProcessResult r =
      Probe({"direct", "prilaunch", "0", "kernel", "3"}, {{"ACCELPOOL_CUDA_PRIORITY", "low"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(CountLines(r.err, kNoPriorityLine), 1) << r.err;
  EXPECT_NE(r.err.find("ACCELPOOL_CUDA_STATE_DIR is not"), std::string::npos) << r.err;
}

// Without task priority (unset, or a malformed value) the priority file is
// not looked at: a malformed one draws no warning, a sound one's deadline
// holds nothing and its counters do not move.
TEST(ShimTest, WithoutTaskPriorityThePriorityFileIsNotOpened) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = PriorityPath(dir.path());
  ASSERT_TRUE(WritePriorityFile(file, kPriorityMagic + 1));
  const Env limits = {{"ACCELPOOL_CUDA_STATE_DIR", dir.path()},
                      {"ACCELPOOL_CUDA_MEMORY_LIMIT", "1024"},
                      {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "50"},
                      {"ACCELPOOL_CUDA_LOG_LEVEL", "info"}};
  ProcessResult r = Probe({"procaddr", "prilaunch", "0", "graph", "3"}, limits);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("priority"), std::string::npos) << r.err;

  ASSERT_TRUE(WritePriorityFile(file));
  const uint64_t far = MonotonicNowNs() + 30'000 * kMsNs;
  ASSERT_TRUE(PwriteU64(file, HoldOffset(0), far));
  Env malformed = limits;
  malformed["ACCELPOOL_CUDA_PRIORITY"] = "urgent";
  for (const Env& env : {limits, Env{{"ACCELPOOL_CUDA_STATE_DIR", dir.path()}}, malformed}) {
    SCOPED_TRACE(env.size());
    r = Probe({"direct", "prilaunch", "0", "kernel", "3"}, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LT(U(ParseKeyValues(r.out), "end_ns"), far);
    EXPECT_EQ(CountLines(r.err, kHeldLine), 0) << r.err;
    EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), 0u);
  }
  EXPECT_EQ(CountLines(r.err, "ignoring ACCELPOOL_CUDA_PRIORITY=\"urgent\""), 1) << r.err;
  EXPECT_EQ(r.err.find(kNoPriorityLine), std::string::npos) << r.err;
}

// The device plugin's limits file carries the priority too, and HAMi's
// variable in the pod's own env does not change it.
TEST(ShimTest, ThePriorityInTheLimitsFileWinsOverTheEnvironment) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string file = PriorityPath(dir.path());
  ASSERT_TRUE(WritePriorityFile(file));
  const std::string shim = dir.path() + "/libaccelpool-cuda.so";
  std::filesystem::copy_file(ACCELPOOL_SHIM_PATH, shim);
  {
    std::ofstream limits(shim + ".limits");
    limits << "ACCELPOOL_CUDA_PRIORITY=high\nACCELPOOL_CUDA_STATE_DIR=" << dir.path() << "\n";
  }
  Env env = {{"CUDA_TASK_PRIORITY", "1"},
             {"LD_LIBRARY_PATH", ACCELPOOL_FAKE_DRIVER_DIR},
             {"LD_PRELOAD", ShimPreload(shim)}};
  ProcessResult r = testing::Run({ProbePath(), "direct", "prilaunch", "0", "kernel", "4"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PreadU64(file, LaunchesOffset(0)), 4u) << "high, as the file says";
  EXPECT_EQ(CountLines(r.err, "ignoring CUDA_TASK_PRIORITY from the environment"), 1) << r.err;
}

}  // namespace
}  // namespace accelpool::cuda
