// TokenBucket: the arithmetic of the compute controller, as pure functions.
//
// The bucket holds device time in nanoseconds. It refills at `share` device-ns
// per wall-ns up to `capacity_ns` (share x burst window). A launch is admitted
// while the balance is non-negative and is debited an *estimate* of its device
// time at once; when the events around the launch complete, Settle() replaces
// the estimate with the measured busy time and updates the running estimate.
// When the balance is negative the caller waits WaitNs() before trying again.
//
// Consequence (the documented contract): the share is a hard ceiling, not an
// average. Over any window of W ns the device time admitted for one container
// on one device is at most share*W + capacity_ns + one launch's estimate error;
// an idle device lends nothing. Example: share 0.25, window 50 ms -> capacity
// 12.5 ms; in one second at most 250 ms + 12.5 ms of kernels run, so a 1 s
// measurement reads at most 26.25%.
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

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_THROTTLE_H_
