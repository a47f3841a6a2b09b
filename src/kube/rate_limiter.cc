#include "kube/rate_limiter.h"

#include <algorithm>
#include <condition_variable>
#include <random>
#include <thread>

namespace accelpool::kube {

TokenBucket::TokenBucket(double qps, int burst, Clock clock)
    : qps_(qps),
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
  return std::chrono::nanoseconds(static_cast<int64_t>((1.0 - tokens_) / qps_ * 1e9) + 1);
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

namespace {

double Uniform01(std::minstd_rand& rng) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

std::minstd_rand SeededRng() {
  std::random_device seed;
  return std::minstd_rand(seed());
}

}  // namespace

Backoff::Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, double jitter)
    : initial_(initial), max_(max), next_(initial), jitter_(jitter), rng_(SeededRng()) {}

std::chrono::milliseconds Backoff::Next() {
  const auto out = next_;
  next_ = std::min(max_, next_ * 2);
  if (jitter_ <= 0) return out;
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(out.count()) * (1.0 + jitter_ * Uniform01(rng_))));
}

std::chrono::milliseconds Jittered(std::chrono::milliseconds d, double jitter) {
  if (jitter <= 0 || d.count() <= 0) return d;
  thread_local std::minstd_rand rng = SeededRng();
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(d.count()) * (1.0 + jitter * Uniform01(rng))));
}

}  // namespace accelpool::kube
