// Fragmentation: the measure of Weng et al., "Beware of Fragmentation"
// (USENIX ATC'23), written from the paper's definitions, and the two policies
// built on it.
//
// A node's fragmentation, given a distribution of task shapes, is the
// expected amount of its idle compute (thousandths of a device) that a task
// drawn from the distribution could not use:
//   - a task that cannot run on the node at all (wrong model, too few devices
//     with enough free compute, not enough host CPU or memory, or a task that
//     asks for no device) leaves all of the node's idle compute unused;
//   - a task that can run leaves unused the idle compute of every device that
//     has less free compute (or memory) than the task needs per device.
// accelpool's measure counts a task that asks for no device by the share of
// the host it would take instead (HostTaskRule::kHostShare): the idle compute
// times the larger of its CPU and memory over the node's free CPU and memory,
// all of the idle compute when it does not fit. Such a task landing on a node
// with little host left strands the devices; one landing on a node with ample
// host strands little of them.
// FGD places a pod where the node's fragmentation grows least and scores a
// node int(100 * sigmoid((F_before - F_after) / 1000)).
//
// `fragmentation` is FGD on core types. `accelpool` is the default policy:
// fragmentation first, then packing onto devices and nodes already in use, so
// that whole nodes stay free for multi-device tasks, with scores spaced so
// that kube-scheduler's 0-10 extender range and its random tie-break keep the
// order (see docs/benchmarks/quality.md).
//
// Thread-safety: pure functions; policy objects are immutable after
// construction and may be shared across threads.
#ifndef ACCELPOOL_CORE_FRAG_H_
#define ACCELPOOL_CORE_FRAG_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/policy.h"
#include "core/types.h"

namespace accelpool::core {

// One task shape prepared for fast evaluation. Models are bits of a mask that
// the caller assigns (model id i is bit i, at most 64 models).
struct FragTask {
  int32_t count = 1;                // devices; 0 = a task that asks for none
  int32_t compute = kComputeWhole;  // thousandths per device
  int64_t memory_mib = 0;           // per device; 0 = not constrained
  int64_t cpu_milli = 0;            // host CPU; 0 = not constrained
  int64_t host_memory_mib = 0;      // host memory; 0 = not constrained
  uint64_t model_mask = 0;          // allowed models; 0 = any model
  double weight = 0;                // share of arrivals; NormalizeTasks makes them sum to 1
};

// A node's free state, viewed without copying.
struct FragNode {
  std::span<const int32_t> free_compute;  // thousandths per device
  std::span<const int64_t> free_memory;   // MiB per device; empty = not tracked
  int64_t cpu_free_milli = -1;            // -1 = not tracked
  int64_t host_memory_free_mib = -1;      // -1 = not tracked
  int32_t model_id = -1;                  // bit in FragTask::model_mask; -1 = unknown model
};

// Scales weights to sum 1 and drops shapes with weight <= 0.
std::vector<FragTask> NormalizeTasks(std::vector<FragTask> tasks);

// How NodeFragment counts a task that asks for no device (count 0).
enum class HostTaskRule {
  kAllIdle,    // FGD: it leaves all of the node's idle compute unused
  kHostShare,  // accelpool: idle compute x min(1, max(cpu / CPU free, memory /
               // host memory free)); all of it when neither is tracked and asked
};

// Expected unusable idle compute of the node (thousandths of a device).
double NodeFragment(const FragNode& node, std::span<const FragTask> tasks,
                    HostTaskRule rule = HostTaskRule::kAllIdle);

// FGD's node score for a fragmentation change: int(100 * sigmoid(delta / 1000)),
// with delta = F_before - F_after.
int32_t FgdScore(double f_before, double f_after);

// The idle compute the node could give to any task (sum of free compute).
int64_t IdleCompute(const FragNode& node);

// FragTasks for `workload` as seen from one inventory: model bit 0 means
// "this inventory's model", bit 1 "another model" (a shape's '|'-separated
// names match as request filters do, ModelMatches). Memory in percent is
// resolved against the inventory's devices, rounded down as Fit does. An
// empty workload gives a built-in mix of common shapes.
std::vector<FragTask> TasksForInventory(const std::vector<TaskShape>& workload,
                                        const NodeInventory& inv);

// A node's fragmentation now, as the accelpool policy measures it with
// `workload` (empty: the built-in mix): the idle compute of its schedulable
// devices not held whole, and the part of it the workload's next pod is
// expected not to be able to use (NodeFragment, kHostShare; a device whose
// share slots are all taken, and a free hardware partition such as a MIG
// instance, which no task shape asks for, is idle and all fragment).
// Thousandths of a device. For monitoring: the extender exports it per node.
struct FragmentationNow {
  double fragment = 0;
  int64_t idle = 0;
};
FragmentationNow MeasureFragmentation(const NodeInventory& inv, const NodeUsage& usage,
                                      const std::vector<TaskShape>& workload);

// The built-in mix used when PolicyContext::workload is empty.
const std::vector<TaskShape>& DefaultWorkload();

// Policy factories used by MakePolicy for "fragmentation" and "accelpool".
PolicyPtr MakeFragmentationPolicy(const PolicyContext& ctx);
PolicyPtr MakeAccelpoolPolicy(const PolicyContext& ctx);

// The accelpool score of one candidate, in pieces, so that the simulator and
// the policy object share one formula: 2 x (FgdScore - 25) clamped to 0..100,
// plus 1 when the node is at least half used after the placement.
struct AccelpoolInputs {
  double f_before = 0;          // NodeFragment before the placement
  double f_after = 0;           // and after
  int64_t node_capacity = 0;    // sum of device capacity on the node (thousandths)
  int64_t node_idle_after = 0;  // idle compute left on the node after the placement
};
int32_t AccelpoolScore(const AccelpoolInputs& in);

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_FRAG_H_
