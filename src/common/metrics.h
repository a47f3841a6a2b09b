// Metrics: a small thread-safe Prometheus registry.
//
// Counters, gauges and histograms, each registered once as a "family" with a
// name, help text and label names; a family hands out one child per label
// value tuple. Serialize() renders every family in the Prometheus text
// exposition format 0.0.4 (HELP and TYPE lines, label values escaped, families
// sorted by name, children sorted by label values).
//
//   MetricsRegistry reg;
//   auto binds = reg.AddCounter("accelpool_extender_binds_total", "Binds by result.",
//                               {"result"});
//   if (!binds.ok()) return binds.status();
//   (*binds)->WithLabels({"ok"}).Inc();
//   std::string page = reg.Serialize();  // serve with kMetricsContentType
//
// Thread-safety: every method of every class here may be called from any
// thread. Counter/Gauge/Histogram references returned by WithLabels() stay
// valid for the registry's lifetime; updating them takes no registry lock.
#ifndef ACCELPOOL_COMMON_METRICS_H_
#define ACCELPOOL_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace accelpool {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// A monotonically increasing value.
class Counter {
 public:
  // Adds `v`; a negative or NaN `v` is ignored (counters never go down).
  void Inc(double v = 1.0);
  double Value() const;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v);
  void Add(double v);
  void Inc() { Add(1.0); }
  void Dec() { Add(-1.0); }
  double Value() const;

 private:
  std::atomic<double> value_{0.0};
};

// Cumulative buckets (le = upper bound) plus sum and count.
class Histogram {
 public:
  // REQUIRES: `bounds` strictly ascending (AddHistogram checks it).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);  // NaN is ignored

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf last
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // guarded by mu_, size bounds_.size() + 1
  double sum_ = 0;                // guarded by mu_
  uint64_t count_ = 0;            // guarded by mu_
};

// Default latency buckets in seconds: 0.5 ms .. 10 s.
const std::vector<double>& DefaultLatencyBuckets();

// A metric family: one child per label-value tuple.
template <typename M>
class Family {
 public:
  // Returns the child for `values` (given in label-name order), creating it on
  // first use. Missing values are taken as "", extra values are ignored, so a
  // caller mistake never crashes; it shows up as an odd series.
  M& WithLabels(const std::vector<std::string>& values);
  // The child with no label values (for families without labels).
  M& Get() { return WithLabels({}); }
  // Drops the children whose label values (in label-name order) `drop`
  // returns true for, so that series of things that are gone (a deleted
  // node, a removed device) leave the exposition. Returns how many went.
  // REQUIRES: nobody uses a reference WithLabels returned for a dropped child
  // afterwards: the code that sets the family serialises itself with this call.
  template <typename Pred>
  size_t RemoveIf(Pred drop) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::erase_if(children_, [&](const auto& kv) { return drop(kv.first); });
  }

 private:
  friend class MetricsRegistry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds)
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(label_names)),
        bounds_(std::move(bounds)) {}

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> labels_;
  const std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;  // guarded by mu_
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class MetricsRegistry {
 public:
  MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;
  ~MetricsRegistry();

  // Registers a family, or returns the existing one when a family of the same
  // type and label names is already registered under `name`.
  // kInvalidArgument: the name or a label name is not a valid Prometheus
  //   identifier ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without ':' and not "le"
  //   for histograms), or histogram bounds are not strictly ascending.
  // kAlreadyExists: `name` is taken by a family of another type or labels,
  // or one family's series would carry another's name (a histogram "foo"
  // writes foo_bucket, foo_sum and foo_count: a counter "foo_count" beside it
  // would make the page one that Prometheus refuses).
  // The pointer stays valid for the registry's lifetime.
  StatusOr<CounterFamily*> AddCounter(const std::string& name, const std::string& help,
                                      const std::vector<std::string>& label_names = {});
  StatusOr<GaugeFamily*> AddGauge(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names = {});
  StatusOr<HistogramFamily*> AddHistogram(
      const std::string& name, const std::string& help,
      const std::vector<std::string>& label_names = {},
      const std::vector<double>& bounds = DefaultLatencyBuckets());

  // The exposition text (format 0.0.4) of every registered family.
  std::string Serialize() const;

 private:
  struct Entry;
  // kAlreadyExists when a new family `name` would write a series another
  // family writes too. REQUIRES: mu_ held, `name` not registered.
  Status CheckSeriesFree(const std::string& name, bool histogram) const;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> families_;  // guarded by mu_
};

// Escapes a label value for the exposition format: \ -> \\, " -> \", newline -> \n;
// bytes that are not UTF-8 become U+FFFD.
std::string EscapeLabelValue(const std::string& v);

// --- implementation of the template -------------------------------------

template <typename M>
M& Family<M>::WithLabels(const std::vector<std::string>& values) {
  std::vector<std::string> key(labels_.size());
  for (size_t i = 0; i < key.size() && i < values.size(); ++i) key[i] = values[i];
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(key);
  if (it == children_.end()) {
    std::unique_ptr<M> child;
    if constexpr (std::is_same_v<M, Histogram>) {
      child = std::make_unique<M>(bounds_);
    } else {
      child = std::make_unique<M>();
    }
    it = children_.emplace(std::move(key), std::move(child)).first;
  }
  return *it->second;
}

}  // namespace accelpool

#endif  // ACCELPOOL_COMMON_METRICS_H_
