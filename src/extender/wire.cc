#include "extender/wire.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

#include "common/strings.h"

namespace accelpool::extender {
namespace {

bool EqualFold(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

Status TypeError(std::string_view field, std::string_view want) {
  return InvalidArgumentError(std::string(field) + " must be " + std::string(want) +
                              "; send the kube-scheduler extender v1 format");
}

// The keys of `obj` that are not in `known` (compared case-insensitively).
std::vector<std::string> UnknownKeys(const Json& obj, std::initializer_list<std::string_view> known) {
  std::vector<std::string> out;
  for (const auto& item : obj.items()) {
    bool found = false;
    for (std::string_view k : known) {
      if (EqualFold(item.key(), k)) {
        found = true;
        break;
      }
    }
    if (!found) {
      out.push_back(item.key());
    }
  }
  return out;
}

StatusOr<Json> ParseObject(std::string_view body, std::string_view what) {
  StatusOr<Json> doc = ParseJson(body);
  if (!doc.ok()) {
    return doc.status().WithPrefix(what);
  }
  if (!doc->is_object()) {
    return TypeError(what, "a JSON object");
  }
  return doc;
}

StatusOr<std::optional<std::vector<std::string>>> StringList(const Json& obj, std::string_view key,
                                                             std::string_view path) {
  const Json* f = FindField(obj, key);
  if (f == nullptr || f->is_null()) {
    return std::optional<std::vector<std::string>>();
  }
  if (!f->is_array()) {
    return TypeError(path, "an array of strings or null");
  }
  std::vector<std::string> out;
  out.reserve(f->size());
  for (const Json& e : *f) {
    if (!e.is_string()) {
      return TypeError(path, "an array of strings or null");
    }
    out.push_back(e.get<std::string>());
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

StatusOr<std::string> StringField(const Json& obj, std::string_view key, std::string_view path) {
  const Json* f = FindField(obj, key);
  if (f == nullptr || f->is_null()) {
    return std::string();
  }
  if (!f->is_string()) {
    return TypeError(path, "a string");
  }
  return f->get<std::string>();
}

StatusOr<std::map<std::string, std::string>> StringMap(const Json& obj, std::string_view key,
                                                       std::string_view path) {
  std::map<std::string, std::string> out;
  const Json* f = FindField(obj, key);
  if (f == nullptr || f->is_null()) {
    return out;
  }
  if (!f->is_object()) {
    return TypeError(path, "an object of strings or null");
  }
  for (const auto& item : f->items()) {
    if (!item.value().is_string()) {
      return TypeError(std::string(path) + "." + item.key(), "a string");
    }
    out.emplace(item.key(), item.value().get<std::string>());
  }
  return out;
}

StatusOr<Json> PodField(const Json& obj) {
  const Json* f = FindField(obj, "Pod");
  if (f == nullptr || f->is_null()) {
    return Json();
  }
  if (!f->is_object()) {
    return TypeError("Pod", "a v1.Pod object or null");
  }
  return *f;
}

StatusOr<int64_t> Int64Field(const Json& obj, std::string_view key, std::string_view path) {
  const Json* f = FindField(obj, key);
  if (f == nullptr || f->is_null()) {
    return int64_t{0};
  }
  if (!f->is_number_integer() ||
      (f->is_number_unsigned() &&
       f->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return TypeError(path, "an integer");  // past int64 it would read back negative
  }
  return f->get<int64_t>();
}

std::string Dump(const Json& j) {
  // Replace invalid UTF-8 rather than throw: names come from the request.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Appends `s` as a JSON string. Node names are DNS subdomains, emitted as
// they are; anything else goes through the full serializer (escapes, invalid
// UTF-8 replaced).
void AppendString(std::string& out, const std::string& s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == ':';
  });
  if (plain) {
    out += '"';
    out += s;
    out += '"';
  } else {
    out += Dump(Json(s));
  }
}

}  // namespace

StatusOr<Json> ParseJson(std::string_view body) {
  if (body.empty()) {
    return InvalidArgumentError("empty body; send a JSON document");
  }
  if (JsonNestingDepth(body) > kMaxJsonDepth) {
    return InvalidArgumentError("JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                " levels; send the kube-scheduler extender v1 format");
  }
  try {
    return Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string("malformed JSON (") + e.what() + ")");
  }
}

const Json* FindField(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it != obj.end()) {
    return &*it;
  }
  for (auto item = obj.begin(); item != obj.end(); ++item) {
    if (EqualFold(item.key(), key)) {
      return &item.value();
    }
  }
  return nullptr;
}

std::vector<std::string> ExtenderArgs::CandidateNames() const {
  if (node_names.has_value()) {
    return *node_names;
  }
  std::vector<std::string> out;
  if (nodes.has_value()) {
    out.reserve(nodes->size());
    for (const Json& n : *nodes) {
      const Json* meta = FindField(n, "metadata");
      const Json* name = meta != nullptr && meta->is_object() ? FindField(*meta, "name") : nullptr;
      out.push_back(name != nullptr && name->is_string() ? name->get<std::string>() : "");
    }
  }
  return out;
}

StatusOr<ExtenderArgs> DecodeExtenderArgs(std::string_view body) {
  StatusOr<Json> doc = ParseObject(body, "ExtenderArgs");
  if (!doc.ok()) {
    return doc.status();
  }
  ExtenderArgs args;
  StatusOr<Json> pod = PodField(*doc);
  if (!pod.ok()) {
    return pod.status();
  }
  args.pod = std::move(pod).value();
  StatusOr<std::optional<std::vector<std::string>>> names =
      StringList(*doc, "NodeNames", "NodeNames");
  if (!names.ok()) {
    return names.status();
  }
  args.node_names = std::move(names).value();
  const Json* nodes = FindField(*doc, "Nodes");
  if (nodes != nullptr && !nodes->is_null()) {
    if (!nodes->is_object()) {
      return TypeError("Nodes", "a v1.NodeList object or null");
    }
    const Json* items = FindField(*nodes, "items");
    std::vector<Json> list;
    if (items != nullptr && !items->is_null()) {
      if (!items->is_array()) {
        return TypeError("Nodes.items", "an array of v1.Node");
      }
      for (const Json& n : *items) {
        const Json* meta = n.is_object() ? FindField(n, "metadata") : nullptr;
        const Json* name = meta != nullptr && meta->is_object() ? FindField(*meta, "name") : nullptr;
        if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
          return TypeError("Nodes.items[].metadata.name", "a non-empty string");
        }
        list.push_back(n);
      }
    }
    args.nodes = std::move(list);
  }
  if (args.nodes.has_value() && args.node_names.has_value()) {
    // kube-scheduler sends one of them (NodeNames when the extender is
    // nodeCacheCapable, else Nodes); with both, which one the answer should
    // follow is not known.
    return InvalidArgumentError(
        "ExtenderArgs carries both NodeNames and Nodes; kube-scheduler sends one of them "
        "(NodeNames when the extender is nodeCacheCapable): send only one");
  }
  args.unknown_keys = UnknownKeys(*doc, {"Pod", "Nodes", "NodeNames"});
  return args;
}

std::string EncodeFilterResult(const FilterResult& r) {
  if (r.nodes.has_value()) {
    Json out = Json::object();
    out["Nodes"] = Json{{"metadata", Json::object()}, {"items", *r.nodes}};
    out["NodeNames"] = r.node_names.has_value() ? Json(*r.node_names) : Json();
    out["FailedNodes"] = r.failed_nodes;
    out["FailedAndUnresolvableNodes"] = r.failed_and_unresolvable;
    out["Error"] = r.error;
    return Dump(out);
  }
  // nodeCacheCapable (names only), the common case: written directly, keys in
  // the order the Json object above would sort them.
  auto append_map = [](std::string& out, const std::map<std::string, std::string>& m) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : m) {
      if (!first) out += ',';
      first = false;
      AppendString(out, k);
      out += ':';
      out += Dump(Json(v));
    }
    out += '}';
  };
  std::string out;
  out.reserve(64 + (r.node_names ? r.node_names->size() * 24 : 0));
  out += "{\"Error\":";
  out += Dump(Json(r.error));
  out += ",\"FailedAndUnresolvableNodes\":";
  append_map(out, r.failed_and_unresolvable);
  out += ",\"FailedNodes\":";
  append_map(out, r.failed_nodes);
  out += ",\"NodeNames\":";
  if (r.node_names.has_value()) {
    out += '[';
    for (size_t i = 0; i < r.node_names->size(); ++i) {
      if (i != 0) out += ',';
      AppendString(out, (*r.node_names)[i]);
    }
    out += ']';
  } else {
    out += "null";
  }
  out += ",\"Nodes\":null}";
  return out;
}

StatusOr<FilterResult> DecodeFilterResult(std::string_view body) {
  StatusOr<Json> doc = ParseObject(body, "ExtenderFilterResult");
  if (!doc.ok()) {
    return doc.status();
  }
  FilterResult r;
  auto names = StringList(*doc, "NodeNames", "NodeNames");
  auto failed = StringMap(*doc, "FailedNodes", "FailedNodes");
  auto unres = StringMap(*doc, "FailedAndUnresolvableNodes", "FailedAndUnresolvableNodes");
  auto error = StringField(*doc, "Error", "Error");
  if (!names.ok()) return names.status();
  if (!failed.ok()) return failed.status();
  if (!unres.ok()) return unres.status();
  if (!error.ok()) return error.status();
  r.node_names = std::move(names).value();
  r.failed_nodes = std::move(failed).value();
  r.failed_and_unresolvable = std::move(unres).value();
  r.error = std::move(error).value();
  const Json* nodes = FindField(*doc, "Nodes");
  if (nodes != nullptr && nodes->is_object()) {
    const Json* items = FindField(*nodes, "items");
    r.nodes = std::vector<Json>();
    if (items != nullptr && items->is_array()) {
      for (const Json& n : *items) {
        r.nodes->push_back(n);
      }
    }
  }
  return r;
}

std::string EncodeHostPriorityList(const std::vector<HostPriority>& list) {
  // Written directly: a list of thousands of nodes is on every scheduling
  // cycle, and building a Json object per entry costs more than the ranking.
  std::string out;
  out.reserve(list.size() * 40 + 2);
  out += '[';
  for (size_t i = 0; i < list.size(); ++i) {
    out += i == 0 ? "{\"Host\":" : ",{\"Host\":";
    AppendString(out, list[i].host);
    out += ",\"Score\":";
    out += std::to_string(list[i].score);
    out += '}';
  }
  out += ']';
  return out;
}

StatusOr<std::vector<HostPriority>> DecodeHostPriorityList(std::string_view body) {
  StatusOr<Json> doc = ParseJson(body);
  if (!doc.ok()) {
    return doc.status().WithPrefix("HostPriorityList");
  }
  std::vector<HostPriority> out;
  if (doc->is_null()) {
    return out;
  }
  if (!doc->is_array()) {
    return TypeError("HostPriorityList", "an array");
  }
  for (const Json& e : *doc) {
    if (!e.is_object()) {
      return TypeError("HostPriorityList[]", "an object");
    }
    auto host = StringField(e, "Host", "HostPriority.Host");
    auto score = Int64Field(e, "Score", "HostPriority.Score");
    if (!host.ok()) return host.status();
    if (!score.ok()) return score.status();
    out.push_back(HostPriority{*host, *score});
  }
  return out;
}

StatusOr<BindingArgs> DecodeBindingArgs(std::string_view body) {
  StatusOr<Json> doc = ParseObject(body, "ExtenderBindingArgs");
  if (!doc.ok()) {
    return doc.status();
  }
  BindingArgs a;
  auto name = StringField(*doc, "PodName", "PodName");
  auto ns = StringField(*doc, "PodNamespace", "PodNamespace");
  auto uid = StringField(*doc, "PodUID", "PodUID");
  auto node = StringField(*doc, "Node", "Node");
  if (!name.ok()) return name.status();
  if (!ns.ok()) return ns.status();
  if (!uid.ok()) return uid.status();
  if (!node.ok()) return node.status();
  a.pod_name = *name;
  a.pod_namespace = *ns;
  a.pod_uid = *uid;
  a.node = *node;
  if (a.pod_name.empty() || a.pod_namespace.empty() || a.node.empty()) {
    return InvalidArgumentError(
        "ExtenderBindingArgs needs PodName, PodNamespace and Node; send all three");
  }
  a.unknown_keys = UnknownKeys(*doc, {"PodName", "PodNamespace", "PodUID", "Node"});
  return a;
}

std::string EncodeBindingResult(std::string_view error) {
  return Dump(Json{{"Error", std::string(error)}});
}

StatusOr<PreemptionArgs> DecodePreemptionArgs(std::string_view body) {
  StatusOr<Json> doc = ParseObject(body, "ExtenderPreemptionArgs");
  if (!doc.ok()) {
    return doc.status();
  }
  PreemptionArgs a;
  StatusOr<Json> pod = PodField(*doc);
  if (!pod.ok()) {
    return pod.status();
  }
  a.pod = std::move(pod).value();
  // NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims (full pods).
  for (std::string_view key : {"NodeNameToMetaVictims", "NodeNameToVictims"}) {
    const Json* m = FindField(*doc, key);
    if (m == nullptr || m->is_null()) {
      continue;
    }
    if (!m->is_object()) {
      return TypeError(key, "an object keyed by node name");
    }
    for (const auto& item : m->items()) {
      const std::string path = std::string(key) + "." + item.key();
      const Json& v = item.value();
      if (v.is_null()) {
        a.victims.emplace(item.key(), MetaVictims{});
        continue;
      }
      if (!v.is_object()) {
        return TypeError(path, "an object with Pods and NumPDBViolations");
      }
      MetaVictims mv;
      auto pdb = Int64Field(v, "NumPDBViolations", path + ".NumPDBViolations");
      if (!pdb.ok()) return pdb.status();
      mv.num_pdb_violations = *pdb;
      const Json* pods = FindField(v, "Pods");
      if (pods != nullptr && !pods->is_null()) {
        if (!pods->is_array()) {
          return TypeError(path + ".Pods", "an array");
        }
        for (const Json& p : *pods) {
          // MetaPod {UID} or a full v1.Pod {metadata.uid}.
          const Json* uid = p.is_object() ? FindField(p, "UID") : nullptr;
          if (uid == nullptr && p.is_object()) {
            const Json* meta = FindField(p, "metadata");
            uid = meta != nullptr && meta->is_object() ? FindField(*meta, "uid") : nullptr;
          }
          if (uid == nullptr || !uid->is_string() || uid->get<std::string>().empty()) {
            return TypeError(path + ".Pods[]", "a pod with a UID");
          }
          mv.pod_uids.push_back(uid->get<std::string>());
        }
      }
      a.victims[item.key()] = std::move(mv);
    }
    break;
  }
  a.unknown_keys = UnknownKeys(*doc, {"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"});
  return a;
}

std::string EncodePreemptionResult(const std::map<std::string, MetaVictims>& victims) {
  Json m = Json::object();
  for (const auto& [node, v] : victims) {
    Json pods = Json::array();
    for (const std::string& uid : v.pod_uids) {
      pods.push_back(Json{{"UID", uid}});
    }
    m[node] = Json{{"Pods", pods}, {"NumPDBViolations", v.num_pdb_violations}};
  }
  return Dump(Json{{"NodeNameToMetaVictims", m}});
}

std::string EncodeErrorBody(std::string_view error) {
  return Dump(Json{{"Error", std::string(error)}});
}

}  // namespace accelpool::extender
