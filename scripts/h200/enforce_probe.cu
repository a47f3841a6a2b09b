// enforce_probe: the driver-API test program of the H200 enforcement plan
// (docs/enforcement.md). Built on the GPU machine by run_enforcement.sh with
// nvcc; run natively, with libaccelpool-cuda preloaded and limits off, and
// with limits on. Prints key=value lines only; the script keeps them raw.
//
//   info                           versions, device, context size
//   memcap <api> <chunk_bytes> [max_bytes]
//                                  allocate until failure or max_bytes (default
//                                  16 GiB), free, allocate again
//   meminfo                        cudaMemGetInfo / cuMemGetInfo / NVML views
//   calibrate <kernel_us>          iterations of the fixed-work kernel for
//                                  about kernel_us alone on the device
//   share <mode> <kernel_us> <s> [iters kernel_ms]
//                                  throughput share with 1 s window spread;
//                                  pass the calibration of a solo run when
//                                  several processes start together
//   overhead <launches>            host-side ns per empty-kernel launch
//   allocbench <rounds>            cuMemAlloc/cuMemFree 256 MB latency
//   startup                        process start to first kernel done, ms
//   hold <MiB>                     allocate and wait for stdin to close
//   contexts <cycles> <chunk_bytes> create a context, allocate, destroy it, and
//                                  retain, allocate, release the primary one,
//                                  <cycles> times each; the driver facts the
//                                  shim's context accounting assumes
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const auto kStart = std::chrono::steady_clock::now();

#define CHECK_RT(x)                                                                     \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::printf("error=%s at=%s:%d\n", cudaGetErrorName(e_), __FILE__, __LINE__);     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// Fixed work, not fixed time: a dependent FMA chain per thread. A kernel that
// spins on clock64() counts time its context spends switched out as progress,
// so with two time-sliced processes both would look close to 100 %.
__global__ void Work(long long iters, float* sink) {
  float a = 1.0f + static_cast<float>(threadIdx.x) * 1e-6f;
  for (long long i = 0; i < iters; ++i) {
    a = fmaf(a, 0.999999f, 1e-6f);
  }
  if (a < -1.0f) {  // Never true; keeps the chain alive.
    sink[blockIdx.x] = a;
  }
}

__global__ void Empty() {}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Device memory in use on GPU 0 as the host driver reports it (MiB), read by
// nvidia-smi outside the shim. NVML's per-process figures are keyed by host
// PIDs, which a container or sandbox does not see; the device-wide figure on
// an otherwise idle GPU is the truth the shim's count is checked against.
long SmiUsedMib() {
  FILE* f = popen("env -u LD_PRELOAD nvidia-smi -i 0 --query-gpu=memory.used "
                  "--format=csv,noheader,nounits 2>/dev/null", "r");
  if (f == nullptr) {
    return -1;
  }
  long mib = -1;
  if (std::fscanf(f, "%ld", &mib) != 1) {
    mib = -1;
  }
  pclose(f);
  return mib;
}

// NVML through dlopen/dlsym at run time, as applications do: no nvml.h or
// -lnvidia-ml at build time, and with the shim preloaded dlsym hands out its
// hook, which is what the truth check exercises.
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct Nvml {
  int (*init)() = nullptr;
  int (*handle_by_index)(unsigned, void**) = nullptr;
  int (*memory_info)(void*, NvmlMemory*) = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
  bool ok = false;
};

Nvml LoadNvml() {
  Nvml n;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (lib == nullptr) {
    return n;
  }
  n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  n.handle_by_index =
      reinterpret_cast<int (*)(unsigned, void**)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  n.memory_info =
      reinterpret_cast<int (*)(void*, NvmlMemory*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  n.driver_version =
      reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
  n.ok = n.init != nullptr && n.handle_by_index != nullptr && n.memory_info != nullptr &&
         n.init() == 0;
  return n;
}

CUfunction FunctionOf(const void* symbol) {
  cudaFunction_t f;
  CHECK_RT(cudaGetFuncBySymbol(&f, symbol));
  return reinterpret_cast<CUfunction>(f);
}

int Info() {
  long smi_before = SmiUsedMib();
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char name[256] = {};
  CUdevice d;
  cuInit(0);
  cuDeviceGet(&d, 0);
  cuDeviceGetName(name, sizeof(name), d);
  int sms = 0;
  cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
  CHECK_RT(cudaFree(nullptr));  // Creates the primary context.
  long smi_after = SmiUsedMib();
  // Whether this driver says where a pool lives (CU_MEMPOOL_ATTR_LOCATION_TYPE,
  // 12, newer than CUDA 13.0's cuda.h): without it the shim learns a pool's
  // location from cuMemPoolCreate and the default-pool lookups.
  CUmemoryPool pool = nullptr;
  int pool_location_type = -1;
  CUresult pool_location_rc = cuDeviceGetDefaultMemPool(&pool, d);
  if (pool_location_rc == CUDA_SUCCESS) {
    pool_location_rc =
        cuMemPoolGetAttribute(pool, static_cast<CUmemPool_attribute>(12), &pool_location_type);
  }
  char nvml_driver[96] = "?";
  Nvml nvml = LoadNvml();
  if (nvml.ok && nvml.driver_version != nullptr) {
    nvml.driver_version(nvml_driver, sizeof(nvml_driver));
  }
  std::printf("driver_api=%d runtime=%d driver=%s device=\"%s\" sms=%d smi_used_before_mib=%ld "
              "smi_used_with_context_mib=%ld context_mib=%ld pool_location_attr_rc=%d "
              "pool_location_type=%d\n",
              driver, runtime, nvml_driver, name, sms, smi_before, smi_after,
              smi_before >= 0 && smi_after >= 0 ? smi_after - smi_before : -1,
              static_cast<int>(pool_location_rc), pool_location_type);
  return 0;
}

struct Held {
  std::string api;
  CUdeviceptr ptr = 0;
  CUarray array = nullptr;
  CUmipmappedArray mipmap = nullptr;
  CUmemGenericAllocationHandle handle = 0;
  CUgraphExec exec = nullptr;
  void* host = nullptr;
  size_t size = 0;
};

CUresult AllocOne(const std::string& api, size_t bytes, Held* h, CUstream stream,
                  CUmemoryPool pool) {
  h->api = api;
  h->size = bytes;
  if (api == "alloc") return cuMemAlloc(&h->ptr, bytes);
  if (api == "pitch") {
    size_t pitch = 0;
    return cuMemAllocPitch(&h->ptr, &pitch, bytes / 256 ? bytes / 256 : 1, 256, 4);
  }
  if (api == "managed") return cuMemAllocManaged(&h->ptr, bytes, CU_MEM_ATTACH_GLOBAL);
  if (api == "async") {
    CUresult rc = cuMemAllocAsync(&h->ptr, bytes, stream);
    cuStreamSynchronize(stream);
    return rc;
  }
  if (api == "pool") {
    CUresult rc = cuMemAllocFromPoolAsync(&h->ptr, bytes, pool, stream);
    cuStreamSynchronize(stream);
    return rc;
  }
  if (api == "host") return cuMemAllocHost(&h->host, bytes);
  if (api == "array") {
    CUDA_ARRAY_DESCRIPTOR desc = {};
    desc.Width = bytes / 4 > 65536 ? 65536 : bytes / 4;
    desc.Height = bytes / 4 / desc.Width;
    if (desc.Height == 0) desc.Height = 1;
    desc.Format = CU_AD_FORMAT_FLOAT;
    desc.NumChannels = 1;
    return cuArrayCreate(&h->array, &desc);
  }
  if (api == "mipmap") {  // One level, 4096 x (bytes / 4096) bytes.
    CUDA_ARRAY3D_DESCRIPTOR desc = {};
    desc.Width = 4096;
    desc.Height = bytes / 4096 ? bytes / 4096 : 1;
    desc.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    desc.NumChannels = 1;
    return cuMipmappedArrayCreate(&h->mipmap, &desc, 1);
  }
  if (api == "graph") {
    // A stream-ordered allocation captured into a graph becomes a memory
    // node: the graph pool maps it at launch and, not freed inside the
    // graph, it stays until cuMemFreeAsync. The shim refuses the launch.
    CUresult rc = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (rc != CUDA_SUCCESS) return rc;
    CUresult alloc_rc = cuMemAllocAsync(&h->ptr, bytes, stream);
    CUgraph graph = nullptr;
    rc = cuStreamEndCapture(stream, &graph);
    if (alloc_rc != CUDA_SUCCESS || rc != CUDA_SUCCESS) {
      if (graph != nullptr) cuGraphDestroy(graph);
      return alloc_rc != CUDA_SUCCESS ? alloc_rc : rc;
    }
    rc = cuGraphInstantiate(&h->exec, graph, 0);
    cuGraphDestroy(graph);
    if (rc != CUDA_SUCCESS) return rc;
    rc = cuGraphLaunch(h->exec, stream);
    cuStreamSynchronize(stream);
    if (rc != CUDA_SUCCESS) {
      cuGraphExecDestroy(h->exec);
      h->exec = nullptr;
    }
    return rc;
  }
  if (api == "vmm") {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    h->size = (bytes + gran - 1) / gran * gran;
    CUresult rc = cuMemCreate(&h->handle, h->size, &prop, 0);
    if (rc != CUDA_SUCCESS) return rc;
    cuMemAddressReserve(&h->ptr, h->size, 0, 0, 0);
    rc = cuMemMap(h->ptr, h->size, 0, h->handle, 0);
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    cuMemSetAccess(h->ptr, h->size, &access, 1);
    cuMemRelease(h->handle);
    return rc;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

void FreeOne(Held& h, CUstream stream) {
  if (h.api == "host") {
    cuMemFreeHost(h.host);
  } else if (h.api == "array") {
    cuArrayDestroy(h.array);
  } else if (h.api == "mipmap") {
    cuMipmappedArrayDestroy(h.mipmap);
  } else if (h.api == "vmm") {
    cuMemUnmap(h.ptr, h.size);
    cuMemAddressFree(h.ptr, h.size);
  } else if (h.api == "async" || h.api == "pool") {
    cuMemFreeAsync(h.ptr, stream);
    cuStreamSynchronize(stream);
  } else if (h.api == "graph") {
    cuMemFreeAsync(h.ptr, stream);
    cuStreamSynchronize(stream);
    cuGraphExecDestroy(h.exec);
  } else {
    cuMemFree(h.ptr);
  }
}

// Every case caps memory far below the card's: a cap that does not hold
// shows at a few times the cap. Stopping there also keeps the loop from
// taking more managed memory than the card has, which can hang the GPU.
constexpr size_t kDefaultMaxTotal = 16ULL << 30;

int MemCap(const std::string& api, size_t chunk, size_t max_bytes) {
  CHECK_RT(cudaFree(nullptr));
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  CUmemoryPool pool = nullptr;
  cuDeviceGetDefaultMemPool(&pool, 0);
  const long smi_base = SmiUsedMib();  // This process's context included.
  // Host memory must not count: 1.5 GiB of it under a 1 GiB cap shows that.
  const size_t max_total = api == "host" ? (3ULL << 29) : max_bytes;
  for (int round = 0; round < 2; ++round) {
    std::vector<Held> held;
    CUresult first = CUDA_SUCCESS;
    size_t total = 0;
    size_t shim_free = 0;
    size_t shim_total = 0;
    while (total < max_total) {
      Held h;
      first = AllocOne(api, chunk, &h, stream, pool);
      if (first != CUDA_SUCCESS) break;
      held.push_back(h);
      total += chunk;
      if (held.size() % 64 == 0) {
        cuMemGetInfo(&shim_free, &shim_total);
        if (shim_free > shim_total) {
          std::printf("underflow=1 free=%zu total=%zu\n", shim_free, shim_total);
        }
      }
    }
    cuMemGetInfo(&shim_free, &shim_total);
    const char* name = nullptr;
    cuGetErrorName(first, &name);
    // Device memory the driver really holds for these allocations (round 0
    // only: each nvidia-smi call costs a fraction of a second).
    long smi_peak = round == 0 ? SmiUsedMib() : -1;
    std::printf("round=%d api=%s chunk=%zu count=%zu bytes=%zu first_error=%s "
                "smi_used_with_context_mib=%ld smi_used_at_peak_mib=%ld "
                "reported_free=%zu reported_total=%zu\n",
                round, api.c_str(), chunk, held.size(), total, name ? name : "?", smi_base,
                smi_peak, shim_free, shim_total);
    for (Held& h : held) FreeOne(h, stream);
    // Freed graph allocations stay reserved by the graph pool until trimmed.
    if (api == "graph") cuDeviceGraphMemTrim(0);
  }
  return 0;
}

int MemInfo() {
  CHECK_RT(cudaFree(nullptr));
  size_t f = 0, t = 0;
  cudaError_t a = cudaMemGetInfo(&f, &t);
  size_t t2 = 0;
  cudaError_t b = cudaMemGetInfo(nullptr, &t2);
  size_t cf = 0, ct = 0;
  CUresult c = cuMemGetInfo(&cf, &ct);
  size_t dt = 0;
  cuDeviceTotalMem(&dt, 0);
  NvmlMemory m = {};
  int n = -1;
  Nvml nvml = LoadNvml();
  void* dev = nullptr;
  if (nvml.ok && nvml.handle_by_index(0, &dev) == 0) {
    n = nvml.memory_info(dev, &m);
  }
  std::printf("cudaMemGetInfo_rc=%d free=%zu total=%zu null_free_rc=%d total_only=%zu "
              "cuMemGetInfo_rc=%d cu_free=%zu cu_total=%zu cuDeviceTotalMem=%zu nvml_rc=%d "
              "nvml_total=%llu nvml_used=%llu nvml_free=%llu\n",
              a, f, t, b, t2, c, cf, ct, dt, n, m.total, m.used, m.free);
  return 0;
}

// One launch of the fixed-work kernel over `blocks` blocks, alone on the
// device, timed with events; returns ms.
double WorkMs(long long iters, int blocks, float* sink) {
  cudaEvent_t a, b;
  CHECK_RT(cudaEventCreate(&a));
  CHECK_RT(cudaEventCreate(&b));
  CHECK_RT(cudaEventRecord(a));
  Work<<<blocks, 128>>>(iters, sink);
  CHECK_RT(cudaEventRecord(b));
  CHECK_RT(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_RT(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

struct Calibration {
  long long iters = 0;
  double kernel_ms = 0;
};

// Iterations for about `us` per launch, and the mean solo duration of that
// launch. Must run alone on the device: contention would stretch it.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Calibration Calibrate(double us, int blocks, float* sink) {
  const long long probe = 1 << 20;
  // Warm-up of about a second: module load, and the SM clock ramping up from
  // idle (345 MHz idle against 1980 MHz busy on an H200); a calibration at a
  // ramping clock scales every share figure by the clock ratio.
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < warm_until) {
    WorkMs(probe, blocks, sink);
  }
  std::vector<double> probe_ms;
  for (int i = 0; i < 9; ++i) {
    probe_ms.push_back(WorkMs(probe, blocks, sink));
  }
  Calibration c;
  c.iters = std::max(1LL, static_cast<long long>(probe * (us / 1000.0) / Median(probe_ms)));
  std::vector<double> kernel_ms;
  for (int i = 0; i < 21; ++i) {
    kernel_ms.push_back(WorkMs(c.iters, blocks, sink));
  }
  c.kernel_ms = Median(kernel_ms);
  return c;
}

int Blocks() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;  // One wave: 132 blocks on an H200.
}

int CalibrateCmd(double kernel_us) {
  CHECK_RT(cudaFree(nullptr));
  float* sink = nullptr;
  CHECK_RT(cudaMalloc(&sink, 4096 * sizeof(float)));
  Calibration c = Calibrate(kernel_us, Blocks(), sink);
  std::printf("iters=%lld kernel_ms=%.4f\n", c.iters, c.kernel_ms);
  return 0;
}

int Share(const std::string& mode, double kernel_us, double seconds, long long given_iters,
          double given_ms) {
  CHECK_RT(cudaFree(nullptr));
  const int blocks = Blocks();
  float* sink = nullptr;
  CHECK_RT(cudaMalloc(&sink, 4096 * sizeof(float)));
  Calibration cal;
  if (given_iters > 0 && given_ms > 0) {
    cal.iters = given_iters;
    cal.kernel_ms = given_ms;
  } else {
    cal = Calibrate(kernel_us, blocks, sink);
  }
  long long iters = cal.iters;
  const double kernel_ms = cal.kernel_ms;
  CUfunction work = FunctionOf(reinterpret_cast<const void*>(&Work));
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  void* params[] = {&iters, &sink};

  CUgraphExec graph = nullptr;
  if (mode == "graph") {
    cudaStream_t cap;
    cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking);
    cudaGraph_t g;
    cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal);
    Work<<<blocks, 128, 0, cap>>>(iters, sink);
    cudaStreamEndCapture(cap, &g);
    cudaGraphExec_t exec;
    CHECK_RT(cudaGraphInstantiate(&exec, g, 0));
    graph = reinterpret_cast<CUgraphExec>(exec);
  }
  CUlaunchConfig cfg = {};
  cfg.gridDimX = blocks;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = stream;

  const int every = std::max(1, static_cast<int>(2000.0 / std::max(kernel_us, 1.0)));
  std::vector<CUevent> marks;
  std::vector<long> marks_at;  // Launch count at each mark.
  CUevent base;
  cuEventCreate(&base, CU_EVENT_DEFAULT);
  cuEventRecord(base, stream);
  auto start = std::chrono::steady_clock::now();
  auto end = start + std::chrono::duration<double>(seconds);
  long launches = 0;
  while (std::chrono::steady_clock::now() < end) {
    CUresult rc = CUDA_SUCCESS;
    if (mode == "kernel" || mode == "sync") {
      rc = cuLaunchKernel(work, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
    } else if (mode == "ex") {
      rc = cuLaunchKernelEx(&cfg, work, params, nullptr);
    } else if (mode == "coop") {
      rc = cuLaunchCooperativeKernel(work, blocks, 1, 1, 128, 1, 1, 0, stream, params);
    } else if (mode == "graph") {
      rc = cuGraphLaunch(graph, stream);
    }
    if (rc != CUDA_SUCCESS) {
      std::printf("launch_error=%d\n", rc);
      return 1;
    }
    ++launches;
    if (mode == "sync") cuStreamSynchronize(stream);
    if (launches % every == 0) {
      CUevent e;
      cuEventCreate(&e, CU_EVENT_DEFAULT);
      cuEventRecord(e, stream);
      marks.push_back(e);
      marks_at.push_back(launches);
    }
  }
  cuStreamSynchronize(stream);
  double wall_ms = Ms(std::chrono::steady_clock::now() - start);
  // Per-1 s windows from completion times of the marks.
  std::vector<double> window_busy(static_cast<size_t>(wall_ms / 1000.0) + 2, 0.0);
  long prev = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    float at = 0;
    cuEventElapsedTime(&at, base, marks[i]);
    size_t w = static_cast<size_t>(at / 1000.0);
    if (w < window_busy.size()) window_busy[w] += (marks_at[i] - prev) * kernel_ms;
    prev = marks_at[i];
  }
  double lo = 1e9, hi = 0;
  size_t full = static_cast<size_t>(wall_ms / 1000.0);
  std::printf("windows=");
  for (size_t w = 0; w < full; ++w) {
    double share = window_busy[w] / 1000.0 * 100.0;
    lo = std::min(lo, share);
    hi = std::max(hi, share);
    std::printf("%s%.1f", w ? "," : "", share);
  }
  std::printf("\nmode=%s kernel_ms=%.4f launches=%ld wall_ms=%.0f share_pct=%.2f "
              "window_min_pct=%.1f window_max_pct=%.1f\n",
              mode.c_str(), kernel_ms, launches, wall_ms,
              launches * kernel_ms / wall_ms * 100.0, full ? lo : 0.0, full ? hi : 0.0);
  return 0;
}

int Overhead(long n) {
  CHECK_RT(cudaFree(nullptr));
  CUfunction empty = FunctionOf(reinterpret_cast<const void*>(&Empty));
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  std::vector<float> ns(static_cast<size_t>(n));
  for (long i = 0; i < n; ++i) {
    // Drained every 1024 launches, outside the timed call: with a full push
    // buffer each launch would wait for the GPU, and that wait would hide
    // what the shim adds on the host.
    if (i % 1024 == 0) cuStreamSynchronize(stream);
    auto a = std::chrono::steady_clock::now();
    cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
    auto b = std::chrono::steady_clock::now();
    ns[static_cast<size_t>(i)] = std::chrono::duration<float, std::nano>(b - a).count();
  }
  cuStreamSynchronize(stream);
  std::sort(ns.begin(), ns.end());
  std::printf("launches=%ld p50_us=%.3f p99_us=%.3f max_us=%.1f\n", n,
              ns[ns.size() / 2] / 1000.0, ns[ns.size() * 99 / 100] / 1000.0, ns.back() / 1000.0);
  return 0;
}

int AllocBench(int rounds) {
  CHECK_RT(cudaFree(nullptr));
  std::vector<double> alloc_us, free_us;
  for (int i = 0; i < rounds; ++i) {
    CUdeviceptr p = 0;
    auto a = std::chrono::steady_clock::now();
    CUresult rc = cuMemAlloc(&p, 256ULL << 20);
    auto b = std::chrono::steady_clock::now();
    if (rc != CUDA_SUCCESS) {
      std::printf("alloc_error=%d\n", rc);
      return 1;
    }
    cuMemFree(p);
    auto c = std::chrono::steady_clock::now();
    alloc_us.push_back(Ms(b - a) * 1000.0);
    free_us.push_back(Ms(c - b) * 1000.0);
  }
  std::sort(alloc_us.begin(), alloc_us.end());
  std::sort(free_us.begin(), free_us.end());
  auto pct = [](const std::vector<double>& v, double q) { return v[static_cast<size_t>(q * (v.size() - 1))]; };
  std::printf("alloc_p50_us=%.1f alloc_p99_us=%.1f alloc_max_us=%.1f free_p50_us=%.1f "
              "free_p99_us=%.1f free_max_us=%.1f\n",
              pct(alloc_us, 0.5), pct(alloc_us, 0.99), alloc_us.back(), pct(free_us, 0.5),
              pct(free_us, 0.99), free_us.back());
  return 0;
}

int Startup() {
  cuInit(0);
  CHECK_RT(cudaFree(nullptr));
  Empty<<<1, 1>>>();
  CHECK_RT(cudaDeviceSynchronize());
  std::printf("start_to_first_kernel_ms=%.1f\n", Ms(std::chrono::steady_clock::now() - kStart));
  return 0;
}

int Hold(size_t mib) {
  CHECK_RT(cudaFree(nullptr));
  CUdeviceptr p = 0;
  CUresult rc = cuMemAlloc(&p, mib << 20);
  size_t f = 0, t = 0;
  cuMemGetInfo(&f, &t);
  std::printf("hold_rc=%d held_mib=%zu free=%zu total=%zu\n", rc, rc == 0 ? mib : 0, f, t);
  std::fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  return 0;
}

}  // namespace

// How the driver's graph pool accounts for a graph between launches, which
// decides how much room a relaunch must hold (docs/enforcement.md, Graph
// memory): reserved and used graph memory after a captured graph that
// allocates and frees `bytes` ran, after it ran again, after a trim while
// it still exists, and after it was destroyed and the pool trimmed.
int GraphAttrs(size_t bytes) {
  CHECK_RT(cudaFree(nullptr));
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  auto show = [](const char* when) {
    cuuint64_t reserved = 0, used = 0;
    cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
    cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
    std::printf("graphattrs when=%s reserved=%llu used=%llu\n", when,
                static_cast<unsigned long long>(reserved), static_cast<unsigned long long>(used));
  };
  CUdeviceptr p = 0;
  cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  CUresult alloc_rc = cuMemAllocAsync(&p, bytes, stream);
  cuMemFreeAsync(p, stream);
  CUgraph graph = nullptr;
  CUresult end_rc = cuStreamEndCapture(stream, &graph);
  CUgraphExec exec = nullptr;
  CUresult inst_rc = cuGraphInstantiate(&exec, graph, 0);
  show("instantiated");
  CUresult launch_rc = cuGraphLaunch(exec, stream);
  cuStreamSynchronize(stream);
  show("after_launch");
  CUresult relaunch_rc = cuGraphLaunch(exec, stream);
  cuStreamSynchronize(stream);
  show("after_relaunch");
  cuDeviceGraphMemTrim(0);
  show("trimmed_graph_alive");
  CUresult third_rc = cuGraphLaunch(exec, stream);
  cuStreamSynchronize(stream);
  show("after_launch_post_trim");
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  show("destroyed");
  cuDeviceGraphMemTrim(0);
  show("destroyed_trimmed");
  std::printf("graphattrs alloc_rc=%d end_rc=%d inst_rc=%d launch_rc=%d relaunch_rc=%d "
              "third_rc=%d\n",
              alloc_rc, end_rc, inst_rc, launch_rc, relaunch_rc, third_rc);
  return 0;
}

// Driver API only (no runtime call first: the runtime would hold the primary
// context). Under a cap the loops pass only if a destroyed context's memory
// and a released primary context's memory stop being charged.
int Contexts(int cycles, size_t chunk) {
  if (cuInit(0) != CUDA_SUCCESS) {
    std::printf("contexts error=cuInit\n");
    return 1;
  }
  CUdevice dev = 0;
  cuDeviceGet(&dev, 0);
  int created_ok = 0, first_created_fail = -1;
  CUresult created_rc = CUDA_SUCCESS;
  for (int i = 0; i < cycles; ++i) {
    CUcontext c = nullptr;
#if CUDA_VERSION >= 13000
    CUresult rc = cuCtxCreate(&c, nullptr, 0, dev);
#else
    CUresult rc = cuCtxCreate(&c, 0, dev);
#endif
    if (rc == CUDA_SUCCESS) {
      CUdeviceptr p = 0;
      rc = cuMemAlloc(&p, chunk);
      cuCtxDestroy(c);  // frees p with the context
    }
    if (rc == CUDA_SUCCESS) {
      ++created_ok;
    } else if (first_created_fail < 0) {
      first_created_fail = i;
      created_rc = rc;
    }
  }
  int primary_ok = 0, first_primary_fail = -1, same_handle = 1, inactive_after = 1;
  CUresult primary_rc = CUDA_SUCCESS;
  for (int i = 0; i < cycles; ++i) {
    CUcontext p = nullptr, cur = nullptr;
    CUresult rc = cuDevicePrimaryCtxRetain(&p, dev);
    if (rc == CUDA_SUCCESS) {
      cuCtxSetCurrent(p);
      cuCtxGetCurrent(&cur);
      same_handle &= cur == p ? 1 : 0;
      CUdeviceptr m = 0;
      rc = cuMemAlloc(&m, chunk);
      cuCtxSetCurrent(nullptr);
      cuDevicePrimaryCtxRelease(dev);  // the last reference: the context resets
      unsigned int flags = 0;
      int active = -1;
      cuDevicePrimaryCtxGetState(dev, &flags, &active);
      inactive_after &= active == 0 ? 1 : 0;
    }
    if (rc == CUDA_SUCCESS) {
      ++primary_ok;
    } else if (first_primary_fail < 0) {
      first_primary_fail = i;
      primary_rc = rc;
    }
  }
  // What cuCtxDestroy answers for the primary context's handle (the shim acts
  // only on success).
  CUcontext p = nullptr;
  CUresult destroy_primary_rc = CUDA_ERROR_UNKNOWN;
  if (cuDevicePrimaryCtxRetain(&p, dev) == CUDA_SUCCESS) {
    destroy_primary_rc = cuCtxDestroy(p);
    cuDevicePrimaryCtxRelease(dev);
  }
  std::printf("contexts cycles=%d chunk=%zu created_ok=%d first_created_fail=%d created_rc=%d "
              "primary_ok=%d first_primary_fail=%d primary_rc=%d same_handle=%d "
              "inactive_after_release=%d destroy_primary_rc=%d\n",
              cycles, chunk, created_ok, first_created_fail, created_rc, primary_ok,
              first_primary_fail, primary_rc, same_handle, inactive_after, destroy_primary_rc);
  return 0;
}

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "info") return Info();
  if (cmd == "memcap" && (argc == 4 || argc == 5)) {
    return MemCap(argv[2], std::strtoull(argv[3], nullptr, 10),
                  argc == 5 ? std::strtoull(argv[4], nullptr, 10) : kDefaultMaxTotal);
  }
  if (cmd == "meminfo") return MemInfo();
  if (cmd == "graphattrs" && argc == 3) return GraphAttrs(std::strtoull(argv[2], nullptr, 10));
  if (cmd == "calibrate" && argc == 3) return CalibrateCmd(std::atof(argv[2]));
  if (cmd == "share" && (argc == 5 || argc == 7)) {
    return Share(argv[2], std::atof(argv[3]), std::atof(argv[4]),
                 argc == 7 ? std::atoll(argv[5]) : 0, argc == 7 ? std::atof(argv[6]) : 0.0);
  }
  if (cmd == "overhead" && argc == 3) return Overhead(std::atol(argv[2]));
  if (cmd == "allocbench" && argc == 3) return AllocBench(std::atoi(argv[2]));
  if (cmd == "startup") return Startup();
  if (cmd == "hold" && argc == 3) return Hold(std::strtoull(argv[2], nullptr, 10));
  if (cmd == "contexts" && argc == 4) {
    return Contexts(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10));
  }
  std::fprintf(stderr, "usage: see the header of enforce_probe.cu\n");
  return 2;
}
