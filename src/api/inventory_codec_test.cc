#include "api/inventory_codec.h"

#include <gtest/gtest.h>

namespace accelpool::api {
namespace {

InventoryDocument Sample() {
  InventoryDocument doc;
  doc.generation = 42;
  core::NodeInventory a;
  a.node = "node-a";
  a.vendor = core::Vendor::kAscend;
  a.topology.kind = "ascend-910c-x16";
  a.topology.valid_counts = {1, 2, 4};
  a.topology.modules = {{0, 1}};
  a.topology.module_rule = core::ModuleRule::kWholeForEven;
  a.topology.group_rule = core::GroupRule::kRequired;
  a.topology.groups = {{0}, {1}};
  a.topology.span_rule = core::SpanRule::kEvenMirrored;
  a.topology.links = {0, 50, 50, 0};
  a.topology.slices.memory_step_mib = 512;
  a.topology.slices.memory_sizes = {24576, 49152};
  a.topology.slices.one_size_per_device = true;
  a.topology.slices.node_handle_budget = 32;
  a.topology.slices.compute_follows_memory = true;
  a.topology.slices.fraction_single_device = true;
  a.topology.super_node = "sp-3";
  a.topology.rack = "r1";
  a.topology.block = "b2";
  for (int i = 0; i < 2; ++i) {
    core::Device d;
    d.id = "NPU-" + std::to_string(i);
    d.index = i;
    d.vendor = core::Vendor::kAscend;
    d.model = "Ascend910C";
    d.memory_mib = 65536;
    d.compute_units = 24;
    d.numa = i;
    d.pci_bus = "0000:9d:00." + std::to_string(i);
    d.healthy = i == 0;
    d.module = 0;
    d.max_shares = 4;
    a.devices.push_back(d);
  }
  doc.inventories.push_back(a);
  core::NodeInventory n;
  n.node = "node-a";
  n.vendor = core::Vendor::kNvidia;
  for (int i = 0; i < 2; ++i) {
    core::Device d;
    d.id = i == 0 ? "GPU-0" : "MIG-1";
    d.index = i;
    d.vendor = core::Vendor::kNvidia;
    d.model = "H200";
    d.memory_mib = i == 0 ? 143771 : 16384;
    d.max_shares = i == 0 ? 10 : 1;
    d.partition = i == 0 ? "" : "1g.18gb";
    d.foreign_mib = i == 0 ? 6144 : 0;
    n.devices.push_back(d);
  }
  doc.inventories.push_back(n);
  return doc;
}

bool SameInventory(const core::NodeInventory& x, const core::NodeInventory& y) {
  if (x.node != y.node || x.vendor != y.vendor || x.devices.size() != y.devices.size())
    return false;
  for (size_t i = 0; i < x.devices.size(); ++i) {
    const auto &a = x.devices[i], &b = y.devices[i];
    if (a.id != b.id || a.index != b.index || a.vendor != b.vendor || a.model != b.model ||
        a.memory_mib != b.memory_mib || a.compute_units != b.compute_units || a.numa != b.numa ||
        a.pci_bus != b.pci_bus || a.healthy != b.healthy || a.module != b.module ||
        a.max_shares != b.max_shares || a.partition != b.partition ||
        a.foreign_mib != b.foreign_mib) {
      return false;
    }
  }
  const auto &s = x.topology, &t = y.topology;
  return s.kind == t.kind && s.valid_counts == t.valid_counts && s.groups == t.groups &&
         s.group_rule == t.group_rule && s.span_rule == t.span_rule && s.modules == t.modules &&
         s.module_rule == t.module_rule && s.links == t.links &&
         s.slices.memory_step_mib == t.slices.memory_step_mib &&
         s.slices.memory_sizes == t.slices.memory_sizes &&
         s.slices.one_size_per_device == t.slices.one_size_per_device &&
         s.slices.node_handle_budget == t.slices.node_handle_budget &&
         s.slices.compute_follows_memory == t.slices.compute_follows_memory &&
         s.slices.fraction_single_device == t.slices.fraction_single_device &&
         s.super_node == t.super_node && s.rack == t.rack && s.block == t.block;
}

TEST(InventoryCodecTest, RoundTripKeepsEveryField) {
  const InventoryDocument doc = Sample();
  auto back = ParseInventory(SerializeInventory(doc), "node-a");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->generation, 42);
  ASSERT_EQ(back->inventories.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(SameInventory(back->inventories[i], doc.inventories[i])) << i;
  }
}

TEST(InventoryCodecTest, ProtocolExampleParses) {
  const std::string text = R"({"version": 1, "generation": 7, "inventories": [{"vendor": "ascend",
    "topology": {"kind": "ascend-910c-x16", "valid_counts": [1, 2, 4, 6, 8, 10, 12, 14, 16],
      "groups": [], "group_rule": "none", "span_rule": "any", "modules": [[0, 1], [2, 3]],
      "module_rule": "whole_for_even", "links": [], "super_node": "sp-3", "rack": "", "block": ""},
    "devices": [{"id": "NPU-0a1b", "index": 0, "model": "Ascend910C", "memory_mib": 65536,
      "compute_units": 24, "numa": 0, "pci_bus": "0000:9d:00.0", "healthy": true, "module": 0,
      "max_shares": 1, "future_field": {"ignored": true}},
      {"id": "NPU-0a1c", "index": 1, "model": "Ascend910C", "module": 0},
      {"id": "NPU-0a1d", "index": 2, "model": "Ascend910C", "module": 1},
      {"id": "NPU-0a1e", "index": 3, "model": "Ascend910C", "module": 1}]}]})";
  auto doc = ParseInventory(text, "n1");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const core::NodeInventory& inv = doc->inventories.at(0);
  EXPECT_EQ(inv.node, "n1");
  EXPECT_EQ(inv.vendor, core::Vendor::kAscend);
  EXPECT_EQ(inv.topology.module_rule, core::ModuleRule::kWholeForEven);
  EXPECT_EQ(inv.topology.modules.size(), 2u);
  EXPECT_EQ(inv.devices.at(0).vendor, core::Vendor::kAscend);
  EXPECT_EQ(inv.devices.at(0).memory_mib, 65536);
}

TEST(InventoryCodecTest, SchemaErrorsNameTheJsonPath) {
  struct Case {
    std::string name, text;
    StatusCode code;
    std::string want;
  };
  auto wrap = [](const std::string& inv) { return R"({"version":1,"inventories":[)" + inv + "]}"; };
  const std::vector<Case> cases = {
      {"not json", "{", StatusCode::kInvalidArgument, "is not valid JSON"},
      {"array", "[]", StatusCode::kInvalidArgument, "document: want an object"},
      {"no version", R"({"inventories":[]})", StatusCode::kInvalidArgument, "version: required"},
      {"version 2", R"({"version":2,"inventories":[]})", StatusCode::kUnimplemented, "version 2"},
      {"version string", R"({"version":"1","inventories":[]})", StatusCode::kInvalidArgument,
       "version: want an integer"},
      {"no inventories", R"({"version":1})", StatusCode::kInvalidArgument, "inventories: required"},
      {"bad vendor", wrap(R"({"vendor":"amd","devices":[]})"), StatusCode::kInvalidArgument,
       "inventories[0].vendor: unknown vendor \"amd\""},
      {"dup vendor", wrap(R"({"vendor":"nvidia","devices":[]},{"vendor":"nvidia","devices":[]})"),
       StatusCode::kInvalidArgument, "inventories[1].vendor: vendor \"nvidia\" appears twice"},
      {"index string", wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":"0"}]})"),
       StatusCode::kInvalidArgument, "inventories[0].devices[0].index: want an integer"},
      {"memory float",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"memory_mib":1.5}]})"),
       StatusCode::kInvalidArgument, "devices[0].memory_mib: want an integer"},
      {"negative memory",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"memory_mib":-1}]})"),
       StatusCode::kInvalidArgument, "memory_mib: want an integer in [0"},
      {"memory past 1 EiB",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"memory_mib":1099511627777}]})"),
       StatusCode::kInvalidArgument, "memory_mib: want an integer in [0, 1099511627776]"},
      {"healthy string",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"healthy":"yes"}]})"),
       StatusCode::kInvalidArgument, "devices[0].healthy: want true or false"},
      {"empty id", wrap(R"({"vendor":"nvidia","devices":[{"id":"","index":0}]})"),
       StatusCode::kInvalidArgument, "devices[0].id: must not be empty"},
      {"zero shares",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"max_shares":0}]})"),
       StatusCode::kInvalidArgument, "max_shares"},
      {"bad group rule",
       wrap(R"({"vendor":"nvidia","topology":{"group_rule":"maybe"},"devices":[]})"),
       StatusCode::kInvalidArgument, "topology.group_rule: want one of none|prefer|required"},
      {"bad module rule", wrap(R"({"vendor":"nvidia","topology":{"module_rule":1},"devices":[]})"),
       StatusCode::kInvalidArgument, "topology.module_rule: want a string"},
      {"module not list", wrap(R"({"vendor":"nvidia","topology":{"modules":[0,1]},"devices":[]})"),
       StatusCode::kInvalidArgument, "topology.modules[0]: want an array of integers"},
      {"slices order",
       wrap(R"({"vendor":"nvidia","topology":{"slices":{"memory_sizes":[2,1]}},"devices":[]})"),
       StatusCode::kInvalidArgument,
       "topology.slices.memory_sizes[1]: slice sizes must be strictly ascending"},
      {"devices object", wrap(R"({"vendor":"nvidia","devices":{}})"), StatusCode::kInvalidArgument,
       "inventories[0].devices: want an array"},
      {"index out of order", wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":1}]})"),
       StatusCode::kInvalidArgument,
       "inventories[0]: inventory of node \"node-x\": device 0 has index 1"},
      {"module names a missing device",
       wrap(
           R"({"vendor":"nvidia","topology":{"modules":[[0,5]]},"devices":[{"id":"G","index":0}]})"),
       StatusCode::kInvalidArgument, "module names device 5"},
      {"bad partition",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"partition":"half"}]})"),
       StatusCode::kInvalidArgument, "devices[0].partition: \"half\" is not an NVIDIA MIG profile"},
      {"partition of another vendor",
       wrap(R"({"vendor":"ascend","devices":[{"id":"G","index":0,"partition":"1g.18gb"}]})"),
       StatusCode::kInvalidArgument, "is not an NVIDIA MIG profile"},
      {"shared partition",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"partition":"1g.18gb",)"
            R"("max_shares":4}]})"),
       StatusCode::kInvalidArgument, "devices[0].max_shares: a MIG instance is granted whole"},
      {"foreign memory above the device's",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"memory_mib":1024,)"
            R"("foreign_mib":2048}]})"),
       StatusCode::kInvalidArgument, "devices[0].foreign_mib: 2048 MiB is more than"},
      {"negative foreign memory",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0,"foreign_mib":-1}]})"),
       StatusCode::kInvalidArgument, "foreign_mib"},
      {"duplicate id",
       wrap(R"({"vendor":"nvidia","devices":[{"id":"G","index":0},{"id":"G","index":1}]})"),
       StatusCode::kInvalidArgument, "duplicate id"},
  };
  for (const Case& c : cases) {
    auto r = ParseInventory(c.text, "node-x");
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("node-x"), std::string::npos) << c.name;
  }
}

TEST(InventoryCodecTest, EnumNames) {
  EXPECT_EQ(GroupRuleName(core::GroupRule::kPrefer), "prefer");
  EXPECT_EQ(SpanRuleName(core::SpanRule::kEvenMirrored), "even_mirrored");
  EXPECT_EQ(ModuleRuleName(core::ModuleRule::kStayInside), "stay_inside");
  EXPECT_EQ(ModuleRuleName(core::ModuleRule::kPreferTogether), "prefer_together");
}

}  // namespace
}  // namespace accelpool::api
