// Graph memory hooks: instantiation (where the shim learns what a graph's
// memory nodes need), upload, executable-graph destruction and the graph
// pool trim. cuGraphLaunch is a launch (hooks_launch.cc) and calls
// HoldForGraphExec / SettleGraphExec from here. See accounting.h for the
// accounting model.
//
// Allocations captured from cuMemAllocAsync become memory nodes: they are
// not charged at capture (hooks_memory.cc passes them through) but when the
// graph's memory is mapped, so a captured allocation is counted once.
#include <atomic>
#include <cstdlib>

#include "cuda/accounting.h"
#include "cuda/log.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

constexpr int kMaxChildDepth = 8;
// Walks of larger graphs stop here (the graph is then not accounted for).
constexpr size_t kMaxNodes = 1 << 20;

struct GraphNeed {
  int device = -1;     // -1: no memory nodes; kGraphMultiDevice: several devices.
  uint64_t bytes = 0;  // Sum of the allocations, each rounded to the granularity.
};

// Adds the memory nodes of `graph` and its child graphs to *need; false when
// the graph cannot be read (its memory then goes unaccounted, logged once).
bool AddNeed(CUgraph graph, int depth, GraphNeed* need) {
  ShimState& s = State();
  size_t n = 0;
  if (s.graph_get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n > kMaxNodes) {
    return false;
  }
  if (n == 0) {
    return true;
  }
  // malloc, not new: the shim needs nothing from libstdc++ at run time.
  auto* nodes = static_cast<CUgraphNode*>(std::malloc(n * sizeof(CUgraphNode)));
  if (nodes == nullptr) {
    return false;
  }
  bool ok = s.graph_get_nodes(graph, nodes, &n) == CUDA_SUCCESS;
  for (size_t i = 0; ok && i < n; ++i) {
    int type = -1;
    if (s.graph_node_get_type(nodes[i], &type) != CUDA_SUCCESS) {
      ok = false;
    } else if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      CUDA_MEM_ALLOC_NODE_PARAMS p = {};
      if (s.graph_mem_alloc_node_get_params(nodes[i], &p) != CUDA_SUCCESS) {
        ok = false;
        continue;
      }
      int dev = LocationDevice(p.poolProps.location);
      if (dev < 0) {
        continue;  // Host-resident graph allocations never count.
      }
      uint64_t bytes = RoundToGranularity(p.bytesize);
      need->bytes = need->bytes > UINT64_MAX - bytes ? UINT64_MAX : need->bytes + bytes;
      need->device = need->device == -1 || need->device == dev ? dev : kGraphMultiDevice;
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && depth < kMaxChildDepth &&
               s.graph_child_graph != nullptr) {
      CUgraph child = nullptr;
      ok = s.graph_child_graph(nodes[i], &child) == CUDA_SUCCESS && AddNeed(child, depth + 1, need);
    }
  }
  std::free(nodes);
  return ok;
}

GraphNeed NeedOf(CUgraph graph) {
  ShimState& s = State();
  GraphNeed need;
  if (s.graph_get_nodes == nullptr || s.graph_node_get_type == nullptr ||
      s.graph_mem_alloc_node_get_params == nullptr || !AddNeed(graph, 0, &need)) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true, std::memory_order_relaxed)) {
      Logf(LogLevel::kWarn,
           "cannot read a graph's memory nodes; memory those graphs allocate is not counted");
    }
    return GraphNeed();
  }
  return need;
}

bool ReadGraphAttr(int device, int attr, uint64_t* value) {
  ShimState& s = State();
  cuuint64_t v = 0;
  if (s.device_get_graph_mem_attribute == nullptr ||
      s.device_get_graph_mem_attribute(device, attr, &v) != CUDA_SUCCESS) {
    return false;
  }
  *value = v;
  return true;
}

// Brings the device's charge to the graph pool's `reserve`. Holds of calls
// in flight (s.graph_held) are charged beside s.graph_charged and cover what
// those calls map: a reserve within charged + held is left alone (their
// settlements take it in), one below the charge is uncharged, and only a
// reserve past both is charged here. REQUIRES: s.pool_mu held (re-reads
// applied in read order).
void SyncGraphLocked(ShimState& s, int device, uint64_t reserve) {
  uint64_t charged = s.graph_charged[device];
  uint64_t held = s.graph_held[device];
  if (reserve < charged) {
    UnchargeBytes(device, charged - reserve);
    charged = reserve;
  } else if (reserve - charged > held) {
    // Mapped already: cannot be refused.
    ForceChargeBytes(device, reserve - charged - held, "graph memory",
                     "graphs are destroyed and cuDeviceGraphMemTrim runs");
    charged = reserve - held;
  }
  s.graph_charged[device] = charged;
}

uint64_t Less(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

bool Accountable(int device) {
  return device >= 0 && device < kMaxDevices && DeviceMemoryLimited(device);
}

// The device's trim epoch (0 where the device is not accounted for).
uint64_t GraphEpoch(int device) {
  ShimState& s = State();
  if (!Accountable(device)) {
    return 0;
  }
  pthread_mutex_lock(&s.mem_mu);
  uint64_t epoch = s.graph_epoch[device];
  pthread_mutex_unlock(&s.mem_mu);
  return epoch;
}

// Holds room for mapping `need`: its bytes less what the pool holds unused
// and no other hold in flight counts on.
bool HoldGrowth(const GraphNeed& need, GraphHold* hold) {
  ShimState& s = State();
  hold->settle = true;
  hold->device = need.device;
  if (!Accountable(need.device)) {
    return true;  // Several devices or no cap: settled after the call only.
  }
  const int dev = need.device;
  pthread_mutex_lock(&s.pool_mu);
  uint64_t reserve = 0;
  uint64_t used = 0;
  if (!ReadGraphAttr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserve) ||
      !ReadGraphAttr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used)) {
    pthread_mutex_unlock(&s.pool_mu);
    return true;
  }
  SyncGraphLocked(s, dev, reserve);
  uint64_t idle = Less(Less(reserve, used), s.graph_idle_claimed[dev]);
  uint64_t from_idle = need.bytes < idle ? need.bytes : idle;
  uint64_t growth = need.bytes - from_idle;
  Charge c = growth == 0 ? Charge::kNotLimited : ChargeBytes(dev, growth);
  if (c != Charge::kOverLimit) {
    if (c == Charge::kCharged) {
      hold->bytes = growth;
      s.graph_held[dev] += growth;
    }
    hold->idle = from_idle;
    s.graph_idle_claimed[dev] += from_idle;
  }
  pthread_mutex_unlock(&s.pool_mu);
  if (c == Charge::kOverLimit) {
    Logf(LogLevel::kDebug, "device %d: graph needing %llu bytes refused at the cap", dev,
         static_cast<unsigned long long>(growth));
    hold->settle = false;
    return false;
  }
  return true;
}

// Ends a hold: its room is taken into the device's charge, which is then
// brought to the re-read reserve.
void SettleGrowth(const GraphHold& hold) {
  ShimState& s = State();
  if (!hold.settle) {
    return;
  }
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    if ((dev != hold.device && hold.device != kGraphMultiDevice) || !Accountable(dev)) {
      continue;
    }
    uint64_t held = dev == hold.device ? hold.bytes : 0;
    pthread_mutex_lock(&s.pool_mu);
    s.graph_held[dev] = Less(s.graph_held[dev], held);
    if (dev == hold.device) {
      s.graph_idle_claimed[dev] = Less(s.graph_idle_claimed[dev], hold.idle);
    }
    uint64_t reserve = 0;
    if (ReadGraphAttr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserve)) {
      s.graph_charged[dev] += held;
      SyncGraphLocked(s, dev, reserve);
    } else if (held != 0) {
      UnchargeBytes(dev, held);
    }
    pthread_mutex_unlock(&s.pool_mu);
  }
}

// Records a new executable graph; `mapped`: its memory was mapped at trim
// epoch `epoch`. A record left under the same handle (a graph destroyed
// where the shim did not see it) is replaced, so that it is never taken for
// the new graph's.
void RememberExec(CUgraphExec exec, const GraphNeed& need, bool mapped, uint64_t epoch) {
  ShimState& s = State();
  if (exec == nullptr) {
    return;
  }
  auto key = reinterpret_cast<uint64_t>(exec);
  AllocRecord r;
  r.bytes = need.bytes;
  r.device = need.device;
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord stale;
  s.graph_execs->Take(key, &stale);
  if (Accountable(need.device)) {
    r.link = mapped ? epoch + 1 : 0;
  }
  bool recorded = need.bytes == 0 || s.graph_execs->Put(key, r);
  pthread_mutex_unlock(&s.mem_mu);
  if (!recorded) {
    Logf(LogLevel::kWarn,
         "cannot record a graph (out of memory); its memory is counted at memory queries only");
  }
  if (need.bytes == 0) {
    return;
  }
  pthread_mutex_lock(&s.pool_mu);
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    if (dev == need.device || need.device == kGraphMultiDevice) {
      s.graph_seen[dev] = true;
    }
  }
  pthread_mutex_unlock(&s.pool_mu);
}

template <typename Call>
CUresult Instantiate(CUgraphExec* exec, CUgraph graph, Call call) {
  ShimState& s = State();
  if (!s.mem_on || exec == nullptr || graph == nullptr) {
    return call();  // Nothing to walk (the driver refuses a NULL graph itself).
  }
  GraphNeed need = NeedOf(graph);
  CUresult rc = call();
  if (rc == CUDA_SUCCESS) {
    RememberExec(*exec, need, false, 0);
  }
  return rc;
}

template <int S>
CUresult HookGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                       unsigned long long flags) {  // NOLINT
  ACCELPOOL_REAL_OR_FAIL(cuGraphInstantiateWithFlagsFn, kHookGraphInstantiateWithFlags);
  return Instantiate(exec, graph, [&] { return real(exec, graph, flags); });
}

template <int S>
CUresult HookGraphInstantiateV2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                char* log, size_t log_size) {
  ACCELPOOL_REAL_OR_FAIL(cuGraphInstantiateV2Fn, kHookGraphInstantiateV2);
  return Instantiate(exec, graph, [&] { return real(exec, graph, error_node, log, log_size); });
}

// With CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD the instantiation also uploads,
// which maps the graph's memory: the growth is held first.
template <int S>
CUresult HookGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  ACCELPOOL_REAL_OR_FAIL(cuGraphInstantiateWithParamsFn, kHookGraphInstantiateWithParams);
  if (!s.mem_on || exec == nullptr || graph == nullptr || params == nullptr ||
      (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) == 0) {
    return Instantiate(exec, graph, [&] { return real(exec, graph, params); });
  }
  GraphNeed need = NeedOf(graph);
  GraphHold hold;
  hold.epoch = GraphEpoch(need.device);
  if (need.bytes != 0 && !HoldGrowth(need, &hold)) {
    params->result_out = 1;  // CUDA_GRAPH_INSTANTIATE_ERROR
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = real(exec, graph, params);
  if (rc == CUDA_SUCCESS) {
    RememberExec(*exec, need, true, hold.epoch);
  }
  SettleGrowth(hold);
  return rc;
}

template <int S>
CUresult HookGraphUpload(CUgraphExec exec, CUstream stream) {
  ACCELPOOL_REAL_OR_FAIL(cuGraphUploadFn, kHookGraphUpload);
  if (!s.mem_on) {
    return real(exec, stream);
  }
  GraphHold hold;
  if (!HoldForGraphExec(exec, stream, s.per_thread_stream[kHookGraphUpload][S], &hold)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = real(exec, stream);
  SettleGraphExec(exec, hold, rc);
  return rc;
}

// Destroying a graph returns its memory to the graph pool, which keeps it
// reserved until a trim; the re-read settles whatever the driver did.
template <int S>
CUresult HookGraphExecDestroy(CUgraphExec exec) {
  ACCELPOOL_REAL_OR_FAIL(cuGraphExecDestroyFn, kHookGraphExecDestroy);
  if (s.launch_on) {
    ForgetGraphCost(exec);
  }
  if (!s.mem_on) {
    return real(exec);
  }
  auto key = reinterpret_cast<uint64_t>(exec);
  AllocRecord r;
  bool tracked = TakeRecord(s.graph_execs, key, &r);
  CUresult rc = real(exec);
  if (tracked) {
    if (rc == CUDA_SUCCESS) {
      GraphHold hold;
      hold.settle = true;
      hold.device = r.device;
      SettleGrowth(hold);
    } else {
      pthread_mutex_lock(&s.mem_mu);
      s.graph_execs->Put(key, r);
      pthread_mutex_unlock(&s.mem_mu);
    }
  }
  return rc;
}

// A trim returns the pool's unused memory to the device and may unmap idle
// graphs' memory: their next launch maps it again, so it is held again.
template <int S>
CUresult HookDeviceGraphMemTrim(CUdevice device) {
  ACCELPOOL_REAL_OR_FAIL(cuDeviceGraphMemTrimFn, kHookDeviceGraphMemTrim);
  CUresult rc = real(device);
  if (rc != CUDA_SUCCESS || !s.mem_on || device < 0 || device >= kMaxDevices) {
    return rc;
  }
  pthread_mutex_lock(&s.mem_mu);
  ++s.graph_epoch[device];
  pthread_mutex_unlock(&s.mem_mu);
  SyncGraphMemory(device);
  return rc;
}

}  // namespace

bool HoldForGraphExec(CUgraphExec exec, CUstream stream, bool per_thread, GraphHold* hold) {
  ShimState& s = State();
  AllocRecord r;
  bool mapped = false;
  uint64_t epoch = 0;
  pthread_mutex_lock(&s.mem_mu);
  const AllocRecord* found = s.graph_execs->Find(reinterpret_cast<uint64_t>(exec));
  if (found != nullptr) {
    r = *found;
    if (Accountable(r.device)) {
      epoch = s.graph_epoch[r.device];
      mapped = r.link == epoch + 1;
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  if (found == nullptr) {
    return true;  // No memory nodes.
  }
  // Launched into a capturing stream, the graph becomes a node of another
  // graph and maps nothing now.
  if (StreamCapturing(stream, per_thread)) {
    return true;
  }
  hold->epoch = epoch;
  if (mapped) {
    hold->settle = true;  // Its memory stays mapped between launches: no growth expected.
    hold->device = r.device;
    return true;
  }
  GraphNeed need;
  need.device = r.device;
  need.bytes = r.bytes;
  return HoldGrowth(need, hold);
}

void SettleGraphExec(CUgraphExec exec, const GraphHold& hold, CUresult rc) {
  ShimState& s = State();
  if (!hold.settle) {
    return;
  }
  if (rc == CUDA_SUCCESS && Accountable(hold.device)) {
    // Mapped as of the epoch the hold was taken in: a trim since (which may
    // have unmapped it again) makes the next launch hold again.
    pthread_mutex_lock(&s.mem_mu);
    if (AllocRecord* r = s.graph_execs->Find(reinterpret_cast<uint64_t>(exec))) {
      r->link = hold.epoch + 1;
    }
    pthread_mutex_unlock(&s.mem_mu);
  }
  SettleGrowth(hold);
}

void SyncGraphMemory(int device) {
  ShimState& s = State();
  if (!Accountable(device)) {
    return;
  }
  pthread_mutex_lock(&s.pool_mu);
  uint64_t reserve = 0;
  if (s.graph_seen[device] &&
      ReadGraphAttr(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserve)) {
    SyncGraphLocked(s, device, reserve);
  }
  pthread_mutex_unlock(&s.pool_mu);
}

void* GraphHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {
      ACCELPOOL_HOOK_SLOTS(HookGraphInstantiateWithFlags),
      ACCELPOOL_HOOK_SLOTS(HookGraphInstantiateWithParams),
      ACCELPOOL_HOOK_SLOTS(HookGraphInstantiateV2),
      ACCELPOOL_HOOK_SLOTS(HookGraphUpload),
      ACCELPOOL_HOOK_SLOTS(HookGraphExecDestroy),
      ACCELPOOL_HOOK_SLOTS(HookDeviceGraphMemTrim),
  };
  if (!IsGraph(id) || slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  return kTable[id - kHookGraphInstantiateWithFlags][slot];
}

}  // namespace accelpool::cuda

using namespace accelpool::cuda;  // NOLINT: exported C entry points below.

ACCELPOOL_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g,
                                                      unsigned long long f) {  // NOLINT
  return HookGraphInstantiateWithFlags<0>(e, g, f);
}
ACCELPOOL_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* e, CUgraph g, CUgraphNode* n,
                                                char* log, size_t size) {
  return HookGraphInstantiateV2<0>(e, g, n, log, size);
}
ACCELPOOL_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* e, CUgraph g,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return HookGraphInstantiateWithParams<0>(e, g, p);
}
ACCELPOOL_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* e, CUgraph g,
                                                            CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return HookGraphInstantiateWithParams<1>(e, g, p);
}
ACCELPOOL_EXPORT CUresult cuGraphUpload(CUgraphExec e, CUstream st) {
  return HookGraphUpload<0>(e, st);
}
ACCELPOOL_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream st) {
  return HookGraphUpload<1>(e, st);
}
ACCELPOOL_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { return HookGraphExecDestroy<0>(e); }
ACCELPOOL_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice d) { return HookDeviceGraphMemTrim<0>(d); }
