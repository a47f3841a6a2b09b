#include "keys/fuzz/fuzz_entry.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "keys/key_rotation.h"

namespace accelpool::keys::fuzz {
namespace {

using nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

std::vector<json> Items(const json& doc, const char* key) {
  std::vector<json> out;
  if (doc.contains(key) && doc.at(key).is_array()) {
    for (const json& item : doc.at(key)) out.push_back(item);
  }
  return out;
}

}  // namespace

int FuzzKeyState(const uint8_t* data, size_t size) {
  const json doc = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("secret")) return 0;
  StatusOr<RotationState> s = StateFromSecret(doc.at("secret"), "secret fuzz/keys");
  if (!s.ok()) {
    Check(s.status().code() == StatusCode::kInvalidArgument && !s.status().message().empty());
    return 0;
  }
  const bool whole = doc.contains("whole") && doc.at("whole").is_boolean() && doc.at("whole").get<bool>();
  const bool skip = doc.contains("skip_not_ready") && doc.at("skip_not_ready").is_boolean() &&
                    doc.at("skip_not_ready").get<bool>();
  AddNodes(*s, Items(doc, "nodes"), whole, skip);
  const size_t reporting = s->node_keys.size();
  KeepNodesWithPlugin(*s, Items(doc, "plugin_pods"));
  AddPods(*s, Items(doc, "pods"));

  // The key set: what signs and the newest are held; the phase follows.
  Check(s->keys.keys.count(s->keys.signing) == 1);
  Check(s->keys.keys.count(s->newest) == 1);
  for (const auto& [id, key] : s->keys.keys) {
    Check(!id.empty() && key.size() >= api::kMinSigningKeyBytes);
    Check(KeyNumber(id) <= KeyNumber(s->newest) || KeyNumber(id) <= KeyNumber(s->keys.signing));
  }
  switch (s->phase) {
    case RotationPhase::kSteady:
      // One key, or none above "signing" while it is no k<N> above them all.
      Check(s->newest == s->keys.signing);
      if (s->keys.keys.size() > 1) {
        bool above_all = KeyNumber(s->keys.signing) >= 0;
        for (const auto& [id, key] : s->keys.keys) {
          if (id != s->keys.signing && KeyNumber(id) >= KeyNumber(s->keys.signing)) {
            above_all = false;
          }
        }
        Check(!above_all);
      }
      break;
    case RotationPhase::kAdded:
      Check(s->keys.keys.size() > 1 && s->newest != s->keys.signing &&
            KeyNumber(s->newest) > KeyNumber(s->keys.signing));
      break;
    case RotationPhase::kSwitched:
      Check(s->keys.keys.size() > 1 && s->newest == s->keys.signing &&
            KeyNumber(s->keys.signing) >= 0);
      for (const auto& [id, key] : s->keys.keys) {
        Check(id == s->keys.signing || KeyNumber(id) < KeyNumber(s->keys.signing));
      }
      break;
  }
  // The next key id is new and ranks above every key held (or there is none).
  const std::string next = NextKeyId(s->keys);
  if (!next.empty()) {
    Check(s->keys.keys.count(next) == 0);
    for (const auto& [id, key] : s->keys.keys) Check(KeyNumber(next) > KeyNumber(id));
  }

  // Nodes: each listed once, under one heading; reported ids never empty.
  // A node without a plugin pod is left out of the wait (unless no plugin
  // pod is seen at all), and is neither waited for nor listed not Ready.
  Check(s->node_keys.size() + s->no_plugin.size() == reporting);
  Check(!s->plugins_unseen || s->no_plugin.empty());
  for (const std::string& node : s->no_plugin) {
    Check(s->node_keys.count(node) == 0);
    Check(std::find(s->not_ready.begin(), s->not_ready.end(), node) == s->not_ready.end());
  }
  for (const auto& [node, ids] : s->node_keys) {
    Check(!node.empty());
    for (const std::string& id : ids) Check(!id.empty() && id.find(',') == std::string::npos);
    if (std::find(s->not_ready.begin(), s->not_ready.end(), node) != s->not_ready.end()) {
      // Only whole objects say Ready; waited for unless skipped (a node
      // named twice in the list may be both).
      Check(whole);
    }
  }
  for (const std::string& node : s->not_ready) {
    // Not Ready nodes lack the newest key, and are waited for unless skipped.
    Check(whole);
    if (!skip) Check(s->node_keys.count(node) == 1);
  }
  if (!whole) Check(s->not_ready.empty());
  for (const std::string& node : s->NodesWithout(s->newest)) Check(s->node_keys.count(node) == 1);
  // Pods: exactly those awaiting admission, bound, whose signature names
  // another key and verifies (counted here from the objects themselves),
  // sorted.
  Check(std::is_sorted(s->pods_with_old_keys.begin(), s->pods_with_old_keys.end()));
  size_t old_keys = 0;
  auto text = [](const json& pod, const char* ptr) {
    const json::json_pointer p(ptr);
    return pod.contains(p) && pod.at(p).is_string() ? pod.at(p).get<std::string>() : std::string();
  };
  for (const json& pod : Items(doc, "pods")) {
    const std::string sig = text(pod, "/metadata/annotations/accelpool.io~1assignment-signature");
    const std::string kid = api::SignatureKeyId(sig);
    const std::string node = text(pod, "/spec/nodeName");
    if (!kid.empty() && kid != s->keys.signing && api::AwaitsAdmission(pod) && !node.empty() &&
        api::VerifyAssignment(s->keys, text(pod, "/metadata/uid"), node,
                              text(pod, "/metadata/annotations/accelpool.io~1assignment"), sig)
            .ok()) {
      ++old_keys;
    }
  }
  Check(s->pods_with_old_keys.size() == old_keys);
  return 1;
}

}  // namespace accelpool::keys::fuzz
