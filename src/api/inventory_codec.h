// Codec for the node annotation accelpool.io/inventory (docs/protocol.md).
//
// Parse is strict: every field is type-checked and range-checked, unknown
// enum spellings are rejected, and the error names the JSON path
// ("inventories[0].devices[3].memory_mib: want an integer >= 0, got \"8G\"").
// Unknown fields are ignored, so a newer writer can add fields. Each parsed
// inventory also passes core::ValidateInventory (indices match positions,
// modules/groups/links name existing devices), so a parsed document is safe
// to hand to core::Fit. Serialize
// writes every field, so Parse(Serialize(x)) == x.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_API_INVENTORY_CODEC_H_
#define ACCELPOOL_API_INVENTORY_CODEC_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::api {

inline constexpr const char* kInventoryAnnotation = "accelpool.io/inventory";
inline constexpr int kInventoryVersion = 1;

struct InventoryDocument {
  int64_t generation = 0;
  std::vector<core::NodeInventory> inventories;  // one per vendor
};

// `node` is copied into every NodeInventory::node. kInvalidArgument with the
// JSON path on any schema error; kUnimplemented for a version other than 1.
StatusOr<InventoryDocument> ParseInventory(std::string_view text, const std::string& node);
StatusOr<InventoryDocument> InventoryFromJson(const nlohmann::json& doc, const std::string& node);

nlohmann::json InventoryToJson(const InventoryDocument& doc);
std::string SerializeInventory(const InventoryDocument& doc);

// Enum spellings of docs/protocol.md.
std::string_view GroupRuleName(core::GroupRule r);
std::string_view SpanRuleName(core::SpanRule r);
std::string_view ModuleRuleName(core::ModuleRule r);

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_INVENTORY_CODEC_H_
