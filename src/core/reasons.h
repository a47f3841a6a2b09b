// Typed "does not fit" reasons and their aggregation into operator messages.
//
// "Does not fit" is a result, never an error: Fit returns a FitResult whose
// code says whether the pod could fit after other pods leave (kUnschedulable)
// or never on this node as it is built (kUnresolvable). Reason names live here
// and only here; nothing parses a reason string back.
//
// Thread-safety: values; ReasonAggregator is not thread-safe.
#ifndef ACCELPOOL_CORE_REASONS_H_
#define ACCELPOOL_CORE_REASONS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace accelpool::core {

enum class FitCode : uint8_t {
  kFits,
  kUnschedulable,  // could fit once assigned devices are released
  kUnresolvable,   // can never fit on this node (too few devices, wrong model, bad count)
};

enum class Reason : uint8_t {
  kNoDevices,            // the node has no devices of the requested vendor
  kTooFewDevices,        // fewer devices than the count, even when empty
  kInvalidCount,         // the count is not one the topology allows
  kModelMismatch,        // no device passes model include/exclude
  kIdMismatch,           // no device passes id include/exclude
  kUnhealthy,            // matching devices are unhealthy
  kCordoned,             // matching healthy devices are cordoned by the operator
  kMemoryTooLarge,       // more memory per device than any device has
  kInsufficientDevices,  // not enough free whole devices
  kInsufficientMemory,   // not enough free memory on enough devices
  kInsufficientCompute,  // not enough free compute on enough devices
  kShareLimit,           // devices already host their maximum number of sharers
  kExclusiveTaken,       // devices are held exclusively by others
  kSliceSizeMismatch,    // devices host slices of another size
  kHandleBudget,         // the node's slice handle budget is used up
  kNoTopologyGroup,      // no ring/wing/zone has enough free devices
  kNoWholeModule,        // not enough free whole modules (910C die pairs)
  kNoMirroredPairs,      // not enough free mirrored pairs across rings
  kNumaUnsatisfiable,    // no NUMA node has enough free devices
  kPartitionMismatch,    // too few devices of the requested partition (MIG profile, or whole)
  kForeignMemory,        // free devices hold memory no grant accounts for (Device::foreign_mib)
  kLast = kForeignMemory,
};

std::string_view ReasonName(Reason r);  // "InsufficientMemory"

struct FitReason {
  Reason reason = Reason::kInsufficientDevices;
  int64_t requested = 0;  // what one device or the request needed (MiB, thousandths, count)
  int64_t available = 0;  // the best the node offered
  friend bool operator==(const FitReason&, const FitReason&) = default;
};

// "2 GiB short on every GPU" style text for one reason.
std::string DescribeReason(const FitReason& r);

// Collects reasons per node and summarises them across nodes:
// "12 nodes: no free whole module; 3 nodes: insufficient memory (need 4096 MiB, best 2048 MiB)".
class ReasonAggregator {
 public:
  void Add(std::string_view node, const std::vector<FitReason>& reasons);
  std::string Summarize(size_t max_items = 5) const;
  size_t nodes() const { return nodes_; }

 private:
  std::map<Reason, size_t> count_;
  std::map<Reason, FitReason> example_;
  size_t nodes_ = 0;
};

}  // namespace accelpool::core

#endif  // ACCELPOOL_CORE_REASONS_H_
