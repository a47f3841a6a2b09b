// TokenBucket: the arithmetic of the compute controller, as pure functions.
//
// The bucket holds device time in nanoseconds. It refills at `share` device-ns
// per wall-ns up to `capacity_ns` (share x burst window). A launch is admitted
// while the balance is non-negative and is debited an *estimate* of its device
// time at once: its launch key's estimate (CostTable, below) or, for a key
// not measured yet, the running estimate of its kind (the prior). For a
// launch that is measured, Settle() later replaces the charge with the time
// to settle it with and updates the prior. When the balance is negative the
// caller waits WaitNs() before trying again.
//
// Consequence (the documented contract): the share is a hard ceiling, not an
// average, on *charged* device time. Over any window of W ns the device time
// charged to one container on one device is at most share*W + capacity_ns +
// one launch's charge; an idle device lends nothing. Example: share 0.25,
// window 50 ms -> capacity 12.5 ms; in one second at most 250 ms + 12.5 ms
// of kernels are charged, so a 1 s measurement reads at most 26.25% when the
// charges are right. True device time differs from charged time by the
// estimation error of CostTable (see there: contention, data-dependent run
// times, a kernel that just got longer).
//
// The state is a plain struct so that it can live in the shared region
// (all processes of a container share one bucket per device); the caller
// provides mutual exclusion. No clock is read here: `now_ns` is an argument.
//
// Thread-safety: none; functions are pure over the state passed in.
#ifndef ACCELPOOL_CUDA_THROTTLE_H_
#define ACCELPOOL_CUDA_THROTTLE_H_

#include <cstdint>

namespace accelpool::cuda {

// Burst window: capacity_ns = share * kBurstWindowNs.
inline constexpr int64_t kBurstWindowNs = 50'000'000;
// Floor of the running estimate: an unmeasured launch is never free.
inline constexpr int64_t kMinEstimateNs = 1'000;
// A refill whose clock reads this far before the last one restarts the
// bucket (the state outlived a reboot); closer, it is another process's
// refill that read the clock a moment later.
inline constexpr int64_t kClockBackNs = 1'000'000'000;
// Launch kinds keep separate estimates: a graph costs far more than a kernel.
inline constexpr int kLaunchKinds = 2;

struct TokenBucketParams {
  // Fraction of the device, (0, 1].
  double share = 1.0;
  int64_t capacity_ns = kBurstWindowNs;

  static TokenBucketParams ForPercent(int percent);
};

struct TokenBucketState {
  int64_t tokens_ns = 0;
  int64_t last_refill_ns = 0;
  // Until measured, a launch is priced at the whole burst (capacity_ns): an
  // unknown kernel may be long, and under-pricing lets the host queue far
  // more work than the share allows before the first measurement lands.
  int64_t estimate_ns[kLaunchKinds] = {0, 0};
  bool initialized = false;
};

// Adds share * (now - last) tokens, capped at capacity. The first call only
// starts the clock with a full bucket. A clock going backwards adds nothing.
void Refill(TokenBucketState& state, const TokenBucketParams& params, int64_t now_ns);

// Refills, then: if the balance is non-negative, debits the current estimate
// for `kind`, stores it in *charged_ns and returns 0 (launch now); otherwise
// returns the ns to wait until the balance is back at zero (> 0) and debits
// nothing.
int64_t Admit(TokenBucketState& state, const TokenBucketParams& params, int64_t now_ns,
              int kind, int64_t* charged_ns);

// Admit() for a launch with a price of its own: debits `cost_ns` when it is
// >= 0 (the launch key's estimate, see CostTable) and the running estimate
// for `kind` when it is < 0 (a key not measured yet).
int64_t AdmitCost(TokenBucketState& state, const TokenBucketParams& params, int64_t now_ns,
                  int kind, int64_t cost_ns, int64_t* charged_ns);

// The ns to wait for the balance to reach zero; 0 if it is non-negative.
int64_t WaitNs(const TokenBucketState& state, const TokenBucketParams& params);

// Replaces a launch's charged estimate with its measured device time
// (measured_ns < 0 means "not measured": the estimate stands). The running
// estimate for `kind` jumps up to a longer measurement at once (so a switch
// to longer kernels cannot queue a burst) and moves 1/4 of the way down
// towards a shorter one.
void Settle(TokenBucketState& state, const TokenBucketParams& params, int kind,
            int64_t charged_ns, int64_t measured_ns);

// Returns a charge whose launch never reached the device (the driver call
// failed): the balance gets the estimate back, the estimate is unchanged.
void Refund(TokenBucketState& state, const TokenBucketParams& params, int64_t charged_ns);

// ---------------------------------------------------------------------------
// CostTable: what one launch costs, learned per launch key, per process.
//
// Key: (CUfunction, gx*gy*gz, bx*by*bz) for kernels; the CUgraphExec for a
// graph. Every key keeps its last kCostWindow measurements (event pairs).
//
// Contention. Without MPS the driver time-slices contexts: an event pair
// around a launch can also span another context's slice, so a measurement is
// the kernel's time *plus* a non-negative inflation. The model therefore
// trusts the low end of a key's measurements:
//   - clamp(m) = max(1.5 m, m + 2 us), m = the window minimum (the slack
//     covers event resolution and the record-to-launch gap of short kernels);
//   - a measured launch is settled with min(measured, clamp(m));
//   - every launch is charged the key's estimate when admitted: the mean of
//     the shortest quarter of the window (4 of 16), each value first capped
//     at clamp(m). It ignores inflation of up to 3/4 of the measurements.
// A kernel that truly gets longer raises the window minimum once its window
// has turned over (kCostWindow measurements of the new length); until then
// it is charged at most clamp(old minimum). Limit: a kernel whose run time
// depends on its data at a fixed grid is charged about its shortest
// quarter, so its true device time can exceed the share by the ratio of its
// mean to that figure (a kernel that alternates 1 ms and 3 ms is charged
// ~1 ms; one uniform in [1, 2] ms about 1.15 ms for a mean of 1.5 ms).
//
// Sampling. Only some launches are measured: every launch of a key until
// kWarmupMeasurements of its measurements are back (so that launches priced
// by the prior are all settled, and a few inflated first measurements cannot
// set a sparse schedule), then one in `interval`. The interval doubles after
// each measurement within the clamp, up to kMaxSampleInterval[kind], and
// halves on each clamped measurement from the second in a row on (a kernel
// that got longer, or heavy contention). A caller may force a sample
// (Lookup's force_sample), e.g. to bound the work queued unmeasured.
//
// Table: kCostTableSize entries, open addressing with kCostProbe-slot probe
// windows and no allocation; a new key evicts the least recently used
// entry of its window. An evicted key starts over as a new key.
//
// Thread-safety: none; the caller serialises all calls.
// ---------------------------------------------------------------------------

inline constexpr int kCostWindow = 16;
inline constexpr int kCostTableSize = 512;  // A power of two.
inline constexpr int kCostProbe = 8;
inline constexpr int kWarmupMeasurements = kCostWindow / 2;
// Kernels: 1 in 32 once stable. Graphs: 1 in 4; they are few and long and
// their launch costs far more host time than two event records, but every
// measured launch under contention is settled at up to clamp(m), so even
// graphs are not measured every time.
inline constexpr uint32_t kMaxSampleInterval[kLaunchKinds] = {32, 4};
inline constexpr int64_t kClampSlackNs = 2'000;

struct LaunchKey {
  uint64_t fn = 0;     // CUfunction or CUgraphExec.
  uint64_t grid = 0;   // gx * gy * gz; 0 for graphs.
  uint32_t block = 0;  // bx * by * bz; 0 for graphs.
  int32_t kind = 0;    // Index into kMaxSampleInterval.

  bool operator==(const LaunchKey& o) const {
    return fn == o.fn && grid == o.grid && block == o.block && kind == o.kind;
  }
};

// The largest time a measurement is believed: max(1.5 m, m + kClampSlackNs).
int64_t InflationClamp(int64_t window_min_ns);

struct CostDecision {
  int slot = -1;       // For Record().
  uint32_t tag = 0;    // Identifies the entry's tenant (eviction check).
  bool sample = false; // Measure this launch with events.
  int64_t charge_ns = -1;  // The key's estimate; < 0: not measured yet.
};

class CostTable {
 public:
  constexpr CostTable() = default;

  // Finds or inserts `key`, marks it used and decides about this launch.
  CostDecision Lookup(const LaunchKey& key, bool force_sample);
  // Adds a measurement for a launch decided earlier and returns the time
  // to settle that launch with: min(measured, clamp(window minimum)). When
  // the entry was evicted meanwhile (or measured_ns < 0) it returns
  // measured_ns and changes nothing.
  int64_t Record(int slot, uint32_t tag, int64_t measured_ns);
  // Starts `key` afresh, as for a key never seen: a handle value ends (a
  // destroyed executable graph) and may come back for different work.
  // Measurements still in flight for it are not taken.
  void Forget(const LaunchKey& key);
  void Clear();

  // For tests: a key's estimate (-1: absent or not measured) and interval
  // (0: absent).
  int64_t EstimateOf(const LaunchKey& key) const;
  uint32_t IntervalOf(const LaunchKey& key) const;

 private:
  struct Entry {
    LaunchKey key;
    uint32_t tag = 0;  // 0: empty.
    uint64_t last_use = 0;
    int64_t window[kCostWindow] = {};
    int32_t count = 0;  // Valid measurements in window (<= kCostWindow).
    int32_t next = 0;   // Ring position of the next measurement.
    int64_t window_min = 0;
    int64_t estimate = 0;
    uint32_t interval = 1;
    uint32_t countdown = 0;  // Launches until the next sample is due.
    uint32_t clamped_run = 0;
  };

  int Find(const LaunchKey& key) const;

  Entry entries_[kCostTableSize] = {};
  uint64_t tick_ = 0;
  uint32_t next_tag_ = 0;
};

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_THROTTLE_H_
