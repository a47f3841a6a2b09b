// A token bucket: `qps` tokens per second, at most `burst` stored.
//
// Thread-safety: all methods may be called from many threads.
#ifndef ACCELPOOL_KUBE_RATE_LIMITER_H_
#define ACCELPOOL_KUBE_RATE_LIMITER_H_

#include <chrono>
#include <functional>
#include <mutex>
#include <stop_token>

namespace accelpool::kube {

class TokenBucket {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // qps <= 0 (or not a finite number) disables limiting. burst < 1 is taken as 1. `clock` null:
  // steady_clock.
  TokenBucket(double qps, int burst, Clock clock = nullptr);

  // Takes a token if one is available now.
  bool TryAcquire();
  // How long until a token is available (zero when one is; at most an hour).
  // Does not take it.
  std::chrono::nanoseconds Delay();
  // Blocks until a token is taken; false when `stop` fired first.
  bool Acquire(std::stop_token stop = {});

 private:
  void RefillLocked(std::chrono::steady_clock::time_point now);

  const double qps_;
  const double burst_;
  const Clock clock_;
  std::mutex mu_;
  double tokens_;                               // guarded by mu_
  std::chrono::steady_clock::time_point last_;  // guarded by mu_
};

// Exponential backoff with a cap and jitter: Next() returns initial, 2x,
// 4x ... max, each stretched by a random part of up to `jitter` of itself
// (so up to max * (1 + jitter)), so that the informers of a DaemonSet's
// thousands of pods, cut off by one apiserver restart, do not all come back
// in the same instant. Reset() after a success. Not thread-safe (one per loop).
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, double jitter = 0.5)
      : initial_(initial), max_(max), next_(initial), jitter_(jitter) {}
  std::chrono::milliseconds Next();
  // `d` stretched by a random part of up to `jitter` of itself, as Next()
  // stretches its steps: for a wait that comes from elsewhere (the
  // apiserver's Retry-After), so that callers told the same wait at once do
  // not all come back in the same instant.
  std::chrono::milliseconds Stretch(std::chrono::milliseconds d) const;
  void Reset() { next_ = initial_; }

 private:
  std::chrono::milliseconds initial_, max_, next_;
  double jitter_;
};

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_RATE_LIMITER_H_
