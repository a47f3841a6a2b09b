// Allocate over kubelet's unix-socket gRPC path when the pod is not yet in
// the plugin's AssignmentStore (kubelet calls before the pod watch delivered
// it). The lookup misses, the allocator's refresh re-lists the node's pending
// pods (PodSync::Refresh through the kube client, over loopback HTTP from an
// in-process kube::FakeApiServer: their metadata, then the one pod the store
// does not hold in full), and the match is retried. The plugin,
// PodSync, KubeReporter and the refresh callback are wired as in
// src/cmd/device_plugin/main.cc. Prints measured figures; asserts none.
//
//   <build>/bench/plugin/plugin_bench --benchmark_filter=AllocateGrpc
//
// Arguments: pods on the node during the call, and whether the other N-1
// are running (allocated long ago) or pending. They hold an accelpool
// assignment for one slot each; each iteration creates one more
// pending pod with an assignment for the remaining slot in the apiserver only
// (not timed), calls Allocate for that slot (timed), then deletes the pod and
// forgets it as the informer would on its delete event (not timed), so the
// slot is free again.
//
// Set-up differences from production, each so that every call takes the
// miss path as an isolated miss would:
//  - The pod watch runs for the initial list and is then stopped, so no
//    iteration's pod reaches the store before its Allocate.
//  - The kube client keeps its default rate limit (KubeConfig qps/burst);
//    after each iteration the benchmark sleeps (not timed) for the requests
//    it made (the list's pages and the reporter's patch) at that rate, so
//    every call finds the token bucket as full as a rare miss does.
//  - The reporter's queued allocation patch is flushed after each call (not
//    timed).
//
// Counters: p50_us / p99_us / mean_us per Allocate (client-observed);
// proc_cpu_us, CPU time of the whole process per call (plugin, gRPC client,
// kube client and the fake apiserver, which all share this machine's cores);
// requests_per_call, apiserver requests per iteration (list pages, the
// refresh's reads of single pods, and the reporter's patch); list_answer_us,
// after the loop, the median time to fetch the same list's pages as unparsed
// HTTP bodies (the fake apiserver's and loopback's share of a refresh).
// The baseline, in the same process over the same channel: one
// GetDevicePluginOptions after each Allocate (not timed; latency.h), as
// empty_p50_us / empty_p99_us, and Allocate's percentiles over them as
// p50_vs_empty_call / p99_vs_empty_call.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/assignment_codec.h"
#include "bench_pods.h"
#include "common/metrics.h"
#include "deviceplugin/api.grpc.pb.h"
#include "http/http.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/fake_apiserver.h"
#include "latency.h"
#include "plugin/kube_reporter.h"
#include "plugin/node_plugin.h"
#include "plugin/plugin_metrics.h"
#include "plugin/pod_sync.h"
#include "plugin/state_dirs.h"
#include "vendors/fake/fake_driver.h"

namespace accelpool::plugin {
namespace {

using nlohmann::json;

constexpr const char* kNode = "bench";
constexpr const char* kPods = "/api/v1/namespaces/default/pods";

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "allocate_miss_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::abort();
}

// A pod of this benchmark's node (bench_pods.h).
json PendingPod(const std::string& name, const std::string& device, int index,
                const std::string& slot, const std::string& created, bool running = false) {
  return bench::SharePod(name, kNode, device, index, slot, created, running);
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The median of 5 fetches of the node's pod list (every page, as the kube
// client asks for it; the N-1 pods left after the loop) as raw HTTP bodies,
// not parsed: about what the in-process fake apiserver and loopback take of
// a refresh.
double ListAnswerMicros(const std::string& url) {
  http::ClientOptions o;
  o.base_url = url;
  StatusOr<std::unique_ptr<http::HttpClient>> c = http::NewHttpClient(o);
  if (!c.ok()) {
    Die("http client", c.status());
  }
  std::vector<double> us;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    std::string cont;
    do {
      http::ClientRequest r;
      r.path = "/api/v1/pods?fieldSelector=spec.nodeName%3D" + std::string(kNode) +
               "&limit=" + std::to_string(kube::ListOptions{}.limit) +
               (cont.empty() ? "" : "&continue=" + cont);
      StatusOr<http::ClientResponse> resp = (*c)->Send(r);
      if (!resp.ok()) {
        Die("list", resp.status());
      }
      // The list's metadata comes after its items; pod objects hold no
      // unescaped quote inside their annotation strings.
      constexpr std::string_view kKey = R"("continue":")";
      const size_t at = resp->body.rfind(kKey);
      cont = at == std::string::npos
                 ? ""
                 : resp->body.substr(at + kKey.size(),
                                     resp->body.find('"', at + kKey.size()) - at - kKey.size());
    } while (!cont.empty());
    us.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() *
                 1e6);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

struct MissFixture {
  // 16 GPUs with 10 slots each, 100 over 160 pods: every pod has a slot of
  // its own.
  MissFixture(int pods, bool running) : shares(pods > 160 ? 100 : 10) {
    std::signal(SIGPIPE, SIG_IGN);  // as main.cc
    char tmpl[] = "/tmp/ap-bench-miss-XXXXXX";
    dir = mkdtemp(tmpl);
    std::ofstream(dir + "/inv.json")
        << R"({"version":1,"inventories":[{"vendor":"nvidia","count":16,"model":"H200",)"
        << R"("memory_mib":143771,"max_shares":)" << shares << "}]}";

    if (Status st = api.Start(); !st.ok()) {
      Die("fake apiserver", st);
    }
    for (int i = 0; i + 1 < pods; ++i) {
      api.Put(kPods, PendingPod("pod-" + std::to_string(i), Device(i), i % 16, Slot(i),
                                "2026-11-30T02:00:00Z", running));
    }
    probe = pods - 1;

    // Wired as src/cmd/device_plugin/main.cc wires it.
    kube::KubeConfig kc;
    kc.server = api.url();
    qps = kc.qps;
    StatusOr<std::unique_ptr<kube::KubeClient>> c = kube::NewKubeClient(kc);
    if (!c.ok()) {
      Die("kube client", c.status());
    }
    client = std::move(c).value();
    StatusOr<std::unique_ptr<PluginMetrics>> m = PluginMetrics::New(registry);
    if (!m.ok()) {
      Die("metrics", m.status());
    }
    metrics = std::move(m).value();
    state_dirs = std::make_unique<StateDirs>(dir + "/containers");
    reporter = std::make_unique<KubeReporter>(client.get(), Logger());
    sync = std::make_unique<PodSync>(client.get(), kNode, &store, reporter.get(), Logger(),
                                     state_dirs.get());
    sync->Start();
    if (!sync->WaitForSync(std::chrono::seconds(30))) {
      Die("pod informer", DeadlineExceededError("no initial list within 30 s"));
    }
    // The watch stops here: the pods created below reach the store only
    // through the allocator's refresh.
    sync->Stop();

    NodePluginOptions o;
    o.node = kNode;
    o.plugin_dir = dir;
    o.enforcement.state_root = dir + "/containers";
    std::vector<vendors::VendorDriverPtr> drivers;
    drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
        vendors::fake::FakeDriverOptions{dir + "/inv.json", kNode}));
    PodSync* pod_sync = sync.get();
    plugin =
        std::make_unique<NodePlugin>(o, std::move(drivers), &store, metrics.get(), reporter.get(),
                                     Logger(), [pod_sync] { return pod_sync->Refresh(); });
    plugin->allocator().SetWideRefresh([pod_sync] { return pod_sync->RefreshNotEnded(); });
    if (Status st = plugin->Start(); !st.ok()) {
      Die("plugin", st);
    }
    auto ch = grpc::CreateChannel("unix:" + dir + "/" + EndpointFor("nvidia.com/gpu"),
                                  grpc::InsecureChannelCredentials());
    stub = v1beta1::DevicePlugin::NewStub(ch);
  }
  ~MissFixture() {
    plugin.reset();
    sync.reset();
    reporter.reset();
    client.reset();
    api.Stop();
    std::filesystem::remove_all(dir);
  }

  std::string Device(int i) const { return "NVIDIA-bench-" + std::to_string(i % 16); }
  std::string Slot(int i) const { return api::SlotId(Device(i), (i / 16) % shares); }

  const int shares;
  int probe = 0;  // the pod index whose slot the new pods take
  double qps = 0;
  std::string dir;
  kube::FakeApiServer api;
  std::unique_ptr<kube::KubeClient> client;
  MetricsRegistry registry;
  std::unique_ptr<PluginMetrics> metrics;
  std::unique_ptr<StateDirs> state_dirs;
  AssignmentStore store;
  std::unique_ptr<KubeReporter> reporter;
  std::unique_ptr<PodSync> sync;
  std::unique_ptr<NodePlugin> plugin;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
};

void BM_AllocateGrpcMiss(benchmark::State& state) {
  const int pods = static_cast<int>(state.range(0));
  MissFixture f(pods, state.range(1) != 0);
  const std::string slot = f.Slot(f.probe);
  std::vector<double> us;
  std::vector<double> empty_us;
  size_t requests = 0;
  double cpu = 0;
  int64_t n = 0;
  for (auto _ : state) {
    const auto begin = std::chrono::steady_clock::now();
    const size_t seen = f.api.Requests().size();
    const json pod = f.api.Put(kPods, PendingPod("new-" + std::to_string(n), f.Device(f.probe),
                                                 f.probe % 16, slot, "2026-11-30T03:00:00Z"));
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(slot);
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    const double cpu0 = ProcessCpuSeconds();
    auto start = std::chrono::steady_clock::now();
    grpc::Status st = f.stub->Allocate(&ctx, req, &resp);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    cpu += ProcessCpuSeconds() - cpu0;
    state.SetIterationTime(secs);
    if (!st.ok()) {
      state.SkipWithError(st.error_message().c_str());
      break;
    }
    us.push_back(secs * 1e6);
    // Not timed: the baseline call, the reporter's patch, then the pod goes
    // (apiserver, store and state dir, as on the informer's delete event),
    // then the pacing.
    const double empty = bench::EmptyCallMicros(*f.stub);
    if (empty < 0) {
      state.SkipWithError("GetDevicePluginOptions failed");
      break;
    }
    empty_us.push_back(empty);
    f.reporter->Flush();
    f.api.Remove(kPods, pod["metadata"]["name"].get<std::string>());
    f.sync->Forget(pod);
    const size_t made = f.api.Requests().size() - seen;
    requests += made;
    std::this_thread::sleep_until(begin + std::chrono::duration<double>(made / f.qps));
    ++n;
  }
  if (!us.empty()) {
    state.counters["proc_cpu_us"] = cpu * 1e6 / us.size();
    state.counters["requests_per_call"] = static_cast<double>(requests) / us.size();
    state.counters["list_answer_us"] = ListAnswerMicros(f.api.url());
  }
  bench::SetLatencyCounters(state, us, empty_us);
}
// Second argument: 0 = the other pods are all pending (every one is in the
// refresh's list), 1 = they are running, as on a node in steady state.
BENCHMARK(BM_AllocateGrpcMiss)
    ->ArgNames({"pods", "running"})
    ->Args({16, 0})
    ->Args({160, 0})
    ->Args({1600, 0})
    ->Args({160, 1})
    ->Args({1600, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace accelpool::plugin
