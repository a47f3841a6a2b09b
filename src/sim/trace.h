// Trace files of the Alibaba GPU cluster trace v2023 ("openb") and any file of
// the same schema: a node list and a pod list, both CSV with a header row.
//
// Node list columns: sn, cpu_milli, memory_mib, gpu, model.
// Pod list columns : name, cpu_milli, memory_mib, num_gpu, gpu_milli and,
// optionally, gpu_spec, qos, pod_phase, creation_time, deletion_time,
// scheduled_time. Columns are found by name, in any order; a header naming
// one twice is refused. Numbers are whole numbers, read exactly ("12", "12.0"
// and "1.2e1" are 12; "999.9999999999999999" is refused, not rounded).
//
// A malformed line stops parsing with "<file>:<line>: <what was wrong>".
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_SIM_TRACE_H_
#define ACCELPOOL_SIM_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace accelpool::sim {

struct TraceNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t gpus = 0;
  std::string model;  // "" on CPU-only nodes
};

struct TracePod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;                // per GPU, 1..1000; 0 for CPU-only pods
  std::vector<std::string> gpu_models;  // allowed models; empty = any
  bool has_times = false;               // the header has both creation_time and deletion_time
  // Which of the two the header has (has_times: both), so that a replay that
  // needs them can name the one missing.
  bool has_creation_column = false;
  bool has_deletion_column = false;
  int64_t creation_time = 0;  // seconds
  int64_t deletion_time = 0;  // seconds; 0 when unknown
};

// Parse from text; `source` names the input in error messages. Header
// columns the schema above does not name are not read; when `warnings` is
// set, one line naming them is appended to it (a "gpu_type" for "gpu_spec"
// would otherwise drop every model restriction without a word).
StatusOr<std::vector<TraceNode>> ParseNodeCsv(std::string_view text, std::string_view source,
                                              std::vector<std::string>* warnings = nullptr);
StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text, std::string_view source,
                                            std::vector<std::string>* warnings = nullptr);

// Read and parse a file: kNotFound when it cannot be opened, kInvalidArgument
// for a directory or a file that cannot be read.
StatusOr<std::vector<TraceNode>> LoadNodeCsv(const std::string& path,
                                             std::vector<std::string>* warnings = nullptr);
StatusOr<std::vector<TracePod>> LoadPodCsv(const std::string& path,
                                           std::vector<std::string>* warnings = nullptr);

// Total GPU request of a pod in thousandths.
inline int64_t PodGpuMilli(const TracePod& p) {
  return static_cast<int64_t>(p.num_gpu) * p.gpu_milli;
}

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_TRACE_H_
