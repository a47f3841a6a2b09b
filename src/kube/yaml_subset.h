// A reader for the subset of YAML that kubeconfig files use: block mappings
// and sequences by indentation, plain / single-quoted / double-quoted
// scalars, "{}" and "[]", true/false and comments. Anchors, multi-line and
// block scalars, and flow collections with content are rejected with the
// line number, never misread.
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
