#include "api/inventory_codec.h"

#include "api/json_check.h"
#include "core/fit.h"

namespace accelpool::api {

using nlohmann::json;
using namespace internal;

namespace {

constexpr int32_t kMaxDevices = 4096;

template <typename E, size_t N>
Status ReadEnum(const json& obj, std::string_view key, const std::string& path,
                const std::pair<E, std::string_view> (&table)[N], E& out) {
  std::string s;
  const bool present = obj.contains(key);
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, key, path, false, s));
  if (!present) return Status::Ok();
  std::string names;
  for (const auto& [e, name] : table) {
    if (name == s) {
      out = e;
      return Status::Ok();
    }
    names += (names.empty() ? "" : "|") + std::string(name);
  }
  return InvalidArgumentError(Join(path, key) + ": want one of " + names + ", got " +
                              Describe(obj.at(std::string(key))));
}

constexpr std::pair<core::GroupRule, std::string_view> kGroupRules[] = {
    {core::GroupRule::kNone, "none"},
    {core::GroupRule::kPrefer, "prefer"},
    {core::GroupRule::kRequired, "required"},
};
constexpr std::pair<core::SpanRule, std::string_view> kSpanRules[] = {
    {core::SpanRule::kAny, "any"},
    {core::SpanRule::kEvenMirrored, "even_mirrored"},
};
constexpr std::pair<core::ModuleRule, std::string_view> kModuleRules[] = {
    {core::ModuleRule::kNone, "none"},
    {core::ModuleRule::kWholeForEven, "whole_for_even"},
    {core::ModuleRule::kStayInside, "stay_inside"},
    {core::ModuleRule::kPreferTogether, "prefer_together"},
};

template <typename E, size_t N>
std::string_view EnumName(const std::pair<E, std::string_view> (&table)[N], E e) {
  for (const auto& [v, name] : table) {
    if (v == e) return name;
  }
  return table[0].second;
}

Status ParseSlices(const json& obj, const std::string& path, core::SliceRule& s) {
  ACCELPOOL_RETURN_IF_ERROR(RequireObject(obj, path));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadInt(obj, "memory_step_mib", path, false, 1, kMaxInt32, s.memory_step_mib));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadIntList(obj, "memory_sizes", path, 1, kMaxMemoryMib, s.memory_sizes));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadBool(obj, "one_size_per_device", path, false, s.one_size_per_device));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadInt32(obj, "node_handle_budget", path, false, 0, kMaxInt32, s.node_handle_budget));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadBool(obj, "compute_follows_memory", path, false, s.compute_follows_memory));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadBool(obj, "fraction_single_device", path, false, s.fraction_single_device));
  for (size_t i = 1; i < s.memory_sizes.size(); ++i) {
    if (s.memory_sizes[i] <= s.memory_sizes[i - 1]) {
      return InvalidArgumentError(Index(Join(path, "memory_sizes"), i) +
                                  ": slice sizes must be strictly ascending");
    }
  }
  return Status::Ok();
}

Status ParseTopology(const json& obj, const std::string& path, core::Topology& t) {
  ACCELPOOL_RETURN_IF_ERROR(RequireObject(obj, path));
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "kind", path, false, t.kind));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadInt32List(obj, "valid_counts", path, 1, kMaxDevices, t.valid_counts));
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32Lists(obj, "groups", path, 0, kMaxDevices - 1, t.groups));
  ACCELPOOL_RETURN_IF_ERROR(ReadEnum(obj, "group_rule", path, kGroupRules, t.group_rule));
  ACCELPOOL_RETURN_IF_ERROR(ReadEnum(obj, "span_rule", path, kSpanRules, t.span_rule));
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32Lists(obj, "modules", path, 0, kMaxDevices - 1, t.modules));
  ACCELPOOL_RETURN_IF_ERROR(ReadEnum(obj, "module_rule", path, kModuleRules, t.module_rule));
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32List(obj, "links", path, 0, kMaxInt32, t.links));
  if (obj.contains("slices")) {
    ACCELPOOL_RETURN_IF_ERROR(ParseSlices(obj.at("slices"), Join(path, "slices"), t.slices));
  }
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "super_node", path, false, t.super_node));
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "rack", path, false, t.rack));
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "block", path, false, t.block));
  return Status::Ok();
}

Status ParseDevice(const json& obj, const std::string& path, core::Vendor vendor, core::Device& d) {
  ACCELPOOL_RETURN_IF_ERROR(RequireObject(obj, path));
  d.vendor = vendor;
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "id", path, true, d.id));
  if (d.id.empty()) return InvalidArgumentError(Join(path, "id") + ": must not be empty");
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32(obj, "index", path, true, 0, kMaxDevices - 1, d.index));
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "model", path, false, d.model));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadInt(obj, "memory_mib", path, false, 0, kMaxMemoryMib, d.memory_mib));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadInt32(obj, "compute_units", path, false, 0, kMaxInt32, d.compute_units));
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32(obj, "numa", path, false, -1, kMaxInt32, d.numa));
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "pci_bus", path, false, d.pci_bus));
  ACCELPOOL_RETURN_IF_ERROR(ReadBool(obj, "healthy", path, false, d.healthy));
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32(obj, "module", path, false, -1, kMaxDevices - 1, d.module));
  ACCELPOOL_RETURN_IF_ERROR(ReadInt32(obj, "max_shares", path, false, 1, 1 << 16, d.max_shares));
  ACCELPOOL_RETURN_IF_ERROR(
      ReadInt(obj, "foreign_mib", path, false, 0, kMaxMemoryMib, d.foreign_mib));
  if (d.foreign_mib > d.memory_mib) {
    return InvalidArgumentError(Join(path, "foreign_mib") + ": " + std::to_string(d.foreign_mib) +
                                " MiB is more than the device's memory_mib (" +
                                std::to_string(d.memory_mib) + ")");
  }
  ACCELPOOL_RETURN_IF_ERROR(ReadString(obj, "partition", path, false, d.partition));
  if (!d.partition.empty()) {
    if (vendor != core::Vendor::kNvidia || !core::ValidMigProfile(d.partition)) {
      return InvalidArgumentError(Join(path, "partition") + ": \"" + d.partition +
                                  "\" is not an NVIDIA MIG profile such as \"1g.18gb\"");
    }
    if (d.max_shares != 1) {
      return InvalidArgumentError(Join(path, "max_shares") +
                                  ": a MIG instance is granted whole; must be 1");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view GroupRuleName(core::GroupRule r) { return EnumName(kGroupRules, r); }
std::string_view SpanRuleName(core::SpanRule r) { return EnumName(kSpanRules, r); }
std::string_view ModuleRuleName(core::ModuleRule r) { return EnumName(kModuleRules, r); }

StatusOr<InventoryDocument> InventoryFromJson(const json& doc, const std::string& node) {
  ACCELPOOL_RETURN_IF_ERROR(RequireObject(doc, ""));
  int64_t version = 0;
  ACCELPOOL_RETURN_IF_ERROR(ReadInt(doc, "version", "", true, 0, kMaxInt32, version));
  if (version != kInventoryVersion) {
    return UnimplementedError("inventory version " + std::to_string(version) +
                              " is not supported (want 1); upgrade the extender or roll the "
                              "device plugin back");
  }
  InventoryDocument out;
  ACCELPOOL_RETURN_IF_ERROR(ReadInt(doc, "generation", "", false, 0, kMaxInt64, out.generation));
  if (!doc.contains("inventories"))
    return InvalidArgumentError("inventories: required field is missing");
  const json& invs = doc.at("inventories");
  if (!invs.is_array()) {
    return InvalidArgumentError("inventories: want an array, got " + Describe(invs));
  }
  for (size_t i = 0; i < invs.size(); ++i) {
    const std::string path = Index("inventories", i);
    const json& in = invs[i];
    ACCELPOOL_RETURN_IF_ERROR(RequireObject(in, path));
    core::NodeInventory inv;
    inv.node = node;
    std::string vendor;
    ACCELPOOL_RETURN_IF_ERROR(ReadString(in, "vendor", path, true, vendor));
    auto v = core::ParseVendor(vendor);
    if (!v) {
      return InvalidArgumentError(Join(path, "vendor") + ": unknown vendor \"" + vendor +
                                  "\"; want nvidia, ascend, kunlunxin, metax, mthreads, thead, "
                                  "cambricon, hygon, iluvatar or enflame");
    }
    inv.vendor = *v;
    for (const core::NodeInventory& seen : out.inventories) {
      if (seen.vendor == inv.vendor) {
        return InvalidArgumentError(Join(path, "vendor") + ": vendor \"" + vendor +
                                    "\" appears twice; merge its devices into one inventory");
      }
    }
    if (in.contains("topology")) {
      ACCELPOOL_RETURN_IF_ERROR(
          ParseTopology(in.at("topology"), Join(path, "topology"), inv.topology));
    }
    if (!in.contains("devices"))
      return InvalidArgumentError(Join(path, "devices") + ": required field is missing");
    const json& devs = in.at("devices");
    const std::string dpath = Join(path, "devices");
    if (!devs.is_array())
      return InvalidArgumentError(dpath + ": want an array, got " + Describe(devs));
    if (devs.size() > static_cast<size_t>(kMaxDevices)) {
      return InvalidArgumentError(dpath + ": more than " + std::to_string(kMaxDevices) +
                                  " devices");
    }
    for (size_t d = 0; d < devs.size(); ++d) {
      core::Device dev;
      ACCELPOOL_RETURN_IF_ERROR(ParseDevice(devs[d], Index(dpath, d), inv.vendor, dev));
      inv.devices.push_back(std::move(dev));
    }
    Status valid = core::ValidateInventory(inv);
    if (!valid.ok()) {
      return InvalidArgumentError(path + ": " + valid.message() +
                                  "; fix the device plugin's topology profile for this node");
    }
    out.inventories.push_back(std::move(inv));
  }
  return out;
}

StatusOr<InventoryDocument> ParseInventory(std::string_view text, const std::string& node) {
  auto j = ParseJson(text, std::string("annotation ") + kInventoryAnnotation + " on node " + node);
  if (!j.ok()) return j.status();
  auto doc = InventoryFromJson(*j, node);
  if (!doc.ok()) {
    return doc.status().WithPrefix(std::string(kInventoryAnnotation) + " on node " + node);
  }
  return doc;
}

json InventoryToJson(const InventoryDocument& doc) {
  json invs = json::array();
  for (const core::NodeInventory& inv : doc.inventories) {
    const core::Topology& t = inv.topology;
    json topo = {
        {"kind", t.kind},
        {"valid_counts", t.valid_counts},
        {"groups", t.groups},
        {"group_rule", GroupRuleName(t.group_rule)},
        {"span_rule", SpanRuleName(t.span_rule)},
        {"modules", t.modules},
        {"module_rule", ModuleRuleName(t.module_rule)},
        {"links", t.links},
        {"slices",
         {{"memory_step_mib", t.slices.memory_step_mib},
          {"memory_sizes", t.slices.memory_sizes},
          {"one_size_per_device", t.slices.one_size_per_device},
          {"node_handle_budget", t.slices.node_handle_budget},
          {"compute_follows_memory", t.slices.compute_follows_memory},
          {"fraction_single_device", t.slices.fraction_single_device}}},
        {"super_node", t.super_node},
        {"rack", t.rack},
        {"block", t.block},
    };
    json devs = json::array();
    for (const core::Device& d : inv.devices) {
      json dev = {{"id", d.id},
                  {"index", d.index},
                  {"model", d.model},
                  {"memory_mib", d.memory_mib},
                  {"compute_units", d.compute_units},
                  {"numa", d.numa},
                  {"pci_bus", d.pci_bus},
                  {"healthy", d.healthy},
                  {"module", d.module},
                  {"max_shares", d.max_shares}};
      if (!d.partition.empty()) dev["partition"] = d.partition;
      if (d.foreign_mib > 0) dev["foreign_mib"] = d.foreign_mib;
      devs.push_back(std::move(dev));
    }
    invs.push_back(
        {{"vendor", core::VendorName(inv.vendor)}, {"topology", topo}, {"devices", devs}});
  }
  return {{"version", kInventoryVersion}, {"generation", doc.generation}, {"inventories", invs}};
}

std::string SerializeInventory(const InventoryDocument& doc) {
  return InventoryToJson(doc).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace accelpool::api
