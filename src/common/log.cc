#include "common/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace accelpool {

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC
// 3629: no overlong forms, no surrogates, nothing past U+10FFFF); 0 when
// there is none. REQUIRES: s[0] >= 0x80.
size_t Utf8Sequence(std::string_view s) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = at(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || at(1) < lo || at(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (at(i) < 0x80 || at(i) > 0xBF) return 0;
  }
  return n;
}

// A JSON string of `s`. Bytes that are not UTF-8 (a name cut mid-character,
// bytes a library or a peer sent) become U+FFFD: a log line must stay JSON
// that collectors accept.
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (const size_t n = Utf8Sequence(s.substr(i)); n > 0) {
        out.append(s.substr(i, n));
        i += n - 1;
      } else {
        out += "\\ufffd";
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

spdlog::level::level_enum ToSpd(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// Hands each formatted line (our JSON; the pattern is "%v") to a function.
class FunctionSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FunctionSink(std::function<void(std::string_view)> fn) : fn_(std::move(fn)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    fn_(std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  std::function<void(std::string_view)> fn_;
};

// Lines written through spdlog's default logger, re-logged through a
// Logger: its level, its JSON format, its component.
class LoggerSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LoggerSink(Logger log) : log_(std::move(log)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    LogLevel level = LogLevel::kInfo;
    switch (msg.level) {
      case spdlog::level::trace:
        level = LogLevel::kTrace;
        break;
      case spdlog::level::debug:
        level = LogLevel::kDebug;
        break;
      case spdlog::level::info:
        level = LogLevel::kInfo;
        break;
      case spdlog::level::warn:
        level = LogLevel::kWarn;
        break;
      case spdlog::level::err:
      case spdlog::level::critical:
        level = LogLevel::kError;
        break;
      default:
        return;
    }
    log_.Log(level, std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  Logger log_;
};

}  // namespace

StatusOr<LogLevel> ParseLogLevel(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "trace") return LogLevel::kTrace;
  if (n == "debug") return LogLevel::kDebug;
  if (n == "info") return LogLevel::kInfo;
  if (n == "warn" || n == "warning") return LogLevel::kWarn;
  if (n == "error") return LogLevel::kError;
  if (n == "off") return LogLevel::kOff;
  return InvalidArgumentError("unknown log level \"" + std::string(name) +
                              "\"; use one of trace, debug, info, warn, error, off");
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "info";
}

LogField::LogField(std::string_view key, std::string_view value) : key_(key) {
  AppendJsonString(json_, value);
}
LogField::LogField(std::string_view key, int64_t value) : key_(key), json_(std::to_string(value)) {}
LogField::LogField(std::string_view key, uint64_t value)
    : key_(key), json_(std::to_string(value)) {}
LogField::LogField(std::string_view key, double value) : key_(key) {
  if (!std::isfinite(value)) {
    json_ = "null";
  } else {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.6g", value);
    json_ = buf;
  }
}
LogField::LogField(std::string_view key, bool value) : key_(key), json_(value ? "true" : "false") {}

std::string FormatLogLine(int64_t ts_ms, LogLevel level, std::string_view component,
                          std::string_view msg, LogFields fields) {
  const std::time_t secs = static_cast<std::time_t>(ts_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ts_ms % 1000));
  std::string out = "{\"ts\":\"";
  out += ts;
  out += "\",\"level\":\"";
  out += LogLevelName(level);
  out += "\",\"component\":";
  AppendJsonString(out, component);
  out += ",\"msg\":";
  AppendJsonString(out, msg);
  for (const LogField& f : fields) {
    if (f.key() == "ts" || f.key() == "level" || f.key() == "component" || f.key() == "msg") {
      continue;  // reserved keys are never overwritten by fields
    }
    out += ',';
    AppendJsonString(out, f.key());
    out += ':';
    out += f.json_value();
  }
  out += '}';
  return out;
}

Logger::Logger() = default;

Logger::Logger(std::shared_ptr<spdlog::logger> impl, std::string component)
    : impl_(std::move(impl)), component_(std::move(component)) {}

Logger Logger::Child(std::string_view name) const {
  std::string c = component_.empty() ? std::string(name) : component_ + "." + std::string(name);
  return Logger(impl_, std::move(c));
}

bool Logger::Enabled(LogLevel level) const {
  return impl_ != nullptr && level != LogLevel::kOff && impl_->should_log(ToSpd(level));
}

void Logger::Log(LogLevel level, std::string_view msg, LogFields fields) const {
  if (!Enabled(level)) return;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const std::string line = FormatLogLine(now_ms, level, component_, msg, fields);
  impl_->log(ToSpd(level), "{}", line);
}

void RouteDefaultLogToStderr() {
  auto logger =
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(std::move(logger));
}

void RouteDefaultLogTo(const Logger& log) {
  auto logger = std::make_shared<spdlog::logger>("", std::make_shared<LoggerSink>(log));
  logger->set_level(spdlog::level::trace);  // `log` filters by its own level
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

StatusOr<Logger> NewLogger(std::string_view component, const LogOptions& options) {
  auto level = ParseLogLevel(options.level);
  if (!level.ok()) return level.status();
  spdlog::sink_ptr sink;
  if (options.sink) {
    sink = std::make_shared<FunctionSink>(options.sink);
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  sink->set_pattern("%v");
  // Not registered in spdlog's global registry: each logger is owned by its holders.
  auto impl = std::make_shared<spdlog::logger>(std::string(component), std::move(sink));
  impl->set_level(ToSpd(*level));
  impl->flush_on(spdlog::level::warn);
  return Logger(std::move(impl), std::string(component));
}

}  // namespace accelpool
