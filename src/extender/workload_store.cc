#include "extender/workload_store.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "core/types.h"

namespace accelpool::extender {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxQuantity = int64_t{1} << 40;  // MiB or millicores
constexpr int64_t kMaxCount = 4096;

// The fields of one stored shape, in order. The memory in percent came
// later: a shape of six fields (a ConfigMap an older extender wrote) has none.
enum ShapeField {
  kCount,
  kCompute,
  kDeviceMemory,
  kCpu,
  kHostMemory,
  kModel,
  kMemoryPercent,
  kShapeFields
};

using ShapeKey = std::tuple<int32_t, int32_t, int64_t, int64_t, int64_t, std::string, int32_t>;

ShapeKey KeyOf(const core::TaskShape& t) {
  return {t.count,           t.compute, t.memory_mib,    t.cpu_milli,
          t.host_memory_mib, t.model,   t.memory_percent};
}

std::string EncodeFrom(const WorkloadState& state, size_t first) {
  std::map<ShapeKey, size_t> index;
  json shapes = json::array();
  json arrivals = json::array();
  for (size_t i = first; i < state.arrivals.size(); ++i) {
    const core::TaskShape& t = state.arrivals[i];
    auto [it, inserted] = index.try_emplace(KeyOf(t), index.size());
    if (inserted) {
      shapes.push_back(json::array({t.count, t.compute, t.memory_mib, t.cpu_milli,
                                    t.host_memory_mib, t.model, t.memory_percent}));
    }
    arrivals.push_back(it->second);
  }
  json doc = {{"version", 1},
              {"observed", state.observed},
              {"watermark", state.watermark},
              {"watermark_uids", state.watermark_uids},
              {"shapes", std::move(shapes)},
              {"arrivals", std::move(arrivals)}};
  return doc.dump();
}

Status Bad(const std::string& why) {
  return InvalidArgumentError("stored workload: " + why +
                              "; it is not used and is rewritten on the next save");
}

StatusOr<int64_t> Integer(const json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return Bad(what + " is not an integer");
  // Unsigned values above INT64_MAX read as negative here, and are refused.
  const int64_t n =
      v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX} ? -1 : v.get<int64_t>();
  if (n < lo || n > hi) {
    return Bad(what + " is " + v.dump() + ", outside " + std::to_string(lo) + ".." +
               std::to_string(hi));
  }
  return n;
}

}  // namespace

bool IsRfc3339Seconds(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SSZ, the form metav1.Time is written in.
  constexpr std::string_view kForm = "dddd-dd-ddTdd:dd:ddZ";
  if (t.size() != kForm.size()) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (kForm[i] == 'd' ? (t[i] < '0' || t[i] > '9') : t[i] != kForm[i]) return false;
  }
  return true;
}

std::string EncodeWorkload(const WorkloadState& state, size_t max_bytes, size_t* kept) {
  size_t first = 0;
  std::string text = EncodeFrom(state, first);
  // Leave out the oldest arrivals until it fits: shrink by the excess (and a
  // little more), a handful of passes at most.
  while (text.size() > max_bytes && first < state.arrivals.size()) {
    const size_t held = state.arrivals.size() - first;
    const double ratio = static_cast<double>(max_bytes) / static_cast<double>(text.size());
    const size_t keep =
        std::min(held - 1, static_cast<size_t>(static_cast<double>(held) * ratio * 0.95));
    first = state.arrivals.size() - keep;
    text = EncodeFrom(state, first);
  }
  if (kept != nullptr) *kept = state.arrivals.size() - first;
  return text;
}

StatusOr<WorkloadState> DecodeWorkload(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad("not JSON");
  if (!doc.is_object()) return Bad("not a JSON object");
  for (const char* key :
       {"version", "observed", "watermark", "watermark_uids", "shapes", "arrivals"}) {
    if (!doc.contains(key)) return Bad(std::string("no \"") + key + "\"");
  }
  StatusOr<int64_t> version = Integer(doc["version"], "version", 1, 1);
  if (!version.ok())
    return Bad("version " + doc["version"].dump() + " is not 1 (a newer extender wrote it?)");
  WorkloadState s;
  StatusOr<int64_t> observed = Integer(doc["observed"], "observed", 0, INT64_MAX);
  ACCELPOOL_RETURN_IF_ERROR(observed.status());
  s.observed = static_cast<uint64_t>(*observed);

  const json& watermark = doc["watermark"];
  if (!watermark.is_string()) return Bad("watermark is not a string");
  s.watermark = watermark.get<std::string>();
  if (!s.watermark.empty() && !IsRfc3339Seconds(s.watermark)) {
    return Bad("watermark \"" + s.watermark + "\" is not a time like 2026-12-01T12:00:05Z");
  }
  const json& uids = doc["watermark_uids"];
  if (!uids.is_array()) return Bad("watermark_uids is not an array");
  if (uids.size() > kMaxWatermarkUids) return Bad("more than 100000 watermark_uids");
  for (const json& u : uids) {
    if (!u.is_string() || u.get_ref<const std::string&>().empty() ||
        u.get_ref<const std::string&>().size() > 128) {
      return Bad("a watermark uid is not a non-empty string of at most 128 characters");
    }
    s.watermark_uids.push_back(u.get<std::string>());
  }

  const json& shapes = doc["shapes"];
  if (!shapes.is_array()) return Bad("shapes is not an array");
  if (shapes.size() > kMaxStoredShapes) return Bad("more than 100000 shapes");
  std::vector<core::TaskShape> table;
  table.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const json& a = shapes[i];
    const std::string at = "shape " + std::to_string(i);
    if (!a.is_array() || (a.size() != kShapeFields && a.size() != kMemoryPercent)) {
      return Bad(at + " is not [count, compute, memory, cpu, host memory, models, memory percent]");
    }
    core::TaskShape t;
    StatusOr<int64_t> count = Integer(a[kCount], at + " count", 0, kMaxCount);
    ACCELPOOL_RETURN_IF_ERROR(count.status());
    StatusOr<int64_t> compute = Integer(a[kCompute], at + " compute", 0, core::kComputeWhole);
    ACCELPOOL_RETURN_IF_ERROR(compute.status());
    StatusOr<int64_t> memory = Integer(a[kDeviceMemory], at + " device memory", 0, kMaxQuantity);
    ACCELPOOL_RETURN_IF_ERROR(memory.status());
    StatusOr<int64_t> cpu = Integer(a[kCpu], at + " cpu", 0, kMaxQuantity);
    ACCELPOOL_RETURN_IF_ERROR(cpu.status());
    StatusOr<int64_t> host_memory = Integer(a[kHostMemory], at + " host memory", 0, kMaxQuantity);
    ACCELPOOL_RETURN_IF_ERROR(host_memory.status());
    if (!a[kModel].is_string() ||
        a[kModel].get_ref<const std::string&>().size() > kMaxStoredModel) {
      return Bad(at + " models is not a string of at most 1024 characters");
    }
    t.count = static_cast<int32_t>(*count);
    t.compute = static_cast<int32_t>(*compute);
    t.memory_mib = *memory;
    t.cpu_milli = *cpu;
    t.host_memory_mib = *host_memory;
    t.model = a[kModel].get<std::string>();
    if (a.size() > kMemoryPercent) {
      StatusOr<int64_t> percent = Integer(a[kMemoryPercent], at + " memory percent", 0, 100);
      ACCELPOOL_RETURN_IF_ERROR(percent.status());
      t.memory_percent = static_cast<int32_t>(*percent);
    }
    table.push_back(std::move(t));
  }

  const json& arrivals = doc["arrivals"];
  if (!arrivals.is_array()) return Bad("arrivals is not an array");
  if (arrivals.size() > kMaxStoredArrivals) return Bad("more than 1000000 arrivals");
  s.arrivals.reserve(arrivals.size());
  for (const json& v : arrivals) {
    StatusOr<int64_t> i =
        Integer(v, "an arrival's shape index", 0, static_cast<int64_t>(table.size()) - 1);
    ACCELPOOL_RETURN_IF_ERROR(i.status());
    s.arrivals.push_back(table[static_cast<size_t>(*i)]);
  }
  if (s.observed < s.arrivals.size()) return Bad("observed is less than the arrivals it holds");
  return s;
}

WorkloadStore::WorkloadStore(kube::KubeClient& client, std::string ns, std::string name)
    : client_(client), ns_(std::move(ns)), name_(std::move(name)) {}

StatusOr<std::optional<WorkloadState>> WorkloadStore::Load() {
  StatusOr<json> cm = client_.Get(kube::ConfigMaps(), ns_, name_);
  if (!cm.ok()) {
    if (cm.status().code() == StatusCode::kNotFound) return std::optional<WorkloadState>();
    return cm.status().WithPrefix("reading ConfigMap " + where());
  }
  const json* data = nullptr;
  if (auto it = cm->find("data"); it != cm->end() && it->is_object()) data = &*it;
  if (data == nullptr || !data->contains(kDataKey)) return std::optional<WorkloadState>();
  const json& text = data->at(kDataKey);
  if (!text.is_string()) {
    return Bad(std::string(kDataKey) + " is not a string").WithPrefix("ConfigMap " + where());
  }
  StatusOr<WorkloadState> state = DecodeWorkload(text.get_ref<const std::string&>());
  if (!state.ok()) return state.status().WithPrefix("ConfigMap " + where());
  return std::optional<WorkloadState>(std::move(state).value());
}

Status WorkloadStore::Save(const WorkloadState& state, size_t* kept) {
  const std::string text = EncodeWorkload(state, 768 * 1024, kept);
  const json patch = {{"data", {{kDataKey, text}}}};
  StatusOr<json> patched =
      client_.Patch(kube::ConfigMaps(), ns_, name_, kube::PatchType::kMerge, patch);
  if (patched.ok()) return Status::Ok();
  if (patched.status().code() != StatusCode::kNotFound) {
    return patched.status().WithPrefix("writing ConfigMap " + where());
  }
  const json cm = {{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata",
                    {{"name", name_},
                     {"namespace", ns_},
                     {"labels", {{"app.kubernetes.io/managed-by", "accelpool-extender"}}}}},
                   {"data", {{kDataKey, text}}}};
  StatusOr<json> created = client_.Create(kube::ConfigMaps(), ns_, cm);
  if (created.ok()) return Status::Ok();
  if (created.status().code() == StatusCode::kAlreadyExists) {  // created meanwhile: patch it
    patched = client_.Patch(kube::ConfigMaps(), ns_, name_, kube::PatchType::kMerge, patch);
    if (patched.ok()) return Status::Ok();
    return patched.status().WithPrefix("writing ConfigMap " + where());
  }
  return created.status().WithPrefix("creating ConfigMap " + where());
}

}  // namespace accelpool::extender
