#include "cuda/throttle.h"

namespace accelpool::cuda {
namespace {

int KindIndex(int kind) { return kind < 0 || kind >= kLaunchKinds ? 0 : kind; }

}  // namespace

TokenBucketParams TokenBucketParams::ForPercent(int percent) {
  if (percent < 1) {
    percent = 1;
  }
  if (percent > 100) {
    percent = 100;
  }
  TokenBucketParams p;
  p.share = percent / 100.0;
  p.capacity_ns = static_cast<int64_t>(p.share * static_cast<double>(kBurstWindowNs));
  return p;
}

void Refill(TokenBucketState& state, const TokenBucketParams& params, int64_t now_ns) {
  if (!state.initialized) {
    state.initialized = true;
    state.tokens_ns = params.capacity_ns;
    for (int64_t& e : state.estimate_ns) {
      e = params.capacity_ns > kMinEstimateNs ? params.capacity_ns : kMinEstimateNs;
    }
    state.last_refill_ns = now_ns;
    return;
  }
  int64_t dt = now_ns - state.last_refill_ns;
  if (dt <= 0) {
    return;
  }
  state.last_refill_ns = now_ns;
  // Cap dt so that the product cannot overflow; a full bucket needs at most
  // capacity / share ns anyway.
  double room = static_cast<double>(params.capacity_ns - state.tokens_ns);
  double add = params.share * static_cast<double>(dt);
  state.tokens_ns = add >= room ? params.capacity_ns : state.tokens_ns + static_cast<int64_t>(add);
}

int64_t WaitNs(const TokenBucketState& state, const TokenBucketParams& params) {
  if (state.tokens_ns >= 0) {
    return 0;
  }
  double wait = static_cast<double>(-state.tokens_ns) / params.share;
  return static_cast<int64_t>(wait) + 1;
}

int64_t Admit(TokenBucketState& state, const TokenBucketParams& params, int64_t now_ns, int kind,
              int64_t* charged_ns) {
  Refill(state, params, now_ns);
  if (state.tokens_ns < 0) {
    *charged_ns = 0;
    return WaitNs(state, params);
  }
  int64_t estimate = state.estimate_ns[KindIndex(kind)];
  state.tokens_ns -= estimate;
  *charged_ns = estimate;
  return 0;
}

void Settle(TokenBucketState& state, const TokenBucketParams& params, int kind,
            int64_t charged_ns, int64_t measured_ns) {
  if (measured_ns < 0) {
    return;
  }
  state.tokens_ns += charged_ns - measured_ns;
  if (state.tokens_ns > params.capacity_ns) {
    state.tokens_ns = params.capacity_ns;
  }
  int64_t& estimate = state.estimate_ns[KindIndex(kind)];
  if (measured_ns >= estimate) {
    estimate = measured_ns;
  } else {
    estimate += (measured_ns - estimate) / 4;
  }
  if (estimate < kMinEstimateNs) {
    estimate = kMinEstimateNs;
  }
}

void Refund(TokenBucketState& state, const TokenBucketParams& params, int64_t charged_ns) {
  state.tokens_ns += charged_ns;
  if (state.tokens_ns > params.capacity_ns) {
    state.tokens_ns = params.capacity_ns;
  }
}

}  // namespace accelpool::cuda
