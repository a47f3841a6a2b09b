#include "plugin/node_publisher.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>

#include "api/assignment_signature.h"
#include "api/inventory_codec.h"
#include "common/strings.h"

namespace accelpool::plugin {
namespace {

std::string LabelValue(const std::string& in) {
  std::string out;
  for (char c : in) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  if (out.size() > 63) {
    out.resize(63);
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) {
    out.pop_back();
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) {
    out.erase(out.begin());
  }
  return out;
}

std::string Body(const std::vector<core::NodeInventory>& inventories) {
  api::InventoryDocument doc;
  doc.generation = 0;
  doc.inventories = inventories;
  return api::SerializeInventory(doc);
}

}  // namespace

std::map<std::string, std::string> NodeLabels(const std::vector<core::NodeInventory>& inventories) {
  std::map<std::string, std::string> labels;
  for (const core::NodeInventory& inv : inventories) {
    if (inv.devices.empty()) {
      continue;
    }
    const std::string vendor(core::VendorName(inv.vendor));
    labels["accelpool.io/vendor." + vendor] = "true";
    std::string model = LabelValue(inv.devices.front().model);
    if (!model.empty()) {
      labels["accelpool.io/model." + vendor] = model;
    }
    // Devices that take more than one container: where shares of this
    // vendor are served (NVIDIA's GPUs, Ascend chips with --ascend-vnpu), so
    // a pod can be pinned to such nodes.
    if (std::any_of(inv.devices.begin(), inv.devices.end(),
                    [](const core::Device& d) { return d.max_shares > 1; })) {
      labels["accelpool.io/shared." + vendor] = "true";
    }
    std::string sn = LabelValue(inv.topology.super_node);
    if (!sn.empty()) {
      labels["accelpool.io/super-node"] = sn;
    }
  }
  return labels;
}

NodePublisher::NodePublisher(kube::KubeClient* client, std::string node, Logger log)
    : client_(client), node_(std::move(node)), log_(std::move(log)) {}

int64_t NodePublisher::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

Status NodePublisher::LoadLocked() {
  if (loaded_) {
    return Status::Ok();
  }
  StatusOr<nlohmann::json> obj = client_->Get(kube::Nodes(), "", node_);
  if (!obj.ok()) {
    return obj.status().WithPrefix("reading node " + node_);
  }
  auto ptr = nlohmann::json::json_pointer("/metadata/annotations/accelpool.io~1inventory");
  if (obj->contains(ptr) && obj->at(ptr).is_string()) {
    StatusOr<api::InventoryDocument> prev =
        api::ParseInventory(obj->at(ptr).get<std::string>(), node_);
    if (prev.ok()) {
      generation_ = prev->generation;
      last_body_ = Body(prev->inventories);
      last_labels_ = NodeLabels(prev->inventories);
      found_ = std::move(prev->inventories);
    } else {
      log_.Warn("the node's inventory annotation does not parse; rewriting it",
                {{"error", prev.status().ToString()}});
    }
  }
  loaded_ = true;
  return Status::Ok();
}

StatusOr<std::vector<core::NodeInventory>> NodePublisher::Found() {
  std::lock_guard<std::mutex> lock(mu_);
  ACCELPOOL_RETURN_IF_ERROR(LoadLocked());
  return found_;
}

StatusOr<bool> NodePublisher::Publish(const std::vector<core::NodeInventory>& inventories) {
  std::lock_guard<std::mutex> lock(mu_);
  ACCELPOOL_RETURN_IF_ERROR(LoadLocked());
  std::string body = Body(inventories);
  if (body == last_body_) {
    return false;
  }
  api::InventoryDocument doc;
  doc.generation = generation_ + 1;
  doc.inventories = inventories;
  nlohmann::json patch;
  patch["metadata"]["annotations"][api::kInventoryAnnotation] = api::SerializeInventory(doc);
  std::map<std::string, std::string> labels = NodeLabels(inventories);
  for (const auto& [k, v] : labels) {
    patch["metadata"]["labels"][k] = v;
  }
  std::vector<std::string> stale;
  for (const auto& [k, v] : last_labels_) {
    if (labels.find(k) == labels.end()) {
      patch["metadata"]["labels"][k] = nullptr;
      stale.push_back(k);
    }
  }
  StatusOr<nlohmann::json> r =
      client_->Patch(kube::Nodes(), "", node_, kube::PatchType::kMerge, patch);
  if (!r.ok()) {
    return r.status().WithPrefix("publishing the inventory of node " + node_);
  }
  generation_ = doc.generation;
  last_body_ = std::move(body);
  last_labels_ = std::move(labels);
  for (const std::string& k : stale) {
    log_.Info("removed a stale node label", {{"label", k}});
  }
  log_.Info("published the node inventory", {{"generation", generation_}});
  return true;
}

StatusOr<bool> NodePublisher::PublishKeyIds(const std::vector<std::string>& ids) {
  const std::string value = StrJoin(ids, ",");
  std::lock_guard<std::mutex> lock(mu_);
  if (!keys_loaded_) {
    StatusOr<nlohmann::json> obj = client_->Get(kube::Nodes(), "", node_);
    if (!obj.ok()) {
      return obj.status().WithPrefix("reading node " + node_);
    }
    auto ptr = nlohmann::json::json_pointer(std::string("/metadata/annotations/") +
                                            "accelpool.io~1assignment-keys");
    last_keys_ = obj->contains(ptr) && obj->at(ptr).is_string() ? obj->at(ptr).get<std::string>()
                                                                : std::string();
    keys_loaded_ = true;
  }
  if (value == last_keys_) {
    return false;
  }
  nlohmann::json patch;
  patch["metadata"]["annotations"][api::kAssignmentKeysAnnotation] =
      value.empty() ? nlohmann::json(nullptr) : nlohmann::json(value);
  StatusOr<nlohmann::json> r =
      client_->Patch(kube::Nodes(), "", node_, kube::PatchType::kMerge, patch);
  if (!r.ok()) {
    return r.status().WithPrefix("publishing the assignment key ids of node " + node_);
  }
  last_keys_ = std::move(value);
  log_.Info("published the assignment key ids", {{"keys", last_keys_}});
  return true;
}

}  // namespace accelpool::plugin
