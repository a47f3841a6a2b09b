#include "ctl/fuzz/fuzz_entry.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ctl/cluster_view.h"

namespace accelpool::ctl::fuzz {
namespace {

using nlohmann::json;

void Fail(const std::string& what) {
  std::fprintf(stderr, "ctl: %s\n", what.c_str());
  std::abort();
}

std::vector<json> Items(const json& doc, const char* key) {
  std::vector<json> out;
  if (doc.contains(key) && doc.at(key).is_array()) {
    for (const json& item : doc.at(key)) out.push_back(item);
  }
  return out;
}

// As the command prints it (json::dump throws on a string that is not UTF-8).
void Print(const char* what, const Report& r) {
  if (!r.json.is_object()) Fail(std::string(what) + ": the report is not a JSON object");
  if (r.text.empty()) Fail(std::string(what) + ": the report has no text");
  (void)r.json.dump(2);
}

}  // namespace

int FuzzClusterReports(const uint8_t* data, size_t size) {
  const json doc = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return 0;
  NamespaceLabels ns_labels;
  if (doc.contains("namespaces") && doc.at("namespaces").is_object()) {
    for (const auto& [ns, labels] : doc.at("namespaces").items()) {
      if (!labels.is_object()) continue;
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string()) ns_labels[ns][k] = v.get<std::string>();
      }
    }
  }
  // Every report, from a view counted as the extender counts with and
  // without --host-aware; explain reads the host-aware one, the default.
  auto reports = [&](bool host_aware) {
    std::unique_ptr<ClusterView> view =
        ClusterView::FromObjects(Items(doc, "nodes"), Items(doc, "pods"), ViewOptions{host_aware});
    Print("nodes", NodesReport(*view));
    Print("pods", PodsReport(*view, ""));
    for (const std::string& node : view->Nodes()) {
      StatusOr<Report> r = NodeReport(*view, node);
      if (!r.ok()) Fail("node " + node + " is listed but has no report: " + r.status().ToString());
      Print("node", *r);
    }
    return view;
  };
  reports(false);
  std::unique_ptr<ClusterView> view = reports(true);
  if (!doc.contains("pod")) return 0;
  const std::string policy = doc.contains("policy") && doc.at("policy").is_string()
                                 ? doc.at("policy").get<std::string>()
                                 : "binpack";
  ExplainInputs inputs;
  inputs.ns_labels = &ns_labels;
  StatusOr<Report> r = ExplainReport(*view, doc.at("pod"), policy, inputs);
  if (!r.ok()) {
    if (r.status().message().empty()) Fail("explain refused without a reason");
    return 0;
  }
  Print("explain", *r);
  return 1;
}

}  // namespace accelpool::ctl::fuzz
