#include "api/json_check.h"

#include "common/strings.h"

namespace accelpool::api::internal {

using nlohmann::json;

std::string Describe(const json& v) {
  std::string d;
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::string:
      d = "string ";
      break;
    case json::value_t::number_float:
      d = "number ";
      break;
    default:
      d = "number ";
      break;
  }
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return d + text;
}

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

namespace {

Status Bad(const std::string& path, std::string_view want, const json& got) {
  return InvalidArgumentError(path + ": want " + std::string(want) + ", got " + Describe(got));
}

const json* Find(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Status Missing(const std::string& path) {
  return InvalidArgumentError(path + ": required field is missing");
}

Status IntValue(const json& v, const std::string& path, int64_t min, int64_t max, int64_t& out) {
  const std::string want =
      "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(kMaxInt64)) return Bad(path, want, v);
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return Bad(path, want, v);
  }
  if (x < min || x > max) return Bad(path, want, v);
  out = x;
  return Status::Ok();
}

}  // namespace

Status ReadInt(const json& obj, std::string_view key, const std::string& path, bool required,
               int64_t min, int64_t max, int64_t& out) {
  const std::string p = Join(path, key);
  const json* v = Find(obj, key);
  if (v == nullptr) return required ? Missing(p) : Status::Ok();
  return IntValue(*v, p, min, max, out);
}

Status ReadInt32(const json& obj, std::string_view key, const std::string& path, bool required,
                 int32_t min, int32_t max, int32_t& out) {
  int64_t x = out;
  ACCELPOOL_RETURN_IF_ERROR(ReadInt(obj, key, path, required, min, max, x));
  out = static_cast<int32_t>(x);
  return Status::Ok();
}

Status ReadBool(const json& obj, std::string_view key, const std::string& path, bool required,
                bool& out) {
  const std::string p = Join(path, key);
  const json* v = Find(obj, key);
  if (v == nullptr) return required ? Missing(p) : Status::Ok();
  if (!v->is_boolean()) return Bad(p, "true or false", *v);
  out = v->get<bool>();
  return Status::Ok();
}

Status ReadString(const json& obj, std::string_view key, const std::string& path, bool required,
                  std::string& out) {
  const std::string p = Join(path, key);
  const json* v = Find(obj, key);
  if (v == nullptr) return required ? Missing(p) : Status::Ok();
  if (!v->is_string()) return Bad(p, "a string", *v);
  out = v->get<std::string>();
  return Status::Ok();
}

Status ReadIntList(const json& obj, std::string_view key, const std::string& path, int64_t min,
                   int64_t max, std::vector<int64_t>& out) {
  const std::string p = Join(path, key);
  const json* v = Find(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return Bad(p, "an array of integers", *v);
  std::vector<int64_t> tmp;
  tmp.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    int64_t x = 0;
    ACCELPOOL_RETURN_IF_ERROR(IntValue((*v)[i], Index(p, i), min, max, x));
    tmp.push_back(x);
  }
  out = std::move(tmp);
  return Status::Ok();
}

Status ReadInt32List(const json& obj, std::string_view key, const std::string& path, int32_t min,
                     int32_t max, std::vector<int32_t>& out) {
  std::vector<int64_t> wide;
  ACCELPOOL_RETURN_IF_ERROR(ReadIntList(obj, key, path, min, max, wide));
  if (Find(obj, key) == nullptr) return Status::Ok();
  out.assign(wide.begin(), wide.end());
  return Status::Ok();
}

Status ReadInt32Lists(const json& obj, std::string_view key, const std::string& path, int32_t min,
                      int32_t max, std::vector<std::vector<int32_t>>& out) {
  const std::string p = Join(path, key);
  const json* v = Find(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return Bad(p, "an array of integer arrays", *v);
  std::vector<std::vector<int32_t>> tmp;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& row = (*v)[i];
    const std::string rp = Index(p, i);
    if (!row.is_array()) return Bad(rp, "an array of integers", row);
    std::vector<int32_t> r;
    for (size_t j = 0; j < row.size(); ++j) {
      int64_t x = 0;
      ACCELPOOL_RETURN_IF_ERROR(IntValue(row[j], Index(rp, j), min, max, x));
      r.push_back(static_cast<int32_t>(x));
    }
    tmp.push_back(std::move(r));
  }
  out = std::move(tmp);
  return Status::Ok();
}

Status RequireObject(const json& v, const std::string& path) {
  if (!v.is_object()) return Bad(path.empty() ? "document" : path, "an object", v);
  return Status::Ok();
}

StatusOr<json> ParseJson(std::string_view text, std::string_view what) {
  // The documents read here nest a few levels; a deeper one is refused
  // before it is parsed, so nothing that walks a document meets it.
  if (JsonNestingDepth(text) > kMaxAnnotationDepth) {
    return InvalidArgumentError(std::string(what) + " nests objects and arrays deeper than " +
                                std::to_string(kMaxAnnotationDepth) +
                                " levels; rewrite it or delete the annotation so the writer "
                                "recreates it");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgumentError(std::string(what) +
                                " is not valid JSON; rewrite it or delete the annotation so "
                                "the writer recreates it");
  }
  return j;
}

}  // namespace accelpool::api::internal
