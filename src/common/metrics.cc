#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <variant>

namespace accelpool {

void Counter::Inc(double v) {
  if (!(v >= 0)) return;  // negative or NaN
  value_.fetch_add(v);
}
double Counter::Value() const { return value_.load(); }

void Gauge::Set(double v) { value_.store(v); }
void Gauge::Add(double v) { value_.fetch_add(v); }
double Gauge::Value() const { return value_.load(); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

const std::vector<double>& DefaultLatencyBuckets() {
  static const std::vector<double> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  return kBuckets;
}

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 when there is none.
size_t Utf8Length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t min = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    // Prometheus refuses a whole scrape for one label value that is not
    // UTF-8: such bytes become U+FFFD, as in the JSON logs.
    const size_t n = Utf8Length(v, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(v, i, n);
      i += n;
      continue;
    }
    const char c = v[i++];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

enum class Kind { kCounter, kGauge, kHistogram };

std::string_view KindName(Kind k) {
  switch (k) {
    case Kind::kCounter:
      return "counter";
    case Kind::kGauge:
      return "gauge";
    case Kind::kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool ValidName(const std::string& n, bool allow_colon) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

// Help text escaping: backslash and newline.
std::string EscapeHelp(const std::string& h) {
  std::string out;
  for (char c : h) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// A bucket bound as other client libraries write `le` (0.0005, 100000),
// never in exponent form, so that a rule matching le="0.0005" finds it.
std::string FormatBound(double v) {
  char buf[400];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

// {a="x",b="y"} plus an optional extra pair; "" when there are no labels.
std::string LabelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

struct MetricsRegistry::Entry {
  Kind kind;
  std::vector<std::string> labels;
  std::variant<std::unique_ptr<CounterFamily>, std::unique_ptr<GaugeFamily>,
               std::unique_ptr<HistogramFamily>>
      family;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

namespace {

Status CheckNames(const std::string& name, const std::vector<std::string>& labels, bool histogram) {
  if (!ValidName(name, true) || name.rfind("__", 0) == 0) {
    return InvalidArgumentError("metric name \"" + name +
                                "\" is not a Prometheus name; use [a-zA-Z_:][a-zA-Z0-9_:]*, "
                                "without a leading \"__\" (reserved)");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (std::find(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(i), labels[i]) !=
        labels.begin() + static_cast<std::ptrdiff_t>(i)) {
      return InvalidArgumentError("metric " + name + " names label \"" + labels[i] + "\" twice");
    }
  }
  for (const auto& l : labels) {
    if (!ValidName(l, false) || l.rfind("__", 0) == 0 || (histogram && l == "le")) {
      return InvalidArgumentError("label name \"" + l + "\" of metric " + name +
                                  " is not allowed; use [a-zA-Z_][a-zA-Z0-9_]*, not \"le\" "
                                  "on histograms and no leading \"__\"");
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

// The series names a family writes.
std::vector<std::string> SeriesNames(const std::string& name, bool histogram) {
  if (!histogram) return {name};
  return {name, name + "_bucket", name + "_sum", name + "_count"};
}

}  // namespace

Status MetricsRegistry::CheckSeriesFree(const std::string& name, bool histogram) const {
  const std::vector<std::string> mine = SeriesNames(name, histogram);
  for (const auto& [other, entry] : families_) {
    for (const std::string& theirs : SeriesNames(other, entry->kind == Kind::kHistogram)) {
      if (std::find(mine.begin(), mine.end(), theirs) != mine.end()) {
        return AlreadyExistsError("metric " + name + " would write series " + theirs +
                                  ", which metric " + other + " writes; pick another name");
      }
    }
  }
  return Status::Ok();
}

StatusOr<CounterFamily*> MetricsRegistry::AddCounter(const std::string& name,
                                                     const std::string& help,
                                                     const std::vector<std::string>& label_names) {
  ACCELPOOL_RETURN_IF_ERROR(CheckNames(name, label_names, false));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    if (it->second->kind != Kind::kCounter || it->second->labels != label_names) {
      return AlreadyExistsError("metric " + name + " is already registered as another " +
                                "type or with other labels; pick another name");
    }
    return std::get<std::unique_ptr<CounterFamily>>(it->second->family).get();
  }
  ACCELPOOL_RETURN_IF_ERROR(CheckSeriesFree(name, false));
  auto e = std::make_unique<Entry>();
  e->kind = Kind::kCounter;
  e->labels = label_names;
  auto fam = std::unique_ptr<CounterFamily>(new CounterFamily(name, help, label_names, {}));
  CounterFamily* out = fam.get();
  e->family = std::move(fam);
  families_.emplace(name, std::move(e));
  return out;
}

StatusOr<GaugeFamily*> MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                                 const std::vector<std::string>& label_names) {
  ACCELPOOL_RETURN_IF_ERROR(CheckNames(name, label_names, false));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    if (it->second->kind != Kind::kGauge || it->second->labels != label_names) {
      return AlreadyExistsError("metric " + name + " is already registered as another " +
                                "type or with other labels; pick another name");
    }
    return std::get<std::unique_ptr<GaugeFamily>>(it->second->family).get();
  }
  ACCELPOOL_RETURN_IF_ERROR(CheckSeriesFree(name, false));
  auto e = std::make_unique<Entry>();
  e->kind = Kind::kGauge;
  e->labels = label_names;
  auto fam = std::unique_ptr<GaugeFamily>(new GaugeFamily(name, help, label_names, {}));
  GaugeFamily* out = fam.get();
  e->family = std::move(fam);
  families_.emplace(name, std::move(e));
  return out;
}

StatusOr<HistogramFamily*> MetricsRegistry::AddHistogram(
    const std::string& name, const std::string& help, const std::vector<std::string>& label_names,
    const std::vector<double>& bounds) {
  ACCELPOOL_RETURN_IF_ERROR(CheckNames(name, label_names, true));
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      // +Inf is the bucket every histogram has already (a second one would
      // repeat the series), -Inf none a value can fall in.
      return InvalidArgumentError("histogram " + name +
                                  ": bucket bounds must be strictly ascending finite numbers");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    if (it->second->kind != Kind::kHistogram || it->second->labels != label_names) {
      return AlreadyExistsError("metric " + name + " is already registered as another " +
                                "type or with other labels; pick another name");
    }
    return std::get<std::unique_ptr<HistogramFamily>>(it->second->family).get();
  }
  ACCELPOOL_RETURN_IF_ERROR(CheckSeriesFree(name, true));
  auto e = std::make_unique<Entry>();
  e->kind = Kind::kHistogram;
  e->labels = label_names;
  auto fam = std::unique_ptr<HistogramFamily>(new HistogramFamily(name, help, label_names, bounds));
  HistogramFamily* out = fam.get();
  e->family = std::move(fam);
  families_.emplace(name, std::move(e));
  return out;
}

std::string MetricsRegistry::Serialize() const {
  std::ostringstream out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, entry] : families_) {
    std::string help;
    std::visit([&](const auto& f) { help = f->help_; }, entry->family);
    out << "# HELP " << name << " " << EscapeHelp(help) << "\n";
    out << "# TYPE " << name << " " << KindName(entry->kind) << "\n";
    if (entry->kind == Kind::kCounter) {
      const auto& f = *std::get<std::unique_ptr<CounterFamily>>(entry->family);
      std::lock_guard<std::mutex> fl(f.mu_);
      for (const auto& [values, c] : f.children_) {
        out << name << LabelText(f.labels_, values) << " " << FormatValue(c->Value()) << "\n";
      }
    } else if (entry->kind == Kind::kGauge) {
      const auto& f = *std::get<std::unique_ptr<GaugeFamily>>(entry->family);
      std::lock_guard<std::mutex> fl(f.mu_);
      for (const auto& [values, g] : f.children_) {
        out << name << LabelText(f.labels_, values) << " " << FormatValue(g->Value()) << "\n";
      }
    } else {
      const auto& f = *std::get<std::unique_ptr<HistogramFamily>>(entry->family);
      std::lock_guard<std::mutex> fl(f.mu_);
      for (const auto& [values, h] : f.children_) {
        const Histogram::Snapshot s = h->Read();
        for (size_t i = 0; i < s.cumulative.size(); ++i) {
          const std::string le = i < s.bounds.size() ? FormatBound(s.bounds[i]) : "+Inf";
          out << name << "_bucket" << LabelText(f.labels_, values, "le", le) << " "
              << s.cumulative[i] << "\n";
        }
        out << name << "_sum" << LabelText(f.labels_, values) << " " << FormatValue(s.sum) << "\n";
        out << name << "_count" << LabelText(f.labels_, values) << " " << s.count << "\n";
      }
    }
  }
  return out.str();
}

}  // namespace accelpool
