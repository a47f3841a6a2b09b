// The stable node order that breaks score ties, shared by the extender's
// Prioritize and the simulator's kube-scheduler mode so that what the
// simulator measures is what a cluster does.
//
// kube-scheduler picks at random among nodes with equal totals, which undoes a
// packing policy (QUALITY.md: FGD leaves ~10% unallocated under random ties
// against 4.8% under a fixed order). The extender therefore gives its single
// best node 10 and every other node at most 9; among equal policy scores the
// node with the lowest StableNodeOrder goes first. The salt is chosen once per
// deployment and kept, so the order is fixed for a cluster but not the same
// alphabetical order everywhere.
//
// Thread-safety: pure function.
#ifndef ACCELPOOL_CORE_NODE_ORDER_H_
#define ACCELPOOL_CORE_NODE_ORDER_H_

#include <cstdint>
#include <string_view>

namespace accelpool::core {

// FNV-1a over the salt's 8 bytes (little-endian) then the node name, finished
// with the SplitMix64 mixer (FNV's high bits mix poorly over similar names).
// Lower values go first.
uint64_t StableNodeOrder(uint64_t salt, std::string_view node);

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_NODE_ORDER_H_
