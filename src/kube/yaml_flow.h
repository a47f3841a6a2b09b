// The flow-style part of the kubeconfig YAML subset (used by yaml_subset.cc):
// flow mappings "{a: b, c: [d, e]}", flow sequences "[a, 'b', \"c\"]",
// single- and double-quoted scalars and plain scalars inside collections.
// A flow collection may continue over several lines; a scalar may not.
// Errors carry the line and column ("line 3, column 14: want ',' or '}'
// after the value of \"server\", found 'x'") and say what was expected.
//
// Scalars become JSON strings, except true/false (booleans) and null/~ (null)
// when plain. Nesting deeper than kMaxFlowDepth is an error, never a deep
// recursion.
//
// Thread-safety: pure functions over the caller's lines.
#ifndef ACCELPOOL_KUBE_YAML_FLOW_H_
#define ACCELPOOL_KUBE_YAML_FLOW_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace accelpool::kube::yaml {

inline constexpr int kMaxFlowDepth = 64;

// One non-empty line with its comment removed: `text` is trimmed and starts
// at 0-based column `indent` of the 1-based line `number`.
struct Line {
  int indent;
  std::string text;
  int number;
};

// A place in a vector<Line>: the line's index and the byte offset in its text.
struct Pos {
  size_t line = 0;
  size_t offset = 0;
};

// "line 4, column 9: <what>" for a place in `lines`.
Status ErrorAt(const std::vector<Line>& lines, Pos at, std::string_view what);

// Reads one node that starts at `at`: a flow collection (which may run over
// the following lines), or a quoted scalar. The rest of the line where the
// node ends must be empty. On success `at` is left on the node's last line.
StatusOr<nlohmann::json> ReadFlowNode(const std::vector<Line>& lines, Pos& at);

// True when a block value starting with `c` is read with ReadFlowNode.
inline bool StartsFlowNode(char c) { return c == '{' || c == '[' || c == '"' || c == '\''; }

// A plain scalar: null/~/"" -> null, true/false -> boolean, else a string.
nlohmann::json PlainScalar(std::string_view s);

}  // namespace accelpool::kube::yaml

#endif  // ACCELPOOL_KUBE_YAML_FLOW_H_
