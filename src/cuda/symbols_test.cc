#include "cuda/symbols.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cuda/cuda_types.h"

namespace accelpool::cuda {
namespace {

constexpr uint64_t kPtds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

TEST(SymbolsTest, ProcAddressTable) {
  struct Case {
    const char* base;
    int version;
    uint64_t flags;
    const char* want_exported;  // nullptr = pass through.
  };
  const Case cases[] = {
      {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 3000, 0, nullptr},               // The 32-bit ABI is not ours.
      {"cuMemAlloc", 12000, kPtds, "cuMemAlloc_v2"},  // No _ptsz variant exists.
      // NVIDIA's cuda.bindings (12.9-13.x) asks every entry at the version of
      // its default ABI and sets only the stream flag: cuLaunchKernel at 4000
      // with per-thread streams, below the _ptsz ABI (7000). The pointer the
      // driver returns for that must still be hooked, or those launches run
      // unthrottled.
      {"cuLaunchKernel", 4000, kPtds, "cuLaunchKernel"},
      {"cuLaunchKernel", 3020, kPtds, nullptr},  // Older than any launch ABI the shim knows.
      {"cuLaunchKernel", 12000, 0, "cuLaunchKernel"},
      {"cuLaunchKernel", 12000, kPtds, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel"},
      {"cuLaunchKernelEx", 11060, 0, "cuLaunchKernelEx"},
      {"cuLaunchKernelEx", 11050, 0, nullptr},
      {"cuGraphLaunch", 12080, kPtds, "cuGraphLaunch_ptsz"},
      {"cuLaunchCooperativeKernel", 12000, 0, "cuLaunchCooperativeKernel"},
      {"cuLaunch", 12000, 0, "cuLaunch"},
      {"cuLaunchGrid", 13000, kPtds, "cuLaunchGrid"},  // No _ptsz variant exists.
      {"cuLaunchGridAsync", 2000, 0, "cuLaunchGridAsync"},
      {"cuMemAllocAsync", 12000, kPtds, "cuMemAllocAsync_ptsz"},
      {"cuMemCreate", 12000, 0, "cuMemCreate"},
      {"cuMemRetainAllocationHandle", 12000, 0, "cuMemRetainAllocationHandle"},
      {"cuMemMapArrayAsync", 12000, kPtds, "cuMemMapArrayAsync_ptsz"},
      {"cuMemMapArrayAsync", 11000, 0, nullptr},  // Older than the entry.
      {"cuDevicePrimaryCtxReset", 12000, 0, "cuDevicePrimaryCtxReset_v2"},
      {"cuDevicePrimaryCtxReset", 7000, 0, "cuDevicePrimaryCtxReset"},
      {"cuCtxDestroy", 13000, 0, "cuCtxDestroy_v2"},
      {"cuDevicePrimaryCtxRelease", 12000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease"},
      {"cuDevicePrimaryCtxRetain", 13000, 0, "cuDevicePrimaryCtxRetain"},
      {"cuCtxCreate", 2000, 0, nullptr},  // The CUDA 3.1-era ABI passes through.
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
      {"cuCtxCreate", 11000, 0, "cuCtxCreate_v2"},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12040, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
      {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
      {"cuCtxSetLimit", 12000, 0, "cuCtxSetLimit"},
      {"cuCtxSetLimit", 13000, kPtds, "cuCtxSetLimit"},   // No _ptsz variant exists.
      {"cuCtxGetLimit", 12000, 0, nullptr},               // Called by the shim, not hooked.
      {"cuDevicePrimaryCtxGetState", 12000, 0, nullptr},  // Called by the shim, not hooked.
      {"cuMemPoolTrimTo", 12000, 0, "cuMemPoolTrimTo"},
      {"cuMemPoolDestroy", 13000, 0, "cuMemPoolDestroy"},
      {"cuIpcOpenMemHandle", 12000, 0, "cuIpcOpenMemHandle_v2"},
      {"cuMemGetInfo", 13000, 0, "cuMemGetInfo_v2"},
      {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"},
      {"cuGraphInstantiate", 13000, 0, "cuGraphInstantiateWithFlags"},
      {"cuGraphInstantiate", 11040, 0, "cuGraphInstantiate_v2"},
      {"cuGraphInstantiate", 10000, 0, nullptr},  // No memory nodes before CUDA 11.4.
      {"cuGraphInstantiateWithFlags", 11040, 0, "cuGraphInstantiateWithFlags"},
      {"cuGraphInstantiateWithParams", 12000, kPtds, "cuGraphInstantiateWithParams_ptsz"},
      {"cuGraphUpload", 12000, kPtds, "cuGraphUpload_ptsz"},
      {"cuGraphExecDestroy", 12000, kPtds, "cuGraphExecDestroy"},
      {"cuDeviceGraphMemTrim", 13000, 0, "cuDeviceGraphMemTrim"},
      {"cuGetProcAddress", 11080, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 12000, kPtds, "cuGetProcAddress_v2_ptsz"},
      {"cuGetProcAddress", 13000, kPtds, "cuGetProcAddress_v2_ptsz"},
      {"cuGetExportTable", 12000, 0, nullptr},
      {"cuCtxSynchronize", 12000, 0, nullptr},
      {"nvmlDeviceGetMemoryInfo", 12000, 0, nullptr},  // Not a driver entry.
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.base << " v" << c.version << " flags " << c.flags);
    const SymbolInfo* s = FindForProcAddress(c.base, c.version, c.flags);
    if (c.want_exported == nullptr) {
      EXPECT_EQ(s, nullptr);
    } else {
      ASSERT_NE(s, nullptr);
      EXPECT_STREQ(s->exported, c.want_exported);
    }
  }
}

// An exported name appears once per cuGetProcAddress base it is offered
// under, always with the same hook.
TEST(SymbolsTest, ExportedNamesAreUniquePerBaseAndFindable) {
  int count = 0;
  const SymbolInfo* all = AllSymbols(&count);
  std::set<std::string> seen;
  for (int i = 0; i < count; ++i) {
    std::string base = all[i].base != nullptr ? all[i].base : "";
    EXPECT_TRUE(seen.insert(std::string(all[i].exported) + "/" + base).second) << all[i].exported;
    const SymbolInfo* found = FindExported(all[i].exported);
    ASSERT_NE(found, nullptr) << all[i].exported;
    EXPECT_EQ(found->id, all[i].id) << all[i].exported;
    EXPECT_EQ(found->per_thread_stream, all[i].per_thread_stream) << all[i].exported;
  }
  EXPECT_EQ(FindExported("malloc"), nullptr);
  EXPECT_EQ(FindExported("cuMemAlloc"), nullptr) << "the v1 export is not hooked";
  EXPECT_EQ(FindExported(""), nullptr);
}

TEST(SymbolsTest, EveryLaunchPathIsALaunch) {
  for (HookId id : {kHookLaunchKernel, kHookLaunchKernelEx, kHookLaunchCooperativeKernel,
                    kHookGraphLaunch, kHookLaunch, kHookLaunchGrid, kHookLaunchGridAsync}) {
    EXPECT_TRUE(IsLaunch(id));
  }
  EXPECT_FALSE(IsLaunch(kHookMemAlloc));
  EXPECT_FALSE(IsLaunch(kHookGraphUpload));
  for (HookId id : {kHookGraphInstantiateWithFlags, kHookGraphInstantiateWithParams,
                    kHookGraphInstantiateV2, kHookGraphUpload, kHookGraphExecDestroy,
                    kHookDeviceGraphMemTrim}) {
    EXPECT_TRUE(IsGraph(id));
  }
  EXPECT_FALSE(IsGraph(kHookGraphLaunch));
  EXPECT_FALSE(IsGraph(kHookLaunchGridAsync));
}

}  // namespace
}  // namespace accelpool::cuda
