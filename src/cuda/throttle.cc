#include "cuda/throttle.h"

#include <cstdint>

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
  if (dt < -kClockBackNs) {
    // The clock is far behind the bucket's last refill: the state outlived
    // a reboot (it lives in the container's state dir, which a pod keeps
    // across one, CLOCK_MONOTONIC does not). Waiting for the clock to catch
    // up would hold every launch for the previous uptime: start over, full.
    state.last_refill_ns = now_ns;
    state.tokens_ns = params.capacity_ns;
    return;
  }
  if (dt <= 0) {
    return;  // another process refilled at a later time a moment ago
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
  return AdmitCost(state, params, now_ns, kind, -1, charged_ns);
}

int64_t AdmitCost(TokenBucketState& state, const TokenBucketParams& params, int64_t now_ns,
                  int kind, int64_t cost_ns, int64_t* charged_ns) {
  Refill(state, params, now_ns);
  if (state.tokens_ns < 0) {
    *charged_ns = 0;
    return WaitNs(state, params);
  }
  int64_t charge = cost_ns >= 0 ? cost_ns : state.estimate_ns[KindIndex(kind)];
  state.tokens_ns -= charge;
  *charged_ns = charge;
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

// ---- CostTable.

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int HomeSlot(const LaunchKey& key) {
  uint64_t h = Mix(key.fn ^ Mix(key.grid ^ Mix((static_cast<uint64_t>(key.block) << 8) ^
                                              static_cast<uint64_t>(key.kind))));
  return static_cast<int>(h & (kCostTableSize - 1));
}

uint32_t MaxInterval(int kind) { return kMaxSampleInterval[KindIndex(kind)]; }

}  // namespace

int64_t InflationClamp(int64_t window_min_ns) {
  int64_t relative = window_min_ns + window_min_ns / 2;
  int64_t absolute = window_min_ns + kClampSlackNs;
  return relative > absolute ? relative : absolute;
}

int CostTable::Find(const LaunchKey& key) const {
  int home = HomeSlot(key);
  for (int i = 0; i < kCostProbe; ++i) {
    int j = (home + i) & (kCostTableSize - 1);
    const Entry& e = entries_[j];
    if (e.tag == 0) {
      return -1;  // Entries are replaced in place, never removed: the key is not further on.
    }
    if (e.key == key) {
      return j;
    }
  }
  return -1;
}

CostDecision CostTable::Lookup(const LaunchKey& key, bool force_sample) {
  int slot = Find(key);
  if (slot < 0) {
    // The first empty slot of the probe window, else its least recently used.
    int home = HomeSlot(key);
    slot = home;
    for (int i = 0; i < kCostProbe; ++i) {
      int j = (home + i) & (kCostTableSize - 1);
      if (entries_[j].tag == 0) {
        slot = j;
        break;
      }
      if (entries_[j].last_use < entries_[slot].last_use) {
        slot = j;
      }
    }
    if (++next_tag_ == 0) {
      next_tag_ = 1;
    }
    entries_[slot] = Entry();
    entries_[slot].key = key;
    entries_[slot].tag = next_tag_;
  }
  Entry& e = entries_[slot];
  e.last_use = ++tick_;
  bool due = e.countdown <= 1;
  if (!due) {
    --e.countdown;
  }
  CostDecision d;
  d.slot = slot;
  d.tag = e.tag;
  d.sample = force_sample || due || e.count < kWarmupMeasurements;
  if (d.sample) {
    e.countdown = e.interval;
  }
  d.charge_ns = e.count > 0 ? e.estimate : -1;
  return d;
}

int64_t CostTable::Record(int slot, uint32_t tag, int64_t measured_ns) {
  if (measured_ns < 0 || slot < 0 || slot >= kCostTableSize || tag == 0 ||
      entries_[slot].tag != tag) {
    return measured_ns;
  }
  Entry& e = entries_[slot];
  bool clamped = e.count > 0 && measured_ns > InflationClamp(e.window_min);
  e.window[e.next] = measured_ns;
  e.next = (e.next + 1) % kCostWindow;
  if (e.count < kCostWindow) {
    ++e.count;
  }
  // Ring positions [0, count) hold the measurements (count < kCostWindow
  // only before the first wrap, and the ring starts at 0).
  int64_t values[kCostWindow];
  e.window_min = e.window[0];
  for (int i = 0; i < e.count; ++i) {
    values[i] = e.window[i];
    if (values[i] < e.window_min) {
      e.window_min = values[i];
    }
  }
  const int64_t cap = InflationClamp(e.window_min);
  // Estimate: mean of the shortest quarter, each capped.
  for (int i = 1; i < e.count; ++i) {
    int64_t v = values[i];
    int j = i - 1;
    for (; j >= 0 && values[j] > v; --j) {
      values[j + 1] = values[j];
    }
    values[j + 1] = v;
  }
  int quarter = (e.count + 3) / 4;
  int64_t sum = 0;
  for (int i = 0; i < quarter; ++i) {
    sum += values[i] < cap ? values[i] : cap;
  }
  e.estimate = sum / quarter;
  if (e.count < kWarmupMeasurements) {
    // Warming up: every launch is measured; the interval starts at 1.
  } else if (clamped) {
    if (++e.clamped_run >= 2 && e.interval > 1) {
      e.interval /= 2;
    }
  } else {
    e.clamped_run = 0;
    uint32_t max = MaxInterval(e.key.kind);
    e.interval = e.interval * 2 < max ? e.interval * 2 : max;
  }
  if (e.countdown > e.interval) {
    e.countdown = e.interval;
  }
  return measured_ns < cap ? measured_ns : cap;
}

void CostTable::Forget(const LaunchKey& key) {
  const int slot = Find(key);
  if (slot < 0) {
    return;
  }
  // The entry keeps its place (and so the probe chain of the keys after it)
  // under a new tag, which the pending measurements do not carry.
  if (++next_tag_ == 0) {
    next_tag_ = 1;
  }
  entries_[slot] = Entry();
  entries_[slot].key = key;
  entries_[slot].tag = next_tag_;
}

void CostTable::Clear() {
  for (Entry& e : entries_) {
    e = Entry();
  }
  tick_ = 0;
}

int64_t CostTable::EstimateOf(const LaunchKey& key) const {
  int slot = Find(key);
  return slot < 0 || entries_[slot].count == 0 ? -1 : entries_[slot].estimate;
}

uint32_t CostTable::IntervalOf(const LaunchKey& key) const {
  int slot = Find(key);
  return slot < 0 ? 0 : entries_[slot].interval;
}

}  // namespace accelpool::cuda
