#include "cuda/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace accelpool::cuda {
namespace {

// The one logging knob of the process; set once from the env at init.
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void Logf(LogLevel level, const char* format, ...) {
  if (!LogEnabled(level)) {
    return;
  }
  char line[1024];
  int n = std::snprintf(line, sizeof(line), "accelpool-cuda[%d] %s: ", static_cast<int>(getpid()),
                        LevelName(level));
  if (n < 0) {
    return;
  }
  va_list args;
  va_start(args, format);
  int m = std::vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, format, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(line) - 2) {
    len = sizeof(line) - 2;
  }
  line[len++] = '\n';
  ssize_t ignored = write(2, line, len);
  (void)ignored;
}

}  // namespace accelpool::cuda
