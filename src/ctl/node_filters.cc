#include "ctl/node_filters.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>

#include "api/resources.h"

namespace accelpool::ctl {
namespace {

using nlohmann::json;
// Wide enough for a 64-bit amount times a power of ten before the range check.
__extension__ typedef __int128 Wide;

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

// An object's metadata.labels (string values only).
std::map<std::string, std::string> Labels(const json& obj) {
  std::map<std::string, std::string> out;
  const json& labels = At(obj, "/metadata/labels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return out;
}

std::vector<std::string> Strings(const json& arr) { return JsonStrings(arr); }

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

Resources ContainerRequests(const json& c) {
  Resources out;
  const json& res = c.is_object() ? c.value("resources", json()) : json();
  for (const char* field : {"limits", "requests"}) {  // requests win over limits
    const json& m = res.is_object() ? res.value(field, json()) : json();
    if (!m.is_object()) continue;
    for (const auto& [name, v] : m.items()) {
      if (!v.is_string() && !v.is_number()) continue;
      const std::optional<int64_t> q =
          ParseMilliQuantity(v.is_string() ? v.get<std::string>() : v.dump());
      if (q) out[name] = *q;
    }
  }
  return out;
}

void Add(Resources& to, const Resources& r) {
  for (const auto& [k, v] : r) {
    int64_t& t = to[k];
    t = v > std::numeric_limits<int64_t>::max() - t ? std::numeric_limits<int64_t>::max() : t + v;
  }
}

void Max(Resources& to, const Resources& r) {
  for (const auto& [k, v] : r) to[k] = std::max(to[k], v);
}

bool ByteSized(const std::string& name) {
  return name == "memory" || name == "ephemeral-storage" || name.rfind("hugepages-", 0) == 0;
}

std::string Amount(const std::string& name, int64_t milli) {
  char buf[64];
  if (name == "cpu") {
    if (milli % 1000 == 0) return std::to_string(milli / 1000);
    return std::to_string(milli) + "m";
  }
  if (ByteSized(name)) {
    const double bytes = static_cast<double>(milli) / 1000.0;
    if (bytes >= 1024.0 * 1024 * 1024) {
      std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    } else {
      std::snprintf(buf, sizeof(buf), "%.0f MiB", bytes / (1024.0 * 1024));
    }
    return buf;
  }
  if (milli % 1000 == 0) return std::to_string(milli / 1000);
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(milli) / 1000.0);
  return buf;
}

std::string ResourcesReject(const Resources& want, const NodeFacts& node, const NodeUse& use) {
  if (node.allocatable.empty()) return "";
  auto alloc = [&](const std::string& name) {
    auto it = node.allocatable.find(name);
    return it == node.allocatable.end() ? int64_t{0} : it->second;
  };
  const int64_t max_pods = alloc("pods") / 1000;
  if (node.allocatable.contains("pods") && use.pods + 1 > max_pods) {
    return "Too many pods: " + std::to_string(use.pods) + " of the node's " +
           std::to_string(max_pods) + " run there";
  }
  for (const auto& [name, amount] : want) {
    if (amount <= 0) continue;
    // accelpool's memory and compute names: kube-scheduler ignores them.
    std::optional<api::ResourceInfo> info = api::LookupResource(name);
    if (info && info->role != api::ResourceRole::kCount) continue;
    auto used = use.requested.find(name);
    const int64_t taken = used == use.requested.end() ? 0 : used->second;
    const int64_t free = std::max<int64_t>(0, alloc(name) - taken);
    if (amount > free) {
      if (!node.allocatable.contains(name)) {
        return "Insufficient " + name + ": asks " + Amount(name, amount) +
               ", the node advertises none";
      }
      return "Insufficient " + name + ": asks " + Amount(name, amount) + ", " + Amount(name, free) +
             " of " + Amount(name, alloc(name)) + " free";
    }
  }
  return "";
}

std::string PortsReject(const std::vector<HostPort>& want, const NodeUse& use) {
  for (const HostPort& w : want) {
    for (const HostPort& h : use.host_ports) {
      if (w.port != h.port || w.protocol != h.protocol) continue;
      if (w.ip == h.ip || w.ip == "0.0.0.0" || h.ip == "0.0.0.0") {
        return "host port " + w.protocol + " " + (w.ip == "0.0.0.0" ? "" : w.ip + ":") +
               std::to_string(w.port) + " is held by a pod on the node";
      }
    }
  }
  return "";
}

// A labelSelector over a pod's labels: null matches nothing, {} everything.
bool SelectorMatches(const json& sel, const std::map<std::string, std::string>& labels) {
  if (!sel.is_object()) return false;
  const json& ml = sel.value("matchLabels", json());
  if (ml.is_object()) {
    for (const auto& [k, v] : ml.items()) {
      auto it = labels.find(k);
      if (it == labels.end() || !v.is_string() || it->second != v.get<std::string>()) return false;
    }
  }
  const json& exprs = sel.value("matchExpressions", json());
  if (exprs.is_array()) {
    for (const json& e : exprs) {
      const std::string op = Str(e, "operator");
      if (op != "In" && op != "NotIn" && op != "Exists" && op != "DoesNotExist") return false;
      auto it = labels.find(Str(e, "key"));
      const std::optional<std::string> have =
          it == labels.end() ? std::nullopt : std::optional<std::string>(it->second);
      if (!Requirement(e, have, false)) return false;
    }
  }
  return true;
}

std::string DescribeSelector(const json& sel) {
  if (!sel.is_object()) return "nothing";
  std::vector<std::string> parts;
  const json& ml = sel.value("matchLabels", json());
  if (ml.is_object()) {
    for (const auto& [k, v] : ml.items()) {
      parts.push_back(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
    }
  }
  const json& exprs = sel.value("matchExpressions", json());
  if (exprs.is_array()) {
    for (const json& e : exprs) {
      std::string vals;
      for (const std::string& v : Strings(e.is_object() ? e.value("values", json()) : json())) {
        vals += (vals.empty() ? "" : ",") + v;
      }
      parts.push_back(Str(e, "key") + " " + Str(e, "operator") +
                      (vals.empty() ? "" : " (" + vals + ")"));
    }
  }
  if (parts.empty()) return "any labels";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::vector<AffinityTerm> RequiredTerms(const json& pod, const char* field) {
  std::vector<AffinityTerm> out;
  const json& block = At(pod, field);
  const json& required = block.is_object()
                             ? block.value("requiredDuringSchedulingIgnoredDuringExecution", json())
                             : json();
  if (!required.is_array()) return out;
  for (const json& t : required) {
    if (!t.is_object()) continue;
    AffinityTerm term;
    term.topology_key = Str(t, "topologyKey");
    term.selector = t.value("labelSelector", json());
    term.namespaces = Strings(t.value("namespaces", json()));
    if (const json& nss = t.value("namespaceSelector", json()); nss.is_object()) {
      term.namespace_selector = nss;
    }
    out.push_back(std::move(term));
  }
  return out;
}

// Whether pods of namespace `ns` are in the term's scope: 1 yes, 0 no, -1
// cannot tell (a namespaceSelector with labels, and no namespaces' labels).
int InScope(const AffinityTerm& t, const std::string& owner_ns, const std::string& ns,
            const NamespaceLabels* ns_labels) {
  if (t.namespaces.empty() && t.namespace_selector.is_null()) return ns == owner_ns ? 1 : 0;
  if (std::find(t.namespaces.begin(), t.namespaces.end(), ns) != t.namespaces.end()) return 1;
  if (t.namespace_selector.is_null()) return 0;
  if (t.namespace_selector.empty()) return 1;
  if (ns_labels == nullptr) return -1;
  static const std::map<std::string, std::string> kNoLabels;
  auto it = ns_labels->find(ns);
  return SelectorMatches(t.namespace_selector, it == ns_labels->end() ? kNoLabels : it->second) ? 1
                                                                                                : 0;
}

// Whether the term needs namespaces' labels to be judged.
bool SelectsNamespacesByLabel(const AffinityTerm& t) {
  return t.namespace_selector.is_object() && !t.namespace_selector.empty();
}

}  // namespace

PodLabels PodLabelsFromJson(const json& pod) {
  PodLabels p;
  p.ns = Str(At(pod, "/metadata"), "namespace");
  p.labels = Labels(pod);
  p.anti_affinity = RequiredTerms(pod, "/spec/affinity/podAntiAffinity");
  return p;
}

InterPodAffinity::InterPodAffinity(const json& pod, const std::map<std::string, NodeFacts>& facts,
                                   const std::map<std::string, NodeUse>& use,
                                   const NamespaceLabels* ns_labels) {
  const PodLabels self = PodLabelsFromJson(pod);
  auto judged = [&](const std::vector<AffinityTerm>& terms) {
    std::vector<AffinityTerm> out;
    for (const AffinityTerm& t : terms) {
      if (ns_labels == nullptr && SelectsNamespacesByLabel(t)) {
        ++skipped_;
        continue;
      }
      out.push_back(t);
    }
    return out;
  };
  const std::vector<AffinityTerm> affinity =
      judged(RequiredTerms(pod, "/spec/affinity/podAffinity"));
  const std::vector<AffinityTerm> anti = judged(self.anti_affinity);
  auto matches = [&](const AffinityTerm& t, const std::string& owner_ns, const PodLabels& p) {
    return InScope(t, owner_ns, p.ns, ns_labels) == 1 && SelectorMatches(t.selector, p.labels);
  };
  auto matches_all = [&](const PodLabels& p) {
    return std::all_of(affinity.begin(), affinity.end(),
                       [&](const AffinityTerm& t) { return matches(t, self.ns, p); });
  };
  for (const AffinityTerm& t : affinity)
    affinity_.push_back({t.topology_key, DescribeSelector(t.selector), {}});
  for (const AffinityTerm& t : anti)
    anti_.push_back({t.topology_key, DescribeSelector(t.selector), {}});
  self_matches_ = !affinity.empty() && matches_all(self);
  for (const auto& [node, u] : use) {
    auto f = facts.find(node);
    if (f == facts.end()) continue;
    const std::map<std::string, std::string>& labels = f->second.labels;
    auto domain_of = [&](const std::string& key) -> const std::string* {
      auto it = labels.find(key);
      return it == labels.end() ? nullptr : &it->second;
    };
    for (const PodLabels& p : u.pod_labels) {
      // A pod matching every affinity term counts in each term's domain.
      if (!affinity.empty() && matches_all(p)) {
        for (Term& t : affinity_) {
          if (const std::string* d = domain_of(t.key)) {
            ++t.hits[*d];
            affinity_matched_ = true;
          }
        }
      }
      for (size_t i = 0; i < anti.size(); ++i) {
        const std::string* d = domain_of(anti[i].topology_key);
        if (d != nullptr && matches(anti[i], self.ns, p)) ++anti_[i].hits[*d];
      }
      // The bound pod's own anti-affinity, against the pending pod.
      for (const AffinityTerm& t : p.anti_affinity) {
        const int scope = InScope(t, p.ns, self.ns, ns_labels);
        if (scope < 0) {
          ++skipped_;
          continue;
        }
        const std::string* d = domain_of(t.topology_key);
        if (d == nullptr || scope == 0 || !SelectorMatches(t.selector, self.labels)) continue;
        auto& [count, text] = existing_[t.topology_key][*d];
        if (count++ == 0) text = DescribeSelector(t.selector);
      }
    }
  }
}

std::string InterPodAffinity::Rejects(const NodeFacts& node) const {
  auto domain_of = [&](const std::string& key) -> const std::string* {
    auto it = node.labels.find(key);
    return it == node.labels.end() ? nullptr : &it->second;
  };
  auto hits_in = [](const Term& t, const std::string& d) {
    auto it = t.hits.find(d);
    return it == t.hits.end() ? int64_t{0} : it->second;
  };
  const Term* empty_domain = nullptr;
  for (const Term& t : affinity_) {
    const std::string* d = domain_of(t.key);
    if (d == nullptr) return "pod affinity (" + t.text + "): the node has no " + t.key + " label";
    if (empty_domain == nullptr && hits_in(t, *d) == 0) empty_domain = &t;
  }
  if (empty_domain != nullptr && (affinity_matched_ || !self_matches_)) {
    return "pod affinity: no pod matching " + empty_domain->text + " in " + empty_domain->key +
           "=" + *domain_of(empty_domain->key);
  }
  for (const Term& t : anti_) {
    const std::string* d = domain_of(t.key);
    const int64_t hits = d == nullptr ? 0 : hits_in(t, *d);
    if (hits > 0) {
      return "pod anti-affinity: " + std::to_string(hits) + " pod" + (hits == 1 ? "" : "s") +
             " matching " + t.text + " in " + t.key + "=" + *d;
    }
  }
  for (const auto& [key, by_value] : existing_) {
    const std::string* d = domain_of(key);
    auto it = d == nullptr ? by_value.end() : by_value.find(*d);
    if (it == by_value.end()) continue;
    const auto& [count, text] = it->second;
    return "anti-affinity of pods already there: " + std::to_string(count) + " pod" +
           (count == 1 ? "" : "s") + " in " + key + "=" + *d + " keep" + (count == 1 ? "s" : "") +
           " out pods matching " + text;
  }
  return "";
}

std::vector<HostPort> PodHostPorts(const json& pod) {
  std::vector<HostPort> out;
  const json& spec = At(pod, "/spec");
  if (!spec.is_object()) return out;
  auto add = [&](const json& containers, bool sidecars_only) {
    if (!containers.is_array()) return;
    for (const json& c : containers) {
      if (sidecars_only && Str(c, "restartPolicy") != "Always") continue;
      const json& ports = c.is_object() ? c.value("ports", json()) : json();
      if (!ports.is_array()) continue;
      for (const json& p : ports) {
        const json& hp = p.is_object() ? p.value("hostPort", json()) : json();
        if (!hp.is_number_integer() || hp.get<int64_t>() <= 0 || hp.get<int64_t>() > 65535) {
          continue;
        }
        HostPort h;
        h.port = static_cast<int32_t>(hp.get<int64_t>());
        h.ip = Str(p, "hostIP").empty() ? "0.0.0.0" : Str(p, "hostIP");
        h.protocol = Str(p, "protocol").empty() ? "TCP" : Str(p, "protocol");
        out.push_back(std::move(h));
      }
    }
  };
  add(spec.value("containers", json()), false);
  add(spec.value("initContainers", json()), true);
  return out;
}

std::optional<int64_t> ParseMilliQuantity(const std::string& text) {
  // <digits>[.<digits>][<suffix>], suffix one of n u m k M G T P E, Ki .. Ei,
  // or e<int> / E<int>.
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  Wide mantissa = 0;
  int exp10 = 0;
  size_t digits = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (mantissa < (Wide{1} << 62)) {  // then << 60 (Ei) still fits
      mantissa = mantissa * 10 + (c - '0');
      if (point) --exp10;
    } else if (!point) {
      ++exp10;  // digits beyond what matters
    }
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  int exp2 = 0;
  const std::string suffix = text.substr(i);
  static const std::pair<const char*, int> kDecimal[] = {{"", 0},   {"n", -9}, {"u", -6}, {"m", -3},
                                                         {"k", 3},  {"M", 6},  {"G", 9},  {"T", 12},
                                                         {"P", 15}, {"E", 18}};
  static const std::pair<const char*, int> kBinary[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30},
                                                        {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  bool known = false;
  for (const auto& [sfx, e] : kDecimal) {
    if (suffix == sfx) {
      exp10 += e;
      known = true;
    }
  }
  for (const auto& [sfx, e] : kBinary) {
    if (suffix == sfx) {
      exp2 = e;
      known = true;
    }
  }
  if (!known && (suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1) {
    int e = 0;
    const char* b = suffix.data() + 1;
    if (*b == '+') ++b;
    auto [p, ec] = std::from_chars(b, suffix.data() + suffix.size(), e);
    if (ec != std::errc() || p != suffix.data() + suffix.size() || e > 30 || e < -30) {
      return std::nullopt;
    }
    exp10 += e;
    known = true;
  }
  if (!known) return std::nullopt;
  exp10 += 3;  // thousandths
  Wide v = mantissa << exp2;
  const Wide kMax = std::numeric_limits<int64_t>::max();
  for (; exp10 > 0; --exp10) {
    if (v > kMax) return std::nullopt;
    v *= 10;
  }
  bool rounded = false;
  for (; exp10 < 0; ++exp10) {
    rounded = rounded || v % 10 != 0;
    v /= 10;
  }
  if (rounded) ++v;  // up, as kube-scheduler's MilliValue
  if (v > kMax) return std::nullopt;
  return static_cast<int64_t>(v);
}

Resources PodRequests(const json& pod) {
  const json& spec = At(pod, "/spec");
  Resources sum;
  const json& containers = spec.is_object() ? spec.value("containers", json()) : json();
  if (containers.is_array()) {
    for (const json& c : containers) Add(sum, ContainerRequests(c));
  }
  // Init containers run one at a time before them; sidecars (restartPolicy
  // Always) start in order and keep running beside everything after them.
  Resources init_peak;
  Resources sidecars;
  const json& inits = spec.is_object() ? spec.value("initContainers", json()) : json();
  if (inits.is_array()) {
    for (const json& c : inits) {
      Resources r = ContainerRequests(c);
      if (Str(c, "restartPolicy") == "Always") {
        Add(sum, r);
        Add(sidecars, r);
        Max(init_peak, sidecars);
      } else {
        Add(r, sidecars);
        Max(init_peak, r);
      }
    }
  }
  Max(sum, init_peak);
  const json& overhead = spec.is_object() ? spec.value("overhead", json()) : json();
  if (overhead.is_object()) {
    Add(sum, ContainerRequests(json{{"resources", {{"requests", overhead}}}}));
  }
  return sum;
}

NodeFacts NodeFactsFromJson(const json& node) {
  NodeFacts f;
  f.name = Str(At(node, "/metadata"), "name");
  f.labels = Labels(node);
  const json& taints = At(node, "/spec/taints");
  if (taints.is_array()) {
    for (const json& t : taints) {
      f.taints.push_back(Taint{Str(t, "key"), Str(t, "value"), Str(t, "effect")});
    }
  }
  const json& u = At(node, "/spec/unschedulable");
  f.unschedulable = u.is_boolean() && u.get<bool>();
  const json& alloc = At(node, "/status/allocatable");
  if (alloc.is_object()) {
    for (const auto& [name, v] : alloc.items()) {
      if (!v.is_string()) continue;
      if (std::optional<int64_t> q = ParseMilliQuantity(v.get<std::string>())) {
        f.allocatable[name] = *q;
      }
    }
  }
  return f;
}

// In kube-scheduler's filter order (NodeUnschedulable, TaintToleration,
// NodeAffinity, NodePorts, NodeResourcesFit), so the reason is the one its
// own diagnosis would give.
namespace {

std::string TaintReject(const json& pod, const NodeFacts& node) {
  const json& tolerations = At(pod, "/spec/tolerations");
  for (const Taint& t : node.taints) {
    if (t.effect != "NoSchedule" && t.effect != "NoExecute") continue;
    if (!Tolerates(tolerations, t)) {
      return "taint " + t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect +
             " is not tolerated";
    }
  }
  return "";
}

std::string NodeAffinityReject(const json& pod, const NodeFacts& node) {
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
    if (!NodeSelectorMatches(required, node)) {
      const size_t n = terms.is_array() ? terms.size() : 0;
      return "required node affinity: none of its " + std::to_string(n) + " nodeSelectorTerm" +
             (n == 1 ? "" : "s") + " matches the node's labels";
    }
  }
  return "";
}

}  // namespace

std::vector<std::string> JsonStrings(const json& arr) {
  std::vector<std::string> out;
  if (!arr.is_array()) return out;
  for (const json& v : arr) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

bool LabelSelectorMatches(const json& selector, const std::map<std::string, std::string>& labels) {
  return SelectorMatches(selector, labels);
}

bool NodeSelectorMatches(const json& selector, const NodeFacts& node) {
  const json& terms = selector.is_object() ? selector.value("nodeSelectorTerms", json()) : json();
  if (!terms.is_array()) return false;
  return std::any_of(terms.begin(), terms.end(),
                     [&](const json& t) { return TermMatches(t, node); });
}

PodAsks PodAsksFromJson(const json& pod) { return PodAsks{PodRequests(pod), PodHostPorts(pod)}; }

std::string SchedulerRejects(const json& pod, const NodeFacts& node, const NodeUse* use) {
  return SchedulerRejects(pod, PodAsksFromJson(pod), node, use);
}

std::string SchedulerRejects(const json& pod, const PodAsks& asks, const NodeFacts& node,
                             const NodeUse* use) {
  if (node.unschedulable &&
      !Tolerates(At(pod, "/spec/tolerations"),
                 Taint{"node.kubernetes.io/unschedulable", "", "NoSchedule"})) {
    return "cordoned (spec.unschedulable): no new pod goes here until `kubectl uncordon`";
  }
  if (std::string no = TaintReject(pod, node); !no.empty()) return no;
  if (std::string no = NodeAffinityReject(pod, node); !no.empty()) return no;
  if (use == nullptr) return "";
  if (std::string no = PortsReject(asks.host_ports, *use); !no.empty()) return no;
  return ResourcesReject(asks.requests, node, *use);
}

}  // namespace accelpool::ctl

namespace accelpool::ctl {

TopologySpread::TopologySpread(const json& pod, const std::map<std::string, NodeFacts>& facts,
                               const std::map<std::string, NodeUse>& use) {
  const PodLabels self = PodLabelsFromJson(pod);
  const json& list = At(pod, "/spec/topologySpreadConstraints");
  if (!list.is_array()) return;
  for (const json& c : list) {
    if (Str(c, "whenUnsatisfiable") != "DoNotSchedule") continue;  // ScheduleAnyway only scores
    Constraint k;
    k.key = Str(c, "topologyKey");
    const json& skew = c.value("maxSkew", json());
    k.max_skew = skew.is_number_integer() ? std::max<int64_t>(1, skew.get<int64_t>()) : 1;
    const json& min_domains = c.value("minDomains", json());
    k.min_domains = min_domains.is_number_integer() ? min_domains.get<int64_t>() : 1;
    // matchLabelKeys: the pod's own values for those keys join the selector.
    json sel = c.value("labelSelector", json());
    for (const std::string& key : Strings(c.value("matchLabelKeys", json()))) {
      auto it = self.labels.find(key);
      if (!sel.is_object() || it == self.labels.end()) continue;
      json& ml = sel["matchLabels"];
      if (ml.is_null() || ml.is_object()) ml[key] = it->second;
    }
    k.text = DescribeSelector(sel);
    k.self = SelectorMatches(sel, self.labels);
    const bool honor_affinity = Str(c, "nodeAffinityPolicy") != "Ignore";
    const bool honor_taints = Str(c, "nodeTaintsPolicy") == "Honor";
    for (const auto& [name, f] : facts) {
      auto domain = f.labels.find(k.key);
      if (domain == f.labels.end()) continue;
      if (honor_affinity && !NodeAffinityReject(pod, f).empty()) continue;
      if (honor_taints && !TaintReject(pod, f).empty()) continue;
      int64_t& n = k.counts[domain->second];
      auto u = use.find(name);
      if (u == use.end()) continue;
      for (const PodLabels& p : u->second.pod_labels) {
        if (p.ns == self.ns && SelectorMatches(sel, p.labels)) ++n;
      }
    }
    constraints_.push_back(std::move(k));
  }
}

std::string TopologySpread::Rejects(const NodeFacts& node) const {
  for (const Constraint& k : constraints_) {
    auto domain = node.labels.find(k.key);
    if (domain == node.labels.end()) {
      return "topology spread (" + k.text + "): the node has no " + k.key + " label";
    }
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const auto& [v, n] : k.counts) least = std::min(least, n);
    if (k.counts.empty() || static_cast<int64_t>(k.counts.size()) < k.min_domains) least = 0;
    auto here = k.counts.find(domain->second);
    const int64_t with_pod = (here == k.counts.end() ? 0 : here->second) + (k.self ? 1 : 0);
    if (with_pod - least > k.max_skew) {
      return "topology spread: " + k.key + "=" + domain->second + " would hold " +
             std::to_string(with_pod) + " pods matching " + k.text + ", the emptiest domain " +
             std::to_string(least) + " (maxSkew " + std::to_string(k.max_skew) + ")";
    }
  }
  return "";
}

}  // namespace accelpool::ctl
