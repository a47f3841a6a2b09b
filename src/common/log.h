// Structured logging on spdlog: one JSON object per line.
//
//   {"ts":"2026-11-30T02:41:07.123Z","level":"info","component":"extender",
//    "msg":"bound pod","pod":"ml/train-0","node":"node-a","took_ms":3}
//
// A Logger is a cheap value (a shared spdlog logger plus a component name).
// Build the root in main from the flags and hand children to components:
//
//   auto root = NewLogger("accelpool-extender", {.level = flags.log_level});
//   if (!root.ok()) { ... }
//   Logger log = root->Child("cache");
//   log.Info("node added", {{"node", name}, {"devices", 8}});
//
// Thread-safety: a Logger may be used from any thread; lines are written whole.
#ifndef ACCELPOOL_COMMON_LOG_H_
#define ACCELPOOL_COMMON_LOG_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace spdlog {
class logger;
}

namespace accelpool {

enum class LogLevel : int { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// "trace", "debug", "info", "warn" (or "warning"), "error", "off"; case-insensitive.
// kInvalidArgument naming the accepted values otherwise.
StatusOr<LogLevel> ParseLogLevel(std::string_view name);
std::string_view LogLevelName(LogLevel level);

// One key=value of a structured line. The value is kept as JSON text.
class LogField {
 public:
  LogField(std::string_view key, std::string_view value);
  LogField(std::string_view key, const std::string& value)
      : LogField(key, std::string_view(value)) {}
  LogField(std::string_view key, const char* value) : LogField(key, std::string_view(value)) {}
  LogField(std::string_view key, int64_t value);
  LogField(std::string_view key, int value) : LogField(key, static_cast<int64_t>(value)) {}
  LogField(std::string_view key, uint64_t value);
  LogField(std::string_view key, double value);
  LogField(std::string_view key, bool value);

  const std::string& key() const { return key_; }
  const std::string& json_value() const { return json_; }

 private:
  std::string key_;
  std::string json_;
};

using LogFields = std::initializer_list<LogField>;

struct LogOptions {
  // Lines below this level are dropped before formatting.
  std::string level = "info";
  // Where whole lines go (without the trailing newline). Null: stderr.
  // Tests pass a function that collects lines.
  std::function<void(std::string_view line)> sink;
};

class Logger {
 public:
  // A logger that drops everything (useful as a default member).
  Logger();

  // A logger with the same sink and level whose component is
  // "<component>.<name>".
  Logger Child(std::string_view name) const;

  bool Enabled(LogLevel level) const;
  void Log(LogLevel level, std::string_view msg, LogFields fields = {}) const;
  void Debug(std::string_view msg, LogFields fields = {}) const {
    Log(LogLevel::kDebug, msg, fields);
  }
  void Info(std::string_view msg, LogFields fields = {}) const {
    Log(LogLevel::kInfo, msg, fields);
  }
  void Warn(std::string_view msg, LogFields fields = {}) const {
    Log(LogLevel::kWarn, msg, fields);
  }
  void Error(std::string_view msg, LogFields fields = {}) const {
    Log(LogLevel::kError, msg, fields);
  }

  const std::string& component() const { return component_; }

 private:
  friend StatusOr<Logger> NewLogger(std::string_view component, const LogOptions& options);
  Logger(std::shared_ptr<spdlog::logger> impl, std::string component);

  std::shared_ptr<spdlog::logger> impl_;  // null: drop everything
  std::string component_;
};

// Builds a root logger. kInvalidArgument when options.level is not a level name.
StatusOr<Logger> NewLogger(std::string_view component, const LogOptions& options = {});

// Sends spdlog's default logger, which library code writes to with
// spdlog::info() and friends (the vendor backends do), to stderr instead of
// spdlog's default stdout, so that a command's stdout carries only its output
// (the device plugin's --print-inventory JSON). Call once at start-up.
void RouteDefaultLogToStderr();

// Sends spdlog's default logger through `log` from now on: the library code's
// lines take its level (--log-level), its JSON format and its component (the
// device plugin passes its root's child "vendor"). `log` must outlive every
// later write to the default logger, or be replaced first.
void RouteDefaultLogTo(const Logger& log);

// The JSON line a Logger writes (exposed for tests and for callers that
// format elsewhere). `ts_ms` is milliseconds since the Unix epoch.
std::string FormatLogLine(int64_t ts_ms, LogLevel level, std::string_view component,
                          std::string_view msg, LogFields fields);

}  // namespace accelpool

#endif  // ACCELPOOL_COMMON_LOG_H_
