// Topology profiles: the data that makes each vendor's rules (VENDORS.md
// section 11) concrete. Backends and the fake inventory name a profile; the
// core fills the topology descriptor from it. Adding a platform is adding a
// table row, not code.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_CORE_PROFILES_H_
#define ACCELPOOL_CORE_PROFILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::core {

struct ProfileInfo {
  std::string name;         // "ascend-910c-x16"
  Vendor vendor;
  std::string model;        // default model name
  int32_t devices;          // devices per node
  int64_t memory_mib;       // per device
  int32_t compute_units;    // per device
  std::string description;  // one line, with the VENDORS.md rule it encodes
};

const std::vector<ProfileInfo>& Profiles();

// Which group a request that fits inside one group takes, by the free
// devices each group has, as each vendor's scheduler orders them.
enum class GroupFit : uint8_t {
  // Remainder 0 first, then even remainders ascending, then odd ones
  // (MindCluster 910A: a request of 1 takes a ring with 1, 3, 2, 4 free; of 2,
  // one with 2, 4, 3 free).
  kEvenRemainder,
  // The group with the fewest free devices that fits (910B Box16: a request
  // of 1 takes a ring with 2 free before one with 3, keeping 3 for a 3).
  kFewestFree,
  // kEvenRemainder for odd counts, kFewestFree for even ones (Kunlunxin P800:
  // 1 -> 1, 3, 2, 4 free; 2 -> 2, 3, 4, so a 2 beside a 3-free wing leaves
  // the other wing whole for a 4; Ascend 310 cards, MindCluster card310x4:
  // 1 -> 1, 3, 2, 4; 2 -> 2, 3, 4; 3 -> 3, 4).
  kEvenRemainderForOdd,
};

// The group order of the profile named `kind` (Topology::kind, which travels
// with an inventory); kEvenRemainder for a kind that is no profile. Under
// ModuleRule::kStayInside it orders the modules a request inside one takes.
GroupFit GroupFitOf(std::string_view kind);

// Which devices a request larger than every module takes under
// ModuleRule::kStayInside.
enum class ModuleSpan : uint8_t {
  // Whole free modules, in module order, for count / size of them; the
  // remainder from one module: the first with exactly the remainder free
  // (a half-used card), else the next free module in part. Modules are of
  // exactly the profile's size. 310P Duo, MindCluster chip310px2 with
  // distributed=true (frame.go getSelectNpu, judgeNodeByTaskNPU): even counts
  // take whole cards; an odd count one chip of the first card with one free,
  // else the chips of the first free cards, the last in part.
  kWholeModules,
  // The free devices of the module with the fewest free first, then the
  // next fewest, each module's all, the last one in part; ties in module
  // order (MindCluster chip310x4: cards with 1, 2, 3, then 4 free chips).
  // Worked example, cards of 4 with 1, 3, 2, 4 free, a request of 6: the
  // 1 free chip, the 2 of the third card, the 3 of the second card.
  kFewestFreeFirst,
};

// The module span of the profile named `kind`; kWholeModules for a kind that
// is no profile.
ModuleSpan ModuleSpanOf(std::string_view kind);

// Builds the topology of a profile for inv.devices (groups, modules, valid
// counts, links, slice rules). Devices keep their own NUMA ids; when a device
// has numa < 0 the profile's documented default is used.
// `modules` are the node's modules (cards) as the hardware reports them, by
// device index: a profile with modules uses them (each of at most its module
// size; of exactly that size when whole modules are taken, ModuleRule::
// kWholeForEven or ModuleSpan::kWholeModules), one without
// ignores them; empty: modules of the profile's size in index order.
// A profile whose node holds any number of modules (ascend-310-cards,
// ascend-310p-duo) takes
// any device count when `modules` is given, else a multiple of its module size.
// kNotFound for an unknown profile; kInvalidArgument when the device count
// does not match the profile, or `modules` do not hold every device exactly
// once in modules the profile allows. On error *inv is unchanged.
Status ApplyProfile(std::string_view profile, NodeInventory* inv,
                    std::vector<std::vector<int32_t>> modules = {});

// A whole node of a profile with synthetic ids "<node>-<index>".
StatusOr<NodeInventory> MakeProfileNode(std::string_view profile, std::string_view node);

// A NUMA-based default for vendors with no documented rule: groups = NUMA
// nodes with GroupRule::kPrefer.
void ApplyNumaDefault(NodeInventory* inv);

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_PROFILES_H_
