#include "common/flags.h"

#include <cstdio>

namespace accelpool {

Status ParseFlagTable(int argc, const char* const* argv,
                      const std::map<std::string, std::string*>& strings,
                      const std::map<std::string, bool*>& bools) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return Status(StatusCode::kCancelled, "");
    if (arg.rfind("--", 0) != 0) {
      return InvalidArgumentError("unexpected argument " + arg + "; flags look like --name=value");
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (auto b = bools.find(name); b != bools.end()) {
      if (has_value && value != "true" && value != "false" && value != "1" && value != "0") {
        return InvalidArgumentError("flag --" + name + " takes true or false, got " + value);
      }
      *b->second = !has_value || value == "true" || value == "1";
      continue;
    }
    auto s = strings.find(name);
    if (s == strings.end()) return InvalidArgumentError("unknown flag --" + name + "; see --help");
    if (!has_value) {
      if (i + 1 >= argc) return InvalidArgumentError("flag --" + name + " needs a value");
      // `--lease-namespace --leader-elect` is a value forgotten, not a
      // namespace called "--leader-elect" (and leader election left off).
      if (std::string_view(argv[i + 1]).rfind("--", 0) == 0) {
        return InvalidArgumentError("flag --" + name + " needs a value, not the next flag " +
                                    argv[i + 1] + "; write --" + name + "=VALUE");
      }
      value = argv[++i];
    }
    *s->second = value;
  }
  return Status::Ok();
}

StatusOr<std::chrono::seconds> ParseDurationFlag(std::string_view flag, std::string_view value) {
  const auto bad = [&] {
    return InvalidArgumentError("--" + std::string(flag) + "=" + std::string(value) +
                                " is not a duration; write it like 90s, 15m or 1h30m");
  };
  constexpr int64_t kMaxSeconds = 366LL * 24 * 3600;
  const auto too_long = [&] {
    return InvalidArgumentError("--" + std::string(flag) + "=" + std::string(value) +
                                " is longer than the limit of a year (366 days, 8784h); give "
                                "a shorter duration");
  };
  const std::string_view units = "hms";
  size_t next_unit = 0;  // units must come in the order h, m, s
  int64_t total = 0;
  size_t i = 0;
  if (value.empty()) return bad();
  while (i < value.size()) {
    int64_t n = 0;
    size_t digits = 0;
    for (; i < value.size() && value[i] >= '0' && value[i] <= '9'; ++i, ++digits) {
      if (n > kMaxSeconds) {
        // Past the limit in any unit; the rest must still be a duration.
        for (; i < value.size() && value[i] >= '0' && value[i] <= '9'; ++i) {
        }
        if (i == value.size() || units.find(value[i], next_unit) == std::string_view::npos) {
          return bad();
        }
        return too_long();
      }
      n = n * 10 + (value[i] - '0');
    }
    if (digits == 0 || i == value.size()) return bad();
    const size_t unit = units.find(value[i], next_unit);
    if (unit == std::string_view::npos) return bad();
    next_unit = unit + 1;
    ++i;
    total += n * (unit == 0 ? 3600 : unit == 1 ? 60 : 1);
    if (total > kMaxSeconds) return too_long();
  }
  return std::chrono::seconds(total);
}

int FlagsExit(const Status& parsed, const char* program, const char* usage) {
  if (parsed.code() == StatusCode::kCancelled) {
    std::fputs(usage, stdout);
    return 0;
  }
  std::fprintf(stderr, "%s: %s\n%s", program, parsed.message().c_str(), usage);
  return 2;
}

}  // namespace accelpool
