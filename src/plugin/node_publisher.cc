#include "plugin/node_publisher.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "api/assignment_signature.h"
#include "api/inventory_codec.h"
#include "common/strings.h"
#include "kube/objects.h"

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

namespace {
// The key ids annotation of a Node object ("" when absent).
std::string KeyIdsOn(const nlohmann::json& node) {
  auto ptr = nlohmann::json::json_pointer(std::string("/metadata/annotations/") +
                                          "accelpool.io~1assignment-keys");
  return node.contains(ptr) && node.at(ptr).is_string() ? node.at(ptr).get<std::string>()
                                                        : std::string();
}
}  // namespace

NodePublisher::NodePublisher(kube::KubeClient* client, std::string node, Logger log,
                             std::set<core::Vendor> owned)
    : client_(client), node_(std::move(node)), log_(std::move(log)), owned_(std::move(owned)) {
  SetCheckEvery(std::chrono::minutes(5));
}

void NodePublisher::SetClock(Clock now) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ = now ? std::move(now) : Clock([] { return std::chrono::steady_clock::now(); });
}

bool NodePublisher::Retry::Waiting(const std::string& what,
                                   std::chrono::steady_clock::time_point now) {
  if (what != failed) {
    // Something else to write: the last failure says nothing of it.
    backoff.Reset();
    failed.reset();
    return false;
  }
  return now < retry_at;
}

void NodePublisher::Retry::Failed(const std::string& what,
                                  std::chrono::steady_clock::time_point now,
                                  std::chrono::steady_clock::duration asked) {
  failed = what;
  const std::chrono::milliseconds step = backoff.Next();
  const auto asked_ms = std::chrono::ceil<std::chrono::milliseconds>(asked);
  retry_at = now + (asked_ms > step ? backoff.Stretch(asked_ms) : step);
}

std::chrono::steady_clock::duration NodePublisher::AskedWait(uint64_t asks) const {
  if (client_->RetryAsks() == asks) {
    return std::chrono::seconds(0);  // asked nothing while this write ran
  }
  const auto left = client_->RetryNotBefore() - std::chrono::steady_clock::now();
  return std::max<std::chrono::steady_clock::duration>(left, std::chrono::seconds(0));
}

void NodePublisher::Retry::Succeeded() {
  backoff.Reset();
  failed.reset();
}

void NodePublisher::SetCheckEvery(std::chrono::milliseconds every) {
  // A part of up to a quarter more, drawn once per publisher: ten thousand
  // nodes started together do not read their Nodes in the same second.
  std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> part(0, every.count() / 4);
  check_every_ = every + std::chrono::milliseconds(part(rng));
}

std::vector<core::NodeInventory> NodePublisher::OwnedOf(
    std::vector<core::NodeInventory> invs) const {
  std::erase_if(invs, [this](const core::NodeInventory& inv) { return !Owns(inv.vendor); });
  return invs;
}

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
      found_ = OwnedOf(std::move(prev->inventories));
      last_body_ = Body(found_);
      last_labels_ = NodeLabels(found_);
    } else {
      log_.Warn("the node's inventory annotation does not parse; rewriting it",
                {{"error", prev.status().ToString()}});
    }
  }
  loaded_ = true;
  checked_ = now_();
  return Status::Ok();
}

StatusOr<std::vector<core::NodeInventory>> NodePublisher::Found() {
  std::lock_guard<std::mutex> lock(mu_);
  ACCELPOOL_RETURN_IF_ERROR(LoadLocked());
  return found_;
}

StatusOr<bool> NodePublisher::Publish(const std::vector<core::NodeInventory>& inventories) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string body = Body(inventories);
  const auto now = now_();
  if (publish_retry_.Waiting(body, now)) {
    return false;
  }
  const uint64_t asks = client_->RetryAsks();
  StatusOr<bool> wrote = PublishLocked(inventories, body, now);
  if (wrote.ok()) {
    publish_retry_.Succeeded();
  } else {
    publish_retry_.Failed(body, now, AskedWait(asks));
  }
  return wrote;
}

StatusOr<bool> NodePublisher::PublishLocked(const std::vector<core::NodeInventory>& inventories,
                                            std::string body,
                                            std::chrono::steady_clock::time_point now) {
  ACCELPOOL_RETURN_IF_ERROR(LoadLocked());
  if (body == last_body_ && now - checked_ < check_every_) {
    return false;
  }
  // Each try reads the Node, merges, and writes on condition that the Node
  // has not changed since: a concurrent write of another vendor's plugin
  // (409) makes the next try merge with it.
  constexpr int kTries = 5;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    StatusOr<nlohmann::json> obj = client_->Get(kube::Nodes(), "", node_);
    if (!obj.ok()) {
      return obj.status().WithPrefix("reading node " + node_ + " to publish its inventory");
    }
    // The key ids as the Node has them: PublishKeyIds need not read it again.
    last_keys_ = KeyIdsOn(*obj);
    keys_loaded_ = true;
    keys_checked_ = now;
    const std::string rv =
        kube::StringAt(*obj, nlohmann::json::json_pointer("/metadata/resourceVersion"));
    const std::string text = kube::StringAt(
        *obj, nlohmann::json::json_pointer("/metadata/annotations/accelpool.io~1inventory"));
    std::vector<core::NodeInventory> on_node;
    int64_t on_node_generation = 0;
    bool on_node_parsed = false;
    if (!text.empty()) {
      StatusOr<api::InventoryDocument> doc = api::ParseInventory(text, node_);
      if (doc.ok()) {
        on_node = std::move(doc->inventories);
        on_node_generation = doc->generation;
        on_node_parsed = true;
      } else {
        log_.Warn(
            "the node's inventory annotation does not parse; rewriting it with this "
            "plugin's vendors only",
            {{"error", doc.status().ToString()}});
      }
    }
    // Another plugin's vendors as the Node has them, then this one's.
    std::vector<core::NodeInventory> merged;
    for (const core::NodeInventory& inv : on_node) {
      const bool given =
          std::any_of(inventories.begin(), inventories.end(),
                      [&](const core::NodeInventory& o) { return o.vendor == inv.vendor; });
      if (!Owns(inv.vendor) && !given) merged.push_back(inv);
    }
    merged.insert(merged.end(), inventories.begin(), inventories.end());
    std::stable_sort(merged.begin(), merged.end(),
                     [](const core::NodeInventory& a, const core::NodeInventory& b) {
                       return a.vendor < b.vendor;
                     });
    std::map<std::string, std::string> labels = NodeLabels(merged);
    const bool labelled = std::all_of(labels.begin(), labels.end(), [&](const auto& kv) {
      return kube::StringAt(*obj, nlohmann::json::json_pointer("/metadata/labels") / kv.first) ==
             kv.second;
    });
    if (on_node_parsed && Body(merged) == Body(on_node) && labelled) {
      // Already there (written by an earlier run, or by this one before an
      // answer was lost, or unchanged since the last check).
      generation_ = on_node_generation;
      last_body_ = std::move(body);
      last_labels_ = NodeLabels(inventories);
      checked_ = now;
      return false;
    }
    api::InventoryDocument doc;
    doc.generation = std::max(generation_, on_node_generation) + 1;
    doc.inventories = merged;
    nlohmann::json patch;
    if (!rv.empty()) {
      patch["metadata"]["resourceVersion"] = rv;
    }
    patch["metadata"]["annotations"][api::kInventoryAnnotation] = api::SerializeInventory(doc);
    for (const auto& [k, v] : labels) {
      patch["metadata"]["labels"][k] = v;
    }
    std::map<std::string, std::string> before = NodeLabels(on_node);
    before.insert(last_labels_.begin(), last_labels_.end());
    std::vector<std::string> stale;
    for (const auto& [k, v] : before) {
      if (labels.find(k) == labels.end()) {
        patch["metadata"]["labels"][k] = nullptr;
        stale.push_back(k);
      }
    }
    StatusOr<nlohmann::json> r =
        client_->Patch(kube::Nodes(), "", node_, kube::PatchType::kMerge, patch);
    if (!r.ok() && r.status().code() == StatusCode::kAborted && attempt + 1 < kTries) {
      log_.Debug("the node changed while its inventory was merged; merging again",
                 {{"attempt", attempt + 1}});
      continue;
    }
    if (!r.ok()) {
      return r.status().WithPrefix("publishing the inventory of node " + node_);
    }
    generation_ = doc.generation;
    last_body_ = std::move(body);
    last_labels_ = NodeLabels(inventories);
    checked_ = now;
    for (const std::string& k : stale) {
      log_.Info("removed a stale node label", {{"label", k}});
    }
    log_.Info("published the node inventory",
              {{"generation", generation_}, {"vendors", static_cast<int64_t>(merged.size())}});
    return true;
  }
  return AbortedError("publishing the inventory of node " + node_ +
                      ": the node kept changing under " + std::to_string(kTries) +
                      " tries; retried on the next publish");
}

StatusOr<bool> NodePublisher::PublishKeyIds(const std::vector<std::string>& ids) {
  std::string value = StrJoin(ids, ",");
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = now_();
  if (keys_retry_.Waiting(value, now)) {
    return false;
  }
  const uint64_t asks = client_->RetryAsks();
  StatusOr<bool> wrote = PublishKeyIdsLocked(value, now);
  if (wrote.ok()) {
    keys_retry_.Succeeded();
  } else {
    keys_retry_.Failed(value, now, AskedWait(asks));
  }
  return wrote;
}

StatusOr<bool> NodePublisher::PublishKeyIdsLocked(std::string value,
                                                  std::chrono::steady_clock::time_point now) {
  if (!keys_loaded_ || now - keys_checked_ >= check_every_) {
    StatusOr<nlohmann::json> obj = client_->Get(kube::Nodes(), "", node_);
    if (!obj.ok()) {
      return obj.status().WithPrefix("reading node " + node_);
    }
    last_keys_ = KeyIdsOn(*obj);
    keys_loaded_ = true;
    keys_checked_ = now;
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
