#include "kube/objects.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string_view>
#include <vector>

namespace accelpool::kube {

using nlohmann::json;

std::string StringAt(const json& obj, const json::json_pointer& ptr) {
  if (!obj.contains(ptr)) return "";
  const json& v = obj.at(ptr);
  return v.is_string() ? v.get<std::string>() : "";
}

Status CreatePodBinding(KubeClient& client, const std::string& ns, const std::string& pod,
                        const std::string& node, const std::string& uid,
                        const std::map<std::string, std::string>& annotations,
                        std::optional<std::chrono::milliseconds> within) {
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", pod}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  if (!uid.empty()) binding["metadata"]["uid"] = uid;
  if (!annotations.empty()) binding["metadata"]["annotations"] = annotations;
  auto r = client.Create(Pods(), ns, binding, pod, "binding", within);
  return r.ok() ? Status::Ok() : r.status();
}

Status PatchAnnotations(
    KubeClient& client, const Resource& r, const std::string& ns, const std::string& name,
    const std::vector<std::pair<std::string, std::optional<std::string>>>& annotations,
    const std::string& resource_version) {
  json ann = json::object();
  for (const auto& [k, v] : annotations) ann[k] = v ? json(*v) : json(nullptr);
  json patch = {{"metadata", {{"annotations", ann}}}};
  if (!resource_version.empty()) patch["metadata"]["resourceVersion"] = resource_version;
  auto res = client.Patch(r, ns, name, PatchType::kMerge, patch);
  return res.ok() ? Status::Ok() : res.status();
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(us % 1000000));
  return buf;
}

StatusOr<std::chrono::system_clock::time_point> ParseMicroTime(const std::string& s) {
  std::tm tm{};
  int frac_digits = 0;
  long frac = 0;
  const char* p = s.c_str();
  int consumed = 0;
  if (std::sscanf(p, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return InvalidArgumentError("time \"" + s + "\" is not RFC 3339 (2026-11-30T02:41:07Z)");
  }
  p += consumed;
  if (*p == '.') {
    ++p;
    while (*p >= '0' && *p <= '9') {
      if (frac_digits < 6) {
        frac = frac * 10 + (*p - '0');
        ++frac_digits;
      }
      ++p;
    }
    while (frac_digits < 6) {
      frac *= 10;
      ++frac_digits;
    }
  }
  if (*p != 'Z' || p[1] != '\0') {
    return InvalidArgumentError("time \"" + s + "\" must be UTC and end in Z");
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = timegm(&tm);
  // Years 1970 to 2199 only: the nanosecond clock holds 1678..2262, and a
  // Lease's renewTime plus its duration, or now minus it, must fit too.
  constexpr int64_t kLast = 7258118399;  // 2199-12-31T23:59:59Z
  if (secs < 0 || secs > kLast) {
    return InvalidArgumentError("time \"" + s + "\" is outside the years 1970 to 2199");
  }
  return std::chrono::system_clock::time_point(std::chrono::seconds(secs)) +
         std::chrono::microseconds(frac);
}

namespace {

// The length of the UTF-8 sequence starting at text[i], 0 when none starts
// there (a stray continuation byte, a truncated or overlong sequence, a
// surrogate or a code point past U+10FFFF).
size_t Utf8SequenceAt(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
    cp = b & 0x1Fu;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    cp = b & 0x0Fu;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    cp = b & 0x07u;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

}  // namespace

std::string EventNote(std::string_view message) {
  constexpr size_t kMax = 1024;  // the apiserver refuses longer notes
  constexpr std::string_view kEllipsis = "...";
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  // Valid UTF-8 first (what the JSON encoder would write for each bad
  // byte), so that the cut below measures what is sent; whole characters
  // only, so the cut never leaves half of one for the encoder to replace.
  std::string valid;
  std::vector<size_t> starts;  // where each character of `valid` starts
  valid.reserve(std::min(message.size(), kMax + 8));
  for (size_t i = 0; i < message.size();) {
    if (valid.size() > kMax) break;  // enough to cut from
    starts.push_back(valid.size());
    const size_t n = Utf8SequenceAt(message, i);
    if (n == 0) {
      valid.append(kReplacement);
      ++i;
    } else {
      valid.append(message.substr(i, n));
      i += n;
    }
  }
  if (valid.size() <= kMax) return valid;
  size_t cut = kMax - kEllipsis.size();
  // The last character that ends at or before the cut.
  auto it = std::upper_bound(starts.begin(), starts.end(), cut);
  cut = *(it - 1);
  valid.resize(cut);
  valid.append(kEllipsis);
  return valid;
}

Status CreateEvent(KubeClient& client, const ObjectRef& about, EventKind kind,
                   const std::string& reason, const std::string& message,
                   const std::string& reporter, const std::string& action) {
  const std::string now = FormatMicroTime(std::chrono::system_clock::now());
  const std::string ns = about.ns.empty() ? "default" : about.ns;
  const std::string type = kind == EventKind::kNormal ? "Normal" : "Warning";
  const std::string note = EventNote(message);
  json regarding = {{"apiVersion", about.api_version}, {"kind", about.kind}, {"name", about.name}};
  if (!about.ns.empty()) regarding["namespace"] = about.ns;
  if (!about.uid.empty()) regarding["uid"] = about.uid;
  json ev = {{"apiVersion", "events.k8s.io/v1"},
             {"kind", "Event"},
             {"metadata", {{"generateName", about.name + "-"}, {"namespace", ns}}},
             {"eventTime", now},
             {"reportingController", reporter},
             {"reportingInstance", reporter},
             {"action", action},
             {"reason", reason},
             {"note", note},
             {"type", type},
             {"regarding", regarding}};
  auto r = client.Create(Events(), ns, ev);
  if (r.ok()) return Status::Ok();
  if (r.status().code() != StatusCode::kNotFound) return r.status();
  // events.k8s.io/v1 not served: fall back to core/v1.
  const std::string now_s = now.substr(0, 19) + "Z";
  json core_ev = {{"apiVersion", "v1"},
                  {"kind", "Event"},
                  {"metadata", {{"generateName", about.name + "-"}, {"namespace", ns}}},
                  {"involvedObject", regarding},
                  {"reason", reason},
                  {"message", note},
                  {"type", type},
                  {"source", {{"component", reporter}}},
                  {"firstTimestamp", now_s},
                  {"lastTimestamp", now_s},
                  {"count", 1}};
  auto c = client.Create(CoreEvents(), ns, core_ev);
  return c.ok() ? Status::Ok() : c.status();
}

namespace {

StatusOr<Lease> LeaseFromJson(const json& j) {
  if (!j.is_object()) return InternalError("lease: the apiserver answered with a non-object");
  Lease l;
  const json meta = j.value("metadata", json::object());
  const json spec = j.value("spec", json::object());
  if (!meta.is_object() || !spec.is_object()) return InternalError("lease: malformed object");
  l.ns = StringAt(meta, json::json_pointer("/namespace"));
  l.name = StringAt(meta, json::json_pointer("/name"));
  l.resource_version = StringAt(meta, json::json_pointer("/resourceVersion"));
  if (meta.contains("annotations") && meta["annotations"].is_object()) {
    for (const auto& [k, v] : meta["annotations"].items()) {
      if (v.is_string()) l.annotations[k] = v.get<std::string>();
    }
  }
  auto str = [&](const char* k) {
    return spec.contains(k) && spec[k].is_string() ? spec[k].get<std::string>() : std::string();
  };
  auto num = [&](const char* k, int32_t def) {
    return spec.contains(k) && spec[k].is_number_integer() ? spec[k].get<int32_t>() : def;
  };
  l.holder = str("holderIdentity");
  l.acquire_time = str("acquireTime");
  l.renew_time = str("renewTime");
  l.lease_duration_s = num("leaseDurationSeconds", 15);
  l.transitions = num("leaseTransitions", 0);
  l.raw = j;
  return l;
}

json LeaseToJson(const Lease& l) {
  json out = l.raw.is_object() ? l.raw : json::object();
  out["apiVersion"] = "coordination.k8s.io/v1";
  out["kind"] = "Lease";
  if (!out.contains("metadata") || !out["metadata"].is_object()) out["metadata"] = json::object();
  if (!out.contains("spec") || !out["spec"].is_object()) out["spec"] = json::object();
  json& meta = out["metadata"];
  meta["name"] = l.name;
  meta["namespace"] = l.ns;
  meta.erase("resourceVersion");
  if (!l.resource_version.empty()) meta["resourceVersion"] = l.resource_version;
  // Annotations the struct holds replace the string ones read; others stay.
  json annotations = meta.contains("annotations") && meta["annotations"].is_object()
                         ? meta["annotations"]
                         : json::object();
  for (auto it = annotations.begin(); it != annotations.end();) {
    it = it->is_string() ? annotations.erase(it) : std::next(it);
  }
  for (const auto& [k, v] : l.annotations) annotations[k] = v;
  if (annotations.empty()) {
    meta.erase("annotations");
  } else {
    meta["annotations"] = annotations;
  }
  json& spec = out["spec"];
  spec["holderIdentity"] = l.holder;
  spec["leaseDurationSeconds"] = l.lease_duration_s;
  spec["leaseTransitions"] = l.transitions;
  spec.erase("acquireTime");
  spec.erase("renewTime");
  if (!l.acquire_time.empty()) spec["acquireTime"] = l.acquire_time;
  if (!l.renew_time.empty()) spec["renewTime"] = l.renew_time;
  return out;
}

}  // namespace

StatusOr<Lease> GetLease(KubeClient& client, const std::string& ns, const std::string& name) {
  auto j = client.Get(Leases(), ns, name);
  if (!j.ok()) return j.status();
  return LeaseFromJson(*j);
}

StatusOr<Lease> CreateLease(KubeClient& client, const Lease& lease) {
  Lease l = lease;
  l.resource_version.clear();
  auto j = client.Create(Leases(), l.ns, LeaseToJson(l));
  if (!j.ok()) return j.status();
  return LeaseFromJson(*j);
}

StatusOr<Lease> UpdateLease(KubeClient& client, const Lease& lease) {
  auto j = client.Update(Leases(), lease.ns, lease.name, LeaseToJson(lease));
  if (!j.ok()) return j.status();
  return LeaseFromJson(*j);
}

}  // namespace accelpool::kube
