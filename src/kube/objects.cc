#include "kube/objects.h"

#include <cstdio>
#include <ctime>

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

Status CreateEvent(KubeClient& client, const ObjectRef& about, EventKind kind,
                   const std::string& reason, const std::string& message,
                   const std::string& reporter, const std::string& action) {
  const std::string now = FormatMicroTime(std::chrono::system_clock::now());
  const std::string ns = about.ns.empty() ? "default" : about.ns;
  const std::string type = kind == EventKind::kNormal ? "Normal" : "Warning";
  const std::string note = message.size() > 1024 ? message.substr(0, 1021) + "..." : message;
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
