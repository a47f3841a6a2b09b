// Scoring policies: which legal placement is best on a node, and how good a
// node is for a pod. Picked by name from a table; an unknown name is an error.
//
//   binpack        fill used devices and nodes first (keeps whole devices free)
//   spread         least-used devices and nodes first
//   topology       best link score / fewest groups crossed, then binpack
//   fragmentation  FGD (Weng et al., ATC'23): least growth of expected fragmentation
//   accelpool      the default: fragmentation-aware packing that also keeps whole
//                  nodes free for big jobs (see docs/benchmarks/quality.md)
//
// Thread-safety: Policy objects are immutable after construction and may be
// shared across threads.
#ifndef ACCELPOOL_CORE_POLICY_H_
#define ACCELPOOL_CORE_POLICY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::core {

// One request shape of the expected workload, with its share of arrivals
// (weights need not sum to 1). Used by fragmentation-aware policies.
struct TaskShape {
  int32_t count = 1;             // devices; 0 = a task that asks for none
  int32_t compute = kComputeWhole;  // thousandths per device
  int64_t memory_mib = 0;        // per device, 0 = not constrained
  std::string model;             // "" = any model
  double weight = 1.0;
  int64_t cpu_milli = 0;         // host CPU, 0 = not constrained
  int64_t host_memory_mib = 0;   // host memory, 0 = not constrained
  // Memory per device in percent of the device (1-100) when memory_mib is 0;
  // resolved against each inventory's devices (TasksForInventory).
  int32_t memory_percent = 0;
  friend bool operator==(const TaskShape&, const TaskShape&) = default;
};

struct PolicyContext {
  std::vector<TaskShape> workload;  // empty: a built-in mix of common shapes
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view Name() const = 0;

  // How good it is to add `placement` to `usage` on `inv`; higher is better.
  // Used to choose among legal candidate placements on one node.
  virtual double PlacementValue(const NodeInventory& inv, const NodeUsage& usage,
                                const Placement& placement) const = 0;

  // The node's score for the chosen placement, 0..100 (kube-scheduler's range).
  virtual int32_t NodeScore(const NodeInventory& inv, const NodeUsage& usage,
                            const Placement& placement) const = 0;

  // The score of a pod that asks for no device and takes `host` on the node
  // (its CPU and memory), 0..100; 50 where it makes no difference. Only the
  // policies that weigh the host against the devices (the fragmentation
  // measures) tell nodes apart; the others leave such a pod to kube-scheduler's
  // own scores.
  virtual int32_t HostScore(const NodeInventory& /*inv*/, const NodeUsage& /*usage*/,
                            const HostResources& /*host*/) const {
    return kNeutralHostScore;
  }
  static constexpr int32_t kNeutralHostScore = 50;
};

using PolicyPtr = std::unique_ptr<Policy>;

// The policy Fit uses when given none: binpack. An immutable shared instance.
const Policy& DefaultPolicy();

// Node utilisation after adding `placement`: mean over devices of the larger
// of memory and compute fraction in use, in [0, 1]. Shared by policies.
double UtilisationAfter(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& placement);

// Names accepted by MakePolicy, in the order above.
const std::vector<std::string>& PolicyNames();

// kInvalidArgument for an unknown name, listing the valid ones.
StatusOr<PolicyPtr> MakePolicy(std::string_view name, const PolicyContext& ctx = {});

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_POLICY_H_
