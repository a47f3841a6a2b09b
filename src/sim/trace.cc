#include "sim/trace.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace accelpool::sim {
namespace {

// Splits one CSV line. A field may be quoted ("V100M16|V100M32", as
// spreadsheet and Python exports write it, commas inside kept): the quotes
// are taken off. False when a quote is left open or a field holds an escaped
// quote (""), which the trace's columns never need.
bool SplitCsvLine(std::string_view line, std::vector<std::string_view>* out) {
  out->clear();
  size_t i = 0;
  while (true) {
    size_t start = i;
    while (start < line.size() && (line[start] == ' ' || line[start] == '\t')) ++start;
    if (start < line.size() && line[start] == '"') {
      const size_t close = line.find('"', start + 1);
      if (close == std::string_view::npos) return false;
      size_t after = close + 1;
      while (after < line.size() &&
             (line[after] == ' ' || line[after] == '\t' || line[after] == '\r')) {
        ++after;
      }
      if (after < line.size() && line[after] != ',') return false;  // "a""b", "a"b
      out->push_back(line.substr(start + 1, close - start - 1));
      if (after >= line.size()) return true;
      i = after + 1;
      continue;
    }
    const size_t comma = line.find(',', i);
    const std::string_view cell =
        line.substr(i, comma == std::string_view::npos ? std::string_view::npos : comma - i);
    if (cell.find('"') != std::string_view::npos) return false;
    out->push_back(cell);
    if (comma == std::string_view::npos) return true;
    i = comma + 1;
  }
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// Lines of a file with their 1-based numbers, blank lines skipped.
struct Line {
  size_t number;
  std::string_view text;
};

std::vector<Line> Lines(std::string_view text) {
  std::vector<Line> out;
  size_t start = 0;
  size_t number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    std::string_view line = Trim(text.substr(start, end - start));
    if (!line.empty()) out.push_back({number, line});
    start = end + 1;
  }
  return out;
}

enum class Whole { kOk, kOutOfRange, kNotWhole };

// A whole number, read exactly: an optional '-', digits with an optional
// fraction, an optional exponent ("12", "12.0", "2.5e3", as some exports
// write integral values). Its value must be an integer: "999.9999999999999999"
// is not 1000, whatever a double rounds it to. kOutOfRange past int64_t.
Whole ParseWholeNumber(std::string_view s, int64_t* out) {
  size_t i = 0;
  const bool negative = i < s.size() && s[i] == '-';
  if (negative) ++i;
  const auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return s.substr(start, i - start);
  };
  const std::string_view whole = digits();
  std::string_view fraction;
  if (i < s.size() && s[i] == '.') {
    ++i;
    fraction = digits();
  }
  if (whole.empty() && fraction.empty()) return Whole::kNotWhole;
  int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) exp_negative = s[i++] == '-';
    const std::string_view e = digits();
    if (e.empty()) return Whole::kNotWhole;
    for (char c : e) exponent = std::min<int64_t>(exponent * 10 + (c - '0'), 100000);
    if (exp_negative) exponent = -exponent;
  }
  if (i != s.size()) return Whole::kNotWhole;
  // The value is digits x 10^scale.
  std::string d = std::string(whole) + std::string(fraction);
  const int64_t scale = exponent - static_cast<int64_t>(fraction.size());
  d.erase(0, std::min(d.find_first_not_of('0'), d.size()));
  if (d.empty()) {
    *out = 0;
    return Whole::kOk;
  }
  if (scale < 0) {
    // The digits below the units must all be zeros (d starts with a non-zero).
    const int64_t below = -scale;
    if (below >= static_cast<int64_t>(d.size())) return Whole::kNotWhole;
    const size_t units = d.size() - static_cast<size_t>(below);
    if (d.find_first_not_of('0', units) != std::string::npos) return Whole::kNotWhole;
    d.resize(units);
  } else {
    if (static_cast<int64_t>(d.size()) + scale > 19) return Whole::kOutOfRange;  // >= 1e19
    d.append(static_cast<size_t>(scale), '0');
  }
  if (negative) d.insert(0, 1, '-');
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
  if (ec == std::errc::result_out_of_range) return Whole::kOutOfRange;
  if (ec != std::errc() || ptr != d.data() + d.size()) return Whole::kNotWhole;
  *out = v;
  return Whole::kOk;
}

class Table {
 public:
  static StatusOr<Table> Make(std::string_view text, std::string_view source,
                              const std::vector<std::string>& required) {
    Table t;
    t.source_ = std::string(source);
    // A byte-order mark (spreadsheet "CSV UTF-8" exports) is not part of the
    // first column's name.
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    t.lines_ = Lines(text);
    if (t.lines_.empty()) {
      return InvalidArgumentError(t.source_ + ": the file is empty; expected a CSV header row");
    }
    std::vector<std::string_view> header;
    if (!SplitCsvLine(t.lines_[0].text, &header)) {
      return InvalidArgumentError(t.source_ + ":" + std::to_string(t.lines_[0].number) +
                                  ": a quote is left open or escaped (\"\"); write the header "
                                  "without quotes inside fields");
    }
    for (size_t i = 0; i < header.size(); ++i) {
      const std::string name(Trim(header[i]));
      if (name.empty()) continue;  // an unnamed column (an exported index) is never read
      auto [it, inserted] = t.column_.emplace(name, i);
      if (!inserted) {
        return InvalidArgumentError(t.source_ + ":" + std::to_string(t.lines_[0].number) +
                                    ": header names column \"" + name + "\" twice (fields " +
                                    std::to_string(it->second + 1) + " and " +
                                    std::to_string(i + 1) + "); remove or rename one");
      }
    }
    for (const std::string& r : required) {
      if (!t.column_.count(r)) {
        return InvalidArgumentError(t.source_ + ":" + std::to_string(t.lines_[0].number) +
                                    ": header has no column \"" + r +
                                    "\"; the file must have a header row naming it");
      }
    }
    t.width_ = header.size();
    return t;
  }

  size_t rows() const { return lines_.size() - 1; }
  bool Has(const std::string& col) const { return column_.count(col) > 0; }

  // A warning naming the header's columns outside `known`, in file order,
  // appended to *warnings (when set and there are any).
  void WarnUnknown(const std::vector<std::string>& known,
                   std::vector<std::string>* warnings) const {
    if (warnings == nullptr) return;
    std::vector<std::pair<size_t, std::string>> unknown;
    for (const auto& [name, index] : column_) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        unknown.emplace_back(index, name);
      }
    }
    if (unknown.empty()) return;
    std::sort(unknown.begin(), unknown.end());
    std::string names, list;
    for (const auto& u : unknown) names += (names.empty() ? "\"" : ", \"") + u.second + "\"";
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    warnings->push_back(source_ + ": column" + (unknown.size() > 1 ? "s " : " ") + names +
                        " not read: not a column of this list (" + list +
                        "); rename it if it is one of these");
  }

  Status Row(size_t r, std::vector<std::string_view>* cells) const {
    const Line& line = lines_[r + 1];
    if (!SplitCsvLine(line.text, cells)) {
      return Error(r,
                   "a quote is left open or escaped (\"\"); quote a field whole, without "
                   "quotes inside it");
    }
    if (cells->size() != width_) {
      return Error(r, "has " + std::to_string(cells->size()) + " fields, the header has " +
                          std::to_string(width_) + "; fix the line or the header");
    }
    for (std::string_view& c : *cells) c = Trim(c);
    return Status::Ok();
  }

  std::string_view Cell(const std::vector<std::string_view>& cells, const std::string& col) const {
    return cells[column_.at(col)];
  }

  Status Int(size_t r, const std::vector<std::string_view>& cells, const std::string& col,
             int64_t min, int64_t max, bool empty_ok, int64_t* out) const {
    std::string_view s = Cell(cells, col);
    if (s.empty() && empty_ok) {
      *out = 0;
      return Status::Ok();
    }
    const auto outside = [&] {
      return Error(r, "column " + col + " is " + std::string(s) + ", outside " +
                          std::to_string(min) + ".." + std::to_string(max));
    };
    int64_t v = 0;
    switch (ParseWholeNumber(s, &v)) {
      case Whole::kOk:
        break;
      case Whole::kOutOfRange:
        return outside();
      case Whole::kNotWhole:
        return Error(r, "column " + col + " is \"" + std::string(s) +
                            "\", not an integer; write a whole number");
    }
    if (v < min || v > max) return outside();
    *out = v;
    return Status::Ok();
  }

  Status Error(size_t r, const std::string& what) const {
    return InvalidArgumentError(source_ + ":" + std::to_string(lines_[r + 1].number) + ": " + what);
  }

 private:
  std::string source_;
  std::vector<Line> lines_;
  std::map<std::string, size_t> column_;
  size_t width_ = 0;
};

StatusOr<std::string> ReadFile(const std::string& path) {
  // Opening a directory succeeds, and reading it fails like an empty file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgumentError(path + " is a directory; give the CSV file in it");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError("cannot open " + path + "; check the path (see --help for the layout)");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    return InvalidArgumentError("cannot read " + path +
                                (std::filesystem::is_regular_file(path, ec)
                                     ? "; check the file"
                                     : ": it is not a regular file; give a CSV file"));
  }
  return ss.str();
}

constexpr int64_t kMaxCpuMilli = int64_t{1} << 40;
constexpr int64_t kMaxMemory = int64_t{1} << 40;

}  // namespace

StatusOr<std::vector<TraceNode>> ParseNodeCsv(std::string_view text, std::string_view source,
                                              std::vector<std::string>* warnings) {
  const std::vector<std::string> columns = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
  StatusOr<Table> table = Table::Make(text, source, columns);
  if (!table.ok()) return table.status();
  const Table& t = *table;
  t.WarnUnknown(columns, warnings);
  std::vector<TraceNode> nodes;
  nodes.reserve(t.rows());
  std::vector<std::string_view> cells;
  for (size_t r = 0; r < t.rows(); ++r) {
    ACCELPOOL_RETURN_IF_ERROR(t.Row(r, &cells));
    TraceNode n;
    n.name = std::string(t.Cell(cells, "sn"));
    if (n.name.empty()) return t.Error(r, "column sn (node name) is empty");
    int64_t gpus = 0;
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "cpu_milli", 0, kMaxCpuMilli, false, &n.cpu_milli));
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "memory_mib", 0, kMaxMemory, false, &n.memory_mib));
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "gpu", 0, 64, false, &gpus));
    n.gpus = static_cast<int32_t>(gpus);
    n.model = std::string(t.Cell(cells, "model"));
    if (n.gpus > 0 && n.model.empty()) {
      return t.Error(r, "node has " + std::to_string(n.gpus) +
                            " GPUs but an empty model; name the GPU model");
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view source,
                                            std::vector<std::string>* warnings) {
  StatusOr<Table> table =
      Table::Make(text, source, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
  if (!table.ok()) return table.status();
  const Table& t = *table;
  t.WarnUnknown({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                 "pod_phase", "creation_time", "deletion_time", "scheduled_time"},
                warnings);
  const bool has_spec = t.Has("gpu_spec");
  const bool has_creation = t.Has("creation_time"), has_deletion = t.Has("deletion_time");
  const bool has_times = has_creation && has_deletion;
  std::vector<TracePod> pods;
  pods.reserve(t.rows());
  std::vector<std::string_view> cells;
  for (size_t r = 0; r < t.rows(); ++r) {
    ACCELPOOL_RETURN_IF_ERROR(t.Row(r, &cells));
    TracePod p;
    p.has_creation_column = has_creation;
    p.has_deletion_column = has_deletion;
    p.name = std::string(t.Cell(cells, "name"));
    if (p.name.empty()) return t.Error(r, "column name (pod name) is empty");
    int64_t num = 0, milli = 0;
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "cpu_milli", 0, kMaxCpuMilli, false, &p.cpu_milli));
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "memory_mib", 0, kMaxMemory, false, &p.memory_mib));
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "num_gpu", 0, 64, false, &num));
    ACCELPOOL_RETURN_IF_ERROR(t.Int(r, cells, "gpu_milli", 0, 1000, false, &milli));
    p.num_gpu = static_cast<int32_t>(num);
    p.gpu_milli = static_cast<int32_t>(milli);
    if (p.num_gpu > 0 && p.gpu_milli == 0) {
      return t.Error(r, "num_gpu is " + std::to_string(num) +
                            " but gpu_milli is 0; give the per-GPU share 1..1000");
    }
    if (p.num_gpu == 0) p.gpu_milli = 0;
    if (p.num_gpu > 1 && p.gpu_milli < 1000) {
      return t.Error(r, "a share below 1000 milli-GPU with num_gpu " + std::to_string(num) +
                            "; sharing pods ask for exactly one GPU");
    }
    if (has_spec) {
      std::string_view spec = t.Cell(cells, "gpu_spec");
      size_t start = 0;
      while (start < spec.size()) {
        size_t bar = spec.find('|', start);
        if (bar == std::string_view::npos) bar = spec.size();
        if (bar > start) p.gpu_models.emplace_back(spec.substr(start, bar - start));
        start = bar + 1;
      }
    }
    if (has_times) {
      ACCELPOOL_RETURN_IF_ERROR(
          t.Int(r, cells, "creation_time", 0, int64_t{1} << 50, false, &p.creation_time));
      ACCELPOOL_RETURN_IF_ERROR(
          t.Int(r, cells, "deletion_time", 0, int64_t{1} << 50, true, &p.deletion_time));
      if (p.deletion_time > 0 && p.deletion_time < p.creation_time) {
        return t.Error(r, "deletion_time " + std::to_string(p.deletion_time) +
                              " is before creation_time " + std::to_string(p.creation_time) +
                              "; fix the row, or leave deletion_time empty for a pod that never "
                              "leaves");
      }
      p.has_times = true;
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

StatusOr<std::vector<TraceNode>> LoadNodeCsv(const std::string& path,
                                             std::vector<std::string>* warnings) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseNodeCsv(*text, path, warnings);
}

StatusOr<std::vector<TracePod>> LoadPodCsv(const std::string& path,
                                           std::vector<std::string>* warnings) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParsePodCsv(*text, path, warnings);
}

}  // namespace accelpool::sim
