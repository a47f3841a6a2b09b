// Who may ask for high task priority (HAMi's nvidia.com/priority: 0).
//
// A high-priority fractional NVIDIA container holds the kernel launches of
// every low-priority container on its GPU, whoever runs them, for as long as
// its launch counter moves (docs/device-plugin.md, "Task priority"); the
// counter lives in a file the container itself can write. So the priority is
// a grant of the platform, not the pod's to take: HighPriorityNamespaces is
// the list of namespaces whose pods may ask for it. The admission webhook
// refuses a pod outside it that asks, and the device plugin treats such a
// container as having no priority (never high), in case the webhook was
// bypassed. Both binaries take it as --high-priority-namespaces, the chart
// as devicePlugin.priority.highPriorityNamespaces.
#ifndef ACCELPOOL_API_TASK_PRIORITY_H_
#define ACCELPOOL_API_TASK_PRIORITY_H_

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace accelpool::api {

class HighPriorityNamespaces {
 public:
  // Nobody may ask for high priority.
  HighPriorityNamespaces() = default;

  // A comma-separated list of namespace names (DNS-1123 labels), "" for
  // nobody, or "*" for every namespace (HAMi's behaviour, for a cluster
  // with one tenant). kInvalidArgument, naming `flag`, for an empty or
  // malformed name, or "*" beside names.
  static StatusOr<HighPriorityNamespaces> Parse(
      std::string_view list, std::string_view flag = "--high-priority-namespaces");

  bool Allows(std::string_view ns) const;
  bool Everyone() const { return every_; }
  bool Nobody() const { return !every_ && names_.empty(); }
  // As Parse takes it ("" for nobody, "*", or the sorted names).
  std::string ToString() const;

 private:
  bool every_ = false;
  std::set<std::string, std::less<>> names_ = {};
};

// The names of the containers (init containers included) of `pod` (a v1.Pod
// as JSON) that ask for high task priority (HighTaskPriority).
std::set<std::string> HighPriorityContainers(const nlohmann::json& pod);

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_TASK_PRIORITY_H_
