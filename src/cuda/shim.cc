// Initialisation, symbol interception (dlsym, cuGetProcAddress[_v2]) and the
// process lifecycle (fork, exit) of libaccelpool-cuda. See shim.h.
#include "cuda/shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cuda/elf_lookup.h"
#include "cuda/log.h"
#include "cuda/priority_file.h"

namespace accelpool::cuda {
namespace {

constinit ShimState g_state;

// Order of initialisation. glibc runs the constructors of a library being
// dlopened with its loader lock held, and dlopen, dlsym, dlvsym and dladdr
// all take that lock. Such a constructor may look a driver entry point up
// or call one, and so reach EnsureInit/EnsureCuda/EnsureNvml or RealDlsym
// with the lock held, and wait there for another thread that is inside the
// same step. That thread must then never wait for the loader's lock, or
// both hang (ShimTest.AConstructorUsingTheDriverWhileAnotherThreadInitia-
// lisesDoesNotDeadlock). So every loader call of a step is made before its
// pthread_once, outside any lock, by each thread that finds the step not
// done (the calls are idempotent: the same handles and addresses), into
// that thread's own storage; the once routine only takes the results of
// the thread that runs it (t_limits_path, t_driver, t_nvml) and calls no
// loader function. The real dlsym needs no once at all: racing threads
// store the same pointer. A thread holding the loader's lock thus either
// does the step itself or waits for a routine that never waits for that
// lock; nothing is passed through unhooked or uncharged meanwhile.

using DlsymFn = void* (*)(void*, const char*);
// Read and written with __atomic builtins, not std::atomic: no library call
// on the uninstrumented path (ACCELPOOL_UNINSTRUMENTED).
DlsymFn g_real_dlsym = nullptr;
pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
// Set while this thread initialises: re-entrant dlsym calls pass through.
// initial-exec: read without __tls_get_addr, which sanitizers intercept and
// which is not usable while they initialise (they call our dlsym then).
__attribute__((tls_model("initial-exec"))) thread_local bool t_in_init = false;

// What a thread looked up of the driver and of NVML before the step's once
// (above), and the limits file's path (nullptr: none); the once routine
// publishes the results of the thread that runs it.
struct DriverLookup {
  DriverEntries entries;
  void* exported[kHookCount][2] = {};  // [id][per-thread-stream]: the hooked entries.
  char error[256] = {};                // Why libcuda.so.1 did not load.
};
struct NvmlLookup {
  NvmlEntries entries;
  void* memory_info[2] = {};  // nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_v2.
};
__attribute__((tls_model("initial-exec"))) thread_local const char* t_limits_path = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local const DriverLookup* t_driver = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local const NvmlLookup* t_nvml = nullptr;

// Storage for objects that must never be destroyed (other threads may still
// call hooks while the process exits).
alignas(SharedRegion) unsigned char g_region_storage[sizeof(SharedRegion)];
constexpr int kTables = 9;
alignas(AllocTable) unsigned char g_table_storage[kTables][sizeof(AllocTable)];

ACCELPOOL_UNINSTRUMENTED DlsymFn ResolveRealDlsym() {
  // dlsym carries GLIBC_2.34 on glibc >= 2.34 (moved into libc) and the
  // original version on older ones (x86-64: 2.2.5, aarch64: 2.17).
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (size_t i = 0; i < sizeof(kVersions) / sizeof(kVersions[0]); ++i) {
    if (void* p = dlvsym(RTLD_NEXT, "dlsym", kVersions[i])) {
      return reinterpret_cast<DlsymFn>(p);
    }
  }
  return nullptr;
}

// No once: dlvsym takes the loader's lock (see "Order of initialisation").
ACCELPOOL_UNINSTRUMENTED DlsymFn RealDlsym() {
  DlsymFn fn = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
  if (fn == nullptr) {
    fn = ResolveRealDlsym();
    __atomic_store_n(&g_real_dlsym, fn, __ATOMIC_RELEASE);
  }
  return fn;
}

const char* EnvLookup(void*, const char* name) { return std::getenv(name); }
void EnvWarn(void*, const char* message) { Logf(LogLevel::kWarn, "%s", message); }

// The device plugin's limits file (config.h), if it mounted one beside this
// library: static, because it is read once per process at init.
LimitsFile g_limits;

// "<this library's path>.limits" into `path`; false if it cannot be named.
// dladdr takes the loader's lock: called before the once (EnsureInit).
bool LimitsFilePath(char* path, size_t path_len) {
  Dl_info info;
  return dladdr(reinterpret_cast<void*>(&LimitsFilePath), &info) != 0 &&
         info.dli_fname != nullptr &&
         std::snprintf(path, path_len, "%s.limits", info.dli_fname) < static_cast<int>(path_len);
}

// Fills g_limits from the limits file at `path`. False when there is no
// such file (a container the plugin did not set up so, or a test): the
// environment is the contract then.
bool LoadLimitsFile(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      Logf(LogLevel::kWarn,
           "cannot open the limits file %s (%s); taking the limits from the "
           "environment",
           path, std::strerror(errno));
    }
    return false;
  }
  size_t len = 0;
  int read_error = 0;
  while (len < LimitsFile::kMaxBytes) {
    ssize_t n = read(fd, g_limits.text + len, LimitsFile::kMaxBytes - len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      read_error = errno;  // EISDIR: a directory where the file's mount should be.
    }
    if (n <= 0) {
      break;
    }
    len += static_cast<size_t>(n);
  }
  close(fd);
  if (read_error != 0) {
    Logf(LogLevel::kWarn,
         "cannot read the limits file %s (%s); taking the limits from the environment", path,
         std::strerror(read_error));
    return false;
  }
  ParseLimitsFile(&g_limits, len);
  return true;
}

// With a limits file, only the log level still comes from the environment.
const char* LimitsOrLogLevelLookup(void* ctx, const char* name) {
  return std::strcmp(name, "ACCELPOOL_CUDA_LOG_LEVEL") == 0 ? std::getenv(name)
                                                            : LimitsFileLookup(ctx, name);
}

// One warning when the environment sets a contract variable the limits file
// does not set to the same value: the pod tried to change its own limits.
void WarnAboutOverriddenEnv(const char* path) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    bool contract = std::strncmp(entry, "ACCELPOOL_CUDA_", 15) == 0 ||
                    std::strncmp(entry, "CUDA_DEVICE_MEMORY_LIMIT", 24) == 0 ||
                    std::strncmp(entry, "CUDA_DEVICE_SM_LIMIT=", 21) == 0 ||
                    std::strncmp(entry, "CUDA_TASK_PRIORITY=", 19) == 0;
    const char* eq = std::strchr(entry, '=');
    if (!contract || eq == nullptr || std::strncmp(entry, "ACCELPOOL_CUDA_LOG_LEVEL=", 25) == 0) {
      continue;
    }
    char name[128];
    size_t n = static_cast<size_t>(eq - entry);
    if (n >= sizeof(name)) {
      continue;
    }
    std::memcpy(name, entry, n);
    name[n] = '\0';
    const char* set = LimitsFileLookup(&g_limits, name);
    if (set == nullptr || std::strcmp(set, eq + 1) != 0) {
      Logf(LogLevel::kWarn,
           "ignoring %s from the environment: the device plugin's limits file "
           "%s sets this container's limits",
           name, path);
      return;
    }
  }
}

void ChildAfterFork() {
  ShimState& s = g_state;
  // A child owns no device memory of its parent and no events: start clean.
  // Its locks may have been held by threads the fork left behind (slot_mu:
  // a cuGetProcAddress binding a hook); no thread of the child holds them.
  pthread_mutex_init(&s.slot_mu, nullptr);
  pthread_mutex_init(&s.mem_mu, nullptr);
  pthread_mutex_init(&s.pool_mu, nullptr);
  for (PoolAccount& p : s.pools) {
    p = PoolAccount();
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    s.graph_charged[d] = 0;
    s.graph_seen[d] = false;
    s.graph_held[d] = 0;
    s.graph_idle_claimed[d] = 0;
  }
  s.slot = -1;
  if (s.region != nullptr) {
    s.region->ForgetClaimsAfterFork();  // The parent's slot is the parent's.
  }
  for (AllocTable* t : {s.pointers, s.arrays, s.vmm_handles, s.vmm_maps, s.ipc, s.graph_execs,
                        s.pool_homes, s.heaps, s.contexts}) {
    if (t != nullptr) {
      t->Clear();
    }
  }
  ResetLaunchStateAfterFork();
}

// Maps the priority file the device plugin made for this container, when
// the contract asks for task priority. Anything wrong: one warning, and the
// container runs without priority (its launches are neither counted nor
// held), which is what it would get without the variable.
void OpenPriority(ShimState& s) {
  if (s.config.priority == Priority::kNone) {
    return;  // The file is not even looked at.
  }
  const char* level = s.config.priority == Priority::kHigh ? "high" : "low";
  if (s.config.state_dir[0] == '\0') {
    Logf(LogLevel::kWarn,
         "task priority %s is set but ACCELPOOL_CUDA_STATE_DIR is not: the container runs "
         "without task priority (the device plugin sets both; restart the pod)",
         level);
    return;
  }
  char error[kMaxPathLen + 256] = {};
  s.priority = MapPriorityFile(s.config.state_dir, error, sizeof(error));
  if (s.priority == nullptr) {
    Logf(LogLevel::kWarn,
         "%s; the container runs without task priority (restart the pod; if this persists, "
         "check that the device plugin's version creates priority files)",
         error);
    return;
  }
  Logf(LogLevel::kInfo, "task priority %s: %s", level,
       s.config.priority == Priority::kHigh
           ? "launches are counted for the device plugin"
           : "launches wait while a high-priority container on the same GPU is busy");
}

// No loader call in here (see "Order of initialisation").
void InitOnce() {
  t_in_init = true;
  ShimState& s = g_state;
  if (t_limits_path != nullptr && LoadLimitsFile(t_limits_path)) {
    s.config = ParseShimConfig(LimitsOrLogLevelLookup, &g_limits, EnvWarn, nullptr);
    SetLogLevel(s.config.log_level);
    WarnAboutOverriddenEnv(t_limits_path);
  } else {
    s.config = ParseShimConfig(EnvLookup, nullptr, EnvWarn, nullptr);
    SetLogLevel(s.config.log_level);
  }
  s.mem_on = s.config.AnyMemoryLimit();
  s.compute_on = s.config.ComputeLimited();
  s.bucket = TokenBucketParams::ForPercent(s.config.compute_percent);
  if (s.mem_on || s.compute_on) {
    char error[640] = {};
    auto* region = new (g_region_storage) SharedRegion();
    bool ok = false;
    if (s.config.state_dir[0] != '\0') {
      ok = region->OpenFile(s.config.state_dir, error, sizeof(error));
      if (!ok) {
        Logf(LogLevel::kWarn, "%s; limits now apply per process, not per container", error);
      } else {
        // This image's start: a slot of this pid and start time is the one of
        // the image it replaced by exec, which ran no cleanup, and this one
        // may never claim (and so free) it.
        const auto pid = static_cast<int32_t>(getpid());
        region->ForgetReplacedImage(pid, ProcessStartTime(pid));
      }
    } else {
      Logf(LogLevel::kWarn,
           "ACCELPOOL_CUDA_STATE_DIR is not set: limits apply per process, not per container "
           "(the device plugin sets it; set it to a directory shared by the container)");
    }
    if (!ok) {
      ok = region->OpenPrivate(error, sizeof(error));
    }
    if (ok) {
      s.region = region;
      AllocTable** tables[kTables] = {&s.pointers,   &s.arrays, &s.vmm_handles,
                                      &s.vmm_maps,   &s.ipc,    &s.graph_execs,
                                      &s.pool_homes, &s.heaps,  &s.contexts};
      for (int i = 0; i < kTables; ++i) {
        *tables[i] = new (g_table_storage[i]) AllocTable();
      }
    } else {
      Logf(LogLevel::kError, "%s; running without limits", error);
      s.mem_on = false;
      s.compute_on = false;
    }
  }
  OpenPriority(s);
  s.launch_on = s.compute_on || s.priority != nullptr;
  // Whenever a hook does more than forward, it takes the shim's locks
  // (slot_mu binds hooks for cuGetProcAddress, mem_mu and the launch state
  // guard what it records): a child forked while another thread held one
  // must start with them free. Task priority alone opens no region, and its
  // children used to hang at their first lookup.
  if (s.mem_on || s.launch_on) {
    pthread_atfork(nullptr, nullptr, ChildAfterFork);
  }
  if (s.mem_on || s.compute_on) {
    Logf(LogLevel::kInfo, "limits on: memory=%s compute=%d%% state_dir=%s",
         s.mem_on ? "yes" : "no", s.compute_on ? s.config.compute_percent : 100,
         s.config.state_dir[0] != '\0' ? s.config.state_dir : "(per process)");
  }
  s.ready.store(true, std::memory_order_release);
  t_in_init = false;
}

template <typename Fn>
Fn Resolve(void* handle, const char* name) {
  return handle == nullptr ? nullptr : reinterpret_cast<Fn>(RealDlsym()(handle, name));
}

// Opens libcuda.so.1 and looks up what the shim needs of it, into `out`
// only: the loader's part of EnsureCuda, before its once.
void LookUpDriver(DriverLookup* out) {
  const bool was_in_init = t_in_init;
  // The driver's constructors may call dlsym: pass it through.
  t_in_init = true;
  DriverEntries& s = out->entries;  // This thread's, published by CudaOnce.
  s.cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (s.cuda == nullptr) {
    s.cuda = dlopen("libcuda.so.1", RTLD_LAZY);
  }
  if (s.cuda == nullptr) {
    const char* error = dlerror();
    std::snprintf(out->error, sizeof(out->error), "%s", error != nullptr ? error : "unknown");
  }
  int count = 0;
  const SymbolInfo* symbols = AllSymbols(&count);
  for (int i = 0; i < count; ++i) {
    const SymbolInfo& sym = symbols[i];
    if (sym.library == HookLibrary::kCuda) {
      out->exported[sym.id][sym.per_thread_stream ? 1 : 0] = Resolve<void*>(s.cuda, sym.exported);
    }
  }
  s.ctx_get_device = Resolve<cuCtxGetDeviceFn>(s.cuda, "cuCtxGetDevice");
  s.ctx_get_current = Resolve<cuCtxGetCurrentFn>(s.cuda, "cuCtxGetCurrent");
  s.ctx_get_limit = Resolve<cuCtxGetLimitFn>(s.cuda, "cuCtxGetLimit");
  s.ctx_push_current = Resolve<cuCtxPushCurrentFn>(s.cuda, "cuCtxPushCurrent_v2");
  s.ctx_pop_current = Resolve<cuCtxPopCurrentFn>(s.cuda, "cuCtxPopCurrent_v2");
  s.stream_get_ctx = Resolve<cuStreamGetCtxFn>(s.cuda, "cuStreamGetCtx");
  s.stream_get_device = Resolve<cuStreamGetDeviceFn>(s.cuda, "cuStreamGetDevice");
  s.primary_ctx_get_state =
      Resolve<cuDevicePrimaryCtxGetStateFn>(s.cuda, "cuDevicePrimaryCtxGetState");
  s.mem_get_address_range = Resolve<cuMemGetAddressRangeFn>(s.cuda, "cuMemGetAddressRange_v2");
  s.pointer_get_attribute = Resolve<cuPointerGetAttributeFn>(s.cuda, "cuPointerGetAttribute");
  s.device_get_mem_pool = Resolve<cuDeviceGetMemPoolFn>(s.cuda, "cuDeviceGetMemPool");
  s.device_get_default_mem_pool =
      Resolve<cuDeviceGetMemPoolFn>(s.cuda, "cuDeviceGetDefaultMemPool");
  s.device_get_uuid = Resolve<cuDeviceGetUuidFn>(s.cuda, "cuDeviceGetUuid_v2");
  if (s.device_get_uuid == nullptr) {
    s.device_get_uuid = Resolve<cuDeviceGetUuidFn>(s.cuda, "cuDeviceGetUuid");
  }
  s.mem_pool_get_attribute = Resolve<cuMemPoolGetAttributeFn>(s.cuda, "cuMemPoolGetAttribute");
  s.mem_pool_trim_to = Resolve<cuMemPoolTrimToFn>(s.cuda, "cuMemPoolTrimTo");
  s.event_create = Resolve<cuEventCreateFn>(s.cuda, "cuEventCreate");
  s.event_destroy = Resolve<cuEventDestroyFn>(s.cuda, "cuEventDestroy_v2");
  s.event_record[0] = Resolve<cuEventRecordFn>(s.cuda, "cuEventRecord");
  s.event_record[1] = Resolve<cuEventRecordFn>(s.cuda, "cuEventRecord_ptsz");
  s.event_query = Resolve<cuEventQueryFn>(s.cuda, "cuEventQuery");
  s.event_elapsed = Resolve<cuEventElapsedTimeFn>(s.cuda, "cuEventElapsedTime_v2");
  if (s.event_elapsed == nullptr) {
    s.event_elapsed = Resolve<cuEventElapsedTimeFn>(s.cuda, "cuEventElapsedTime");
  }
  s.stream_is_capturing[0] = Resolve<cuStreamIsCapturingFn>(s.cuda, "cuStreamIsCapturing");
  s.stream_is_capturing[1] = Resolve<cuStreamIsCapturingFn>(s.cuda, "cuStreamIsCapturing_ptsz");
  s.stream_synchronize = Resolve<cuStreamSynchronizeFn>(s.cuda, "cuStreamSynchronize");
  s.exchange_capture_mode =
      Resolve<cuThreadExchangeStreamCaptureModeFn>(s.cuda, "cuThreadExchangeStreamCaptureMode");
  s.graph_get_nodes = Resolve<cuGraphGetNodesFn>(s.cuda, "cuGraphGetNodes");
  s.graph_node_get_type = Resolve<cuGraphNodeGetTypeFn>(s.cuda, "cuGraphNodeGetType");
  s.graph_mem_alloc_node_get_params =
      Resolve<cuGraphMemAllocNodeGetParamsFn>(s.cuda, "cuGraphMemAllocNodeGetParams");
  s.graph_child_graph =
      Resolve<cuGraphChildGraphNodeGetGraphFn>(s.cuda, "cuGraphChildGraphNodeGetGraph");
  s.device_get_graph_mem_attribute =
      Resolve<cuDeviceGetGraphMemAttributeFn>(s.cuda, "cuDeviceGetGraphMemAttribute");
  t_in_init = was_in_init;
}

// Publishes the calling thread's DriverLookup (t_driver). No loader call.
void CudaOnce() {
  ShimState& s = g_state;
  const DriverLookup& found = *t_driver;
  static_cast<DriverEntries&>(s) = found.entries;
  if (s.cuda == nullptr) {
    Logf(LogLevel::kError, "cannot load libcuda.so.1 (%s); CUDA calls will fail", found.error);
  }
  int count = 0;
  const SymbolInfo* symbols = AllSymbols(&count);
  for (int i = 0; i < count; ++i) {
    const SymbolInfo& sym = symbols[i];
    if (sym.library != HookLibrary::kCuda) {
      continue;
    }
    int slot = sym.per_thread_stream ? 1 : 0;
    void* fn = found.exported[sym.id][slot];
    s.real[sym.id][slot].store(fn, std::memory_order_release);
    s.per_thread_stream[sym.id][slot] = sym.per_thread_stream;
    Logf(LogLevel::kDebug, "dlsym %s -> %p", sym.exported, fn);
  }
  s.cuda_ready.store(true, std::memory_order_release);
}

// The loader's part of EnsureNvml, as LookUpDriver.
void LookUpNvml(NvmlLookup* out) {
  const bool was_in_init = t_in_init;
  t_in_init = true;
  NvmlEntries& s = out->entries;
  s.nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (s.nvml == nullptr) {
    s.nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY);
  }
  out->memory_info[0] = Resolve<void*>(s.nvml, "nvmlDeviceGetMemoryInfo");
  out->memory_info[1] = Resolve<void*>(s.nvml, "nvmlDeviceGetMemoryInfo_v2");
  s.nvml_get_index = Resolve<nvmlDeviceGetIndexFn>(s.nvml, "nvmlDeviceGetIndex");
  s.nvml_get_uuid = Resolve<nvmlDeviceGetUUIDFn>(s.nvml, "nvmlDeviceGetUUID");
  t_in_init = was_in_init;
}

// Publishes the calling thread's NvmlLookup (t_nvml). No loader call.
void NvmlOnce() {
  ShimState& s = g_state;
  static_cast<NvmlEntries&>(s) = t_nvml->entries;
  s.real[kHookNvmlMemoryInfo][0].store(t_nvml->memory_info[0]);
  s.real[kHookNvmlMemoryInfoV2][0].store(t_nvml->memory_info[1]);
  s.nvml_ready.store(true, std::memory_order_release);
}

// Emulates dlsym(RTLD_NEXT, name) for a caller outside this library: the
// first object after the caller's in load order that defines `name`. The real
// dlsym would search after *this* library instead, which hands an interposer
// loaded after us its own definition (endless recursion) and skips objects
// between the caller and us. The lookup reads ELF tables directly
// (elf_lookup.h): no malloc and no intercepted loader call, because runtimes
// such as sanitizers resolve their interceptors this way before they are ready.
ACCELPOOL_UNINSTRUMENTED void* NextAfter(const void* caller, const char* name) {
  Dl_info info;
  struct link_map* from = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&from), RTLD_DL_LINKMAP) == 0 ||
      from == nullptr) {
    return RealDlsym()(RTLD_NEXT, name);
  }
  for (const struct link_map* lm = from->l_next; lm != nullptr; lm = lm->l_next) {
    void* sym = nullptr;
    if (FindDefinition(lm, name, &sym) == ElfLookupResult::kFound) {
      return sym;
    }
  }
  return nullptr;
}

// True when `p` is code of this library (a driver that resolves its own
// exports through the global scope hands our hooks back to us).
bool IsOurs(const void* p) {
  Dl_info mine;
  Dl_info theirs;
  return dladdr(reinterpret_cast<const void*>(&IsOurs), &mine) != 0 && dladdr(p, &theirs) != 0 &&
         mine.dli_fbase == theirs.dli_fbase;
}

void* HookFor(HookId id, int slot) {
  if (id == kHookGetProcAddress || id == kHookGetProcAddressV2) {
    return nullptr;  // Handled by the caller: one instance each.
  }
  if (IsLaunch(id)) {
    return LaunchHook(id, slot);
  }
  return IsGraph(id) ? GraphHook(id, slot) : MemoryHook(id, slot);
}

}  // namespace

ShimState& State() { return g_state; }

// Each: the loader's part first, by this thread, then the once routine,
// which takes this thread's results if it is the first (see "Order of
// initialisation").
void EnsureInit() {
  if (!g_state.ready.load(std::memory_order_acquire)) {
    char path[kMaxPathLen + 16];
    t_limits_path = LimitsFilePath(path, sizeof(path)) ? path : nullptr;
    pthread_once(&g_init_once, InitOnce);
    t_limits_path = nullptr;
  }
}

void EnsureCuda() {
  if (!g_state.cuda_ready.load(std::memory_order_acquire)) {
    EnsureInit();
    DriverLookup found;
    LookUpDriver(&found);
    t_driver = &found;
    pthread_once(&g_cuda_once, CudaOnce);
    t_driver = nullptr;
  }
}

void EnsureNvml() {
  if (!g_state.nvml_ready.load(std::memory_order_acquire)) {
    EnsureInit();
    NvmlLookup found;
    LookUpNvml(&found);
    t_nvml = &found;
    pthread_once(&g_nvml_once, NvmlOnce);
    t_nvml = nullptr;
  }
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void* BindHook(HookId id, void* real_fn, bool per_thread_stream) {
  ShimState& s = g_state;
  int chosen = -1;
  pthread_mutex_lock(&s.slot_mu);
  for (int slot = 0; slot < kSlots && chosen < 0; ++slot) {
    if (s.real[id][slot].load(std::memory_order_relaxed) == real_fn) {
      chosen = slot;
    }
  }
  for (int slot = 2; slot < kSlots && chosen < 0; ++slot) {
    if (s.real[id][slot].load(std::memory_order_relaxed) == nullptr) {
      s.per_thread_stream[id][slot] = per_thread_stream;
      s.real[id][slot].store(real_fn, std::memory_order_release);
      chosen = slot;
    }
  }
  pthread_mutex_unlock(&s.slot_mu);
  if (chosen < 0) {
    Logf(LogLevel::kWarn, "no free hook slot for entry %d; passing it through unlimited",
         static_cast<int>(id));
    return nullptr;
  }
  return HookFor(id, chosen);
}

}  // namespace accelpool::cuda

using accelpool::cuda::BindHook;
using accelpool::cuda::EnsureCuda;
using accelpool::cuda::EnsureInit;
using accelpool::cuda::EnsureNvml;
using accelpool::cuda::FindExported;
using accelpool::cuda::FindForProcAddress;
using accelpool::cuda::HookLibrary;
using accelpool::cuda::kHookGetProcAddress;
using accelpool::cuda::kHookGetProcAddressV2;
using accelpool::cuda::LogLevel;
using accelpool::cuda::Logf;
using accelpool::cuda::Real;
using accelpool::cuda::State;
using accelpool::cuda::SymbolInfo;

namespace {

// Replaces a driver pointer that cuGetProcAddress returned for `symbol`.
void SwapProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);

}  // namespace

ACCELPOOL_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                              cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* status) {
  EnsureCuda();
  auto real = Real<cuGetProcAddress_v2Fn>(kHookGetProcAddressV2, 0);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  CUresult rc = real(symbol, pfn, version, flags, status);
  if (rc == CUDA_SUCCESS) {
    SwapProcAddress(symbol, pfn, version, flags);
  }
  return rc;
}

// The _ptsz resolver takes a request that names no stream mode as a
// per-thread one. Where the driver has no such export, its default resolver
// is asked with the flag set.
ACCELPOOL_EXPORT CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int version,
                                                   cuuint64_t flags,
                                                   CUdriverProcAddressQueryResult* status) {
  EnsureCuda();
  constexpr cuuint64_t kStreamModes =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const cuuint64_t meant =
      (flags & kStreamModes) == 0 ? flags | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : flags;
  auto real = Real<cuGetProcAddress_v2Fn>(kHookGetProcAddressV2, 1);
  CUresult rc = CUDA_ERROR_NOT_FOUND;
  if (real != nullptr) {
    rc = real(symbol, pfn, version, flags, status);
  } else if (auto v2 = Real<cuGetProcAddress_v2Fn>(kHookGetProcAddressV2, 0)) {
    rc = v2(symbol, pfn, version, meant, status);
  }
  if (rc == CUDA_SUCCESS) {
    SwapProcAddress(symbol, pfn, version, meant);
  }
  return rc;
}

ACCELPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                           cuuint64_t flags) {
  EnsureCuda();
  auto real = Real<cuGetProcAddressFn>(kHookGetProcAddress, 0);
  if (real == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  CUresult rc = real(symbol, pfn, version, flags);
  if (rc == CUDA_SUCCESS) {
    SwapProcAddress(symbol, pfn, version, flags);
  }
  return rc;
}

namespace {

void SwapProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr) {
    return;
  }
  const SymbolInfo* sym = FindForProcAddress(symbol, version, flags);
  if (sym == nullptr) {
    return;  // Not ours, or an older ABI: the driver's pointer stands.
  }
  if (sym->id == kHookGetProcAddressV2) {
    *pfn = sym->per_thread_stream ? reinterpret_cast<void*>(&cuGetProcAddress_v2_ptsz)
                                  : reinterpret_cast<void*>(&cuGetProcAddress_v2);
    return;
  }
  if (sym->id == kHookGetProcAddress) {
    *pfn = reinterpret_cast<void*>(&cuGetProcAddress);
    return;
  }
  auto& s = State();
  if (!s.mem_on && !s.launch_on) {
    return;  // Nothing to enforce: hand out the driver's own function.
  }
  if (accelpool::cuda::IsOurs(*pfn)) {
    return;  // Already one of our entry points: never wrap a hook in a hook.
  }
  if (void* hook = BindHook(sym->id, *pfn, sym->per_thread_stream)) {
    Logf(LogLevel::kDebug, "cuGetProcAddress %s (v%d, flags %llu) hooked", symbol, version,
         static_cast<unsigned long long>(flags));
    *pfn = hook;
  }
}

}  // namespace

ACCELPOOL_EXPORT ACCELPOOL_UNINSTRUMENTED void* dlsym(void* handle, const char* name) {
  auto real = accelpool::cuda::RealDlsym();
  if (real == nullptr) {
    return nullptr;
  }
  if (handle == RTLD_NEXT) {
    return accelpool::cuda::NextAfter(__builtin_return_address(0), name);
  }
  const SymbolInfo* sym = accelpool::cuda::t_in_init ? nullptr : FindExported(name);
  void* found = real(handle, name);
  if (sym == nullptr || found == nullptr) {
    return found;
  }
  auto& s = State();
  if (sym->library == HookLibrary::kNvml) {
    EnsureNvml();
  } else {
    EnsureCuda();
  }
  if (sym->id == kHookGetProcAddressV2) {
    return sym->per_thread_stream ? reinterpret_cast<void*>(&cuGetProcAddress_v2_ptsz)
                                  : reinterpret_cast<void*>(&cuGetProcAddress_v2);
  }
  if (sym->id == kHookGetProcAddress) {
    return reinterpret_cast<void*>(&cuGetProcAddress);
  }
  if (!s.mem_on && !s.launch_on) {
    return found;
  }
  if (sym->library == HookLibrary::kNvml) {
    return accelpool::cuda::NvmlHook(sym->id);
  }
  int slot = sym->per_thread_stream ? 1 : 0;
  void* hook = accelpool::cuda::HookFor(sym->id, slot);
  Logf(LogLevel::kDebug, "dlsym %s hooked", name);
  return hook != nullptr ? hook : found;
}

namespace {

// exit() may run on a thread that a signal interrupted inside a hook holding
// mem_mu or the region mutex (a handler that calls exit, as many do for
// SIGTERM or SIGINT): waiting for either here would hang the process for
// good. So both are only tried, kExitLockTries times kExitLockPauseNs apart,
// which is ample for another thread or process to leave its short section,
// and the release is skipped while one stays held. Nothing is lost by that:
// once the process is gone its slot is dead to the other processes of the
// container (its pid is gone or a zombie, and the kernel has dropped its
// liveness lock), and they reclaim it with its charges at their next claim,
// charge past the cap or usage query (SharedRegion::ReclaimDeadLocked), as
// for a SIGKILLed process.
constexpr int kExitLockTries = 20;
constexpr long kExitLockPauseNs = 1'000'000;  // NOLINT: timespec's type.

__attribute__((destructor)) void ReleaseSlotAtExit() {
  auto& s = State();
  if (s.region == nullptr) {
    return;
  }
  for (int i = 0; i < kExitLockTries; ++i) {
    if (i > 0) {
      struct timespec pause = {0, kExitLockPauseNs};
      nanosleep(&pause, nullptr);
    }
    if (pthread_mutex_trylock(&s.mem_mu) != 0) {
      continue;
    }
    const bool released = s.slot < 0 || s.region->TryReleaseSlot(s.slot);
    if (released) {
      s.slot = -1;
    }
    pthread_mutex_unlock(&s.mem_mu);
    if (released) {
      return;
    }
  }
}

}  // namespace
