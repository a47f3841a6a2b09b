#include "api/pod_request.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>

#include "api/host_request.h"
#include "api/json_check.h"
#include "api/resources.h"
#include "core/fit.h"

namespace accelpool::api {

using nlohmann::json;

namespace {

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

// Splits "a, b,,c" into {"a","b","c"}.
std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

// HAMi's hami.io/gpu-scheduler-policy: one of binpack, spread,
// topology-aware, numa, mutex, or (HAMi 2.10) an ordered comma-separated list
// of them. In accelpool terms: topology-aware is the topology policy (best
// links, then binpack); else the first of binpack and spread; numa adds
// nothing (every policy prefers one NUMA group already); mutex asks for
// devices nobody else uses (exclusive). A value with any other word is kept
// as it is, names no policy, and is refused at admission.
struct HamiGpuPolicy {
  std::string policy;  // "" = the cluster's
  bool mutex = false;
};
HamiGpuPolicy TranslateHamiGpuPolicy(const std::string& value) {
  HamiGpuPolicy out;
  bool topology = false;
  std::string order;  // the first of binpack and spread
  for (std::string word : SplitList(value)) {
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (word == "topology-aware") {
      topology = true;
    } else if (word == "binpack" || word == "spread") {
      if (order.empty()) order = word;
    } else if (word == "mutex") {
      out.mutex = true;
    } else if (word != "numa") {
      return HamiGpuPolicy{value, false};
    }
  }
  out.policy = topology ? "topology" : order;
  return out;
}

// Reads a string-to-string map (annotations, labels); a non-string value is an error.
Status ReadStringMap(const json& meta, const char* key, std::map<std::string, std::string>& out) {
  if (!meta.is_object() || !meta.contains(key)) return Status::Ok();
  const json& m = meta.at(key);
  if (m.is_null()) return Status::Ok();
  if (!m.is_object()) {
    return InvalidArgumentError(std::string("metadata.") + key + ": want an object, got " +
                                internal::Describe(m));
  }
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      return InvalidArgumentError(std::string("metadata.") + key + "." + k +
                                  ": want a string, got " + internal::Describe(v));
    }
    out[k] = v.get<std::string>();
  }
  return Status::Ok();
}

std::optional<std::string> Lookup(const std::map<std::string, std::string>& m,
                                  const std::string& k) {
  auto it = m.find(k);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

StatusOr<bool> ParseBoolAnnotation(const std::string& key, const std::string& v) {
  std::string l = v;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "true" || l == "1" || l == "yes") return true;
  if (l == "false" || l == "0" || l == "no" || l.empty()) return false;
  return InvalidArgumentError("annotation " + key + ": want \"true\" or \"false\", got " +
                              Quote(v));
}

// Everything one container asks of one vendor, before units are applied.
struct VendorAsk {
  std::optional<int64_t> count;
  std::string count_name;
  std::optional<int64_t> memory_mib;
  std::string memory_name;
  std::optional<int64_t> memory_percent;
  std::string percent_name;
  std::optional<int64_t> compute;  // thousandths
  std::string compute_name;
  std::string model_family;
  std::string partition;  // from nvidia.com/mig-<profile>
  std::string first_name;
  // A count name given as 0: asks for nothing, names no family or partition,
  // and leaves the count to another count name of the vendor (a chart's
  // default nvidia.com/gpu: 0 beside a MIG profile's name).
  std::string zero_count_name;
};

// Pod-wide selectors from annotations.
struct Selectors {
  std::vector<std::string> model_include, model_exclude, id_include, id_exclude;
  bool numa = false, exclusive = false, has_exclusive = false;
  // NVIDIA-specific spellings, used for NVIDIA requests when the accelpool.io/* key is absent.
  std::vector<std::string> nv_model_include, nv_model_exclude, nv_id_include, nv_id_exclude;
  bool nv_numa = false;
  bool has_model_include = false, has_model_exclude = false, has_id_include = false,
       has_id_exclude = false, has_numa = false;
};

Status ReadSelectors(const std::map<std::string, std::string>& ann, Selectors& s) {
  auto list = [&](const char* key, std::vector<std::string>& out, bool* has) {
    if (auto v = Lookup(ann, key)) {
      out = SplitList(*v);
      if (has != nullptr) *has = true;
    }
  };
  list("accelpool.io/model-include", s.model_include, &s.has_model_include);
  list("accelpool.io/model-exclude", s.model_exclude, &s.has_model_exclude);
  list("accelpool.io/uuid-include", s.id_include, &s.has_id_include);
  list("accelpool.io/uuid-exclude", s.id_exclude, &s.has_id_exclude);
  list("nvidia.com/use-gputype", s.nv_model_include, nullptr);
  list("nvidia.com/nouse-gputype", s.nv_model_exclude, nullptr);
  list("nvidia.com/use-gpuuuid", s.nv_id_include, nullptr);
  list("nvidia.com/nouse-gpuuuid", s.nv_id_exclude, nullptr);
  if (auto v = Lookup(ann, "accelpool.io/numa-bind")) {
    auto b = ParseBoolAnnotation("accelpool.io/numa-bind", *v);
    if (!b.ok()) return b.status();
    s.numa = *b;
    s.has_numa = true;
  }
  if (auto v = Lookup(ann, "nvidia.com/numa-bind")) {
    auto b = ParseBoolAnnotation("nvidia.com/numa-bind", *v);
    if (!b.ok()) return b.status();
    s.nv_numa = *b;
  }
  if (auto v = Lookup(ann, "accelpool.io/exclusive")) {
    auto b = ParseBoolAnnotation("accelpool.io/exclusive", *v);
    if (!b.ok()) return b.status();
    s.exclusive = *b;
    s.has_exclusive = true;
  }
  return Status::Ok();
}

Status CheckDisjoint(const std::vector<std::string>& inc, const std::vector<std::string>& exc,
                     const char* what) {
  for (const std::string& i : inc) {
    for (const std::string& e : exc) {
      std::string a = i, b = e;
      std::transform(a.begin(), a.end(), a.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::transform(b.begin(), b.end(), b.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (a == b) {
        return InvalidArgumentError(std::string(what) + " " + Quote(i) +
                                    " is both included and excluded; remove it from one list");
      }
    }
  }
  return Status::Ok();
}

// One value of nvidia.com/priority: true for 0 (high), false for 1 (low).
StatusOr<bool> TaskPriorityOf(const json& v) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_number_integer() || v.is_number_unsigned()) {
    text = v.dump();
  }
  if (text == "0") return true;
  if (text == "1") return false;
  return InvalidArgumentError("want 0 (high priority) or 1 (low priority), got " +
                              internal::Describe(v));
}

// The count name that `name` (a memory, percent or compute name) belongs to,
// or "".
std::string OwnerOf(const std::string& name) {
  for (const ResourceInfo& r : KnownResources()) {
    if (r.role == ResourceRole::kCount &&
        (r.memory_name == name || r.memory_percent_name == name || r.compute_name == name)) {
      return r.name;
    }
  }
  return "";
}

// A memory, percent or compute name goes with one count name (its sibling in
// the resource table). Through another, such as a vendor's whole-device name
// (kunlunxin.com/xpu with kunlunxin.com/vxpu-memory), the container would be
// booked a share of a device that is handed over whole and uncapped.
Status CheckShareNames(const VendorAsk& ask) {
  // A MIG profile's name: the request check says that an instance is granted whole.
  if (ask.count_name.empty() || !ask.partition.empty()) return Status::Ok();
  const std::optional<ResourceInfo> count = LookupResource(ask.count_name);
  if (!count) return Status::Ok();
  const std::pair<const std::string*, const std::string*> pairs[] = {
      {&ask.memory_name, &count->memory_name},
      {&ask.percent_name, &count->memory_percent_name},
      {&ask.compute_name, &count->compute_name}};
  for (const auto& [given, sibling] : pairs) {
    if (given->empty() || *given == *sibling) continue;
    const std::string owner = OwnerOf(*given);
    return InvalidArgumentError(
        *given + " does not go with " + ask.count_name + "; " +
        (owner.empty() ? std::string() : "ask through " + owner + " for a share of a device, or ") +
        "drop " + *given + " to get whole devices");
  }
  return Status::Ok();
}

// Collects a container's resources by vendor.
Status CollectContainer(const json& c, const std::string& where,
                        std::map<core::Vendor, VendorAsk>& asks) {
  if (!c.contains("resources") || c.at("resources").is_null()) return Status::Ok();
  const json& res = c.at("resources");
  if (!res.is_object()) {
    return InvalidArgumentError(where + ": resources: want an object, got " +
                                internal::Describe(res));
  }
  std::map<std::string, json> merged;  // limits win over requests
  for (const char* section : {"requests", "limits"}) {
    if (!res.contains(section) || res.at(section).is_null()) continue;
    const json& m = res.at(section);
    if (!m.is_object()) {
      return InvalidArgumentError(where + ": resources." + section + ": want an object, got " +
                                  internal::Describe(m));
    }
    for (const auto& [name, v] : m.items()) merged[name] = v;
  }
  for (const auto& [name, v] : merged) {
    auto info = LookupResource(name);
    if (info && info->role == ResourceRole::kIgnored && name == kTaskPriorityResource) {
      ACCELPOOL_RETURN_IF_ERROR(TaskPriorityOf(v).status().WithPrefix(where + ": " + name));
    }
    if (!info || info->role == ResourceRole::kIgnored) continue;
    std::string text;
    if (v.is_string()) {
      text = v.get<std::string>();
    } else if (v.is_number_integer() || v.is_number_unsigned()) {
      text = v.dump();
    } else {
      return InvalidArgumentError(where + ": " + name + ": want a whole number, got " +
                                  internal::Describe(v));
    }
    const bool bytes = info->role == ResourceRole::kMemory && info->suffix_means_bytes;
    auto q = ParseWholeQuantity(text, bytes);
    if (!q.ok()) return q.status().WithPrefix(where + ": " + name);
    if (*q == 0 && info->role != ResourceRole::kCount) {
      // A memory or compute amount of 0 is not given, as in HAMi (whose
      // gpucores: 0 means "no compute limit"): the container asks what the
      // rest of its resources say, and for nothing of this vendor alone.
      continue;
    }
    if (*q == 0) {  // a count: see VendorAsk::zero_count_name
      VendorAsk& ask = asks[info->vendor];
      if (ask.zero_count_name.empty()) ask.zero_count_name = name;
      continue;
    }
    VendorAsk& ask = asks[info->vendor];
    if (ask.first_name.empty()) ask.first_name = name;
    if (!info->model_family.empty()) {
      if (!ask.model_family.empty() && ask.model_family != info->model_family) {
        return InvalidArgumentError(where + ": asks for device families " +
                                    Quote(ask.model_family) + " and " + Quote(info->model_family) +
                                    " of one vendor; use one family per container");
      }
      ask.model_family = info->model_family;
    }
    if (!info->partition.empty()) ask.partition = info->partition;
    const int64_t value = *q;
    switch (info->role) {
      case ResourceRole::kCount:
        if (ask.count) {
          return InvalidArgumentError(where + ": asks through both " + ask.count_name + " and " +
                                      name + "; use one count resource per vendor");
        }
        ask.count = value;
        ask.count_name = name;
        break;
      case ResourceRole::kMemory: {
        int64_t mib = 0;
        // A binary unit (Ki .. Ei, the only suffixes ending in i that
        // ParseWholeQuantity takes): bytes (MetaX vmemory); a number: units.
        // Decimal suffixes and exponents only write a number (the apiserver
        // turns a plain 2000 into "2k"), so "2k" is 2000 units, not bytes.
        const bool binary_unit = text.size() > 2 && text.back() == 'i';
        if (bytes && binary_unit) {
          mib = value / (int64_t{1} << 20) + (value % (int64_t{1} << 20) != 0);  // rounded up
        } else if (value <= (int64_t{1} << 40) / info->unit) {
          mib = value * info->unit;
        } else {
          mib = std::numeric_limits<int64_t>::max();
        }
        if (mib > (int64_t{1} << 40)) {
          return InvalidArgumentError(
              where + ": " + name + ": " + text + " is too large (memory is in " +
              (info->unit > 1 ? "units of " + std::to_string(info->unit) + " MiB"
                              : std::string("MiB")) +
              " per device" + (bytes ? "; bytes take a binary unit such as 8Gi" : "") + ")");
        }
        ask.memory_mib = mib;
        ask.memory_name = name;
        break;
      }
      case ResourceRole::kMemoryPercent:
        if (value < 1 || value > 100) {
          return InvalidArgumentError(where + ": " + name + ": " + text +
                                      "% is out of range; use 1..100");
        }
        ask.memory_percent = value;
        ask.percent_name = name;
        break;
      case ResourceRole::kCompute:
        if (value < 1 || value > info->unit) {
          return InvalidArgumentError(
              where + ": " + name + ": " + text + " is out of range; use 1.." +
              std::to_string(info->unit) +
              (info->unit == 100 ? " (percent of a device)" : " (units per device)"));
        }
        // Rounded down (at least 1), so N shares of 1/N of a device fit it:
        // rounded up, 16 shares of 1/16 (62.5) would need 1008.
        ask.compute = std::max<int64_t>(1, value * core::kComputeWhole / info->unit);
        ask.compute_name = name;
        break;
      case ResourceRole::kIgnored:
        break;
    }
  }
  return Status::Ok();
}

// The first job identity found, as "<ns>/<name>".
void FindGroup(const std::map<std::string, std::string>& ann,
               const std::map<std::string, std::string>& labels, const std::string& ns,
               PodDeviceRequest& out) {
  struct Source {
    const char* key;
    bool annotation, label;
  };
  static constexpr Source kSources[] = {
      {"accelpool.io/pod-group", true, true},
      {"scheduling.k8s.io/group-name", true, true},
      {"pod-group.scheduling.sigs.k8s.io", true, true},
      {"kueue.x-k8s.io/workload", true, false},
      {"jobset.sigs.k8s.io/jobset-name", false, true},
  };
  for (const Source& s : kSources) {
    std::optional<std::string> v;
    if (s.annotation) v = Lookup(ann, s.key);
    if ((!v || v->empty()) && s.label) v = Lookup(labels, s.key);
    if (v && !v->empty()) {
      out.group = ns + "/" + *v;
      out.group_source = s.key;
      return;
    }
  }
}

}  // namespace

StatusOr<int64_t> ParseWholeQuantity(const std::string& s, bool allow_suffix) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("want a whole number, got " + Quote(s) + " (" + why + ")");
  };
  if (s.empty()) return bad("empty");
  size_t i = 0;
  if (s[0] == '+') i = 1;
  if (s[0] == '-') return bad("negative values are not allowed");
  const size_t digits_start = i;
  int64_t v = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return bad("too large");
    v = v * 10 + (s[i] - '0');
  }
  if (i == digits_start) return bad("no digits");
  if (i == s.size()) return v;
  if (s[i] == '.') return bad("fractions are not allowed for extended resources");
  auto times = [&](int64_t mult) -> StatusOr<int64_t> {
    if (v > std::numeric_limits<int64_t>::max() / mult) return bad("too large");
    return v * mult;
  };
  const std::string suffix = s.substr(i);
  // A decimal exponent ("3e3", "3E+3"); "E" alone is the exa suffix.
  if ((suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1 && suffix[1] != 'i') {
    size_t j = 1;
    if (suffix[j] == '-') return bad("negative exponents make fractions; write the plain number");
    if (suffix[j] == '+') ++j;
    if (j == suffix.size()) return bad("malformed exponent");
    int exp = 0;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j]))) return bad("malformed exponent");
      exp = std::min(exp * 10 + (suffix[j] - '0'), 100);
    }
    if (v == 0) return int64_t{0};
    for (; exp > 0; --exp) {
      StatusOr<int64_t> next = times(10);
      if (!next.ok()) return next;
      v = *next;
    }
    return v;
  }
  // Decimal suffixes: kube-apiserver writes a whole number in canonical form,
  // with the largest one that keeps it whole (4000 -> "4k"), so they are
  // accepted for every resource. Binary suffixes only where a unit means bytes.
  static const std::pair<const char*, int64_t> kDecimal[] = {
      {"k", 1000},          {"M", 1000000},          {"G", 1000000000},
      {"T", 1000000000000}, {"P", 1000000000000000}, {"E", 1000000000000000000},
  };
  static const std::pair<const char*, int64_t> kBinary[] = {
      {"Ki", int64_t{1} << 10}, {"Mi", int64_t{1} << 20}, {"Gi", int64_t{1} << 30},
      {"Ti", int64_t{1} << 40}, {"Pi", int64_t{1} << 50}, {"Ei", int64_t{1} << 60},
  };
  for (const auto& [name, mult] : kDecimal) {
    if (suffix == name) return times(mult);
  }
  if (suffix == "m" || suffix == "u" || suffix == "n") {
    return bad("milli-units are not allowed for extended resources; write the plain number");
  }
  if (!allow_suffix) {
    return bad("a plain count is needed here, not a quantity with a unit");
  }
  for (const auto& [name, mult] : kBinary) {
    if (suffix == name) return times(mult);
  }
  return bad("unknown unit " + Quote(suffix) + "; use k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi or Ei");
}

bool RequestsAccelerators(const json& pod) {
  if (!pod.is_object() || !pod.contains("spec") || !pod.at("spec").is_object()) return false;
  const json& spec = pod.at("spec");
  for (const char* list : {"initContainers", "containers"}) {
    if (!spec.contains(list) || !spec.at(list).is_array()) continue;
    for (const json& c : spec.at(list)) {
      if (!c.is_object() || !c.contains("resources") || !c.at("resources").is_object()) continue;
      for (const char* section : {"limits", "requests"}) {
        const json& r = c.at("resources");
        if (!r.contains(section) || !r.at(section).is_object()) continue;
        for (const auto& [name, v] : r.at(section).items()) {
          if (IsAcceleratorResource(name)) return true;
        }
      }
    }
  }
  return false;
}

StatusOr<PodDeviceRequest> ParsePodRequest(const json& pod) {
  if (!pod.is_object())
    return InvalidArgumentError("pod: want an object, got " + internal::Describe(pod));
  PodDeviceRequest out;
  std::map<std::string, std::string> ann, labels;
  if (pod.contains("metadata")) {
    const json& meta = pod.at("metadata");
    ACCELPOOL_RETURN_IF_ERROR(internal::RequireObject(meta, "metadata"));
    ACCELPOOL_RETURN_IF_ERROR(internal::ReadString(meta, "namespace", "metadata", false, out.ns));
    ACCELPOOL_RETURN_IF_ERROR(internal::ReadString(meta, "name", "metadata", false, out.name));
    ACCELPOOL_RETURN_IF_ERROR(internal::ReadString(meta, "uid", "metadata", false, out.uid));
    ACCELPOOL_RETURN_IF_ERROR(ReadStringMap(meta, "annotations", ann));
    ACCELPOOL_RETURN_IF_ERROR(ReadStringMap(meta, "labels", labels));
  }
  if (!pod.contains("spec")) return InvalidArgumentError("spec: required field is missing");
  const json& spec = pod.at("spec");
  ACCELPOOL_RETURN_IF_ERROR(internal::RequireObject(spec, "spec"));
  ACCELPOOL_RETURN_IF_ERROR(internal::ReadString(spec, "nodeName", "spec", false, out.node_name));

  Selectors sel;
  ACCELPOOL_RETURN_IF_ERROR(ReadSelectors(ann, sel));
  if (auto p = Lookup(ann, "accelpool.io/policy")) {
    out.policy = *p;
  } else if (auto h = Lookup(ann, "hami.io/gpu-scheduler-policy")) {
    const HamiGpuPolicy hami = TranslateHamiGpuPolicy(*h);
    out.policy = hami.policy;
    out.policy_devices_only = true;
    if (hami.mutex && !sel.has_exclusive) sel.exclusive = true;
  }
  if (auto p = Lookup(ann, "accelpool.io/node-policy")) {
    out.node_policy = *p;
  } else if (auto h = Lookup(ann, "hami.io/node-scheduler-policy")) {
    out.node_policy = *h;
  }
  FindGroup(ann, labels, out.ns, out);

  for (const char* list : {"initContainers", "containers"}) {
    if (!spec.contains(list) || spec.at(list).is_null()) continue;
    const json& cs = spec.at(list);
    const std::string lpath = std::string("spec.") + list;
    if (!cs.is_array())
      return InvalidArgumentError(lpath + ": want an array, got " + internal::Describe(cs));
    const bool init = std::string(list) == "initContainers";
    for (size_t i = 0; i < cs.size(); ++i) {
      const json& c = cs[i];
      const std::string cpath = internal::Index(lpath, i);
      ACCELPOOL_RETURN_IF_ERROR(internal::RequireObject(c, cpath));
      std::string name;
      ACCELPOOL_RETURN_IF_ERROR(internal::ReadString(c, "name", cpath, true, name));
      core::ContainerKind kind = core::ContainerKind::kRegular;
      if (init) {
        std::string restart;
        ACCELPOOL_RETURN_IF_ERROR(internal::ReadString(c, "restartPolicy", cpath, false, restart));
        kind = restart == "Always" ? core::ContainerKind::kSidecar : core::ContainerKind::kInit;
      }
      const std::string where = "container " + Quote(name);
      std::map<core::Vendor, VendorAsk> asks;
      ACCELPOOL_RETURN_IF_ERROR(CollectContainer(c, where, asks));
      for (const auto& [vendor, ask] : asks) {
        const bool shares = ask.memory_mib || ask.memory_percent || ask.compute;
        if (!ask.count && !ask.zero_count_name.empty()) {
          if (shares) {
            return InvalidArgumentError(where + ": " + ask.zero_count_name +
                                        " is 0 but memory or compute is requested; ask for at "
                                        "least 1 device or drop the memory/compute resources");
          }
          continue;  // an explicit zero asks for nothing
        }
        ACCELPOOL_RETURN_IF_ERROR(CheckShareNames(ask).WithPrefix(where));
        if (ask.memory_mib && ask.memory_percent) {
          return InvalidArgumentError(where + ": both " + ask.memory_name + " and " +
                                      ask.percent_name + " are set; give memory one way");
        }
        if (ask.count && *ask.count > 4096) {
          return InvalidArgumentError(where + ": " + ask.count_name + ": " +
                                      std::to_string(*ask.count) +
                                      " devices is more than any node has");
        }
        core::DeviceRequest r;
        r.container = name;
        r.kind = kind;
        r.vendor = vendor;
        r.count = static_cast<int32_t>(ask.count.value_or(1));
        r.memory_mib = ask.memory_mib.value_or(0);
        r.memory_percent = static_cast<int32_t>(ask.memory_percent.value_or(0));
        r.compute = static_cast<int32_t>(ask.compute.value_or(0));
        r.exclusive = sel.exclusive;
        r.partition = ask.partition;
        const bool nv = vendor == core::Vendor::kNvidia;
        r.model_include = sel.has_model_include || !nv ? sel.model_include : sel.nv_model_include;
        r.model_exclude = sel.has_model_exclude || !nv ? sel.model_exclude : sel.nv_model_exclude;
        r.id_include = sel.has_id_include || !nv ? sel.id_include : sel.nv_id_include;
        r.id_exclude = sel.has_id_exclude || !nv ? sel.id_exclude : sel.nv_id_exclude;
        r.numa_bind = sel.has_numa || !nv ? sel.numa : sel.nv_numa;
        Status st = CheckDisjoint(r.model_include, r.model_exclude, "device model");
        if (st.ok()) st = CheckDisjoint(r.id_include, r.id_exclude, "device UUID");
        if (!st.ok()) return st.WithPrefix(where);
        out.request.containers.push_back(std::move(r));
        out.origins.push_back(
            {ask.count_name.empty() ? ask.first_name : ask.count_name, ask.model_family});
      }
    }
  }
  if (!out.request.containers.empty()) {
    Status st = core::ValidatePodRequest(out.request);
    if (!st.ok()) return st;
  }
  StatusOr<core::HostResources> host = ParseHostRequest(pod);
  if (!host.ok()) return host.status();
  out.request.host = *host;
  return out;
}

bool HighTaskPriority(const nlohmann::json& container) {
  if (!container.is_object()) return false;
  const json* found = nullptr;
  for (const char* section : {"requests", "limits"}) {  // limits win, as for every resource
    const json::json_pointer at("/resources/" + std::string(section));
    if (!container.contains(at) || !container.at(at).is_object()) continue;
    const json& m = container.at(at);
    if (m.contains(kTaskPriorityResource)) found = &m.at(kTaskPriorityResource);
  }
  if (found == nullptr) return false;
  StatusOr<bool> high = TaskPriorityOf(*found);
  return high.ok() && *high;
}

}  // namespace accelpool::api
