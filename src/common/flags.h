// Command-line flags for the daemons: "--name=value", "--name value" and
// boolean "--name" / "--name=true|false|1|0", written into caller-owned tables.
//
// Returns kCancelled for -h/--help (print usage, exit 0), kInvalidArgument with
// a message for a positional argument, an unknown flag, a missing value (a
// space-separated value that starts with "--" is taken as one: write
// --name=VALUE for such a value) or a boolean that is not true/false/1/0.
//
// Thread-safety: pure functions over their arguments; FlagsExit writes to
// stdout or stderr.
#ifndef ACCELPOOL_COMMON_FLAGS_H_
#define ACCELPOOL_COMMON_FLAGS_H_

#include <chrono>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace accelpool {

Status ParseFlagTable(int argc, const char* const* argv,
                      const std::map<std::string, std::string*>& strings,
                      const std::map<std::string, bool*>& bools);

// A duration flag's value: whole numbers with units h, m, s, in that order
// ("90s", "15m", "1h30m"). kInvalidArgument naming `flag` otherwise (also for
// an empty value), and, saying so, for more than a year (366 days).
StatusOr<std::chrono::seconds> ParseDurationFlag(std::string_view flag, std::string_view value);

// What a binary's main returns when its flags did not parse (`parsed` is the
// parser's error): for kCancelled (-h/--help), `usage` on stdout and 0;
// otherwise "<program>: <message>" and `usage` on stderr, and 2.
int FlagsExit(const Status& parsed, const char* program, const char* usage);

}  // namespace accelpool

#endif  // ACCELPOOL_COMMON_FLAGS_H_
