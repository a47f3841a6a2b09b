// Graphs of the fake libcuda.so.1: building graphs with memory, child and
// empty nodes, instantiation, upload and launch, which map the graph's
// memory from a per-device graph pool (fake_cuda_state.h), the trim, and
// the graph-memory attributes. Launches of a CUgraphExec that no
// instantiation returned keep the older test convention: the handle's value
// is the work's duration in nanoseconds.
#include <cstring>
#include <new>
#include <utility>

#include "cuda/testing/driver_api.h"
#include "cuda/testing/fake_cuda_state.h"

// The fake driver also runs on the C++ runtimes of older images
// (tests/cuda/old_glibc.sh), which predate libstdc++ 11's out-of-line
// __throw_bad_array_new_length (GLIBCXX_3.4.29) that std::vector's growth
// calls here. A copy of its own, bound locally (-Bsymbolic), keeps the
// library loadable there; it is only reached by a request larger than the
// address space.
namespace std {
[[noreturn]] void __throw_bad_array_new_length() { throw std::bad_array_new_length(); }
}  // namespace std

namespace {

using namespace accelpool::cuda::fake;  // NOLINT: test fake.

constexpr int kEmptyNode = 5;  // CU_GRAPH_NODE_TYPE_EMPTY
constexpr int kFreeNode = 11;  // CU_GRAPH_NODE_TYPE_MEM_FREE
// Handles of graph objects: far above any duration the tests launch.
constexpr uintptr_t kObjectBase = 0x7E0000000000;

// REQUIRES: s.mu held.
uintptr_t NewObjectLocked(State& s) { return kObjectBase + s.next_graph_object++; }

CUresult AddNode(CUgraphNode* node, CUgraph graph, const GraphNode& n) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.graphs.find(reinterpret_cast<uintptr_t>(graph));
  if (node == nullptr || it == s.graphs.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uintptr_t id = NewObjectLocked(s);
  s.nodes[id] = n;
  it->second.push_back(id);
  *node = reinterpret_cast<CUgraphNode>(id);
  return CUDA_SUCCESS;
}

// Adds the memory nodes of `graph` and its children to `exec`; `freed`
// collects the addresses that free nodes release. REQUIRES: s.mu held.
void CollectLocked(State& s, uintptr_t graph, GraphExec* exec, std::vector<CUdeviceptr>* freed,
                   std::vector<GraphNode>* allocs) {
  for (uintptr_t id : s.graphs[graph]) {
    const GraphNode& n = s.nodes[id];
    if (n.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      exec->device = n.device;
      exec->bytes += Pages(n.bytes);
      allocs->push_back(n);
    } else if (n.type == kFreeNode) {
      freed->push_back(n.dptr);
    } else if (n.type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CollectLocked(s, n.child, exec, freed, allocs);
    }
  }
}

CUresult Instantiate(CUgraphExec* out, CUgraph graph) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto key = reinterpret_cast<uintptr_t>(graph);
  if (out == nullptr || s.graphs.count(key) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphExec exec;
  std::vector<CUdeviceptr> freed;
  std::vector<GraphNode> allocs;
  CollectLocked(s, key, &exec, &freed, &allocs);
  for (const GraphNode& a : allocs) {
    bool is_freed = false;
    for (CUdeviceptr f : freed) {
      is_freed = is_freed || f == a.dptr;
    }
    if (!is_freed) {
      exec.outliving.push_back(a);
    }
  }
  uintptr_t id = NewObjectLocked(s);
  s.execs[id] = exec;
  *out = reinterpret_cast<CUgraphExec>(id);
  return CUDA_SUCCESS;
}

// Maps what the graph needs from its device's graph pool. REQUIRES: s.mu held.
CUresult MapLocked(State& s, const GraphExec& e) {
  for (const GraphNode& a : e.outliving) {
    if (s.allocations.count(a.dptr) != 0) {
      return CUDA_ERROR_INVALID_VALUE;  // Not freed since the last launch.
    }
  }
  int d = e.device;
  uint64_t idle = s.graph_reserved[d] - s.graph_used[d];
  uint64_t grow = e.bytes > idle ? e.bytes - idle : 0;
  if (s.used[d] + grow > kDeviceBytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.graph_reserved[d] += grow;
  s.used[d] += grow;
  return CUDA_SUCCESS;
}

struct MapHook {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
};

// Takes the fakecuda_OnNextGraphMap callback if it is set for `when`.
// REQUIRES: s.mu held.
MapHook TakeMapHookLocked(State& s, int when) {
  MapHook h;
  if (s.on_graph_map != nullptr && s.on_graph_map_when == when) {
    h.fn = s.on_graph_map;
    h.ctx = s.on_graph_map_ctx;
    s.on_graph_map = nullptr;
    s.on_graph_map_ctx = nullptr;
  }
  return h;
}

// Upload (run = false) or launch: a launch leaves the outliving allocations
// in use. Returns NOT_FOUND for a handle no instantiation returned.
CUresult Run(CUgraphExec exec, bool run) {
  State& s = S();
  auto key = reinterpret_cast<uintptr_t>(exec);
  MapHook before;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.execs.count(key) != 0) {
      before = TakeMapHookLocked(s, 0);
    }
  }
  if (before.fn != nullptr) {
    before.fn(before.ctx);  // Another thread, as it were, inside this call.
  }
  MapHook after;
  CUresult rc = CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.execs.find(key);
    if (it == s.execs.end()) {
      return CUDA_ERROR_NOT_FOUND;
    }
    rc = MapLocked(s, it->second);
    if (rc == CUDA_SUCCESS && run) {
      for (const GraphNode& a : it->second.outliving) {
        uint64_t bytes = Pages(a.bytes);
        s.graph_used[a.device] += bytes;
        Allocation alloc{bytes, a.device, false};
        alloc.graph = true;
        s.allocations[a.dptr] = alloc;
      }
    }
    if (rc == CUDA_SUCCESS) {
      after = TakeMapHookLocked(s, 1);
    }
  }
  if (after.fn != nullptr) {
    after.fn(after.ctx);  // Mapped, and the caller has not heard back yet.
  }
  return rc;
}

CUresult LaunchGraph(CUgraphExec exec, CUstream st, bool per_thread) {
  if (Capturing(st)) {
    return CUDA_SUCCESS;
  }
  CUresult rc = Run(exec, true);
  if (rc == CUDA_ERROR_NOT_FOUND) {
    return Launch(st, per_thread, static_cast<int64_t>(reinterpret_cast<uintptr_t>(exec)));
  }
  return rc == CUDA_SUCCESS ? Launch(st, per_thread, 1000) : rc;
}

CUresult Upload(CUgraphExec exec) {
  CUresult rc = Run(exec, false);
  return rc == CUDA_ERROR_NOT_FOUND ? CUDA_ERROR_INVALID_VALUE : rc;
}

CUresult InstantiateWithParams(CUgraphExec* out, CUgraph graph,
                               CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = Instantiate(out, graph);
  if (rc == CUDA_SUCCESS && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0) {
    rc = Upload(*out);
    if (rc != CUDA_SUCCESS) {
      State& s = S();
      std::lock_guard<std::mutex> lock(s.mu);
      s.execs.erase(reinterpret_cast<uintptr_t>(*out));
    }
  }
  params->result_out = rc == CUDA_SUCCESS ? 0 : 1;
  return rc;
}

}  // namespace

namespace accelpool::cuda::fake {

CUresult CaptureAlloc(CUdeviceptr* out, uint64_t bytes) {
  if (out == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  GraphNode n{CU_GRAPH_NODE_TYPE_MEM_ALLOC};
  n.bytes = bytes;
  n.device = CurrentDevice();
  n.dptr = NextAddressLocked(s, Pages(bytes));
  s.captured.push_back(n);
  *out = n.dptr;
  return CUDA_SUCCESS;
}

CUresult CaptureFree(CUdeviceptr ptr) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  GraphNode n{kFreeNode};
  n.dptr = ptr;
  s.captured.push_back(n);
  return CUDA_SUCCESS;
}

}  // namespace accelpool::cuda::fake

// The capturing stream (0xCA97) always captures: ending a capture returns
// what was recorded on it since the last end, as a new graph. A capture
// begun in global mode counts as under way until it ends (cuEventQuery).
FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream st, int mode) {
  if (!Capturing(st)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.global_captures;
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamEndCapture(CUstream st, CUgraph* graph) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (graph == nullptr || !Capturing(st)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (s.global_captures > 0) {
    --s.global_captures;
  }
  if (s.capture_invalidated) {
    s.capture_invalidated = s.global_captures > 0;
    s.captured.clear();
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  uintptr_t id = NewObjectLocked(s);
  std::vector<uintptr_t>& nodes = s.graphs[id];
  for (const GraphNode& n : s.captured) {
    uintptr_t node = NewObjectLocked(s);
    s.nodes[node] = n;
    nodes.push_back(node);
  }
  s.captured.clear();
  *graph = reinterpret_cast<CUgraph>(id);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (graph == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uintptr_t id = NewObjectLocked(s);
  s.graphs[id];
  *graph = reinterpret_cast<CUgraph>(id);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.graphs.erase(reinterpret_cast<uintptr_t>(graph)) == 1 ? CUDA_SUCCESS
                                                                 : CUDA_ERROR_INVALID_VALUE;
}
FAKE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                            size_t, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (p == nullptr || p->poolProps.location.id < 0 || p->poolProps.location.id >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphNode n{CU_GRAPH_NODE_TYPE_MEM_ALLOC};
  n.bytes = p->bytesize;
  n.device = p->poolProps.location.id;
  n.location_type = p->poolProps.location.type;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    n.dptr = NextAddressLocked(s, Pages(n.bytes));
  }
  CUresult rc = AddNode(node, graph, n);
  if (rc == CUDA_SUCCESS) {
    p->dptr = n.dptr;
  }
  return rc;
}
FAKE_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                           size_t, CUdeviceptr dptr) {
  GraphNode n{kFreeNode};
  n.dptr = dptr;
  return AddNode(node, graph, n);
}
FAKE_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                              size_t, CUgraph child) {
  GraphNode n{CU_GRAPH_NODE_TYPE_GRAPH};
  n.child = reinterpret_cast<uintptr_t>(child);
  return AddNode(node, graph, n);
}
FAKE_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                         size_t) {
  return AddNode(node, graph, GraphNode{kEmptyNode});
}
FAKE_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.graphs.find(reinterpret_cast<uintptr_t>(graph));
  if (count == nullptr || it == s.graphs.end() || s.failing.count("cuGraphGetNodes") != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (nodes != nullptr) {
    for (size_t i = 0; i < *count; ++i) {
      nodes[i] = i < it->second.size() ? reinterpret_cast<CUgraphNode>(it->second[i]) : nullptr;
    }
  }
  *count = it->second.size();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, int* type) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.nodes.find(reinterpret_cast<uintptr_t>(node));
  if (type == nullptr || it == s.nodes.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *type = it->second.type;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.nodes.find(reinterpret_cast<uintptr_t>(node));
  if (p == nullptr || it == s.nodes.end() || it->second.type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memset(p, 0, sizeof(*p));
  p->poolProps.location.type = it->second.location_type;
  p->poolProps.location.id = it->second.device;
  p->bytesize = it->second.bytes;
  p->dptr = it->second.dptr;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* graph) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.nodes.find(reinterpret_cast<uintptr_t>(node));
  if (graph == nullptr || it == s.nodes.end() || it->second.type != CU_GRAPH_NODE_TYPE_GRAPH) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *graph = reinterpret_cast<CUgraph>(it->second.child);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* e, CUgraph g, CUgraphNode*, char*, size_t) {
  return Instantiate(e, g);
}
FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g,
                                                 unsigned long long) {  // NOLINT
  return Instantiate(e, g);
}
FAKE_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* e, CUgraph g,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return InstantiateWithParams(e, g, p);
}
FAKE_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* e, CUgraph g,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return InstantiateWithParams(e, g, p);
}
FAKE_EXPORT CUresult cuGraphUpload(CUgraphExec e, CUstream) { return Upload(e); }
FAKE_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream) { return Upload(e); }
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream st) { return LaunchGraph(e, st, false); }
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream st) {
  return LaunchGraph(e, st, true);
}
FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.execs.erase(reinterpret_cast<uintptr_t>(e)) == 1 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
}
FAKE_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice d) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (d < 0 || d >= kDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t idle = s.graph_reserved[d] - s.graph_used[d];
  s.graph_reserved[d] -= idle;
  s.used[d] -= idle;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice d, int attr, void* value) {
  State& s = S();
  MapHook hook;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::swap(hook.fn, s.on_graph_attr);
    std::swap(hook.ctx, s.on_graph_attr_ctx);
  }
  if (hook.fn != nullptr) {
    hook.fn(hook.ctx);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  if (d < 0 || d >= kDevices || value == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *out = s.graph_used[d];
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *out = s.graph_reserved[d];
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Runs fn(ctx) once, inside the next upload or launch of an instantiated
// graph: before it maps the graph's memory (after_map = 0) or after, before
// the call returns (1). Deterministically replays another thread's graph
// call, trim or memory query overlapping this one.
FAKE_EXPORT void fakecuda_OnNextGraphMap(int after_map, void (*fn)(void*), void* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.on_graph_map = fn;
  s.on_graph_map_ctx = ctx;
  s.on_graph_map_when = after_map != 0 ? 1 : 0;
}

// Runs fn(ctx) once, inside the next cuDeviceGetGraphMemAttribute, before
// it answers: the shim reads the graph pool there while it holds room for
// a graph's memory, so this observes what a launch has done by its memory
// hold.
FAKE_EXPORT void fakecuda_OnNextGraphMemAttribute(void (*fn)(void*), void* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.on_graph_attr = fn;
  s.on_graph_attr_ctx = ctx;
}

FAKE_EXPORT uint64_t fakecuda_GraphReservedBytes(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return device >= 0 && device < kDevices ? s.graph_reserved[device] : 0;
}
