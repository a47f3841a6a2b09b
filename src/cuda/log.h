// A tiny stderr logger for code that runs inside arbitrary host processes.
//
// One line per message, "accelpool-cuda[<pid>] <level>: <text>", written
// with a single write(2) so lines from many threads do not interleave. No
// allocation, no libstdc++, no spdlog: the shim must stay invisible to the
// host process. Level filtering is a relaxed atomic load.
//
// Thread-safety: all functions are safe from any thread.
#ifndef ACCELPOOL_CUDA_LOG_H_
#define ACCELPOOL_CUDA_LOG_H_

#include "cuda/config.h"

namespace accelpool::cuda {

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void Logf(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_LOG_H_
