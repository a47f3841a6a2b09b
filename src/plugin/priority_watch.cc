#include "plugin/priority_watch.h"

#include <time.h>

#include <condition_variable>
#include <vector>

#include "cuda/config.h"
#include "plugin/allocator.h"
#include "plugin/plugin_metrics.h"
#include "plugin/priority_file.h"

namespace accelpool::plugin {
namespace {

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

PriorityWatch::PriorityWatch(PriorityWatchOptions options, const AssignmentStore* store,
                             const StateDirs* dirs, PluginMetrics* metrics, Logger log)
    : options_(options), store_(store), dirs_(dirs), metrics_(metrics), log_(std::move(log)) {}

void PriorityWatch::Release(const Seat& seat) {
  Status st = WriteHold(seat.state_dir, seat.ordinal, 0);
  if (!st.ok() && st.code() != StatusCode::kNotFound) {
    log_.Warn("cannot release a low-priority container's hold; it lapses on its own",
              {{"container", seat.who}, {"error", st.message()}});
  }
}

void PriorityWatch::Poll(std::chrono::steady_clock::time_point now, uint64_t mono_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  // The seats of every allocated fractional NVIDIA container, by device and
  // priority, as Enforce made their files.
  struct Seats {
    std::vector<Seat> high, low;
  };
  std::map<std::string, Seats> by_device;
  for (const PodAssignment& p : store_->All()) {
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (!HasShimState(p, c)) continue;
      StatusOr<std::string> dir = dirs_->PathFor(p.pod.uid, c.name);
      if (!dir.ok()) continue;
      const bool high = p.pod.high_priority.contains(c.name);
      for (size_t i = 0; i < c.devices.size() && i < static_cast<size_t>(cuda::kMaxDevices); ++i) {
        Seat s{p.pod.Key() + "/" + c.name, StateDirs::StateSubdir(*dir), static_cast<int>(i)};
        (high ? by_device[c.devices[i].id].high : by_device[c.devices[i].id].low)
            .push_back(std::move(s));
      }
    }
  }

  std::map<Seat, uint64_t> counts;
  std::set<Seat> held;
  for (const auto& [device, seats] : by_device) {
    if (seats.high.empty() || seats.low.empty()) {
      busy_until_.erase(device);  // one priority alone on the GPU: nobody to hold
      continue;
    }
    // Busy: a high-priority counter moved since the last poll. A counter
    // seen for the first time says nothing yet.
    std::string busy_by;
    for (const Seat& s : seats.high) {
      StatusOr<uint64_t> n = ReadLaunches(s.state_dir, s.ordinal);
      if (!n.ok()) {
        // kNotFound: the file is gone with its container; others are said once.
        if (n.status().code() != StatusCode::kNotFound && warned_.insert(s.state_dir).second) {
          log_.Warn("cannot read a high-priority container's launch counter; it holds no one",
                    {{"container", s.who}, {"error", n.status().message()}});
        }
        continue;
      }
      warned_.erase(s.state_dir);
      counts[s] = *n;
      auto was = counts_.find(s);
      if (was != counts_.end() && was->second != *n) busy_by = s.who;
    }
    if (!busy_by.empty()) {
      const bool was_busy = busy_until_.contains(device) && now < busy_until_[device];
      busy_until_[device] = now + options_.busy_for;
      if (!was_busy) {
        log_.Info("holding low-priority containers: a high-priority container is busy on the GPU",
                  {{"device", device},
                   {"high", busy_by},
                   {"low", static_cast<int64_t>(seats.low.size())}});
      }
    }
    const auto until = busy_until_.find(device);
    if (until == busy_until_.end() || now >= until->second) {
      if (until != busy_until_.end()) {
        busy_until_.erase(until);
        log_.Info("releasing low-priority containers: the GPU's high-priority work is idle",
                  {{"device", device}});
      }
      continue;  // holds left from before are released below
    }
    const uint64_t deadline =
        mono_ns +
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(options_.hold_ahead).count());
    for (const Seat& s : seats.low) {
      Status st = WriteHold(s.state_dir, s.ordinal, deadline);
      if (!st.ok()) {
        if (st.code() != StatusCode::kNotFound && warned_.insert(s.state_dir).second) {
          log_.Warn("cannot hold a low-priority container; it runs unheld",
                    {{"container", s.who}, {"error", st.message()}});
        }
        continue;
      }
      warned_.erase(s.state_dir);
      held.insert(s);
      if (!held_.contains(s) && metrics_ != nullptr) metrics_->PriorityHoldStarted();
    }
  }
  // Holds this watch wrote that no longer apply: released at once rather
  // than left to lapse (a seat whose container is gone has no file to write).
  for (const Seat& s : held_) {
    if (!held.contains(s)) Release(s);
  }
  // Devices gone from every grant keep no busy window, and containers that
  // are gone no warning: a file is reported again only under a new path.
  std::erase_if(busy_until_, [&](const auto& kv) { return !by_device.contains(kv.first); });
  std::set<std::string> live;
  for (const auto& [device, seats] : by_device) {
    for (const std::vector<Seat>* v : {&seats.high, &seats.low}) {
      for (const Seat& s : *v) live.insert(s.state_dir);
    }
  }
  std::erase_if(warned_, [&](const std::string& dir) { return !live.contains(dir); });
  counts_ = std::move(counts);
  held_ = std::move(held);
  if (metrics_ != nullptr) {
    std::set<std::string> who;
    for (const Seat& s : held_) who.insert(s.who);
    metrics_->SetPriorityHeld(static_cast<double>(who.size()));
  }
}

void PriorityWatch::Run(std::stop_token stop) {
  std::mutex m;
  std::condition_variable_any cv;
  while (!stop.stop_requested()) {
    Poll(std::chrono::steady_clock::now(), MonotonicNs());
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, stop, options_.every, [] { return false; });
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Seat& s : held_) Release(s);
  held_.clear();
  if (metrics_ != nullptr) metrics_->SetPriorityHeld(0);
}

size_t PriorityWatch::WarnedFiles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return warned_.size();
}

std::set<std::string> PriorityWatch::Held() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> who;
  for (const Seat& s : held_) who.insert(s.who);
  return who;
}

}  // namespace accelpool::plugin
