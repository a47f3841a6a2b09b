#include "core/node_order.h"

namespace accelpool::core {

uint64_t StableNodeOrder(uint64_t salt, std::string_view node) {
  constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
  constexpr uint64_t kFnvPrime = 1099511628211ULL;
  uint64_t h = kFnvOffset;
  for (int b = 0; b < 8; ++b) {
    h ^= (salt >> (8 * b)) & 0xFFU;
    h *= kFnvPrime;
  }
  for (char ch : node) {
    h ^= static_cast<unsigned char>(ch);
    h *= kFnvPrime;
  }
  uint64_t z = h + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace accelpool::core
