#include "cuda/config.h"

#include <cstdio>
#include <cstring>

namespace accelpool::cuda {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;

constexpr char kWithoutLimit[] = "running without this limit";

// `outcome` says what the process does instead: runs without the item, or
// uses another variable.
void Warn(WarnSink warn, void* ctx, const char* name, const char* value, const char* expected,
          const char* outcome = kWithoutLimit) {
  if (warn == nullptr) {
    return;
  }
  char line[1024];
  std::snprintf(line, sizeof(line),
                "ignoring %s=\"%.64s\": expected %s; %s (fix the value or unset it)", name, value,
                expected, outcome);
  warn(ctx, line);
}

bool IsUnset(const char* v) { return v == nullptr || v[0] == '\0'; }

// The memory cap of a device comes from the first of these that is set and
// well formed: a malformed value is passed over as if unset (the next one is
// a cap, which is safer than none), with one warning that names what is
// used instead.
constexpr int kMemorySources = 4;
struct MemorySource {
  const char* prefix;
  bool per_device;
  bool bare_is_mib;
};
constexpr MemorySource kMemory[kMemorySources] = {
    {"ACCELPOOL_CUDA_MEMORY_LIMIT", true, true},
    {"ACCELPOOL_CUDA_MEMORY_LIMIT", false, true},
    {"CUDA_DEVICE_MEMORY_LIMIT", true, false},
    {"CUDA_DEVICE_MEMORY_LIMIT", false, false},
};

const char* MemoryExpected(bool bare_is_mib) {
  return bare_is_mib ? "a positive number of MiB such as 4096 or 4Gi"
                     : "a positive size such as 4096m or 4g";
}

// A malformed variable that every device reads (no _<i>): warned once, after
// every device has found what it uses instead.
struct SharedBadValue {
  const char* value = nullptr;  // Non-null: malformed.
  int with_limit = 0;           // Devices that found a cap further on, and without one.
  int without_limit = 0;
  bool agree = true;       // Those with one all found it in the same variable.
  char instead[160] = {};  // `using NAME="value" instead`, as the first found it.
};

void MemoryLimits(EnvLookup lookup, void* lctx, WarnSink warn, void* wctx, ShimConfig* config) {
  SharedBadValue shared[kMemorySources];
  for (int i = 0; i < kMaxDevices; ++i) {
    char names[kMemorySources][96];
    const char* bad[kMemorySources] = {};
    int used = -1;
    for (int k = 0; k < kMemorySources && used < 0; ++k) {
      const MemorySource& src = kMemory[k];
      if (src.per_device) {
        std::snprintf(names[k], sizeof(names[k]), "%s_%d", src.prefix, i);
      } else {
        std::snprintf(names[k], sizeof(names[k]), "%s", src.prefix);
      }
      const char* value = lookup(lctx, names[k]);
      if (IsUnset(value)) {
        continue;
      }
      if (auto v = ParseMemoryBytes(value, src.bare_is_mib)) {
        config->memory_limit_bytes[i] = *v;
        used = k;
      } else {
        bad[k] = value;
      }
    }
    char instead[160];
    if (used >= 0) {
      std::snprintf(instead, sizeof(instead), "using %s=\"%.64s\" instead", names[used],
                    lookup(lctx, names[used]));
    } else {
      std::snprintf(instead, sizeof(instead), "%s", kWithoutLimit);
    }
    for (int k = 0; k < kMemorySources; ++k) {
      if (bad[k] == nullptr) {
        continue;
      }
      if (kMemory[k].per_device) {
        Warn(warn, wctx, names[k], bad[k], MemoryExpected(kMemory[k].bare_is_mib), instead);
        continue;
      }
      SharedBadValue& s = shared[k];
      s.value = bad[k];
      if (used < 0) {
        ++s.without_limit;
      } else if (s.with_limit++ == 0) {
        std::snprintf(s.instead, sizeof(s.instead), "%s", instead);
      } else {
        s.agree = s.agree && std::strcmp(s.instead, instead) == 0;
      }
    }
  }
  for (int k = 0; k < kMemorySources; ++k) {
    const SharedBadValue& s = shared[k];
    if (s.value == nullptr) {
      continue;
    }
    const char* outcome = kWithoutLimit;
    if (s.with_limit > 0) {
      // Every device found the same variable, or each its own (or none).
      outcome = s.without_limit == 0 && s.agree ? s.instead
                                                : "using CUDA_DEVICE_MEMORY_LIMIT[_<i>] where set, "
                                                  "else running without this limit";
    }
    Warn(warn, wctx, kMemory[k].prefix, s.value, MemoryExpected(kMemory[k].bare_is_mib), outcome);
  }
}

}  // namespace

bool ShimConfig::AnyMemoryLimit() const {
  if (disabled) {
    return false;
  }
  for (uint64_t limit : memory_limit_bytes) {
    if (limit != 0) {
      return true;
    }
  }
  return false;
}

namespace {

// A device id without its "GPU-" or "MIG-" prefix: a MIG instance's UUID
// is listed as "MIG-<uuid>", and cuDeviceGetUuid gives only the 16 bytes.
const char* UuidBody(const char* id) {
  return std::strncmp(id, "GPU-", 4) == 0 || std::strncmp(id, "MIG-", 4) == 0 ? id + 4 : id;
}

bool SameIgnoringCase(const char* a, const char* b) {
  for (; *a != '\0' && *b != '\0'; ++a, ++b) {
    char x = *a >= 'A' && *a <= 'Z' ? static_cast<char>(*a - 'A' + 'a') : *a;
    char y = *b >= 'A' && *b <= 'Z' ? static_cast<char>(*b - 'A' + 'a') : *b;
    if (x != y) {
      return false;
    }
  }
  return *a == *b;
}

// Fills config.device_uuids from a comma-separated list. False (nothing
// kept) for an empty entry, one too long, or more than kMaxDevices.
bool ParseDeviceUuids(const char* list, ShimConfig* config) {
  int count = 0;
  for (const char* p = list;; ++p) {
    while (*p == ' ') {
      ++p;
    }
    const char* end = p;
    while (*end != ',' && *end != '\0') {
      ++end;
    }
    const char* last = end;
    while (last > p && last[-1] == ' ') {
      --last;
    }
    const size_t len = static_cast<size_t>(last - p);
    if (len == 0 || len >= kDeviceIdLen || count == kMaxDevices) {
      std::memset(config->device_uuids, 0, sizeof(config->device_uuids));
      config->device_uuid_count = 0;
      return false;
    }
    std::memcpy(config->device_uuids[count], p, len);
    config->device_uuids[count][len] = '\0';
    ++count;
    if (*end == '\0') {
      break;
    }
    p = end;
  }
  config->device_uuid_count = count;
  return true;
}

}  // namespace

int ShimConfig::DeviceIndexOf(const char* id) const {
  for (int i = 0; i < device_uuid_count; ++i) {
    if (SameIgnoringCase(UuidBody(device_uuids[i]), UuidBody(id))) {
      return i;
    }
  }
  return -1;
}

bool ShimConfig::MemoryLimited(int device) const {
  return !disabled && device >= 0 && device < kMaxDevices && memory_limit_bytes[device] != 0;
}

std::optional<uint64_t> ParseUnsigned(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 20) {
    return std::nullopt;
  }
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (max - digit) / 10) {
      return std::nullopt;
    }
    value = value * 10 + digit;
  }
  return value;
}

namespace {

// Space, tab and line ends (a value written on Windows ends in "\r\n").
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && IsBlank(text.back())) {
    text.remove_suffix(1);
  }
  while (!text.empty() && IsBlank(text.front())) {
    text.remove_prefix(1);
  }
  return text;
}

// A whole number with blanks around it, as a value from a YAML block scalar
// ("30\n") or a hand-edited file reads: the same leniency as the memory values.
std::optional<uint64_t> ParseNumberField(std::string_view text, uint64_t max) {
  return ParseUnsigned(Trimmed(text), max);
}

}  // namespace

std::optional<uint64_t> ParseMemoryBytes(std::string_view text, bool bare_is_mib) {
  text = Trimmed(text);
  // Strip an optional trailing "i", "b" or "B" after a unit letter ("Gi", "MB").
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    ++digits;
  }
  std::string_view number(text.data(), digits);
  std::string_view unit(text.data() + digits, text.size() - digits);
  uint64_t multiplier = bare_is_mib ? kMiB : 1;
  if (!unit.empty()) {
    switch (unit.front()) {
      case 'k':
      case 'K':
        multiplier = 1ULL << 10;
        break;
      case 'm':
      case 'M':
        multiplier = kMiB;
        break;
      case 'g':
      case 'G':
        multiplier = 1ULL << 30;
        break;
      default:
        return std::nullopt;
    }
    unit.remove_prefix(1);
    if (!unit.empty() && (unit.front() == 'i' || unit.front() == 'b' || unit.front() == 'B')) {
      unit.remove_prefix(1);
    }
    if (!unit.empty()) {
      return std::nullopt;
    }
  }
  auto n = ParseUnsigned(number, UINT64_MAX / multiplier);
  if (!n || *n == 0) {
    return std::nullopt;
  }
  return *n * multiplier;
}

ShimConfig ParseShimConfig(EnvLookup lookup, void* lctx, WarnSink warn, void* wctx) {
  ShimConfig config;
  if (const char* level = lookup(lctx, "ACCELPOOL_CUDA_LOG_LEVEL"); !IsUnset(level)) {
    std::string_view v(level);
    if (v == "error" || v == "0") {
      config.log_level = LogLevel::kError;
    } else if (v == "warn" || v == "warning" || v == "1") {
      config.log_level = LogLevel::kWarn;
    } else if (v == "info" || v == "2") {
      config.log_level = LogLevel::kInfo;
    } else if (v == "debug" || v == "3") {
      config.log_level = LogLevel::kDebug;
    } else {
      Warn(warn, wctx, "ACCELPOOL_CUDA_LOG_LEVEL", level, "one of error, warn, info, debug");
    }
  }
  if (const char* off = lookup(lctx, "ACCELPOOL_CUDA_DISABLE"); !IsUnset(off)) {
    std::string_view v(off);
    if (v == "1" || v == "true") {
      config.disabled = true;
      return config;
    }
    if (v != "0" && v != "false") {
      Warn(warn, wctx, "ACCELPOOL_CUDA_DISABLE", off, "1 or 0");
    }
  }

  MemoryLimits(lookup, lctx, warn, wctx, &config);

  // The compute share likewise: a malformed value of ours is passed over for
  // HAMi's, where that is set and well formed.
  const char* ours = lookup(lctx, "ACCELPOOL_CUDA_COMPUTE_LIMIT");
  bool ours_used = false;
  if (!IsUnset(ours)) {
    auto v = ParseNumberField(ours, 100);
    if (v && *v >= 1) {
      config.compute_percent = static_cast<int>(*v);
      ours_used = true;
    }
  }
  const char* alias = ours_used ? nullptr : lookup(lctx, "CUDA_DEVICE_SM_LIMIT");
  bool alias_used = false;
  if (!IsUnset(alias)) {
    if (auto v = ParseNumberField(alias, 100)) {
      config.compute_percent = static_cast<int>(*v);  // HAMi: 0 means no limit.
      alias_used = true;
    }
  }
  if (!IsUnset(ours) && !ours_used) {
    char instead[160];
    if (alias_used) {
      std::snprintf(instead, sizeof(instead), "using CUDA_DEVICE_SM_LIMIT=\"%.64s\" instead",
                    alias);
    } else {
      std::snprintf(instead, sizeof(instead), "%s", kWithoutLimit);
    }
    Warn(warn, wctx, "ACCELPOOL_CUDA_COMPUTE_LIMIT", ours, "a whole percent from 1 to 100",
         instead);
  }
  if (!IsUnset(alias) && !alias_used) {
    Warn(warn, wctx, "CUDA_DEVICE_SM_LIMIT", alias, "a whole percent from 0 to 100");
  }

  if (const char* r = lookup(lctx, "ACCELPOOL_CUDA_CONTEXT_RESERVE_MIB"); !IsUnset(r)) {
    if (auto v = ParseNumberField(r, 1ULL << 20)) {
      config.context_reserve_bytes = *v * kMiB;
    } else {
      Warn(warn, wctx, "ACCELPOOL_CUDA_CONTEXT_RESERVE_MIB", r, "a number of MiB such as 512");
    }
  }

  // Task priority: ours by name, HAMi's by number; HAMi's only where ours is
  // unset, as for the compute limit.
  constexpr const char* kWithoutPriority = "running without task priority";
  if (const char* p = lookup(lctx, "ACCELPOOL_CUDA_PRIORITY"); !IsUnset(p)) {
    std::string_view v(p);
    if (v == "high") {
      config.priority = Priority::kHigh;
    } else if (v == "low") {
      config.priority = Priority::kLow;
    } else {
      Warn(warn, wctx, "ACCELPOOL_CUDA_PRIORITY", p, "high or low", kWithoutPriority);
    }
  } else if (const char* h = lookup(lctx, "CUDA_TASK_PRIORITY"); !IsUnset(h)) {
    std::string_view v(h);
    if (v == "0") {
      config.priority = Priority::kHigh;
    } else if (v == "1") {
      config.priority = Priority::kLow;
    } else {
      Warn(warn, wctx, "CUDA_TASK_PRIORITY", h, "0 (high) or 1 (low)", kWithoutPriority);
    }
  }

  if (const char* uuids = lookup(lctx, "ACCELPOOL_CUDA_DEVICE_UUIDS"); !IsUnset(uuids)) {
    if (!ParseDeviceUuids(uuids, &config)) {
      Warn(warn, wctx, "ACCELPOOL_CUDA_DEVICE_UUIDS", uuids,
           "at most 16 comma-separated device UUIDs such as GPU-<uuid>,GPU-<uuid>",
           "running without the device map (each process's CUDA ordinals are taken for the "
           "container's device indices)");
    }
  }

  if (const char* dir = lookup(lctx, "ACCELPOOL_CUDA_STATE_DIR"); !IsUnset(dir)) {
    if (dir[0] == '/' && std::strlen(dir) < kMaxPathLen - 32) {
      std::snprintf(config.state_dir, sizeof(config.state_dir), "%s", dir);
    } else {
      Warn(warn, wctx, "ACCELPOOL_CUDA_STATE_DIR", dir,
           "an absolute directory path shorter than 480 bytes");
    }
  }
  return config;
}

int ParseLimitsFile(LimitsFile* f, size_t len) {
  len = len < LimitsFile::kMaxBytes ? len : LimitsFile::kMaxBytes;
  f->text[len] = '\0';
  f->count = 0;
  char* p = f->text;
  char* end = f->text + len;
  while (p < end) {
    char* line = p;
    while (p < end && *p != '\n') {
      ++p;
    }
    if (p < end) {
      *p++ = '\0';  // The line's end.
    }
    // A file written with CRLF line ends: the "\r" is no part of the value
    // (every value of the contract would be malformed with it, and its
    // limit off).
    const size_t line_len = std::strlen(line);
    if (line_len > 0 && line[line_len - 1] == '\r') {
      line[line_len - 1] = '\0';
    }
    char* eq = std::strchr(line, '=');
    if (eq == nullptr || eq == line || f->count == LimitsFile::kMaxEntries) {
      continue;
    }
    *eq = '\0';
    f->names[f->count] = line;
    f->values[f->count] = eq + 1;
    ++f->count;
  }
  return f->count;
}

const char* LimitsFileLookup(void* ctx, const char* name) {
  const auto* f = static_cast<const LimitsFile*>(ctx);
  const char* found = nullptr;
  for (int i = 0; i < f->count; ++i) {
    if (std::strcmp(f->names[i], name) == 0) {
      found = f->values[i];
    }
  }
  return found;
}

}  // namespace accelpool::cuda
