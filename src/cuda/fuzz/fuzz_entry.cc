#include "cuda/fuzz/fuzz_entry.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda/config.h"
#include "cuda/shared_region.h"

namespace accelpool::cuda::fuzz {
namespace {

void Check(bool ok) {
  if (!ok) {
    std::abort();
  }
}

struct Env {
  std::vector<std::pair<std::string, std::string>> vars;
};

const char* Lookup(void* ctx, const char* name) {
  const Env& env = *static_cast<const Env*>(ctx);
  const char* found = nullptr;
  for (const auto& [k, v] : env.vars) {
    if (k == name) {
      found = v.c_str();  // The last definition wins, as in execve's envp.
    }
  }
  return found;
}

struct Warnings {
  std::vector<std::string> lines;
};

void Warn(void* ctx, const char* message) {
  static_cast<Warnings*>(ctx)->lines.emplace_back(message);
}

bool SameConfig(const ShimConfig& a, const ShimConfig& b) {
  return a.disabled == b.disabled && a.compute_percent == b.compute_percent &&
         a.priority == b.priority && a.context_reserve_bytes == b.context_reserve_bytes &&
         a.log_level == b.log_level &&
         std::memcmp(a.memory_limit_bytes, b.memory_limit_bytes, sizeof(a.memory_limit_bytes)) ==
             0 &&
         std::strcmp(a.state_dir, b.state_dir) == 0;
}

}  // namespace

int FuzzShimEnv(const uint8_t* data, size_t size) {
  Env env;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos || line.find('\0') != std::string_view::npos) {
      continue;  // Not representable in an environment.
    }
    env.vars.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  Warnings warnings;
  ShimConfig c = ParseShimConfig(&Lookup, &env, &Warn, &warnings);
  Check(c.compute_percent >= 0 && c.compute_percent <= 100);
  Check(c.log_level >= LogLevel::kError && c.log_level <= LogLevel::kDebug);
  Check(c.priority == Priority::kNone || c.priority == Priority::kHigh ||
        c.priority == Priority::kLow);
  Check(!c.disabled || c.priority == Priority::kNone);
  Check(std::memchr(c.state_dir, '\0', sizeof(c.state_dir)) != nullptr);
  // At most one warning per variable, each one line naming a variable that
  // is set ("ignoring NAME=...").
  std::vector<std::string> warned;
  for (const std::string& w : warnings.lines) {
    Check(w.rfind("ignoring ", 0) == 0 && w.find('\n') == std::string::npos);
    size_t eq = w.find("=\"");
    Check(eq != std::string::npos);
    std::string name = w.substr(9, eq - 9);
    Check(Lookup(&env, name.c_str()) != nullptr);
    for (const std::string& earlier : warned) {
      Check(earlier != name);
    }
    warned.push_back(name);
  }
  Warnings again_warnings;
  ShimConfig again = ParseShimConfig(&Lookup, &env, &Warn, &again_warnings);
  Check(SameConfig(c, again) && again_warnings.lines == warnings.lines);

  // The value parsers on the raw input too.
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  for (bool bare_is_mib : {true, false}) {
    std::optional<uint64_t> bytes = ParseMemoryBytes(raw, bare_is_mib);
    Check(!bytes.has_value() || *bytes > 0);
  }
  for (uint64_t max : {uint64_t{100}, uint64_t{1} << 40, ~uint64_t{0}}) {
    std::optional<uint64_t> n = ParseUnsigned(raw, max);
    Check(!n.has_value() || *n <= max);
  }
  // The same bytes as the device plugin's limits file.
  LimitsFile file;
  size_t len = size < LimitsFile::kMaxBytes ? size : LimitsFile::kMaxBytes;
  std::memcpy(file.text, data, len);
  int entries = ParseLimitsFile(&file, len);
  Check(entries >= 0 && entries <= LimitsFile::kMaxEntries);
  for (int i = 0; i < entries; ++i) {
    Check(file.names[i][0] != '\0' && std::strchr(file.names[i], '\n') == nullptr &&
          std::strchr(file.values[i], '\n') == nullptr);
  }
  ShimConfig from_file = ParseShimConfig(&LimitsFileLookup, &file, nullptr, nullptr);
  Check(from_file.compute_percent >= 0 && from_file.compute_percent <= 100);
  return warnings.lines.empty() ? 1 : 0;
}

int FuzzProcStat(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);  // NUL-terminated copy.
  ProcStat st;
  if (!ParseProcStat(line.c_str(), &st)) {
    return 0;
  }
  // Fields are counted from the last ')': a command name cannot forge them.
  const char* paren = std::strrchr(line.c_str(), ')');
  Check(paren != nullptr);
  return 1;
}

}  // namespace accelpool::cuda::fuzz
