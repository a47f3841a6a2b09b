#include "api/task_priority.h"

#include "api/pod_request.h"

namespace accelpool::api {
namespace {

bool IsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace

StatusOr<HighPriorityNamespaces> HighPriorityNamespaces::Parse(std::string_view list,
                                                               std::string_view flag) {
  HighPriorityNamespaces out;
  if (list.empty()) return out;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string_view name = list.substr(start, comma - start);
    start = comma + 1;
    if (name == "*") {
      out.every_ = true;
    } else if (!IsLabel(name)) {
      return InvalidArgumentError(
          std::string(flag) + ": \"" + std::string(name) +
          "\" is not a namespace name (1-63 characters of a-z, 0-9 and -, starting and ending "
          "with a letter or digit); give a comma-separated list, \"*\" for every namespace, or "
          "nothing for none, in: " +
          std::string(list));
    } else {
      out.names_.insert(std::string(name));
    }
  }
  if (out.every_ && !out.names_.empty()) {
    return InvalidArgumentError(std::string(flag) +
                                ": \"*\" (every namespace) beside namespace names; give one or "
                                "the other, in: " +
                                std::string(list));
  }
  return out;
}

bool HighPriorityNamespaces::Allows(std::string_view ns) const {
  return every_ || names_.find(ns) != names_.end();
}

std::string HighPriorityNamespaces::ToString() const {
  if (every_) return "*";
  std::string out;
  for (const std::string& n : names_) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::set<std::string> HighPriorityContainers(const nlohmann::json& pod) {
  std::set<std::string> out;
  if (!pod.is_object()) return out;
  for (const char* list : {"/spec/containers", "/spec/initContainers"}) {
    const nlohmann::json::json_pointer at(list);
    if (!pod.contains(at) || !pod.at(at).is_array()) continue;
    for (const nlohmann::json& c : pod.at(at)) {
      if (HighTaskPriority(c) && c.contains("name") && c.at("name").is_string()) {
        out.insert(c.at("name").get<std::string>());
      }
    }
  }
  return out;
}

}  // namespace accelpool::api
