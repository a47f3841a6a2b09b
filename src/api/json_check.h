// Internal helpers for the strict JSON codecs in src/api: typed field reads
// that report the JSON path of a bad value ("inventories[0].devices[2].index:
// want an integer, got string \"2\"").
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_API_JSON_CHECK_H_
#define ACCELPOOL_API_JSON_CHECK_H_

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace accelpool::api::internal {

// "string \"abc\"", "number 1.5", "object", ... for messages; long values are cut.
std::string Describe(const nlohmann::json& v);

std::string Join(const std::string& path, std::string_view key);
std::string Index(const std::string& path, size_t i);

// Each Read* returns OK and leaves `out` unchanged when the key is absent and
// not `required`. kInvalidArgument "<path>: ..." otherwise.
Status ReadInt(const nlohmann::json& obj, std::string_view key, const std::string& path,
               bool required, int64_t min, int64_t max, int64_t& out);
Status ReadInt32(const nlohmann::json& obj, std::string_view key, const std::string& path,
                 bool required, int32_t min, int32_t max, int32_t& out);
Status ReadBool(const nlohmann::json& obj, std::string_view key, const std::string& path,
                bool required, bool& out);
Status ReadString(const nlohmann::json& obj, std::string_view key, const std::string& path,
                  bool required, std::string& out);
Status ReadIntList(const nlohmann::json& obj, std::string_view key, const std::string& path,
                   int64_t min, int64_t max, std::vector<int64_t>& out);
Status ReadInt32List(const nlohmann::json& obj, std::string_view key, const std::string& path,
                     int32_t min, int32_t max, std::vector<int32_t>& out);
Status ReadInt32Lists(const nlohmann::json& obj, std::string_view key, const std::string& path,
                      int32_t min, int32_t max, std::vector<std::vector<int32_t>>& out);
// Checks that `v` is an object.
Status RequireObject(const nlohmann::json& v, const std::string& path);
// The deepest nesting ParseJson takes (accelpool's annotations nest fewer
// than ten levels).
inline constexpr int kMaxAnnotationDepth = 32;
// Parses text as JSON; kInvalidArgument with the parser's position otherwise,
// and for text nested deeper than kMaxAnnotationDepth.
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what);

inline constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
// The most memory one device, grant or slice may name, in MiB (1 EiB): far
// beyond any device, and low enough that sums over a node's grants and the
// percent arithmetic of the fit stay clear of int64 overflow.
inline constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;
inline constexpr int32_t kMaxInt32 = std::numeric_limits<int32_t>::max();

}  // namespace accelpool::api::internal

#endif  // ACCELPOOL_API_JSON_CHECK_H_
