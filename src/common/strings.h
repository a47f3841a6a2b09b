// Small string helpers shared by the components.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_COMMON_STRINGS_H_
#define ACCELPOOL_COMMON_STRINGS_H_

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

}  // namespace accelpool

#endif  // ACCELPOOL_COMMON_STRINGS_H_
