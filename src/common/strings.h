// Small string helpers shared by the components.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_COMMON_STRINGS_H_
#define ACCELPOOL_COMMON_STRINGS_H_

#include <algorithm>
#include <string>
#include <string_view>

namespace accelpool {

// The elements of `parts` (strings, in iteration order) with `sep` between
// them; "" for none.
template <typename Container>
std::string StrJoin(const Container& parts, std::string_view sep) {
  std::string out;
  bool first = true;
  for (const auto& p : parts) {
    if (!first) out += sep;
    out += p;
    first = false;
  }
  return out;
}

// The deepest nesting of objects and arrays in JSON text `text`, counting
// brackets outside strings. O(n) and without recursion, so that a parser's
// caller can refuse hostile nesting before anything walks the document.
inline int JsonNestingDepth(std::string_view text) {
  int depth = 0;
  int max_depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace accelpool

#endif  // ACCELPOOL_COMMON_STRINGS_H_
