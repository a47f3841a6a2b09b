#include "ctl/node_filters.h"

#include <algorithm>
#include <charconv>
#include <optional>

namespace accelpool::ctl {
namespace {

using nlohmann::json;

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

const json& At(const json& j, const char* pointer) {
  static const json kNull;
  const json::json_pointer p(pointer);
  return j.contains(p) ? j.at(p) : kNull;
}

std::vector<std::string> Strings(const json& arr) {
  std::vector<std::string> out;
  if (!arr.is_array()) return out;
  for (const json& v : arr) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

std::optional<int64_t> Int(const std::string& s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || s.empty()) return std::nullopt;
  return v;
}

bool Tolerates(const json& tolerations, const Taint& t) {
  if (!tolerations.is_array()) return false;
  for (const json& tol : tolerations) {
    const std::string effect = Str(tol, "effect");
    if (!effect.empty() && effect != t.effect) continue;
    const std::string op = Str(tol, "operator").empty() ? "Equal" : Str(tol, "operator");
    const std::string key = Str(tol, "key");
    if (op == "Exists") {
      if (key.empty() || key == t.key) return true;
    } else if (op == "Equal") {
      if (key == t.key && Str(tol, "value") == t.value) return true;
    }
  }
  return false;
}

// One requirement of a nodeSelectorTerm against a value (nullopt: no such
// label or field).
bool Requirement(const json& req, const std::optional<std::string>& have, bool field) {
  const std::string op = Str(req, "operator");
  const std::vector<std::string> values =
      Strings(req.is_object() ? req.value("values", json()) : json());
  const bool listed = have && std::find(values.begin(), values.end(), *have) != values.end();
  if (op == "In") return listed;
  if (op == "NotIn") return !listed;
  if (field) return false;  // matchFields take In and NotIn only
  if (op == "Exists") return have.has_value();
  if (op == "DoesNotExist") return !have.has_value();
  if ((op == "Gt" || op == "Lt") && have && values.size() == 1) {
    const std::optional<int64_t> a = Int(*have);
    const std::optional<int64_t> b = Int(values[0]);
    if (!a || !b) return false;
    return op == "Gt" ? *a > *b : *a < *b;
  }
  return false;
}

bool TermMatches(const json& term, const NodeFacts& node) {
  if (!term.is_object()) return false;
  const json& exprs = term.value("matchExpressions", json());
  const json& fields = term.value("matchFields", json());
  const size_t n = (exprs.is_array() ? exprs.size() : 0) + (fields.is_array() ? fields.size() : 0);
  if (n == 0) return false;  // an empty term matches nothing
  if (exprs.is_array()) {
    for (const json& e : exprs) {
      auto it = node.labels.find(Str(e, "key"));
      const std::optional<std::string> have =
          it == node.labels.end() ? std::nullopt : std::optional<std::string>(it->second);
      if (!Requirement(e, have, false)) return false;
    }
  }
  if (fields.is_array()) {
    for (const json& f : fields) {
      const std::optional<std::string> have =
          Str(f, "key") == "metadata.name" ? std::optional<std::string>(node.name) : std::nullopt;
      if (!Requirement(f, have, true)) return false;
    }
  }
  return true;
}

}  // namespace

NodeFacts NodeFactsFromJson(const json& node) {
  NodeFacts f;
  f.name = Str(At(node, "/metadata"), "name");
  const json& labels = At(node, "/metadata/labels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) f.labels[k] = v.get<std::string>();
    }
  }
  const json& taints = At(node, "/spec/taints");
  if (taints.is_array()) {
    for (const json& t : taints) {
      f.taints.push_back(Taint{Str(t, "key"), Str(t, "value"), Str(t, "effect")});
    }
  }
  const json& u = At(node, "/spec/unschedulable");
  f.unschedulable = u.is_boolean() && u.get<bool>();
  return f;
}

// In kube-scheduler's filter order (NodeUnschedulable, TaintToleration,
// NodeAffinity), so the reason is the one its own diagnosis would give.
std::string SchedulerRejects(const json& pod, const NodeFacts& node) {
  const json& tolerations = At(pod, "/spec/tolerations");
  if (node.unschedulable &&
      !Tolerates(tolerations, Taint{"node.kubernetes.io/unschedulable", "", "NoSchedule"})) {
    return "cordoned (spec.unschedulable): no new pod goes here until `kubectl uncordon`";
  }
  for (const Taint& t : node.taints) {
    if (t.effect != "NoSchedule" && t.effect != "NoExecute") continue;
    if (!Tolerates(tolerations, t)) {
      return "taint " + t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect +
             " is not tolerated";
    }
  }
  const json& selector = At(pod, "/spec/nodeSelector");
  if (selector.is_object()) {
    for (const auto& [k, v] : selector.items()) {
      const std::string want = v.is_string() ? v.get<std::string>() : v.dump();
      auto it = node.labels.find(k);
      if (it == node.labels.end()) {
        return "nodeSelector " + k + "=" + want + ": the node has no " + k + " label";
      }
      if (it->second != want) {
        return "nodeSelector " + k + "=" + want + ": the node's label is " + k + "=" + it->second;
      }
    }
  }
  const json& required =
      At(pod, "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution");
  if (required.is_object()) {
    const json& terms = required.value("nodeSelectorTerms", json());
    bool any = false;
    if (terms.is_array()) {
      for (const json& t : terms) any = any || TermMatches(t, node);
    }
    if (!any) {
      const size_t n = terms.is_array() ? terms.size() : 0;
      return "required node affinity: none of its " + std::to_string(n) + " nodeSelectorTerm" +
             (n == 1 ? "" : "s") + " matches the node's labels";
    }
  }
  return "";
}

}  // namespace accelpool::ctl
