#include "vendors/fake/inventory_file.h"

#include <cctype>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "core/fit.h"
#include "core/profiles.h"
#include "vendors/driver.h"

namespace accelpool::vendors::fake {
namespace {

using nlohmann::json;

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

// Reads an optional field of the expected JSON kind; a wrong kind, or an
// integer that does not fit T, is an error naming the field.
template <typename T>
Status ReadOpt(const json& obj, const char* key, const std::string& where, T* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    return Status::Ok();
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) {
      return InvalidArgumentError(where + "." + key + " must be a string");
    }
    *out = it->get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) {
      return InvalidArgumentError(where + "." + key + " must be true or false");
    }
    *out = it->get<bool>();
  } else {
    static_assert(std::is_integral_v<T> && std::is_signed_v<T>);
    if (!it->is_number_integer()) {
      return InvalidArgumentError(where + "." + key + " must be an integer");
    }
    constexpr int64_t kMin = std::numeric_limits<T>::min();
    constexpr int64_t kMax = std::numeric_limits<T>::max();
    const bool fits = it->is_number_unsigned()
                          ? it->get<uint64_t>() <= static_cast<uint64_t>(kMax)
                          : it->get<int64_t>() >= kMin && it->get<int64_t>() <= kMax;
    if (!fits) {
      return InvalidArgumentError(where + "." + key + ": " + it->dump() + " is out of range " +
                                  std::to_string(kMin) + ".." + std::to_string(kMax));
    }
    *out = static_cast<T>(it->get<int64_t>());
  }
  return Status::Ok();
}

// A device's "used_mib" and where it was given, by device index.
using UsedByIndex = std::map<size_t, std::pair<int64_t, std::string>>;
// A device's "processes" and where they were given, by device index.
using ProcessesByIndex = std::map<size_t, std::pair<std::vector<ProcessMemory>, std::string>>;

constexpr size_t kMaxProcesses = 64;
constexpr int64_t kMaxPid = 4194304;  // Linux's largest pid_max

// A device's "processes": [{"pid": P, "used_mib": M}, ...] (used_mib -1:
// the library does not say). Memory is checked against the device later.
StatusOr<std::vector<ProcessMemory>> ReadProcesses(const json& list, const std::string& where) {
  if (!list.is_array() || list.size() > kMaxProcesses) {
    return InvalidArgumentError(where + " must be an array of at most " +
                                std::to_string(kMaxProcesses) +
                                " {\"pid\": N, \"used_mib\": M} objects");
  }
  std::vector<ProcessMemory> out;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!list[k].is_object()) {
      return InvalidArgumentError(at + " must be an object {\"pid\": N, \"used_mib\": M}");
    }
    ProcessMemory p;
    ACCELPOOL_RETURN_IF_ERROR(ReadOpt(list[k], "pid", at, &p.pid));
    ACCELPOOL_RETURN_IF_ERROR(ReadOpt(list[k], "used_mib", at, &p.used_mib));
    if (p.pid < 1 || p.pid > kMaxPid) {
      return InvalidArgumentError(at + ".pid: " + std::to_string(p.pid) + " is out of range 1.." +
                                  std::to_string(kMaxPid));
    }
    if (p.used_mib < -1) {
      return InvalidArgumentError(at + ".used_mib: " + std::to_string(p.used_mib) +
                                  " is below -1 (-1: not said)");
    }
    for (const ProcessMemory& q : out) {
      if (q.pid == p.pid) {
        return InvalidArgumentError(at + ".pid: " + std::to_string(p.pid) +
                                    " is listed twice; give each process once");
      }
    }
    out.push_back(p);
  }
  return out;
}

Status ApplyOverride(const json& d, const std::string& where, core::NodeInventory* inv,
                     UsedByIndex* used, ProcessesByIndex* processes) {
  if (!d.is_object()) {
    return InvalidArgumentError(where + " must be an object");
  }
  int64_t index = -1;
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "index", where, &index));
  if (index < 0 || index >= static_cast<int64_t>(inv->devices.size())) {
    return InvalidArgumentError(where + ".index: " + std::to_string(index) +
                                " is out of range 0.." +
                                std::to_string(static_cast<int64_t>(inv->devices.size()) - 1) +
                                "; give the device's position on the node");
  }
  core::Device& dev = inv->devices[static_cast<size_t>(index)];
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "id", where, &dev.id));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "model", where, &dev.model));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "memory_mib", where, &dev.memory_mib));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "numa", where, &dev.numa));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "pci_bus", where, &dev.pci_bus));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "healthy", where, &dev.healthy));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "partition", where, &dev.partition));
  if (!dev.partition.empty()) {
    if (dev.vendor != core::Vendor::kNvidia || !core::ValidMigProfile(dev.partition)) {
      return InvalidArgumentError(where + ".partition: \"" + dev.partition +
                                  "\" is not an NVIDIA MIG profile such as \"1g.18gb\"");
    }
    dev.max_shares = 1;  // a MIG instance is granted whole
  }
  if (dev.memory_mib <= 0 || dev.memory_mib > core::kMaxMemoryMib) {
    return InvalidArgumentError(where + ".memory_mib must be positive and at most 2^40 MiB");
  }
  if (d.contains("used_mib")) {
    int64_t used_mib = 0;
    ACCELPOOL_RETURN_IF_ERROR(ReadOpt(d, "used_mib", where, &used_mib));
    (*used)[static_cast<size_t>(index)] = {used_mib, where + ".used_mib"};
  }
  if (auto it = d.find("processes"); it != d.end() && !it->is_null()) {
    StatusOr<std::vector<ProcessMemory>> list = ReadProcesses(*it, where + ".processes");
    if (!list.ok()) {
      return list.status();
    }
    (*processes)[static_cast<size_t>(index)] = {std::move(list).value(), where + ".processes"};
  }
  if (dev.numa < -1 || dev.numa > 1023) {
    return InvalidArgumentError(where + ".numa: " + std::to_string(dev.numa) +
                                " is out of range -1..1023 (-1: unknown)");
  }
  if (dev.id.empty() || dev.id.size() > 50) {
    return InvalidArgumentError(where + ".id must have 1 to 50 characters");
  }
  return Status::Ok();
}

StatusOr<core::NodeInventory> ParseOne(const json& j, const std::string& where,
                                       std::string_view node, MemoryUse* use) {
  if (!j.is_object()) {
    return InvalidArgumentError(where + " must be an object");
  }
  std::string vendor_name;
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "vendor", where, &vendor_name));
  std::optional<core::Vendor> vendor = core::ParseVendor(vendor_name);
  if (!vendor.has_value() || *vendor == core::Vendor::kUnknown) {
    return InvalidArgumentError(where + ".vendor: \"" + vendor_name +
                                "\" is not a vendor; use nvidia, ascend, kunlunxin, metax, "
                                "mthreads, thead, cambricon, hygon, iluvatar or enflame");
  }
  std::string profile;
  int64_t count = 0;
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "profile", where, &profile));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "count", where, &count));
  core::Device defaults;
  defaults.vendor = *vendor;
  defaults.memory_mib = 16384;
  defaults.max_shares = TraitsFor(*vendor).default_max_shares;
  if (!profile.empty()) {
    const core::ProfileInfo* info = nullptr;
    for (const core::ProfileInfo& p : core::Profiles()) {
      if (p.name == profile) {
        info = &p;
      }
    }
    if (info == nullptr) {
      return InvalidArgumentError(where + ".profile: unknown profile \"" + profile +
                                  "\"; see docs/vendors.md for the list");
    }
    if (count == 0) {
      count = info->devices;
    }
    defaults.model = info->model;
    defaults.memory_mib = info->memory_mib;
    defaults.compute_units = info->compute_units;
  }
  if (count <= 0 || count > 256) {
    return InvalidArgumentError(where + ": give a \"profile\" or a \"count\" of 1..256 devices");
  }
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "model", where, &defaults.model));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "memory_mib", where, &defaults.memory_mib));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "compute_units", where, &defaults.compute_units));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "max_shares", where, &defaults.max_shares));
  if (defaults.max_shares < 1 || defaults.max_shares > 100) {
    return InvalidArgumentError(where + ".max_shares must be 1..100");
  }
  if (defaults.memory_mib <= 0 || defaults.memory_mib > core::kMaxMemoryMib) {
    return InvalidArgumentError(where + ".memory_mib must be positive and at most 2^40 MiB");
  }
  if (defaults.compute_units < 0) {
    return InvalidArgumentError(where + ".compute_units must not be negative");
  }
  core::NodeInventory inv;
  inv.node = std::string(node);
  inv.vendor = *vendor;
  const std::string prefix = Upper(core::VendorName(*vendor)) + "-" + std::string(node) + "-";
  for (int32_t i = 0; i < static_cast<int32_t>(count); ++i) {
    core::Device d = defaults;
    d.index = i;
    d.id = prefix + std::to_string(i);
    inv.devices.push_back(d);
  }
  UsedByIndex used_by_index;
  ProcessesByIndex processes_by_index;
  auto devs = j.find("devices");
  if (devs != j.end()) {
    if (!devs->is_array()) {
      return InvalidArgumentError(where + ".devices must be an array");
    }
    for (size_t i = 0; i < devs->size(); ++i) {
      ACCELPOOL_RETURN_IF_ERROR(ApplyOverride(
          (*devs)[i], where + ".devices[" + std::to_string(i) + "]", &inv, &used_by_index,
          &processes_by_index));
    }
  }
  // Checked once every override applied (a later entry may change the memory).
  for (const core::Device& d : inv.devices) {
    const auto it = used_by_index.find(static_cast<size_t>(d.index));
    const int64_t mib = it == used_by_index.end() ? 0 : it->second.first;
    if (mib < 0 || mib > d.memory_mib) {
      return InvalidArgumentError(it->second.second + ": " + std::to_string(mib) +
                                  " is out of range 0.." + std::to_string(d.memory_mib) +
                                  " (the device's memory_mib)");
    }
    std::vector<ProcessMemory> procs;
    if (const auto p = processes_by_index.find(static_cast<size_t>(d.index));
        p != processes_by_index.end()) {
      for (const ProcessMemory& q : p->second.first) {
        if (q.used_mib > d.memory_mib) {
          return InvalidArgumentError(p->second.second + ": pid " + std::to_string(q.pid) +
                                      " holds " + std::to_string(q.used_mib) +
                                      " MiB, more than the device's memory_mib " +
                                      std::to_string(d.memory_mib));
        }
      }
      procs = p->second.first;
    }
    if (d.partition.empty()) {
      use->used[d.id] = mib;
      use->processes[d.id] = std::move(procs);
    }
  }
  if (!profile.empty()) {
    Status st = core::ApplyProfile(profile, &inv);
    if (!st.ok()) {
      return st.WithPrefix(where + ".profile");
    }
  } else {
    core::ApplyNumaDefault(&inv);
  }
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "super_node", where, &inv.topology.super_node));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "rack", where, &inv.topology.rack));
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(j, "block", where, &inv.topology.block));
  return inv;
}

StatusOr<std::vector<core::NodeInventory>> ParseChecked(const json& doc, std::string_view node,
                                                        MemoryUse* use) {
  if (!doc.is_object()) {
    return InvalidArgumentError("the inventory file must hold a JSON object");
  }
  int64_t version = 0;
  ACCELPOOL_RETURN_IF_ERROR(ReadOpt(doc, "version", "$", &version));
  if (version != 1) {
    return InvalidArgumentError("$.version must be 1 (got " + std::to_string(version) + ")");
  }
  auto invs = doc.find("inventories");
  if (invs == doc.end() || !invs->is_array()) {
    return InvalidArgumentError("$.inventories must be an array of vendor inventories");
  }
  std::vector<core::NodeInventory> out;
  std::map<std::string, std::string> owner;  // device id -> "inventories[i] device d"
  for (size_t i = 0; i < invs->size(); ++i) {
    StatusOr<core::NodeInventory> inv =
        ParseOne((*invs)[i], "inventories[" + std::to_string(i) + "]", node, use);
    if (!inv.ok()) {
      return inv.status();
    }
    for (const core::NodeInventory& prev : out) {
      if (prev.vendor == inv->vendor) {
        return InvalidArgumentError(
            "inventories[" + std::to_string(i) + "]: a second inventory of vendor " +
            std::string(core::VendorName(inv->vendor)) + "; merge them into one");
      }
    }
    for (const core::Device& d : inv->devices) {
      const std::string here =
          "inventories[" + std::to_string(i) + "] device " + std::to_string(d.index);
      auto [at, fresh] = owner.emplace(d.id, here);
      if (!fresh) {
        return InvalidArgumentError(here + ": id \"" + d.id + "\" is already the id of " +
                                    at->second +
                                    "; device ids must be unique on the node (set \"id\" in "
                                    "that device's entry of \"devices\")");
      }
    }
    out.push_back(std::move(inv).value());
  }
  return out;
}

}  // namespace

StatusOr<std::vector<core::NodeInventory>> ParseInventoryFile(std::string_view text,
                                                              std::string_view node,
                                                              MemoryUse* use) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return InvalidArgumentError("the inventory file is not valid JSON; fix its syntax");
  }
  MemoryUse scratch;
  try {
    StatusOr<std::vector<core::NodeInventory>> out =
        ParseChecked(doc, node, use != nullptr ? use : &scratch);
    if (!out.ok() && use != nullptr) *use = MemoryUse();
    return out;
  } catch (const std::exception& e) {
    if (use != nullptr) *use = MemoryUse();  // nothing of a refused file is reported
    return InvalidArgumentError(std::string("the inventory file has a value of the wrong type (") +
                                e.what() + "); compare it with docs/device-plugin.md");
  }
}

StatusOr<std::vector<core::NodeInventory>> LoadInventoryFile(const std::string& path,
                                                             std::string_view node,
                                                             MemoryUse* use) {
  std::ifstream in(path);
  if (!in) {
    return NotFoundError("cannot read the inventory file " + path +
                         "; check --fake-inventory and the file's permissions");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  StatusOr<std::vector<core::NodeInventory>> r = ParseInventoryFile(ss.str(), node, use);
  if (!r.ok()) {
    return r.status().WithPrefix(path);
  }
  return r;
}

}  // namespace accelpool::vendors::fake
