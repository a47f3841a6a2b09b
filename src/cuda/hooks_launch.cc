// Launch hooks and the runtime half of the compute controller.
//
// With a compute share below 100%, every launch path (cuLaunchKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch and their _ptsz
// variants, and the deprecated cuLaunch, cuLaunchGrid and cuLaunchGridAsync)
// first asks the device's shared token bucket for admission at the
// price of its launch key, sleeping while the balance is negative. The key
// is (function, grid size, block size) for a kernel and the CUgraphExec for
// a graph; its price is learned per process by a CostTable (throttle.h), and
// a key not measured yet is priced by the bucket's per-kind prior. Only some
// launches are bracketed by a pair of timing events on their stream: every
// launch of a key until 8 of its measurements are back, then about 1 in 32
// (kernels) or 1 in 4 (graphs). Completed pairs are harvested on later
// launches; each settles its launch at min(measured, 1.5 x the key's window
// minimum) and trains the key. Launches into a capturing stream are not
// executed, so they pass through; the graph launch that runs them is charged.
//
// A launch runs in its stream's context (LaunchContext), which need not be
// the current one: its device's bucket is charged, and its timing events
// are made in that context.
//
// Cost of an unmeasured launch: cuCtxGetCurrent (the device is cached per
// thread against the current context; a stream of its own is looked up in
// a per-thread cache of its context, asked of cuStreamGetCtx on a miss and
// every kContextRecheckEvery uses), cuStreamIsCapturing, one process mutex
// section (the key table), one bucket lock and one clock read. A measured
// launch adds two cuEventRecord calls and a second mutex section.
// Harvesting runs only while measured launches are outstanding, on every 8th
// launch and while waiting.
//
// In-flight bound: at most kMaxInFlight launches per process past the newest
// measured launch known complete (the bound of the per-launch design, where
// every launch was measured). A launch is measured regardless of its key's
// schedule when kForceSampleEvery launches have passed without one, so that
// progress stays observable. Completion of a measured launch vouches for the
// launches before it on its own stream only; on other streams the bound is
// approximate. Harvest settles every completed measured launch, not only
// those ahead of the oldest one still running: a measured kernel may only
// finish after later launches of the same process (one thread driving two
// GPUs through an all-reduce, a spin-wait released by a later kernel,
// cuStreamWaitValue32), and the launches on other streams must not wait
// for it. Nor do those queued behind it on its own stream, forever: a
// launch waits for the bound at most kInFlightWaitNs, then goes ahead and
// raises the bound's base to its own sequence number, so that the next
// kMaxInFlight launches go too (without any completion, a stuck process
// gets kMaxInFlight launches per kInFlightWaitNs). The bucket still charges
// each of them.
//
// Task priority (priority_format.h), on the same paths and whether or not
// the share is on: a launch on CUDA ordinal d of a high-priority container
// adds one to launches[d] of the priority file; one of a low-priority
// container first waits while hold_until_ns[d] holds (HoldsAt), sleeping at
// most 10 ms at a time and re-reading the deadline after each sleep. Both
// take the launch's device from the same per-thread context cache as the
// controller, and skip launches into a capturing stream.
//
// With the share off (0 or 100%) and no task priority, the hooks forward
// after one load and one branch (launch_on). Task priority adds the device
// lookup (cuCtxGetCurrent; the device is cached per thread) and then, for
// high, cuStreamIsCapturing and one relaxed atomic add; for low, one relaxed
// load and a branch while no hold is set (the stream is asked only when a
// deadline holds the launch). Thread-safety: the key table, event pool and
// pending ring under g_launch.mu (taken before a bucket lock, never while
// holding one); counters atomic; the context cache is per thread; the
// priority file's fields are accessed with relaxed 8-byte atomics and no
// lock is held while a launch waits on them.
#include <time.h>

#include <atomic>
#include <optional>

#include "cuda/accounting.h"
#include "cuda/log.h"
#include "cuda/priority_file.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

constexpr int kKernelKind = 0;
constexpr int kGraphKind = 1;
constexpr int kMaxPairs = 256;
constexpr int64_t kMaxSleepNs = 2'000'000;
// Unsettled launches one process may have in flight. Bounds how much work an
// estimate that is too low (kernels just got longer) can queue.
constexpr uint64_t kMaxInFlight = 64;
constexpr uint64_t kForceSampleEvery = kMaxInFlight / 2;
constexpr uint64_t kHarvestEvery = 8;
constexpr int kHarvestBatch = 64;
constexpr int64_t kInFlightPollNs = 50'000;
// The longest one launch waits for the in-flight bound. Far longer than the
// device time of kMaxInFlight ordinary kernels, so that the bound holds in
// the normal case; short enough that a measured kernel waiting on a later
// launch delays that launch only this long.
constexpr int64_t kInFlightWaitNs = 200'000'000;
// A cached (context -> device) answer is re-read this often even when the
// context handle is unchanged: a destroyed context's handle may be reused by
// a new context on another device. The same holds for a cached (stream ->
// context) answer: a destroyed stream's handle may be reused by a new stream
// of another context.
constexpr uint32_t kContextRecheckEvery = 256;
// Streams whose context each thread keeps (a compute and a communication
// stream, say, launched into alternately).
constexpr int kStreamCache = 4;

struct EventPair {
  CUcontext ctx;  // nullptr in the ring: the context is gone (ForgetContextEvents).
  int device;     // The context's device.
  CUevent start;
  CUevent end;
};

struct Pending {
  EventPair events;
  int device;
  int kind;
  int64_t charged;
  uint64_t seq;
  int slot;
  uint32_t tag;
};

struct LaunchState {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  CostTable costs;
  EventPair free_pairs[kMaxPairs] = {};
  int free_count = 0;
  int created = 0;
  Pending ring[kMaxPairs] = {};
  int head = 0;
  int count = 0;
  std::atomic<int> pending{0};            // == count, read without mu.
  std::atomic<uint64_t> seq{0};           // Launches admitted so far.
  std::atomic<uint64_t> completed{0};     // Seq of the newest measured launch seen complete.
  std::atomic<uint64_t> last_sample{0};   // Seq of the newest measured launch.
  // Bumped whenever a context ends (ForgetContextEvents): every thread's
  // cached context and stream answers go at its next launch, not only the
  // ending thread's. A new context may get the ended one's handle on
  // another device, and another thread launching in it would charge the old
  // device's bucket until its next recheck.
  std::atomic<uint32_t> context_epoch{0};
};

constinit LaunchState g_launch;

struct ThreadContext {
  CUcontext ctx;
  int device;
  uint32_t uses;
};
// initial-exec: read without __tls_get_addr (the shim is preloaded).
__attribute__((tls_model("initial-exec"))) thread_local ThreadContext t_context = {nullptr, -1,
                                                                                  0};

// A stream's context as cuStreamGetCtx gave it, and that context's device
// (-1 until a launch needs it: the context is not the current one).
struct ThreadStream {
  CUstream stream;  // nullptr: a free entry.
  CUcontext ctx;
  int device;
  uint32_t uses;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadStream t_streams[kStreamCache] = {};
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_stream_next = 0;
// The context_epoch the calling thread's caches were filled under.
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_context_epoch = 0;

// Drops the calling thread's cached context and stream answers.
void ForgetContext() {
  t_context.ctx = nullptr;
  for (ThreadStream& t : t_streams) {
    t.stream = nullptr;
  }
}

uint64_t Behind(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// Raises `v` to `to`, never lowers it (threads race to raise it).
void RaiseTo(std::atomic<uint64_t>& v, uint64_t to) {
  uint64_t seen = v.load(std::memory_order_relaxed);
  while (seen < to && !v.compare_exchange_weak(seen, to, std::memory_order_relaxed)) {
  }
}

// A stream handle of its own, not one of the default streams (0,
// CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), which are the current context's.
bool OwnStream(CUstream stream) {
  return stream != nullptr && stream != ACCELPOOL_CU_STREAM_LEGACY &&
         stream != ACCELPOOL_CU_STREAM_PER_THREAD;
}

// The cache entry of `stream` with its context, asking cuStreamGetCtx on a
// miss and every kContextRecheckEvery uses; nullptr when it cannot be asked.
// Without the cache every launch into a stream would add that driver call.
ThreadStream* StreamContext(CUstream stream) {
  ThreadStream* entry = nullptr;
  for (ThreadStream& t : t_streams) {
    if (t.stream == stream) {
      if (++t.uses < kContextRecheckEvery) {
        return &t;
      }
      entry = &t;
      break;
    }
  }
  if (entry == nullptr) {
    entry = &t_streams[t_stream_next++ % kStreamCache];
  }
  CUcontext c = nullptr;
  if (State().stream_get_ctx(stream, &c) != CUDA_SUCCESS || c == nullptr) {
    entry->stream = nullptr;
    return nullptr;
  }
  *entry = ThreadStream{stream, c, -1, 0};
  return entry;
}

// The device of `ctx`, the context of `stream`, which is not current:
// cuStreamGetDevice (CUDA 12.8 on), else cuCtxGetDevice with `ctx` pushed.
bool ForeignContextDevice(CUstream stream, CUcontext ctx, int* device) {
  ShimState& s = State();
  CUdevice d = 0;
  if (s.stream_get_device != nullptr && s.stream_get_device(stream, &d) == CUDA_SUCCESS) {
    *device = d;
    return true;
  }
  if (s.ctx_push_current == nullptr || s.ctx_pop_current == nullptr ||
      s.ctx_get_device == nullptr || s.ctx_push_current(ctx) != CUDA_SUCCESS) {
    return false;
  }
  const bool known = s.ctx_get_device(&d) == CUDA_SUCCESS;
  CUcontext popped = nullptr;
  s.ctx_pop_current(&popped);  // The caller's context (or none) is current again.
  if (known) {
    *device = d;
  }
  return known;
}

// The context a launch into `stream` runs in, and its device; *foreign when
// that context is not the calling thread's current one. A launch into a
// stream of its own runs in the stream's context: a context-less CUkernel
// (cuLibraryGetKernel) may be launched into a stream of another device than
// the current one, or with no context current at all. Such launches were
// charged to the current device's bucket, their timing events made in the
// current context failed to record on the stream, and with no context
// current they passed unthrottled. The default streams are the current
// context's. The device is cached per thread against the context handle:
// cuCtxSetCurrent, cuCtxPushCurrent/PopCurrent and cudaSetDevice all change
// the handle, and a primary context keeps its handle for the life of the
// process, through release and retain.
bool LaunchContext(CUstream stream, CUcontext* ctx, int* device, bool* foreign) {
  ShimState& s = State();
  *foreign = false;
  if (s.ctx_get_current == nullptr) {
    *ctx = nullptr;
    return CurrentDevice(device);  // No events without a context handle.
  }
  const uint32_t epoch = g_launch.context_epoch.load(std::memory_order_acquire);
  if (epoch != t_context_epoch) {
    ForgetContext();
    t_context_epoch = epoch;
  }
  CUcontext c = nullptr;
  if (s.ctx_get_current(&c) != CUDA_SUCCESS) {
    c = nullptr;
  }
  if (OwnStream(stream) && s.stream_get_ctx != nullptr) {
    ThreadStream* st = StreamContext(stream);
    if (st != nullptr && st->ctx != c) {
      if (st->device >= 0 || ForeignContextDevice(stream, st->ctx, &st->device)) {
        *ctx = st->ctx;
        *device = st->device;
        *foreign = true;
        return true;
      }
      st->stream = nullptr;  // Its device unknown: the current context's, as before.
    }
  }
  if (c == nullptr) {
    return false;
  }
  ThreadContext& t = t_context;
  if (c != t.ctx || ++t.uses >= kContextRecheckEvery) {
    CUdevice d = 0;
    if (s.ctx_get_device == nullptr || s.ctx_get_device(&d) != CUDA_SUCCESS) {
      t.ctx = nullptr;
      return false;
    }
    t = ThreadContext{c, d, 0};
  }
  *ctx = c;
  *device = t.device;
  return true;
}

// The shared buckets are the container's devices' (ContainerIndex); a
// launch's device is the process's CUDA ordinal.
void RefundShared(int device, int64_t charged) {
  ShimState& s = State();
  const int bucket = ContainerIndex(device);
  if (TokenBucketState* st = s.region->LockBucket(bucket)) {
    Refund(*st, s.bucket, charged);
    s.region->UnlockBucket(bucket);
  }
}

// REQUIRES: g_launch.mu held.
void FreePairLocked(const EventPair& pair) {
  if (g_launch.free_count < kMaxPairs) {
    g_launch.free_pairs[g_launch.free_count++] = pair;
  }
}

// A pair whose query or record failed (`why`), never used again. Where the
// answer says its context or events are gone (destroyed through a path the
// shim does not see, such as a green context's), none of that context's
// events is called again, nor destroyed: those handles are not the driver's
// any more. Its free pairs go the same way, and a context that reuses the
// handle makes its own. Any other failure (a sticky error of a context that
// still exists) destroys the pair, as nothing else would.
// REQUIRES: g_launch.mu held.
bool SaysGone(CUresult rc) {
  return rc == CUDA_ERROR_INVALID_CONTEXT || rc == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
         rc == CUDA_ERROR_INVALID_HANDLE;
}

void RetirePairLocked(const EventPair& pair, CUresult why) {
  --g_launch.created;
  if (!SaysGone(why)) {
    ShimState& s = State();
    if (s.event_destroy != nullptr) {
      s.event_destroy(pair.start);
      s.event_destroy(pair.end);
    }
    return;
  }
  for (int i = g_launch.free_count - 1; i >= 0; --i) {
    if (g_launch.free_pairs[i].ctx == pair.ctx) {
      g_launch.free_pairs[i] = g_launch.free_pairs[--g_launch.free_count];
      --g_launch.created;
    }
  }
}

struct Settlement {
  int device;
  int kind;
  int64_t charged;
  int64_t settled;
};

// Puts the calling thread in relaxed stream-capture mode for its lifetime.
// While any thread captures in global mode (torch.cuda.graph's default), an
// event query from a thread in global mode fails and invalidates that
// capture; relaxed mode allows it for events never recorded in a capture,
// which the shim's measurement events never are (launches into a capturing
// stream are not measured).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    auto exchange = State().exchange_capture_mode;
    mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
    swapped_ = exchange != nullptr && exchange(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (swapped_) {
      State().exchange_capture_mode(&mode_);  // Back to the thread's own mode.
    }
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int mode_;
  bool swapped_;
};

// Settles up to kHarvestBatch completed measured launches, wherever they
// are in the ring (a launch still running does not hold up those behind
// it); the rest keep their order. The key table under g_launch.mu, then the
// buckets, one lock per run of a device.
void Harvest() {
  ShimState& s = State();
  Settlement done[kHarvestBatch];
  int n = 0;
  RelaxedCaptureMode relaxed;  // The queries below must not break a capture.
  pthread_mutex_lock(&g_launch.mu);
  const int count = g_launch.count;
  int kept = 0;  // Entries kept so far, moved up to ring[head, head + kept).
  for (int i = 0; i < count; ++i) {
    Pending& p = g_launch.ring[(g_launch.head + i) % kMaxPairs];
    // The events of a destroyed context are gone with it: not one call on them.
    CUresult q = n == kHarvestBatch        ? CUDA_ERROR_NOT_READY
                 : p.events.ctx != nullptr ? s.event_query(p.events.end)
                                           : CUDA_ERROR_INVALID_CONTEXT;
    if (q == CUDA_ERROR_NOT_READY) {
      if (kept != i) {
        g_launch.ring[(g_launch.head + kept) % kMaxPairs] = p;
      }
      ++kept;
      continue;
    }
    int64_t measured = -1;
    if (p.events.ctx == nullptr) {
      --g_launch.created;
    } else if (q == CUDA_SUCCESS) {
      float ms = 0;
      if (s.event_elapsed(&ms, p.events.start, p.events.end) == CUDA_SUCCESS && ms >= 0) {
        measured = static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      }
      FreePairLocked(p.events);
    } else {
      RetirePairLocked(p.events, q);  // Its work is gone with its context.
    }
    RaiseTo(g_launch.completed, p.seq);
    done[n++] = {p.device, p.kind, p.charged, g_launch.costs.Record(p.slot, p.tag, measured)};
  }
  g_launch.count = kept;
  g_launch.pending.store(g_launch.count, std::memory_order_relaxed);
  pthread_mutex_unlock(&g_launch.mu);
  int locked = -1;
  TokenBucketState* st = nullptr;
  for (int i = 0; i < n; ++i) {
    if (done[i].settled < 0) {
      continue;  // Not measured: the charge stands.
    }
    if (ContainerIndex(done[i].device) != locked) {
      if (st != nullptr) {
        s.region->UnlockBucket(locked);
      }
      locked = ContainerIndex(done[i].device);
      st = s.region->LockBucket(locked);
    }
    if (st != nullptr) {
      Settle(*st, s.bucket, done[i].kind, done[i].charged, done[i].settled);
    }
  }
  if (st != nullptr) {
    s.region->UnlockBucket(locked);
  }
}

void HarvestIfPending() {
  if (g_launch.pending.load(std::memory_order_relaxed) > 0) {
    Harvest();
  }
}

// A pair of `ctx`'s events. A new pair is made in `ctx` (pushed around the
// creation when it is not the current context, `foreign`): an event records
// only on a stream of its own context.
bool AcquirePair(CUcontext ctx, int device, bool foreign, EventPair* out) {
  ShimState& s = State();
  if (ctx == nullptr || s.event_create == nullptr || s.event_query == nullptr ||
      s.event_elapsed == nullptr) {
    return false;
  }
  bool ok = false;
  pthread_mutex_lock(&g_launch.mu);
  for (int i = g_launch.free_count - 1; i >= 0; --i) {
    if (g_launch.free_pairs[i].ctx == ctx) {
      *out = g_launch.free_pairs[i];
      g_launch.free_pairs[i] = g_launch.free_pairs[--g_launch.free_count];
      ok = true;
      break;
    }
  }
  // Every pair made and none of this context's free: a free pair of another
  // context makes room (a context that once had many launches in flight
  // keeps that many free pairs, and a few such contexts would leave none for
  // a later one, whose launches would then never be measured).
  // A pair whose context ended unseen answers so, and is dropped without a
  // destroy (RetirePairLocked).
  if (!ok && g_launch.created >= kMaxPairs && g_launch.free_count > 0 &&
      s.event_destroy != nullptr) {
    const EventPair other = g_launch.free_pairs[--g_launch.free_count];
    const CUresult q = s.event_query(other.end);
    RetirePairLocked(other, q == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : q);
  }
  const bool pushed = !ok && g_launch.created < kMaxPairs && foreign &&
                      s.ctx_push_current != nullptr && s.ctx_pop_current != nullptr &&
                      s.ctx_push_current(ctx) == CUDA_SUCCESS;
  if (!ok && g_launch.created < kMaxPairs && (pushed || !foreign)) {
    out->ctx = ctx;
    out->device = device;
    if (s.event_create(&out->start, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
      if (s.event_create(&out->end, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
        ++g_launch.created;
        ok = true;
      } else if (s.event_destroy != nullptr) {
        s.event_destroy(out->start);
      }
    }
  }
  if (pushed) {
    CUcontext popped = nullptr;
    s.ctx_pop_current(&popped);
  }
  pthread_mutex_unlock(&g_launch.mu);
  return ok;
}

void ReleasePair(const EventPair& pair) {
  pthread_mutex_lock(&g_launch.mu);
  FreePairLocked(pair);
  pthread_mutex_unlock(&g_launch.mu);
}

// A record that failed: its answer may be about the stream (one destroyed, or
// of another context), not the pair, so the pair's own event says whether
// its context is gone.
void RetireRecordedPair(const EventPair& pair, CUresult why) {
  ShimState& s = State();
  if (SaysGone(why) && s.event_query != nullptr) {
    const CUresult q = s.event_query(pair.end);
    if (!SaysGone(q)) {
      why = CUDA_SUCCESS;  // The events are alive: destroyed as before.
    }
  }
  pthread_mutex_lock(&g_launch.mu);
  RetirePairLocked(pair, why);
  pthread_mutex_unlock(&g_launch.mu);
}

CUresult RecordOn(CUevent event, CUstream stream, bool per_thread) {
  ShimState& s = State();
  if (per_thread && s.event_record[1] != nullptr) {
    return s.event_record[1](event, stream);
  }
  if (per_thread && stream == nullptr) {
    stream = ACCELPOOL_CU_STREAM_PER_THREAD;
  }
  return s.event_record[0] != nullptr ? s.event_record[0](event, stream) : CUDA_ERROR_NOT_FOUND;
}

void Sleep(int64_t ns) {
  struct timespec ts = {0, static_cast<long>(ns)};  // NOLINT: timespec's type.
  nanosleep(&ts, nullptr);
}

// Where a launch goes, resolved once for the priority step and admission.
struct LaunchSite {
  CUcontext ctx = nullptr;
  int device = -1;
  bool foreign = false;  // ctx is the stream's, not the current context.
  int capturing = -1;  // -1: not asked yet; else whether the stream captures.
};

bool Capturing(CUstream stream, bool per_thread, LaunchSite* site) {
  if (site->capturing < 0) {
    site->capturing = StreamCapturing(stream, per_thread) ? 1 : 0;
  }
  return site->capturing != 0;
}

constinit std::atomic<bool> g_logged_hold{false};  // The first hold was logged.

// A low-priority launch on `device`, held by `hold` at `now`: sleeps until
// the deadline, re-read after each step, no longer holds.
void WaitWhileHeld(PriorityLayout* p, int device, uint64_t hold, uint64_t now) {
  if (!g_logged_hold.exchange(true, std::memory_order_relaxed)) {
    Logf(LogLevel::kInfo,
         "a launch on device %d waits: a high-priority container on the same GPU is busy "
         "(task priority low; logged once per process)",
         device);
  }
  for (int64_t step = HoldStepNs(hold, now); step > 0; step = HoldStepNs(hold, now)) {
    Sleep(step);
    hold = __atomic_load_n(&p->hold_until_ns[device], __ATOMIC_RELAXED);
    now = static_cast<uint64_t>(MonotonicNs());
  }
}

// The priority step of a launch whose device is known. Returns false when
// the launch goes into a capturing stream: it runs nothing, so it is
// neither counted nor held, and passes through.
bool ApplyPriority(CUstream stream, bool per_thread, LaunchSite* site) {
  ShimState& s = State();
  PriorityLayout* p = s.priority;
  const int d = ContainerIndex(site->device);  // The file numbers the container's devices.
  if (d < 0 || d >= kMaxDevices) {
    return true;
  }
  if (s.config.priority == Priority::kHigh) {
    if (Capturing(stream, per_thread, site)) {
      return false;
    }
    __atomic_fetch_add(&p->launches[d], 1, __ATOMIC_RELAXED);
    return true;
  }
  uint64_t hold = __atomic_load_n(&p->hold_until_ns[d], __ATOMIC_RELAXED);
  if (hold == 0) {
    return true;  // The common case: no high-priority container is busy.
  }
  const uint64_t now = static_cast<uint64_t>(MonotonicNs());
  if (!HoldsAt(hold, now)) {
    return true;
  }
  if (Capturing(stream, per_thread, site)) {
    return false;
  }
  WaitWhileHeld(p, d, hold, now);
  return true;
}

// Resolves the launch's context and device (the stream's; LaunchContext)
// and applies task priority. Returns false when the launch passes through
// untouched from here on: no context (a default stream with none current,
// which the driver refuses), a device past kMaxDevices, or a capturing
// stream seen by the priority step. REQUIRES: State().launch_on.
bool GateLaunch(CUstream stream, bool per_thread, LaunchSite* site) {
  if (!LaunchContext(stream, &site->ctx, &site->device, &site->foreign) || site->device < 0 ||
      site->device >= kMaxDevices) {
    site->device = -1;
    return false;
  }
  if (State().priority != nullptr && !ApplyPriority(stream, per_thread, site)) {
    site->device = -1;
    return false;
  }
  return true;
}

// Waits while `seq` is more than kMaxInFlight launches past the newest
// measured launch known complete, at most kInFlightWaitNs (see the top).
void WaitInFlight(uint64_t seq) {
  int64_t give_up = -1;
  while (g_launch.pending.load(std::memory_order_relaxed) > 0 &&
         Behind(seq, g_launch.completed.load(std::memory_order_relaxed)) > kMaxInFlight) {
    const int64_t now = MonotonicNs();
    if (give_up < 0) {
      give_up = now + kInFlightWaitNs;
    } else if (now >= give_up) {
      RaiseTo(g_launch.completed, seq);  // The measured launches in flight are stuck.
      return;
    }
    Sleep(kInFlightPollNs);
    Harvest();
  }
}

class Admission {
 public:
  // Blocks until the device's bucket admits this launch. `site` is what
  // GateLaunch resolved (it returned true). Records nothing on the stream:
  // Start() does, right before the launch.
  Admission(LaunchSite* site, CUstream stream, bool per_thread, const LaunchKey& key)
      : stream_(stream),
        per_thread_(per_thread),
        kind_(key.kind),
        device_(site->device),
        ctx_(site->ctx),
        foreign_(site->foreign) {
    ShimState& s = State();
    if (Capturing(stream, per_thread, site)) {
      device_ = -1;  // Captured, not executed.
      return;
    }
    const uint64_t seq = g_launch.seq.fetch_add(1, std::memory_order_relaxed) + 1;
    if (seq % kHarvestEvery == 0) {
      HarvestIfPending();
    }
    WaitInFlight(seq);
    bool force =
        Behind(seq, g_launch.last_sample.load(std::memory_order_relaxed)) >= kForceSampleEvery;
    pthread_mutex_lock(&g_launch.mu);
    CostDecision d = g_launch.costs.Lookup(key, force);
    pthread_mutex_unlock(&g_launch.mu);
    const int bucket = ContainerIndex(device_);
    for (;;) {
      TokenBucketState* st = s.region->LockBucket(bucket);
      if (st == nullptr) {
        device_ = -1;
        return;
      }
      int64_t wait = AdmitCost(*st, s.bucket, MonotonicNs(), kind_, d.charge_ns, &charged_);
      s.region->UnlockBucket(bucket);
      if (wait == 0) {
        break;
      }
      Sleep(wait < kMaxSleepNs ? wait : kMaxSleepNs);
      HarvestIfPending();
    }
    sample_ = d.sample;
    pending_ = Pending{{}, device_, kind_, 0, seq, d.slot, d.tag};
  }

  // Called right before the launch, once nothing can hold or refuse it any
  // more: a launch to be measured records the start event of its pair on
  // its stream here, so that the pair spans the launch alone (a step
  // between the record and the launch, such as a graph launch's memory
  // hold, would be measured as device time), and a launch refused before
  // it records nothing.
  void Start() {
    if (device_ < 0 || !sample_ || !AcquirePair(ctx_, device_, foreign_, &events_)) {
      return;
    }
    if (CUresult recorded = RecordOn(events_.start, stream_, per_thread_);
        recorded != CUDA_SUCCESS) {
      RetireRecordedPair(events_, recorded);
      ForgetContext();
      return;
    }
    measuring_ = true;
    pending_.events = events_;
    g_launch.last_sample.store(pending_.seq, std::memory_order_relaxed);
  }

  // Settles the admission with the launch result.
  void Done(CUresult rc) {
    if (device_ < 0) {
      return;
    }
    if (rc != CUDA_SUCCESS) {
      RefundShared(device_, charged_);
      if (measuring_) {
        ReleasePair(events_);
      }
      return;
    }
    if (!measuring_) {
      return;  // The key's estimate stands.
    }
    if (CUresult recorded = RecordOn(events_.end, stream_, per_thread_); recorded != CUDA_SUCCESS) {
      RetireRecordedPair(events_, recorded);
      ForgetContext();
      return;
    }
    pending_.charged = charged_;
    pthread_mutex_lock(&g_launch.mu);
    if (g_launch.count < kMaxPairs) {
      int tail = (g_launch.head + g_launch.count) % kMaxPairs;
      g_launch.ring[tail] = pending_;
      ++g_launch.count;
      g_launch.pending.store(g_launch.count, std::memory_order_relaxed);
      measuring_ = false;
    } else {
      FreePairLocked(events_);
    }
    pthread_mutex_unlock(&g_launch.mu);
  }

 private:
  CUstream stream_;
  bool per_thread_;
  int kind_;
  int device_;
  CUcontext ctx_;  // The launch's context and whether it is not the current one.
  bool foreign_;
  int64_t charged_ = 0;
  bool sample_ = false;  // The key's schedule measures this launch (Start).
  bool measuring_ = false;
  EventPair events_ = {};
  Pending pending_ = {};
};

LaunchKey KernelKey(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz) {
  return LaunchKey{reinterpret_cast<uintptr_t>(f),
                   static_cast<uint64_t>(gx) * static_cast<uint64_t>(gy) * static_cast<uint64_t>(gz),
                   bx * by * bz, kKernelKind};
}

#define ACCELPOOL_LAUNCH_PROLOGUE(type, id) \
  EnsureCuda();                             \
  auto real = Real<type>(id, S);            \
  if (real == nullptr) {                    \
    return CUDA_ERROR_NOT_FOUND;            \
  }                                         \
  ShimState& s = State()

template <int S>
CUresult HookLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                          void** params, void** extra) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchKernelFn, kHookLaunchKernel);
  if (!s.launch_on) {
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
  }
  const bool per_thread = s.per_thread_stream[kHookLaunchKernel][S];
  LaunchSite site;
  if (!GateLaunch(stream, per_thread, &site) || !s.compute_on) {
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
  }
  Admission admission(&site, stream, per_thread, KernelKey(f, gx, gy, gz, bx, by, bz));
  admission.Start();
  CUresult rc = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
  admission.Done(rc);
  return rc;
}

template <int S>
CUresult HookLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                            void** extra) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchKernelExFn, kHookLaunchKernelEx);
  if (!s.launch_on || config == nullptr) {
    return real(config, f, params, extra);
  }
  const bool per_thread = s.per_thread_stream[kHookLaunchKernelEx][S];
  LaunchSite site;
  if (!GateLaunch(config->hStream, per_thread, &site) || !s.compute_on) {
    return real(config, f, params, extra);
  }
  Admission admission(&site, config->hStream, per_thread,
                      KernelKey(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                                config->blockDimX, config->blockDimY, config->blockDimZ));
  admission.Start();
  CUresult rc = real(config, f, params, extra);
  admission.Done(rc);
  return rc;
}

template <int S>
CUresult HookLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                     unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                     CUstream stream, void** params) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchCooperativeKernelFn, kHookLaunchCooperativeKernel);
  if (!s.launch_on) {
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
  }
  const bool per_thread = s.per_thread_stream[kHookLaunchCooperativeKernel][S];
  LaunchSite site;
  if (!GateLaunch(stream, per_thread, &site) || !s.compute_on) {
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
  }
  Admission admission(&site, stream, per_thread, KernelKey(f, gx, gy, gz, bx, by, bz));
  admission.Start();
  CUresult rc = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
  admission.Done(rc);
  return rc;
}

// The deprecated launches of a function set up beforehand. Its block shape
// (cuFuncSetBlockShape) is not seen by the shim, so their key has the grid
// only (block size 0): launches of one function with another block shape
// share its price, which their measurements keep right. cuLaunch runs one
// block; it and cuLaunchGrid go to the legacy default stream.
template <typename Call>
CUresult GateDeprecated(bool per_thread, CUfunction f, int gw, int gh, CUstream stream, Call call) {
  ShimState& s = State();
  if (!s.launch_on) {
    return call();
  }
  LaunchSite site;
  if (!GateLaunch(stream, per_thread, &site) || !s.compute_on) {
    return call();
  }
  Admission admission(
      &site, stream, per_thread,
      KernelKey(f, static_cast<unsigned>(gw), static_cast<unsigned>(gh), 1, 0, 1, 1));
  admission.Start();
  CUresult rc = call();
  admission.Done(rc);
  return rc;
}

template <int S>
CUresult HookLaunch(CUfunction f) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchFn, kHookLaunch);
  return GateDeprecated(s.per_thread_stream[kHookLaunch][S], f, 1, 1, nullptr,
                        [&] { return real(f); });
}

template <int S>
CUresult HookLaunchGrid(CUfunction f, int gw, int gh) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchGridFn, kHookLaunchGrid);
  return GateDeprecated(s.per_thread_stream[kHookLaunchGrid][S], f, gw, gh, nullptr,
                        [&] { return real(f, gw, gh); });
}

template <int S>
CUresult HookLaunchGridAsync(CUfunction f, int gw, int gh, CUstream stream) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchGridAsyncFn, kHookLaunchGridAsync);
  return GateDeprecated(s.per_thread_stream[kHookLaunchGridAsync][S], f, gw, gh, stream,
                        [&] { return real(f, gw, gh, stream); });
}

// A graph's first launch maps its memory nodes: with a memory cap the growth
// is held (accounting.h) and a launch that would pass the cap returns
// CUDA_ERROR_OUT_OF_MEMORY, having run nothing. The order: task priority,
// the compute share's admission, the memory hold, the start event of a
// measured launch (Admission::Start), the launch, its end event. A launch
// holds no memory while it waits (a hold during the wait counted memory
// nobody had mapped yet, and the container's other processes were refused
// near the cap meanwhile); a launch refused for memory gives its admission
// back and has recorded no event; and the hold's own host time is not
// measured as the graph's device time.
template <int S>
CUresult HookGraphLaunch(CUgraphExec graph, CUstream stream) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuGraphLaunchFn, kHookGraphLaunch);
  if (!s.launch_on && !s.mem_on) {
    return real(graph, stream);
  }
  const bool per_thread = s.per_thread_stream[kHookGraphLaunch][S];
  LaunchSite site;
  const bool admit = s.launch_on && GateLaunch(stream, per_thread, &site) && s.compute_on;
  std::optional<Admission> admission;
  if (admit) {
    admission.emplace(&site, stream, per_thread,
                      LaunchKey{reinterpret_cast<uintptr_t>(graph), 0, 0, kGraphKind});
  }
  GraphHold hold;
  if (s.mem_on && !HoldForGraphExec(graph, stream, per_thread, &hold)) {
    if (admission) {
      admission->Done(CUDA_ERROR_OUT_OF_MEMORY);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (admission) {
    admission->Start();
  }
  const CUresult rc = real(graph, stream);
  if (admission) {
    admission->Done(rc);
  }
  SettleGraphExec(graph, hold, rc);
  return rc;
}

}  // namespace

void* LaunchHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {ACCELPOOL_HOOK_SLOTS(HookLaunchKernel),
                                         ACCELPOOL_HOOK_SLOTS(HookLaunchKernelEx),
                                         ACCELPOOL_HOOK_SLOTS(HookLaunchCooperativeKernel),
                                         ACCELPOOL_HOOK_SLOTS(HookGraphLaunch),
                                         ACCELPOOL_HOOK_SLOTS(HookLaunch),
                                         ACCELPOOL_HOOK_SLOTS(HookLaunchGrid),
                                         ACCELPOOL_HOOK_SLOTS(HookLaunchGridAsync)};
  if (id < kHookLaunchKernel || id > kHookLaunchGridAsync || slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  return kTable[id - kHookLaunchKernel][slot];
}

void ForgetContextEvents(CUcontext ctx, int device) {
  pthread_mutex_lock(&g_launch.mu);
  for (int i = g_launch.free_count - 1; i >= 0; --i) {
    const EventPair& p = g_launch.free_pairs[i];
    if (ctx != nullptr ? p.ctx == ctx : p.device == device) {
      g_launch.free_pairs[i] = g_launch.free_pairs[--g_launch.free_count];
      --g_launch.created;  // Not destroyed: the driver already has.
    }
  }
  for (int i = 0; i < g_launch.count; ++i) {
    EventPair& p = g_launch.ring[(g_launch.head + i) % kMaxPairs].events;
    if (p.ctx != nullptr && (ctx != nullptr ? p.ctx == ctx : p.device == device)) {
      p.ctx = nullptr;  // Harvest settles it unmeasured, without a call.
    }
  }
  pthread_mutex_unlock(&g_launch.mu);
  g_launch.context_epoch.fetch_add(1, std::memory_order_acq_rel);
  ForgetContext();
}

void ForgetGraphCost(CUgraphExec exec) {
  pthread_mutex_lock(&g_launch.mu);
  g_launch.costs.Forget(LaunchKey{reinterpret_cast<uintptr_t>(exec), 0, 0, kGraphKind});
  pthread_mutex_unlock(&g_launch.mu);
}

void NoteContextCreated() { g_launch.context_epoch.fetch_add(1, std::memory_order_acq_rel); }

void ResetLaunchStateAfterFork() {
  pthread_mutex_init(&g_launch.mu, nullptr);
  g_launch.costs.Clear();
  g_launch.free_count = 0;
  g_launch.created = 0;
  g_launch.head = 0;
  g_launch.count = 0;
  g_launch.pending.store(0);
  g_launch.seq.store(0);
  g_launch.completed.store(0);
  g_launch.last_sample.store(0);
  ForgetContext();
}

}  // namespace accelpool::cuda

using namespace accelpool::cuda;  // NOLINT: exported C entry points below.

ACCELPOOL_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                         unsigned bx, unsigned by, unsigned bz, unsigned sm,
                                         CUstream st, void** p, void** e) {
  return HookLaunchKernel<0>(f, gx, gy, gz, bx, by, bz, sm, st, p, e);
}
ACCELPOOL_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                              unsigned bx, unsigned by, unsigned bz, unsigned sm,
                                              CUstream st, void** p, void** e) {
  return HookLaunchKernel<1>(f, gx, gy, gz, bx, by, bz, sm, st, p, e);
}
ACCELPOOL_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** p,
                                           void** e) {
  return HookLaunchKernelEx<0>(c, f, p, e);
}
ACCELPOOL_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** p,
                                                void** e) {
  return HookLaunchKernelEx<1>(c, f, p, e);
}
ACCELPOOL_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                                    unsigned gz, unsigned bx, unsigned by,
                                                    unsigned bz, unsigned sm, CUstream st,
                                                    void** p) {
  return HookLaunchCooperativeKernel<0>(f, gx, gy, gz, bx, by, bz, sm, st, p);
}
ACCELPOOL_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                         unsigned gz, unsigned bx, unsigned by,
                                                         unsigned bz, unsigned sm, CUstream st,
                                                         void** p) {
  return HookLaunchCooperativeKernel<1>(f, gx, gy, gz, bx, by, bz, sm, st, p);
}
ACCELPOOL_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream st) {
  return HookGraphLaunch<0>(g, st);
}
ACCELPOOL_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream st) {
  return HookGraphLaunch<1>(g, st);
}
ACCELPOOL_EXPORT CUresult cuLaunch(CUfunction f) { return HookLaunch<0>(f); }
ACCELPOOL_EXPORT CUresult cuLaunchGrid(CUfunction f, int gw, int gh) {
  return HookLaunchGrid<0>(f, gw, gh);
}
ACCELPOOL_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int gw, int gh, CUstream st) {
  return HookLaunchGridAsync<0>(f, gw, gh, st);
}
