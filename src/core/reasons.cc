#include "core/reasons.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace accelpool::core {

std::string_view ReasonName(Reason r) {
  switch (r) {
    case Reason::kNoDevices: return "NoDevices";
    case Reason::kTooFewDevices: return "TooFewDevices";
    case Reason::kInvalidCount: return "InvalidCount";
    case Reason::kModelMismatch: return "ModelMismatch";
    case Reason::kIdMismatch: return "IdMismatch";
    case Reason::kUnhealthy: return "Unhealthy";
    case Reason::kCordoned:
      return "Cordoned";
    case Reason::kMemoryTooLarge: return "MemoryTooLarge";
    case Reason::kInsufficientDevices: return "InsufficientDevices";
    case Reason::kInsufficientMemory: return "InsufficientMemory";
    case Reason::kInsufficientCompute: return "InsufficientCompute";
    case Reason::kShareLimit: return "ShareLimit";
    case Reason::kExclusiveTaken: return "ExclusiveTaken";
    case Reason::kSliceSizeMismatch: return "SliceSizeMismatch";
    case Reason::kHandleBudget: return "HandleBudget";
    case Reason::kNoTopologyGroup: return "NoTopologyGroup";
    case Reason::kNoWholeModule: return "NoWholeModule";
    case Reason::kNoMirroredPairs: return "NoMirroredPairs";
    case Reason::kNumaUnsatisfiable: return "NumaUnsatisfiable";
    case Reason::kPartitionMismatch:
      return "PartitionMismatch";
    case Reason::kForeignMemory:
      return "ForeignMemory";
  }
  return "Unknown";
}

std::string DescribeReason(const FitReason& r) {
  std::ostringstream out;
  switch (r.reason) {
    case Reason::kNoDevices:
      out << "no devices of the requested vendor";
      break;
    case Reason::kTooFewDevices:
      out << "too few devices (need " << r.requested << ", node has " << r.available << ")";
      break;
    case Reason::kInvalidCount:
      if (r.available == 1) {  // fraction_single_device
        out << "count " << r.requested
            << " is not valid for a share of these devices (a share takes one device; ask for "
               "whole devices to use more)";
      } else {
        out << "count " << r.requested << " is not valid for this topology";
      }
      break;
    case Reason::kModelMismatch:
      if (r.available > 0) {
        out << "too few devices of an allowed model (need " << r.requested << ", node has "
            << r.available << ")";
      } else {
        out << "no device of an allowed model";
      }
      break;
    case Reason::kIdMismatch:
      if (r.available > 0) {
        out << "too few devices with an allowed id (need " << r.requested << ", node has "
            << r.available << ")";
      } else {
        out << "no device with an allowed id";
      }
      break;
    case Reason::kUnhealthy:
      out << "matching devices are unhealthy (" << r.available << " healthy, need "
          << r.requested << ")";
      break;
    case Reason::kCordoned:
      out << "matching devices are cordoned: taken out of service by the operator (" << r.available
          << " in service, need " << r.requested << ")";
      break;
    case Reason::kMemoryTooLarge:
      out << "memory per device too large (need " << r.requested << " MiB, largest device "
          << r.available << " MiB)";
      break;
    case Reason::kInsufficientDevices:
      out << "not enough free devices (need " << r.requested << ", free " << r.available << ")";
      break;
    case Reason::kInsufficientMemory:
      out << "insufficient memory (need " << r.requested << " MiB per device, best free "
          << r.available << " MiB)";
      break;
    case Reason::kInsufficientCompute:
      out << "insufficient compute (need " << r.requested / 10.0 << "% per device, best free "
          << r.available / 10.0 << "%)";
      break;
    case Reason::kShareLimit:
      out << "devices already shared by their maximum number of containers";
      break;
    case Reason::kExclusiveTaken:
      out << "devices held exclusively by other pods";
      break;
    case Reason::kSliceSizeMismatch:
      out << "devices host slices of another size (need " << r.requested << " MiB slices)";
      break;
    case Reason::kHandleBudget:
      out << "the node's slice budget is used up";
      break;
    case Reason::kNoTopologyGroup:
      out << "no ring/link group has " << r.requested << " free devices (best "
          << r.available << ")";
      break;
    case Reason::kNoWholeModule:
      out << "not enough free whole modules (need " << r.requested << ", free "
          << r.available << ")";
      break;
    case Reason::kNoMirroredPairs:
      out << "not enough free mirrored device pairs across rings (need " << r.requested
          << ", free " << r.available << ")";
      break;
    case Reason::kNumaUnsatisfiable:
      out << "no NUMA node has " << r.requested << " free devices (best " << r.available << ")";
      break;
    case Reason::kPartitionMismatch:
      out << "too few devices partitioned as requested (need " << r.requested << ", node has "
          << r.available << "): a MIG instance fits only its nvidia.com/mig-<profile> resource, "
          << "a whole GPU only nvidia.com/gpu";
      break;
    case Reason::kForeignMemory:
      out << r.available << " otherwise free device(s) hold memory that no grant accounts for "
          << "(a leftover process or a container that sets the visible devices itself); they "
          << "take shares only until it is freed (see the node's AccelpoolForeignMemory events)";
      break;
  }
  return out.str();
}

void ReasonAggregator::Add(std::string_view /*node*/, const std::vector<FitReason>& reasons) {
  ++nodes_;
  // Count each reason once per node; keep the example that came closest.
  std::vector<Reason> seen;
  for (const FitReason& r : reasons) {
    if (std::find(seen.begin(), seen.end(), r.reason) != seen.end()) continue;
    seen.push_back(r.reason);
    ++count_[r.reason];
    auto it = example_.find(r.reason);
    if (it == example_.end() || r.available > it->second.available) example_[r.reason] = r;
  }
}

std::string ReasonAggregator::Summarize(size_t max_items) const {
  std::vector<std::pair<size_t, Reason>> order;
  order.reserve(count_.size());
  for (const auto& [reason, n] : count_) order.emplace_back(n, reason);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::ostringstream out;
  size_t shown = 0;
  for (const auto& [n, reason] : order) {
    if (shown == max_items) {
      out << "; and " << (order.size() - shown) << " more reasons";
      break;
    }
    if (shown > 0) out << "; ";
    out << n << (n == 1 ? " node: " : " nodes: ") << DescribeReason(example_.at(reason));
    ++shown;
  }
  return out.str();
}

}  // namespace accelpool::core
