#include "kube/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <random>
#include <thread>

namespace accelpool::kube {
namespace {
constexpr double kMaxDelaySeconds = 3600;
}  // namespace

TokenBucket::TokenBucket(double qps, int burst, Clock clock)
    : qps_(std::isfinite(qps) && qps > 0 ? qps : 0),
      burst_(static_cast<double>(std::max(burst, 1))),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })),
      tokens_(static_cast<double>(std::max(burst, 1))),
      last_(clock_()) {}

void TokenBucket::RefillLocked(std::chrono::steady_clock::time_point now) {
  if (now > last_) {
    const double secs = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + secs * qps_);
    last_ = now;
  }
}

bool TokenBucket::TryAcquire() {
  if (qps_ <= 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  RefillLocked(clock_());
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  return false;
}

std::chrono::nanoseconds TokenBucket::Delay() {
  if (qps_ <= 0) return std::chrono::nanoseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  RefillLocked(clock_());
  if (tokens_ >= 1.0) return std::chrono::nanoseconds(0);
  // A rate near zero puts the next token centuries away, past what
  // nanoseconds hold: the wait is cut to an hour (Acquire asks again then).
  const double seconds = (1.0 - tokens_) / qps_;
  if (!(seconds < kMaxDelaySeconds)) {
    return std::chrono::seconds(static_cast<int64_t>(kMaxDelaySeconds));
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9) + 1);
}

bool TokenBucket::Acquire(std::stop_token stop) {
  std::mutex m;
  std::condition_variable_any cv;
  for (;;) {
    if (TryAcquire()) return true;
    const auto wait = std::max(Delay(), std::chrono::nanoseconds(100000));
    std::unique_lock<std::mutex> lock(m);
    if (cv.wait_for(lock, stop, wait, [] { return false; }), stop.stop_requested()) return false;
  }
}

std::chrono::milliseconds Backoff::Next() {
  auto out = next_;
  next_ = std::min(max_, next_ * 2);
  return Stretch(out);
}

std::chrono::milliseconds Backoff::Stretch(std::chrono::milliseconds d) const {
  if (jitter_ > 0 && d.count() > 0) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_real_distribution<double> part(0.0, jitter_);
    d +=
        std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(d.count()) * part(rng)));
  }
  return d;
}

}  // namespace accelpool::kube
