#include "api/host_request.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "api/json_check.h"

namespace accelpool::api {
namespace {

using json = nlohmann::json;
__extension__ typedef __int128 int128;  // exact products of quantities

constexpr int128 kLimit = int128{1} << 62;

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

// ceil(digits x 10^exp10 x 2^exp2), exactly; kInvalidArgument above kLimit.
// REQUIRES: digits < 10^20 (ParseScaled keeps 20 significant digits).
StatusOr<int64_t> ScaleUp(std::string_view text, int128 digits, int exp10, int exp2) {
  if (digits == 0) return int64_t{0};
  const int128 kFar = int128{1} << 100;  // a denominator past every numerator left
  // 10 = 2 x 5: a power of two cancels against a negative power of ten first
  // ("0.01Ei"), so that what remains either only multiplies or only divides,
  // but for the few powers of two of the unit (exp2 >= -20).
  int128 den = 1;
  for (; exp2 > 0 && exp10 < 0; --exp2, ++exp10) {
    den *= 5;
    // digits x 2^exp2 < 2^67 x 2^16 here (5^44 > 2^100): far below one.
    if (den > kFar) return int64_t{1};
  }
  for (; exp10 < 0; ++exp10) {
    den *= 10;
    if (den > kFar) return int64_t{1};  // nothing multiplies after this
  }
  for (; exp2 < 0; ++exp2) {
    den *= 2;
    if (den > kFar) return int64_t{1};
  }
  // value = q + r / den; each remaining factor scales both.
  int128 q = digits / den, r = digits % den;
  auto scale = [&](int by) {
    q = q * by + (r * by) / den;
    r = (r * by) % den;
    return q <= kLimit;
  };
  for (; exp10 > 0; --exp10) {
    if (!scale(10)) return InvalidArgumentError("quantity " + Quote(text) + " is too large");
  }
  for (; exp2 > 0; --exp2) {
    if (!scale(2)) return InvalidArgumentError("quantity " + Quote(text) + " is too large");
  }
  const int128 v = q + (r > 0 ? 1 : 0);
  if (v > kLimit) return InvalidArgumentError("quantity " + Quote(text) + " is too large");
  return static_cast<int64_t>(v);
}

// Parses a quantity into value = digits x 10^exp10 x 2^exp2 and scales it to
// units of 10^-scale10 x 2^scale2, rounding up.
StatusOr<int64_t> ParseScaled(std::string_view s, int scale10, int scale2) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("want a quantity such as \"500m\", \"2\" or \"4Gi\", got " +
                                Quote(s) + " (" + why + ")");
  };
  if (s.empty()) return bad("empty");
  size_t i = 0;
  if (s[0] == '-') return bad("negative values are not allowed");
  if (s[0] == '+') i = 1;
  int128 digits = 0;
  int significant = 0, fraction = 0;
  bool any = false, point = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    any = true;
    if (digits == 0 && c == '0') {
      if (point) ++fraction;
      continue;
    }
    if (++significant > 20) return bad("more than 20 significant digits");
    digits = digits * 10 + (c - '0');
    if (point) ++fraction;
  }
  if (!any) return bad("no digits");
  int exp10 = -fraction, exp2 = 0;
  const std::string_view suffix = s.substr(i);
  if (suffix.empty()) {
  } else if ((suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1 && suffix != "Ei") {
    size_t j = 1;
    bool negative = false;
    if (suffix[j] == '+' || suffix[j] == '-') negative = suffix[j++] == '-';
    if (j == suffix.size()) return bad("malformed exponent");
    int e = 0;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j]))) return bad("malformed exponent");
      e = std::min(e * 10 + (suffix[j] - '0'), 1000);
    }
    exp10 += negative ? -e : e;
  } else {
    static const std::pair<std::string_view, int> kDecimal[] = {
        {"n", -9}, {"u", -6}, {"m", -3}, {"k", 3},   {"M", 6},
        {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18},
    };
    static const std::pair<std::string_view, int> kBinary[] = {
        {"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60},
    };
    bool known = false;
    for (const auto& [name, e] : kDecimal) {
      if (suffix == name) exp10 += e, known = true;
    }
    for (const auto& [name, e] : kBinary) {
      if (suffix == name) exp2 += e, known = true;
    }
    if (!known) {
      return bad("unknown unit " + Quote(suffix) +
                 "; use n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi or Ei");
    }
  }
  return ScaleUp(s, digits, exp10 + scale10, exp2 - scale2);
}

// A container's requests (limits where a request is missing).
struct Ask {
  int64_t cpu = 0, memory = 0;
};

StatusOr<Ask> ReadResources(const json& holder, const std::string& where) {
  Ask a;
  if (!holder.is_object() || !holder.contains("resources")) return a;
  const json& r = holder.at("resources");
  if (r.is_null()) return a;
  if (!r.is_object()) {
    return InvalidArgumentError(where + ".resources: want an object, got " +
                                internal::Describe(r));
  }
  for (const auto& [name, field, parse] :
       {std::tuple{"cpu", &Ask::cpu, &ParseCpuMilli}, {"memory", &Ask::memory, &ParseMemoryMiB}}) {
    for (const char* section : {"requests", "limits"}) {
      if (!r.contains(section) || r.at(section).is_null()) continue;
      const json& m = r.at(section);
      if (!m.is_object()) {
        return InvalidArgumentError(where + ".resources." + section + ": want an object, got " +
                                    internal::Describe(m));
      }
      if (!m.contains(name)) continue;
      const json& q = m.at(name);
      StatusOr<int64_t> v = q.is_string() ? parse(q.get<std::string>())
                                          : InvalidArgumentError("want a quantity string, got " +
                                                                 internal::Describe(q));
      if (!v.ok()) return v.status().WithPrefix(where + ": " + section + "." + name);
      a.*field = *v;
      break;  // the request wins over the limit
    }
  }
  return a;
}

}  // namespace

StatusOr<int64_t> ParseCpuMilli(std::string_view quantity) {
  return ParseScaled(quantity, 3, 0);
}

StatusOr<int64_t> ParseMemoryMiB(std::string_view quantity) {
  return ParseScaled(quantity, 0, 20);
}

StatusOr<core::HostResources> ParseHostRequest(const json& pod) {
  if (!pod.is_object() || !pod.contains("spec") || !pod.at("spec").is_object()) {
    return InvalidArgumentError("pod: spec: want an object");
  }
  const json& spec = pod.at("spec");
  // Summed in 128 bits: each quantity is at most kLimit, but a pod may ask
  // for many, and the sums are checked against kLimit once at the end.
  int128 run_cpu = 0, run_mem = 0;    // regular containers and sidecars
  int128 init_cpu = 0, init_mem = 0;  // the largest init container phase
  int128 side_cpu = 0, side_mem = 0;  // sidecars declared so far
  for (const char* list : {"initContainers", "containers"}) {
    if (!spec.contains(list) || spec.at(list).is_null()) continue;
    const json& cs = spec.at(list);
    const std::string lpath = std::string("spec.") + list;
    if (!cs.is_array()) {
      return InvalidArgumentError(lpath + ": want an array, got " + internal::Describe(cs));
    }
    const bool init = std::string_view(list) == "initContainers";
    for (size_t i = 0; i < cs.size(); ++i) {
      const json& c = cs[i];
      std::string name;
      if (c.is_object() && c.contains("name") && c.at("name").is_string()) {
        name = c.at("name").get<std::string>();
      }
      StatusOr<Ask> a =
          ReadResources(c, name.empty() ? internal::Index(lpath, i) : "container " + Quote(name));
      if (!a.ok()) return a.status();
      const bool sidecar = init && c.is_object() && c.contains("restartPolicy") &&
                           c.at("restartPolicy") == "Always";
      if (init && !sidecar) {
        init_cpu = std::max(init_cpu, side_cpu + a->cpu);
        init_mem = std::max(init_mem, side_mem + a->memory);
        continue;
      }
      if (sidecar) {
        side_cpu += a->cpu;
        side_mem += a->memory;
      }
      run_cpu += a->cpu;
      run_mem += a->memory;
    }
  }
  int128 cpu = std::max(run_cpu, init_cpu), mem = std::max(run_mem, init_mem);
  // Pod-level resources, where given, are the pod's request.
  if (spec.contains("resources") && spec.at("resources").is_object()) {
    StatusOr<Ask> pod_level = ReadResources(spec, "spec");
    if (!pod_level.ok()) return pod_level.status();
    if (pod_level->cpu > 0) cpu = pod_level->cpu;
    if (pod_level->memory > 0) mem = pod_level->memory;
  }
  if (spec.contains("overhead") && !spec.at("overhead").is_null()) {
    const json wrapped = {{"resources", {{"requests", spec.at("overhead")}}}};
    StatusOr<Ask> over = ReadResources(wrapped, "spec.overhead");
    if (!over.ok()) return over.status();
    cpu += over->cpu;
    mem += over->memory;
  }
  if (cpu > kLimit || mem > kLimit) {
    return InvalidArgumentError(std::string("pod: the ") + (cpu > kLimit ? "CPU" : "memory") +
                                " its containers request adds up to more than any node has "
                                "(2^62 units); lower the containers' requests");
  }
  return core::HostResources{static_cast<int64_t>(cpu), static_cast<int64_t>(mem)};
}

StatusOr<core::HostResources> ParseNodeAllocatable(const json& node) {
  if (!node.is_object() || !node.contains("status") || !node.at("status").is_object() ||
      !node.at("status").contains("allocatable")) {
    return NotFoundError("node has no status.allocatable");
  }
  const json& alloc = node.at("status").at("allocatable");
  if (!alloc.is_object()) {
    return InvalidArgumentError("status.allocatable: want an object, got " +
                                internal::Describe(alloc));
  }
  if (!alloc.contains("cpu") || !alloc.contains("memory")) {
    return NotFoundError("status.allocatable has no cpu or no memory");
  }
  core::HostResources out;
  for (const auto& [name, field, parse] :
       {std::tuple{"cpu", &core::HostResources::cpu_milli, &ParseCpuMilli},
        {"memory", &core::HostResources::memory_mib, &ParseMemoryMiB}}) {
    const json& q = alloc.at(name);
    if (!q.is_string()) {
      return InvalidArgumentError(std::string("status.allocatable.") + name +
                                  ": want a quantity string, got " + internal::Describe(q));
    }
    StatusOr<int64_t> v = parse(q.get<std::string>());
    if (!v.ok()) return v.status().WithPrefix(std::string("status.allocatable.") + name);
    out.*field = *v;
  }
  return out;
}

}  // namespace accelpool::api
