// enforce_probe: the driver-API test program of the H200 enforcement plan
// (docs/enforcement.md). Built on the GPU machine by run_enforcement.sh with
// nvcc; run natively, with libaccelpool-cuda preloaded and limits off, and
// with limits on. Prints key=value lines only; the script keeps them raw.
//
//   info                           versions, device, context size (NVML)
//   memcap <api> <chunk_bytes>     allocate until failure, free, allocate again
//   meminfo                        cudaMemGetInfo / cuMemGetInfo / NVML views
//   share <mode> <kernel_us> <s>   throughput share with 1 s window spread
//   overhead <launches>            host-side ns per empty-kernel launch
//   allocbench <rounds>            cuMemAlloc/cuMemFree 256 MB latency
//   startup                        process start to first kernel done, ms
//   hold <MiB>                     allocate and wait for stdin to close
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvml.h>
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

// Duration of the last Spin, measured on the device (block 0), in ns. Host
// timing would include the shim's throttling sleep before the launch.
__device__ unsigned long long g_spin_ns;

__device__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void Spin(long long cycles) {
  unsigned long long t0 = GlobalTimerNs();
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    g_spin_ns = GlobalTimerNs() - t0;
  }
}

// Runs one Spin alone and returns its device-measured duration in ms.
double SpinMs(long long cycles, int blocks) {
  Spin<<<blocks, 128>>>(cycles);
  CHECK_RT(cudaDeviceSynchronize());
  unsigned long long ns = 0;
  CHECK_RT(cudaMemcpyFromSymbol(&ns, g_spin_ns, sizeof(ns)));
  return ns / 1e6;
}

__global__ void Empty() {}


double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

unsigned long long NvmlProcessUsed() {
  nvmlDevice_t dev;
  if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) {
    return 0;
  }
  unsigned int count = 64;
  nvmlProcessInfo_t infos[64];
  if (nvmlDeviceGetComputeRunningProcesses(dev, &count, infos) != NVML_SUCCESS) {
    return 0;
  }
  for (unsigned i = 0; i < count; ++i) {
    if (infos[i].pid == static_cast<unsigned>(getpid())) {
      return infos[i].usedGpuMemory;
    }
  }
  return 0;  // In a PID namespace NVML reports host PIDs: see the docs.
}

CUfunction FunctionOf(const void* symbol) {
  cudaFunction_t f;
  CHECK_RT(cudaGetFuncBySymbol(&f, symbol));
  return reinterpret_cast<CUfunction>(f);
}

int Info() {
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
  unsigned long long before = NvmlProcessUsed();
  CHECK_RT(cudaFree(nullptr));  // Creates the primary context.
  unsigned long long ctx = NvmlProcessUsed();
  char nvml_driver[96] = {};
  nvmlSystemGetDriverVersion(nvml_driver, sizeof(nvml_driver));
  std::printf("driver_api=%d runtime=%d driver=%s device=\"%s\" sms=%d nvml_before=%llu "
              "nvml_context_bytes=%llu\n",
              driver, runtime, nvml_driver, name, sms, before, ctx);
  return 0;
}

struct Held {
  std::string api;
  CUdeviceptr ptr = 0;
  CUarray array = nullptr;
  CUmemGenericAllocationHandle handle = 0;
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
  } else if (h.api == "vmm") {
    cuMemUnmap(h.ptr, h.size);
    cuMemAddressFree(h.ptr, h.size);
  } else if (h.api == "async" || h.api == "pool") {
    cuMemFreeAsync(h.ptr, stream);
    cuStreamSynchronize(stream);
  } else {
    cuMemFree(h.ptr);
  }
}

int MemCap(const std::string& api, size_t chunk) {
  CHECK_RT(cudaFree(nullptr));
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  CUmemoryPool pool = nullptr;
  cuDeviceGetDefaultMemPool(&pool, 0);
  unsigned long long ctx = NvmlProcessUsed();
  const size_t max_total = api == "host" ? (8ULL << 30) : (200ULL << 30);
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
    std::printf("round=%d api=%s chunk=%zu count=%zu bytes=%zu first_error=%s "
                "nvml_process_used=%llu context_nvml=%llu reported_free=%zu reported_total=%zu\n",
                round, api.c_str(), chunk, held.size(), total, name ? name : "?",
                NvmlProcessUsed(), ctx, shim_free, shim_total);
    for (Held& h : held) FreeOne(h, stream);
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
  nvmlMemory_t m = {};
  nvmlDevice_t dev;
  nvmlInit_v2();
  nvmlDeviceGetHandleByIndex_v2(0, &dev);
  nvmlReturn_t n = nvmlDeviceGetMemoryInfo(dev, &m);
  std::printf("cudaMemGetInfo_rc=%d free=%zu total=%zu null_free_rc=%d total_only=%zu "
              "cuMemGetInfo_rc=%d cu_free=%zu cu_total=%zu cuDeviceTotalMem=%zu nvml_rc=%d "
              "nvml_total=%llu nvml_used=%llu nvml_free=%llu\n",
              a, f, t, b, t2, c, cf, ct, dt, n, m.total, m.used, m.free);
  return 0;
}

// Calibrates Spin so that one launch of `blocks` blocks takes about `us`.
long long CyclesFor(double us, int blocks) {
  const long long probe = 2000000;
  SpinMs(probe, blocks);  // Warm-up.
  double ms = SpinMs(probe, blocks);
  return static_cast<long long>(probe * (us / 1000.0) / ms);
}

int Share(const std::string& mode, double kernel_us, double seconds) {
  CHECK_RT(cudaFree(nullptr));
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms;  // One wave: 132 blocks on an H200.
  long long cycles = kernel_us > 0 ? CyclesFor(kernel_us, blocks) : 0;
  CUfunction spin = FunctionOf(reinterpret_cast<const void*>(&Spin));
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  void* params[] = {&cycles};
  // Duration of one launch running alone, measured on the device.
  double kernel_ms = 0;
  for (int i = 0; i < 5; ++i) {
    kernel_ms += SpinMs(cycles, blocks) / 5.0;
  }

  CUgraphExec graph = nullptr;
  if (mode == "graph") {
    cudaStream_t cap;
    cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking);
    cudaGraph_t g;
    cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal);
    Spin<<<blocks, 128, 0, cap>>>(cycles);
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
      rc = cuLaunchKernel(spin, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
    } else if (mode == "ex") {
      rc = cuLaunchKernelEx(&cfg, spin, params, nullptr);
    } else if (mode == "coop") {
      rc = cuLaunchCooperativeKernel(spin, blocks, 1, 1, 128, 1, 1, 0, stream, params);
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

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "info") return Info();
  if (cmd == "memcap" && argc == 4) return MemCap(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (cmd == "meminfo") return MemInfo();
  if (cmd == "share" && argc == 5) return Share(argv[2], std::atof(argv[3]), std::atof(argv[4]));
  if (cmd == "overhead" && argc == 3) return Overhead(std::atol(argv[2]));
  if (cmd == "allocbench" && argc == 3) return AllocBench(std::atoi(argv[2]));
  if (cmd == "startup") return Startup();
  if (cmd == "hold" && argc == 3) return Hold(std::strtoull(argv[2], nullptr, 10));
  std::fprintf(stderr, "usage: see the header of enforce_probe.cu\n");
  return 2;
}
