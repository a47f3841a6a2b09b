// A reader for the subset of YAML that kubeconfig files use: block mappings
// and sequences by indentation, flow mappings and sequences ("{a: b}",
// "[x, 'y']", nested, over several lines), plain / single-quoted /
// double-quoted scalars, true/false/null and comments. Anchors, aliases,
// tags, block scalars and multi-line scalars are rejected, never misread.
// Every error is kInvalidArgument and starts with "line N" (flow errors also
// give the column and what was expected there). Duplicate keys are errors.
//
// Thread-safety: pure function.
#ifndef ACCELPOOL_KUBE_YAML_SUBSET_H_
#define ACCELPOOL_KUBE_YAML_SUBSET_H_

#include <nlohmann/json.hpp>
#include <string_view>

#include "common/status.h"

namespace accelpool::kube {

// Scalars become JSON strings, except true/false (booleans) and null/~.
StatusOr<nlohmann::json> ParseYamlSubset(std::string_view text);

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_YAML_SUBSET_H_
