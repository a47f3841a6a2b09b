// Launch hooks and the runtime half of the compute controller.
//
// With a compute share below 100%, every launch path (cuLaunchKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch and their _ptsz
// variants) first asks the device's shared token bucket for admission
// (sleeping while the balance is negative), then brackets the launch with a
// pair of timing events on the launch stream. Completed pairs are harvested
// on later launches: their elapsed time is the measured device busy time and
// settles the estimate charged at admission (throttle.h has the arithmetic).
// Launches into a capturing stream are not executed, so they pass through;
// the graph launch that runs them is charged instead.
//
// With the share off (0 or 100%), the hooks forward after one load and one
// branch. Thread-safety: event pool and pending ring under g_launch.mu.
#include <time.h>

#include "cuda/log.h"
#include "cuda/shim.h"

namespace accelpool::cuda {
namespace {

constexpr int kKernelKind = 0;
constexpr int kGraphKind = 1;
constexpr int kMaxPairs = 256;
constexpr int64_t kMaxSleepNs = 2'000'000;
// Unsettled launches one process may have in flight. Bounds how much work an
// estimate that is too low (kernels just got longer) can queue.
constexpr int kMaxInFlight = 64;
constexpr int64_t kInFlightPollNs = 50'000;

struct EventPair {
  CUcontext ctx;
  CUevent start;
  CUevent end;
};

struct Pending {
  EventPair events;
  int device;
  int kind;
  int64_t charged;
};

struct LaunchState {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  EventPair free_pairs[kMaxPairs] = {};
  int free_count = 0;
  int created = 0;
  Pending ring[kMaxPairs] = {};
  int head = 0;
  int count = 0;
};

constinit LaunchState g_launch;

void SettleShared(int device, int kind, int64_t charged, int64_t measured) {
  ShimState& s = State();
  if (TokenBucketState* st = s.region->LockBucket(device)) {
    Settle(*st, s.bucket, kind, charged, measured);
    s.region->UnlockBucket(device);
  }
}

void RefundShared(int device, int64_t charged) {
  ShimState& s = State();
  if (TokenBucketState* st = s.region->LockBucket(device)) {
    Refund(*st, s.bucket, charged);
    s.region->UnlockBucket(device);
  }
}

// Settles every completed launch at the head of the ring.
void Harvest() {
  ShimState& s = State();
  pthread_mutex_lock(&g_launch.mu);
  while (g_launch.count > 0) {
    Pending& p = g_launch.ring[g_launch.head];
    CUresult q = s.event_query(p.events.end);
    if (q == CUDA_ERROR_NOT_READY) {
      break;
    }
    int64_t measured = -1;
    if (q == CUDA_SUCCESS) {
      float ms = 0;
      if (s.event_elapsed(&ms, p.events.start, p.events.end) == CUDA_SUCCESS && ms >= 0) {
        measured = static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      }
      if (g_launch.free_count < kMaxPairs) {
        g_launch.free_pairs[g_launch.free_count++] = p.events;
      }
    }
    SettleShared(p.device, p.kind, p.charged, measured);
    g_launch.head = (g_launch.head + 1) % kMaxPairs;
    --g_launch.count;
  }
  pthread_mutex_unlock(&g_launch.mu);
}

int InFlight() {
  pthread_mutex_lock(&g_launch.mu);
  int n = g_launch.count;
  pthread_mutex_unlock(&g_launch.mu);
  return n;
}

bool AcquirePair(EventPair* out) {
  ShimState& s = State();
  CUcontext ctx = nullptr;
  if (s.ctx_get_current == nullptr || s.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr ||
      s.event_create == nullptr || s.event_query == nullptr || s.event_elapsed == nullptr) {
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
  if (!ok && g_launch.created < kMaxPairs) {
    out->ctx = ctx;
    if (s.event_create(&out->start, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
      if (s.event_create(&out->end, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
        ++g_launch.created;
        ok = true;
      } else if (s.event_destroy != nullptr) {
        s.event_destroy(out->start);
      }
    }
  }
  pthread_mutex_unlock(&g_launch.mu);
  return ok;
}

void ReleasePair(const EventPair& pair) {
  pthread_mutex_lock(&g_launch.mu);
  if (g_launch.free_count < kMaxPairs) {
    g_launch.free_pairs[g_launch.free_count++] = pair;
  }
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

class Admission {
 public:
  // Blocks until the device's bucket admits this launch.
  Admission(CUstream stream, bool per_thread, int kind)
      : stream_(stream), per_thread_(per_thread), kind_(kind) {
    ShimState& s = State();
    if (!CurrentDevice(&device_) || device_ < 0 || device_ >= kMaxDevices) {
      device_ = -1;
      return;
    }
    auto is_capturing = s.stream_is_capturing[per_thread ? 1 : 0];
    int capture = 0;
    if (is_capturing != nullptr && is_capturing(stream, &capture) == CUDA_SUCCESS &&
        capture != 0) {
      device_ = -1;  // Captured, not executed.
      return;
    }
    Harvest();
    while (InFlight() >= kMaxInFlight) {
      struct timespec ts = {0, kInFlightPollNs};
      nanosleep(&ts, nullptr);
      Harvest();
    }
    for (;;) {
      TokenBucketState* st = s.region->LockBucket(device_);
      if (st == nullptr) {
        device_ = -1;
        return;
      }
      int64_t wait = Admit(*st, s.bucket, MonotonicNs(), kind_, &charged_);
      s.region->UnlockBucket(device_);
      if (wait == 0) {
        break;
      }
      struct timespec ts = {0, static_cast<long>(wait < kMaxSleepNs ? wait : kMaxSleepNs)};
      nanosleep(&ts, nullptr);
      Harvest();
    }
    measuring_ = AcquirePair(&events_);
    if (measuring_ && RecordOn(events_.start, stream_, per_thread_) != CUDA_SUCCESS) {
      ReleasePair(events_);
      measuring_ = false;
    }
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
      return;  // The estimate stands.
    }
    if (RecordOn(events_.end, stream_, per_thread_) != CUDA_SUCCESS) {
      ReleasePair(events_);
      return;
    }
    pthread_mutex_lock(&g_launch.mu);
    if (g_launch.count < kMaxPairs) {
      int tail = (g_launch.head + g_launch.count) % kMaxPairs;
      g_launch.ring[tail] = Pending{events_, device_, kind_, charged_};
      ++g_launch.count;
      measuring_ = false;
    }
    pthread_mutex_unlock(&g_launch.mu);
    if (measuring_) {
      ReleasePair(events_);
    }
  }

 private:
  CUstream stream_;
  bool per_thread_;
  int kind_;
  int device_ = -1;
  int64_t charged_ = 0;
  bool measuring_ = false;
  EventPair events_ = {};
};

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
  if (!s.compute_on) {
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
  }
  Admission admission(stream, s.per_thread_stream[kHookLaunchKernel][S], kKernelKind);
  CUresult rc = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
  admission.Done(rc);
  return rc;
}

template <int S>
CUresult HookLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                            void** extra) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchKernelExFn, kHookLaunchKernelEx);
  if (!s.compute_on || config == nullptr) {
    return real(config, f, params, extra);
  }
  Admission admission(config->hStream, s.per_thread_stream[kHookLaunchKernelEx][S],
                      kKernelKind);
  CUresult rc = real(config, f, params, extra);
  admission.Done(rc);
  return rc;
}

template <int S>
CUresult HookLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                     unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                     CUstream stream, void** params) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuLaunchCooperativeKernelFn, kHookLaunchCooperativeKernel);
  if (!s.compute_on) {
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
  }
  Admission admission(stream, s.per_thread_stream[kHookLaunchCooperativeKernel][S],
                      kKernelKind);
  CUresult rc = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
  admission.Done(rc);
  return rc;
}

template <int S>
CUresult HookGraphLaunch(CUgraphExec graph, CUstream stream) {
  ACCELPOOL_LAUNCH_PROLOGUE(cuGraphLaunchFn, kHookGraphLaunch);
  if (!s.compute_on) {
    return real(graph, stream);
  }
  Admission admission(stream, s.per_thread_stream[kHookGraphLaunch][S], kGraphKind);
  CUresult rc = real(graph, stream);
  admission.Done(rc);
  return rc;
}

}  // namespace

void* LaunchHook(HookId id, int slot) {
  static void* const kTable[][kSlots] = {
      ACCELPOOL_HOOK_SLOTS(HookLaunchKernel), ACCELPOOL_HOOK_SLOTS(HookLaunchKernelEx),
      ACCELPOOL_HOOK_SLOTS(HookLaunchCooperativeKernel), ACCELPOOL_HOOK_SLOTS(HookGraphLaunch)};
  if (id < kHookLaunchKernel || id > kHookGraphLaunch || slot < 0 || slot >= kSlots) {
    return nullptr;
  }
  return kTable[id - kHookLaunchKernel][slot];
}

void ResetLaunchStateAfterFork() {
  pthread_mutex_init(&g_launch.mu, nullptr);
  g_launch.free_count = 0;
  g_launch.created = 0;
  g_launch.head = 0;
  g_launch.count = 0;
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
