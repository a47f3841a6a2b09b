#include "extender/fuzz/fuzz_entry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "core/profiles.h"
#include "extender/convert.h"
#include "extender/handlers.h"
#include "extender/kube_adapters.h"
#include "extender/pod_load.h"
#include "extender/webhook.h"
#include "extender/workload_store.h"

namespace accelpool::extender::fuzz {
namespace {

// A cluster of four 8-GPU nodes (one with an inventory that did not parse),
// an extender without Kubernetes writes, and its handlers.
struct Fixture {
  Fixture() {
    for (const char* name : {"node-a", "node-b", "node-c"}) {
      StatusOr<core::NodeInventory> inv = core::MakeProfileNode("nvidia-hgx-8", name);
      if (!inv.ok()) std::abort();
      for (core::Device& d : inv->devices) d.max_shares = 4;
      cache.UpsertNode(name, std::vector<core::NodeInventory>{*inv}, 1, {});
    }
    cache.UpsertNode("node-bad",
                     StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("bad")), 0, {});
    auto e = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
    if (!e.ok()) std::abort();
    ext = std::move(e).value();
    handlers = std::make_unique<Handlers>(*ext, nullptr, nullptr, Logger());
    webhook = std::make_unique<Webhook>(WebhookOptions{}, &cache, Logger());
  }
  Cache cache;
  std::unique_ptr<Extender> ext;
  std::unique_ptr<Handlers> handlers;
  std::unique_ptr<Webhook> webhook;
};

Fixture& Get() {
  static Fixture* f = new Fixture();  // lives for the process, as libFuzzer expects
  return *f;
}

int Check(const char* verb, const Reply& r) {
  if (r.status != 200 && r.status != 400) {
    std::fprintf(stderr, "%s: unexpected status %d: %s\n", verb, r.status, r.body.c_str());
    std::abort();
  }
  if (!nlohmann::json::accept(r.body)) {
    std::fprintf(stderr, "%s: reply is not JSON: %s\n", verb, r.body.c_str());
    std::abort();
  }
  return r.status;
}

std::string_view View(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace

int FuzzFilter(const uint8_t* data, size_t size) {
  return Check("filter", Get().handlers->Filter(View(data, size)));
}
int FuzzPrioritize(const uint8_t* data, size_t size) {
  return Check("prioritize", Get().handlers->Prioritize(View(data, size)));
}
int FuzzBind(const uint8_t* data, size_t size) {
  return Check("bind", Get().handlers->Bind(View(data, size)));
}
int FuzzPreempt(const uint8_t* data, size_t size) {
  return Check("preempt", Get().handlers->Preempt(View(data, size)));
}
int FuzzMutate(const uint8_t* data, size_t size) {
  return Check("mutate", Get().webhook->Mutate(View(data, size)));
}

int FuzzWatch(const uint8_t* data, size_t size) {
  Cache cache;
  CacheFeeder feeder(cache, Logger());
  // Every pod event also reaches the all-pods side (trimmed as the informer
  // trims it): host requests per node and the workload learner.
  cache.TrackHost(true);
  PodLoadOptions plo;
  plo.learner.min_arrivals = 1;
  PodLoad load(cache, plo, nullptr, Logger());
  std::set<std::string> seen;       // uids the all-pods side has had an add for
  std::set<std::string> load_uids;  // every uid it was given
  std::set<std::tuple<std::string, std::string, std::string>> pods;  // uid, ns, name
  int64_t peak = 0;                                                  // pods holding devices at once
  std::string_view rest = View(data, size);
  while (!rest.empty()) {
    const size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.empty()) {
      continue;
    }
    nlohmann::json obj = nlohmann::json::parse(line.substr(1), nullptr, false);
    if (obj.is_discarded()) {
      continue;
    }
    switch (line[0]) {
      case 'n':
        feeder.OnNode(obj);
        break;
      case 'N':
        feeder.OnNodeDeleted(obj);
        break;
      case 'r':  // a node read from the apiserver, begun a moment ago
        feeder.OnNodeRead(obj, feeder.NodeEvents());
        break;
      case 'p':
      case 'P': {
        ObservedPod o = ObservePodJson(obj);
        if (!o.ref.uid.empty()) {
          pods.emplace(o.ref.uid, o.ref.ns, o.ref.name);
        }
        line[0] == 'p' ? feeder.OnPod(obj) : feeder.OnPodDeleted(obj);
        nlohmann::json trimmed = obj;
        PodLoad::Trim(trimmed);
        const nlohmann::json* uid = trimmed.is_object() && trimmed.contains("metadata") &&
                                            trimmed["metadata"].contains("uid")
                                        ? &trimmed["metadata"]["uid"]
                                        : nullptr;
        const std::string load_uid = uid != nullptr && uid->is_string() ? uid->get<std::string>() : "";
        if (!load_uid.empty()) load_uids.insert(load_uid);
        if (line[0] == 'P') {
          load.OnPodDeleted(trimmed);
          seen.erase(load_uid);
        } else if (seen.insert(load_uid).second) {
          load.OnPodAdded(trimmed);
        } else {
          load.OnPodUpdated(trimmed, trimmed);
        }
        break;
      }
      default:
        continue;
    }
    const CacheStats now = cache.Stats();
    peak = std::max(peak, now.pods_bound + now.pods_reserved);
  }
  for (const auto& [uid, ns, name] : pods) {
    feeder.OnPodDeleted({{"metadata", {{"uid", uid}, {"namespace", ns}, {"name", name}}}});
  }
  for (const std::string& uid : load_uids) {
    load.OnPodDeleted({{"metadata", {{"uid", uid}}}});
  }
  if (cache.HostPods() != 0) {
    std::fprintf(stderr, "watch: %lld pods' host requests still counted after every pod left\n",
                 static_cast<long long>(cache.HostPods()));
    std::abort();
  }
  const CacheStats stats = cache.Stats();
  if (stats.pods_bound != 0 || stats.pods_reserved != 0) {
    std::fprintf(stderr, "watch: %lld bound and %lld reserved pods left after every pod left\n",
                 static_cast<long long>(stats.pods_bound),
                 static_cast<long long>(stats.pods_reserved));
    std::abort();
  }
  for (const std::string& node : cache.NodeNames()) {
    NodeSnapshotPtr snap = cache.Node(node);
    if (snap != nullptr && !snap->Idle()) {
      std::fprintf(stderr, "watch: node %s still has devices booked after every pod left\n",
                   node.c_str());
      std::abort();
    }
    if (snap != nullptr && (snap->host_requested != core::HostResources{} || snap->host_pods != 0)) {
      std::fprintf(stderr, "watch: node %s still has host requests after every pod left\n",
                   node.c_str());
      std::abort();
    }
  }
  return static_cast<int>(peak);
}

int FuzzWorkloadStore(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  StatusOr<WorkloadState> state = DecodeWorkload(text);
  if (!state.ok()) {
    if (state.status().code() != StatusCode::kInvalidArgument || state.status().message().empty()) {
      std::fprintf(stderr, "workload: refused without a reason: %s\n",
                   state.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  size_t kept = 0;
  StatusOr<WorkloadState> again = DecodeWorkload(EncodeWorkload(*state, 1 << 30, &kept));
  if (!again.ok() || kept != state->arrivals.size() || !(*again == *state)) {
    std::fprintf(stderr, "workload: a document read does not encode back to itself\n");
    std::abort();
  }
  core::WorkloadLearner learner(
      core::WorkloadLearnerOptions{.window = 64, .max_shapes = 8, .min_arrivals = 1});
  learner.Restore(state->arrivals, state->observed);
  const std::vector<core::TaskShape> shapes = learner.Shapes();
  double total = 0;
  for (const core::TaskShape& t : shapes) total += t.weight;
  const bool all_offered = learner.distinct() <= 8;
  if (learner.arrivals() != std::min<size_t>(64, state->arrivals.size()) ||
      (all_offered && total != static_cast<double>(learner.arrivals()))) {
    std::fprintf(stderr, "workload: a restored learner does not hold the window it was given\n");
    std::abort();
  }
  return 1;
}

}  // namespace accelpool::extender::fuzz
