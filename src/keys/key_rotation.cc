#include "keys/key_rotation.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "kube/config.h"
#include "kube/objects.h"

namespace accelpool::keys {
namespace {

using nlohmann::json;
using Ptr = json::json_pointer;

// The most digits of a "k<N>" key id counted as a number.
constexpr size_t kMaxKeyDigits = 18;
// Random key bytes, as text (the components read a key file's text).
constexpr size_t kNewKeyRandomBytes = 48;
// Names listed in a progress line or an error, at most.
constexpr size_t kListed = 10;
// Nodes without the newest key whose Ready condition is read (one GET each);
// with more still missing, all are waited for.
constexpr size_t kReadyChecks = 50;
// Failed reads in a row (apiserver unavailable) before a run gives up.
constexpr int kUnavailableRetries = 30;

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "a, b, c and 7 more".
std::string Listed(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kListed; ++i) {
    out += (i == 0 ? "" : ", ") + names[i];
  }
  if (names.size() > kListed) {
    out += " and " + std::to_string(names.size() - kListed) + " more";
  }
  return out;
}

// Not Ready: the Ready condition says False or Unknown (kubelet stopped
// reporting). A node without the condition yet counts as Ready: waiting for
// it is the safe side.
bool NodeReady(const json& node) {
  const Ptr ptr("/status/conditions");
  if (!node.contains(ptr) || !node.at(ptr).is_array()) return true;
  for (const json& c : node.at(ptr)) {
    // A field of another type reads as absent; a status other than False or
    // Unknown counts as Ready.
    if (kube::StringAt(c, Ptr("/type")) != "Ready") continue;
    const std::string status = kube::StringAt(c, Ptr("/status"));
    return status != "False" && status != "Unknown";
  }
  return true;
}

std::string Secs(std::chrono::seconds s) { return std::to_string(s.count()) + " s"; }

}  // namespace

const char* RotationPhaseName(RotationPhase p) {
  switch (p) {
    case RotationPhase::kSteady:
      return "steady";
    case RotationPhase::kAdded:
      return "added";
    case RotationPhase::kSwitched:
      return "switched";
  }
  return "unknown";
}

std::vector<std::string> RotationState::NodesWithout(const std::string& key) const {
  std::vector<std::string> out;
  for (const auto& [node, ids] : node_keys) {
    if (std::find(ids.begin(), ids.end(), key) == ids.end()) out.push_back(node);
  }
  return out;
}

int64_t KeyNumber(const std::string& id) {
  if (id.size() < 2 || id.size() > 1 + kMaxKeyDigits || id[0] != 'k') return -1;
  int64_t n = 0;
  for (size_t i = 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return -1;
    n = n * 10 + (id[i] - '0');
  }
  return n;
}

std::string NextKeyId(const api::SigningKeys& keys) {
  int64_t top = 0;
  for (const auto& [id, key] : keys.keys) top = std::max(top, KeyNumber(id));
  const std::string next = "k" + std::to_string(top + 1);
  return next.size() > 1 + kMaxKeyDigits ? std::string() : next;
}

std::string FormatTime(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

StatusOr<std::chrono::system_clock::time_point> ParseTime(const std::string& text) {
  std::tm tm{};
  char z = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z, &consumed) != 7 ||
      z != 'Z' || static_cast<size_t>(consumed) != text.size() || tm.tm_mon < 1 || tm.tm_mon > 12 ||
      tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return InvalidArgumentError("\"" + text + "\" is not an RFC 3339 UTC time like " +
                                "2026-12-01T02:03:04Z");
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = timegm(&tm);
  // system_clock counts nanoseconds in 64 bits (years 1678..2262), and the
  // difference of two such times must fit as well: a time is taken from 1970
  // to 2199 only (an old time near 1700 would overflow now - time).
  constexpr int64_t kLast = 7258118399;  // 2199-12-31T23:59:59Z
  if (secs < 0 || secs > kLast) {
    return InvalidArgumentError("\"" + text + "\" is outside the times taken here " +
                                "(years 1970 to 2199)");
  }
  return std::chrono::system_clock::from_time_t(secs);
}

KeyRotation::KeyRotation(kube::KubeClient* client, RotationOptions options, Logger log, Clock clock)
    : client_(client),
      options_(std::move(options)),
      log_(std::move(log)),
      clock_(std::move(clock)) {}

void KeyRotation::Sleep() {
  if (clock_.sleep) {
    clock_.sleep(options_.poll);
  } else {
    std::this_thread::sleep_for(options_.poll);
  }
}

StatusOr<RotationState> StateFromSecret(const json& secret, const std::string& where) {
  if (!secret.is_object()) return InvalidArgumentError(where + " is not an object");
  RotationState s;
  s.resource_version = kube::StringAt(secret, Ptr("/metadata/resourceVersion"));
  s.switched_at = kube::StringAt(secret, Ptr(std::string("/metadata/annotations/") +
                                             "accelpool.io~1assignment-key-switched-at"));
  std::map<std::string, std::string> files;
  if (secret.contains("data") && secret.at("data").is_object()) {
    for (const auto& [name, value] : secret.at("data").items()) {
      if (!value.is_string()) {
        return InvalidArgumentError(where + ": data." + name + " is not a string");
      }
      StatusOr<std::string> bytes = kube::Base64Decode(value.get<std::string>());
      if (!bytes.ok()) return bytes.status().WithPrefix(where + ": data." + name);
      files[name] = std::move(bytes).value();
    }
  }
  StatusOr<api::SigningKeys> keys = api::ParseSigningKeys(files);
  if (!keys.ok()) {
    return keys.status().WithPrefix(where + " is not a usable key set (fix it before rotating)");
  }
  s.keys = std::move(keys).value();
  const int64_t signing = KeyNumber(s.keys.signing);
  int64_t top = signing;
  s.newest = s.keys.signing;
  // Switched: "signing" is a k<N> above every other key, as a rotation
  // leaves it. Ids of another form count below every k<N>, so a set such as
  // {signing: primary, primary, backup} is not mistaken for one.
  bool signing_above_all = signing >= 0;
  for (const auto& [id, key] : s.keys.keys) {
    if (id == s.keys.signing) continue;
    if (KeyNumber(id) >= signing) signing_above_all = false;
    if (KeyNumber(id) > top) {
      top = KeyNumber(id);
      s.newest = id;
    }
  }
  s.phase = s.keys.keys.size() == 1      ? RotationPhase::kSteady
            : s.newest != s.keys.signing ? RotationPhase::kAdded
            : signing_above_all          ? RotationPhase::kSwitched
                                         : RotationPhase::kSteady;
  return s;
}

void AddNodes(RotationState& s, const std::vector<json>& nodes, bool whole, bool skip_not_ready) {
  const Ptr keys_ptr(std::string("/metadata/annotations/") + "accelpool.io~1assignment-keys");
  const Ptr inventory_ptr(std::string("/metadata/annotations/") + "accelpool.io~1inventory");
  for (const json& node : nodes) {
    const std::string name = kube::StringAt(node, Ptr("/metadata/name"));
    if (name.empty()) continue;
    if (!node.contains(keys_ptr) || !node.at(keys_ptr).is_string()) {
      if (node.contains(inventory_ptr)) s.unreported.push_back(name);
      continue;
    }
    std::vector<std::string> ids = Split(node.at(keys_ptr).get<std::string>());
    if (whole && !NodeReady(node) && std::find(ids.begin(), ids.end(), s.newest) == ids.end()) {
      s.not_ready.push_back(name);
      if (skip_not_ready) continue;
    }
    s.node_keys[name] = std::move(ids);
  }
}

void KeepNodesWithPlugin(RotationState& s, const std::vector<json>& plugin_pods) {
  std::set<std::string> running;
  for (const json& pod : plugin_pods) {
    const std::string node = kube::StringAt(pod, Ptr("/spec/nodeName"));
    const std::string phase = kube::StringAt(pod, Ptr("/status/phase"));
    if (!node.empty() && phase != "Succeeded" && phase != "Failed") running.insert(node);
  }
  if (running.empty()) {
    s.plugins_unseen = !s.node_keys.empty();
    return;
  }
  for (auto it = s.node_keys.begin(); it != s.node_keys.end();) {
    if (running.count(it->first) != 0) {
      ++it;
      continue;
    }
    s.no_plugin.push_back(it->first);
    s.not_ready.erase(std::remove(s.not_ready.begin(), s.not_ready.end(), it->first),
                      s.not_ready.end());
    it = s.node_keys.erase(it);
  }
}

void AddPods(RotationState& s, const std::vector<json>& pods) {
  const Ptr sig_ptr(std::string("/metadata/annotations/") + "accelpool.io~1assignment-signature");
  for (const json& pod : pods) {
    const std::string signature = kube::StringAt(pod, sig_ptr);
    const std::string kid = api::SignatureKeyId(signature);
    if (kid.empty() || kid == s.keys.signing || !api::AwaitsAdmission(pod)) continue;
    // Only a signature a node would accept holds the old key: one the
    // extender made at a bind (the pod is bound, and it verifies). Anyone
    // who may annotate a pod could otherwise keep a retired key alive by
    // naming it on a pod that never leaves Pending.
    const std::string node = kube::StringAt(pod, Ptr("/spec/nodeName"));
    const std::string uid = kube::StringAt(pod, Ptr("/metadata/uid"));
    const Ptr assignment_ptr(std::string("/metadata/annotations/") + "accelpool.io~1assignment");
    if (node.empty() ||
        !api::VerifyAssignment(s.keys, uid, node, kube::StringAt(pod, assignment_ptr), signature)
             .ok()) {
      continue;
    }
    s.pods_with_old_keys.push_back(kube::StringAt(pod, Ptr("/metadata/namespace")) + "/" +
                                   kube::StringAt(pod, Ptr("/metadata/name")) + " (key " + kid +
                                   ", node " + kube::StringAt(pod, Ptr("/spec/nodeName")) + ")");
  }
  std::sort(s.pods_with_old_keys.begin(), s.pods_with_old_keys.end());
}

StatusOr<RotationState> KeyRotation::Read() {
  const std::string where = "secret " + options_.ns + "/" + options_.secret;
  StatusOr<json> secret = client_->Get(kube::Secrets(), options_.ns, options_.secret);
  if (!secret.ok()) {
    if (secret.status().code() == StatusCode::kNotFound) {
      return NotFoundError(where +
                           " does not exist: install the chart with assignmentSigning.enabled=true "
                           "(its hook creates it), or name the right one with --namespace and "
                           "--secret");
    }
    return secret.status().WithPrefix("reading " + where);
  }
  StatusOr<RotationState> s = StateFromSecret(*secret, where);
  if (!s.ok()) return s.status();

  // The nodes' metadata only (a Node's status is most of it, and this runs
  // every poll); the Ready condition is read, one node at a time, only for
  // the few nodes still without the newest key, the only ones it changes
  // anything for.
  kube::ListOptions meta;
  meta.metadata_only = true;
  StatusOr<kube::ListResult> nodes = client_->List(kube::Nodes(), "", meta);
  if (!nodes.ok()) return nodes.status().WithPrefix("listing the nodes");
  AddNodes(*s, nodes->items, /*whole=*/!nodes->metadata_only, options_.skip_not_ready);
  // Only a node with a device plugin on it checks signatures: the plugin pods
  // of the Secret's namespace (a pod mounts a Secret of its own namespace),
  // the node each is bound to and its phase kept.
  kube::ListOptions plugins;
  plugins.label_selector = kPluginPodSelector;
  plugins.keep = [](json& pod) {
    json kept = {{"spec", json::object()}, {"status", json::object()}};
    kept["spec"]["nodeName"] = kube::StringAt(pod, Ptr("/spec/nodeName"));
    kept["status"]["phase"] = kube::StringAt(pod, Ptr("/status/phase"));
    pod = std::move(kept);
    return true;
  };
  StatusOr<kube::ListResult> plugin_pods = client_->List(kube::Pods(), options_.ns, plugins);
  if (!plugin_pods.ok()) {
    return plugin_pods.status().WithPrefix("listing the device-plugin pods (" +
                                           std::string(kPluginPodSelector) + ") in namespace " +
                                           options_.ns);
  }
  KeepNodesWithPlugin(*s, plugin_pods->items);
  const std::vector<std::string> missing = s->NodesWithout(s->newest);
  if (nodes->metadata_only && missing.size() <= kReadyChecks) {
    for (const std::string& name : missing) {
      StatusOr<json> node = client_->Get(kube::Nodes(), "", name);
      if (!node.ok() && node.status().code() == StatusCode::kNotFound) {
        s->node_keys.erase(name);  // deleted since the list
      } else if (!node.ok()) {
        return node.status().WithPrefix("reading node " + name);
      } else if (!NodeReady(*node)) {
        if (options_.skip_not_ready) s->node_keys.erase(name);
        s->not_ready.push_back(name);
      }
    }
  }

  if (s->phase == RotationPhase::kSwitched && !options_.lease_name.empty()) {
    StatusOr<kube::Lease> lease = kube::GetLease(*client_, options_.lease_ns, options_.lease_name);
    if (lease.ok()) {
      // Only a live lease speaks for the leader: an expired one is the last
      // word of a leader that is gone, and the next one writes its own.
      StatusOr<std::chrono::system_clock::time_point> renewed =
          kube::ParseMicroTime(lease->renew_time);
      if (!lease->holder.empty() && renewed.ok() &&
          *renewed + std::chrono::seconds(lease->lease_duration_s) >= clock_.now()) {
        auto it = lease->annotations.find(api::kLeaseSigningKeyAnnotation);
        if (it != lease->annotations.end()) s->leader_signs = it->second;
      }
    } else if (lease.status().code() != StatusCode::kNotFound) {
      return lease.status().WithPrefix("reading the extender's lease " + options_.lease_ns + "/" +
                                       options_.lease_name +
                                       " (pass --extender-lease=none to skip that check)");
    }
  }
  if (s->phase == RotationPhase::kSwitched) {
    kube::ListOptions o;
    o.field_selector = "status.phase=Pending";
    StatusOr<kube::ListResult> pods = client_->List(kube::Pods(), "", o);
    if (!pods.ok()) return pods.status().WithPrefix("listing the pending pods");
    AddPods(*s, pods->items);
  }
  return s;
}

Status KeyRotation::Write(const RotationState& s,
                          const std::map<std::string, std::string>& set_data,
                          const std::vector<std::string>& drop_data,
                          const std::string& switched_at) {
  // A merge patch with the resourceVersion read: a Secret edited since
  // answers a conflict (kAborted) and the step starts over from a new read.
  json patch;
  patch["metadata"]["resourceVersion"] = s.resource_version;
  patch["metadata"]["annotations"][kSwitchedAtAnnotation] =
      switched_at.empty() ? json(nullptr) : json(switched_at);
  patch["data"] = json::object();
  for (const auto& [name, value] : set_data) patch["data"][name] = kube::Base64Encode(value);
  for (const std::string& name : drop_data) patch["data"][name] = nullptr;
  StatusOr<json> r =
      client_->Patch(kube::Secrets(), options_.ns, options_.secret, kube::PatchType::kMerge, patch);
  if (!r.ok()) {
    return r.status().WithPrefix("updating secret " + options_.ns + "/" + options_.secret);
  }
  return Status::Ok();
}

StatusOr<bool> KeyRotation::Step(const RotationState& s) {
  const auto now = clock_.now();
  const std::string& signing = s.keys.signing;
  switch (s.phase) {
    case RotationPhase::kSteady: {
      if (started_) return true;
      std::string random(kNewKeyRandomBytes, '\0');
      if (RAND_bytes(reinterpret_cast<unsigned char*>(random.data()),
                     static_cast<int>(random.size())) != 1) {
        return InternalError("no random bytes from OpenSSL for the new key; nothing was changed");
      }
      const std::string id = NextKeyId(s.keys);
      if (id.empty()) {
        return FailedPreconditionError(
            "the key ids have run out of numbers (k<N> up to 18 digits); give the signing key a "
            "short id such as k1 by hand (docs/operations.md), then rotate");
      }
      ACCELPOOL_RETURN_IF_ERROR(Write(s, {{id, kube::Base64Encode(random)}}, {}, ""));
      started_ = true;
      log_.Info("step 1 of 3: added a new key; the old one still signs",
                {{"key", id}, {"signing", signing}});
      return false;
    }
    case RotationPhase::kAdded: {
      const std::vector<std::string> missing = s.NodesWithout(s.newest);
      if (missing.empty()) {
        if (s.node_keys.empty()) {
          log_.Warn(
              "no node with a device plugin reports its assignment keys; switching without "
              "waiting",
              {{"key", s.newest}});
        }
        if (!s.not_ready.empty()) {
          log_.Warn(
              "switching without these nodes, which are not Ready and lack the new key "
              "(--skip-not-ready): a pod placed on one in the first minutes after it is "
              "back may be refused with unknown_key, and must be deleted to be placed again",
              {{"key", s.newest}, {"nodes", Listed(s.not_ready)}});
        }
        ACCELPOOL_RETURN_IF_ERROR(Write(s, {{"signing", s.newest}}, {}, FormatTime(now)));
        started_ = true;
        log_.Info("step 2 of 3: the new key signs; the old ones are still accepted",
                  {{"signing", s.newest},
                   {"nodes", static_cast<int64_t>(s.node_keys.size())},
                   {"not_ready", static_cast<int64_t>(s.not_ready.size())},
                   {"no_plugin", static_cast<int64_t>(s.no_plugin.size())}});
        return false;
      }
      const std::string waiting = "nodes:" + s.newest;
      if (waiting_for_ != waiting) {
        waiting_for_ = waiting;
        waiting_since_ = now;
      }
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - waiting_since_);
      if (waited >= options_.node_timeout) {
        std::string why;
        if (!s.not_ready.empty()) {
          why = " Not Ready among them: " + Listed(s.not_ready) +
                "; bring them back, or delete the Node objects of nodes that are gone, or rotate "
                "with --skip-not-ready to switch without them (a pod placed on one in the first "
                "minutes after it is back may then be refused and must be deleted).";
        }
        if (s.plugins_unseen) {
          why += std::string(" No pod labelled ") + kPluginPodSelector + " runs in namespace " +
                 options_.ns +
                 ", so every node that reports keys is waited for; on a node whose device "
                 "plugin no longer runs, remove the report: kubectl annotate node NAME "
                 "accelpool.io/assignment-keys-.";
        }
        return DeadlineExceededError(
            "key " + s.newest + " has not reached " + std::to_string(missing.size()) + " of " +
            std::to_string(s.node_keys.size()) + " nodes in " + Secs(waited) + ": " +
            Listed(missing) + "." + why + " The rotation stays at step 1 (every key is accepted, " +
            signing +
            " still signs). Check the device plugin on those nodes (its log, and "
            "accelpool_plugin_assignment_key_reload_errors_total), then run accelpool-keys "
            "rotate again to resume");
      }
      log_.Info("waiting for the new key to reach every node",
                {{"key", s.newest},
                 {"nodes_with_key", static_cast<int64_t>(s.node_keys.size() - missing.size())},
                 {"nodes", static_cast<int64_t>(s.node_keys.size())},
                 {"waiting_for", Listed(missing)},
                 {"waited_s", static_cast<int64_t>(waited.count())}});
      Sleep();
      return false;
    }
    case RotationPhase::kSwitched: {
      StatusOr<std::chrono::system_clock::time_point> since = ParseTime(s.switched_at);
      if (!since.ok() || *since > now) {
        // Switched by hand, or the note was lost: the settling time counts
        // from now. So it does from a time still to come (edited by hand,
        // or the clock of the run that switched was ahead): the switch was
        // no later than now, and waiting for that time could take years.
        ACCELPOOL_RETURN_IF_ERROR(Write(s, {}, {}, FormatTime(now)));
        log_.Info("the signing key was switched without a time on record; waiting from now",
                  {{"signing", signing}});
        return false;
      }
      const auto after = std::chrono::duration_cast<std::chrono::seconds>(now - *since);
      if (after < options_.settle) {
        log_.Info("waiting for the extender to re-read the Secret and sign with the new key",
                  {{"signing", signing},
                   {"left_s", static_cast<int64_t>((options_.settle - after).count())}});
        Sleep();
        return false;
      }
      if (!s.leader_signs.empty() && s.leader_signs != signing) {
        if (after >= options_.drain_timeout) {
          return DeadlineExceededError(
              "the extender's leader still signs with " + s.leader_signs + " " + Secs(after) +
              " after the switch to " + signing + ". The rotation stays at step 2 (both keys are "
              "accepted). Check that the extender pod mounts the key Secret and its log for "
              "\"re-reading the assignment keys failed\", then run accelpool-keys rotate again "
              "to resume");
        }
        log_.Info("waiting for the extender's leader to sign with the new key",
                  {{"signing", signing}, {"leader_signs", s.leader_signs}});
        Sleep();
        return false;
      }
      if (!s.pods_with_old_keys.empty()) {
        if (after >= options_.drain_timeout) {
          return DeadlineExceededError(
              std::to_string(s.pods_with_old_keys.size()) +
              " pods signed with an old key still wait for admission " + Secs(after) +
              " after the switch: " + Listed(s.pods_with_old_keys) +
              ". The rotation stays at step 2 (" + signing +
              " signs, the old keys are still accepted). Look at why they are not admitted "
              "(kubectl describe pod), or delete them so the scheduler assigns them again, then "
              "run accelpool-keys rotate again to resume");
        }
        log_.Info("waiting for pods signed with an old key to be admitted",
                  {{"pods", static_cast<int64_t>(s.pods_with_old_keys.size())},
                   {"waiting_for", Listed(s.pods_with_old_keys)}});
        Sleep();
        return false;
      }
      std::vector<std::string> old;
      for (const auto& [id, key] : s.keys.keys) {
        if (id != signing) old.push_back(id);
      }
      ACCELPOOL_RETURN_IF_ERROR(Write(s, {}, old, ""));
      started_ = true;
      log_.Info("step 3 of 3: dropped the old keys",
                {{"dropped", Listed(old)}, {"signing", signing}});
      return false;
    }
  }
  return InternalError("unknown rotation phase");
}

Status KeyRotation::Rotate() {
  bool first = true;
  int unavailable = 0;
  while (true) {
    StatusOr<RotationState> s = Read();
    if (!s.ok()) {
      // A restarting apiserver is waited out for a while; anything else ends the run.
      if (s.status().code() != StatusCode::kUnavailable || ++unavailable > kUnavailableRetries) {
        return s.status();
      }
      log_.Warn("the apiserver did not answer; trying again", {{"error", s.status().ToString()}});
      Sleep();
      continue;
    }
    unavailable = 0;
    if (first) {
      first = false;
      // Resuming a rotation: once the Secret is steady again it is done,
      // whoever took the last step (another run, say), and no second
      // rotation starts.
      if (s->phase != RotationPhase::kSteady) started_ = true;
      log_.Info(s->phase == RotationPhase::kSteady ? "starting a key rotation"
                                                   : "resuming the key rotation under way",
                {{"phase", RotationPhaseName(s->phase)},
                 {"signing", s->keys.signing},
                 {"keys", static_cast<int64_t>(s->keys.keys.size())}});
      if (s->phase == RotationPhase::kSteady && s->keys.keys.size() > 1) {
        log_.Info(
            "the Secret holds keys no rotation left (\"signing\" is not a k<N> above the "
            "others): a new key is added, and all the others are dropped at step 3",
            {{"signing", s->keys.signing}, {"next", NextKeyId(s->keys)}});
      }
      if (s->plugins_unseen) {
        log_.Warn("no device-plugin pod found (label " + std::string(kPluginPodSelector) +
                  ", namespace " + options_.ns +
                  "): every node that reports assignment keys is waited for");
      }
      if (!s->unreported.empty()) {
        log_.Warn(
            "these nodes have an accelpool inventory but report no assignment keys: their device "
            "plugin checks no signature, or predates the report; the rotation cannot wait for them",
            {{"nodes", Listed(s->unreported)}});
      }
    }
    // The nodes left out of the wait, or waited for though not Ready, each
    // time they change.
    if (s->no_plugin != logged_no_plugin_ && !s->no_plugin.empty()) {
      log_.Warn(
          "these nodes report assignment keys but run no device-plugin pod (its DaemonSet "
          "left them, or their vendor was turned off): not waited for. To clear the stale "
          "report: kubectl annotate node NAME accelpool.io/assignment-keys-",
          {{"nodes", Listed(s->no_plugin)}});
    }
    logged_no_plugin_ = s->no_plugin;
    if (s->phase == RotationPhase::kAdded && s->not_ready != logged_not_ready_ &&
        !s->not_ready.empty()) {
      log_.Info(options_.skip_not_ready
                    ? "these nodes are not Ready and lack the new key: not waited for "
                      "(--skip-not-ready)"
                    : "these nodes are not Ready and lack the new key: waited for like the others, "
                      "up to --node-timeout (--skip-not-ready switches without them)",
                {{"key", s->newest}, {"nodes", Listed(s->not_ready)}});
    }
    if (s->phase == RotationPhase::kAdded) logged_not_ready_ = s->not_ready;
    StatusOr<bool> done = Step(*s);
    if (!done.ok()) {
      if (done.status().code() == StatusCode::kAborted) {
        log_.Info("the Secret changed while a step was written; reading it again",
                  {{"error", done.status().ToString()}});
        continue;
      }
      return done.status();
    }
    if (*done) {
      log_.Info("key rotation complete", {{"signing", s->keys.signing}});
      return Status::Ok();
    }
  }
}

}  // namespace accelpool::keys
