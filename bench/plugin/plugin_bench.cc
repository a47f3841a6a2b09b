// Device plugin benchmarks: kubelet's Allocate over the real unix-socket gRPC
// path (slot-id parsing, pod lookup among the node's pending assignments,
// driver spec, enforcement env), and the plugin's resident memory with 16
// devices. Prints measured figures; asserts none.
//
//   build-<you>/bench/plugin/plugin_bench
//
// BM_AllocateGrpcKubeletView is the same call with kubelet's pod-resources
// API wired (an in-process server on a unix socket listing every pending pod),
// which Allocate reads to confirm the pod its slot ids name is the one kubelet
// admits.
//
// Counters: p50_us / p99_us / mean_us per Allocate (client-observed), rss_mib
// of this process after the plugin started (includes the benchmark harness).
// The baseline, measured in the same process over the same channel: after
// each Allocate (not timed), one GetDevicePluginOptions, which the plugin
// answers without reading any state (latency.h): empty_p50_us / empty_p99_us,
// and Allocate's percentiles over them, p50_vs_empty_call / p99_vs_empty_call.
// rss_harness_mib is this process before the first plugin was made in it (in
// BM_AllocateGrpcKubeletView, plus what starting the pod-resources server,
// kubelet's stand-in, added), rss_plugin_mib = rss_mib - rss_harness_mib.
// What an earlier benchmark of the same process left resident (code pages,
// gRPC's threads, heap not given back) counts in a later one's
// rss_plugin_mib, so that figure is the plugin's own only for the first
// benchmark of a process: pass --benchmark_filter naming one benchmark and
// size.
// The same call when the pod is not yet in the plugin's store (the lookup
// misses and the node's pods are re-listed) is BM_AllocateGrpcMiss, in
// allocate_miss_bench.cc.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "api/assignment_codec.h"
#include "deviceplugin/api.grpc.pb.h"
#include "latency.h"
#include "plugin/node_plugin.h"
#include "plugin/pod_resources.h"
#include "podresources/podresources.grpc.pb.h"
#include "vendors/fake/fake_driver.h"

namespace accelpool::plugin {
namespace {

double RssMib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stod(line.substr(6)) / 1024.0;
    }
  }
  return 0;
}

// This process when its first Fixture began, before any plugin was made in
// it: the benchmark harness (the loaded libraries, the benchmark library).
// Read once, as google-benchmark makes a fresh Fixture for each of its runs.
double FirstFixtureRssMib() {
  static const double rss = RssMib();
  return rss;
}

struct Fixture {
  // Over 160 pods the devices get 100 slots each, so that every pod has a
  // slot of its own.
  explicit Fixture(int pods) : shares(pods > 160 ? 100 : 10) {
    harness_rss_mib = FirstFixtureRssMib();
    char tmpl[] = "/tmp/ap-bench-XXXXXX";
    dir = mkdtemp(tmpl);
    std::ofstream(dir + "/inv.json")
        << R"({"version":1,"inventories":[{"vendor":"nvidia","count":16,"model":"H200",)"
        << R"("memory_mib":143771,"max_shares":)" << shares << "}]}";
    std::vector<vendors::VendorDriverPtr> drivers;
    drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
        vendors::fake::FakeDriverOptions{dir + "/inv.json", "bench"}));
    NodePluginOptions o;
    o.node = "bench";
    o.plugin_dir = dir;
    o.enforcement.state_root = dir + "/containers";
    plugin =
        std::make_unique<NodePlugin>(o, std::move(drivers), &store, nullptr, nullptr, Logger());
    if (!plugin->Start().ok()) {
      std::abort();
    }
    // `pods` pending fractional pods, one per slot of the 16 GPUs.
    for (int i = 0; i < pods; ++i) {
      AddPod(i, "uid-" + std::to_string(i));
    }
    auto ch = grpc::CreateChannel("unix:" + dir + "/" + EndpointFor("nvidia.com/gpu"),
                                  grpc::InsecureChannelCredentials());
    stub = v1beta1::DevicePlugin::NewStub(ch);
  }
  ~Fixture() {
    plugin.reset();
    std::filesystem::remove_all(dir);
  }

  std::string Slot(int i) const {
    return api::SlotId("NVIDIA-bench-" + std::to_string(i % 16), (i / 16) % shares);
  }

  void AddPod(int i, const std::string& uid) {
    api::Assignment a;
    a.node = "bench";
    api::AssignedContainer c;
    c.name = "main";
    c.vendor = core::Vendor::kNvidia;
    c.resource = "nvidia.com/gpu";
    c.devices.push_back(
        {"NVIDIA-bench-" + std::to_string(i % 16), i % 16, Slot(i), 4096, 100, false});
    a.containers.push_back(c);
    store.Upsert({"bench", "pod-" + std::to_string(i), uid,
                  "2026-11-30T02:" + std::to_string(10 + i % 50) + ":00Z"},
                 a, {});
  }

  const int shares;
  // The benchmark harness's share of this process's resident memory.
  double harness_rss_mib = 0;
  std::string dir;
  AssignmentStore store;
  std::unique_ptr<NodePlugin> plugin;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
};

void AllocateLoop(benchmark::State& state, Fixture& f, int pods) {
  std::vector<double> us;
  std::vector<double> empty_us;
  int64_t n = 0;
  for (auto _ : state) {
    const int i = static_cast<int>(n % pods);
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(f.Slot(i));
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    auto start = std::chrono::steady_clock::now();
    grpc::Status st = f.stub->Allocate(&ctx, req, &resp);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(secs);
    if (!st.ok()) {
      state.SkipWithError(st.error_message().c_str());
      break;
    }
    us.push_back(secs * 1e6);
    // Not timed: the baseline call, then the pod is replaced by a fresh
    // pending one on the same slot.
    const double empty = bench::EmptyCallMicros(*f.stub);
    if (empty < 0) {
      state.SkipWithError("GetDevicePluginOptions failed");
      break;
    }
    empty_us.push_back(empty);
    f.store.Remove("uid-" + std::to_string(i) + (n >= pods ? "-" + std::to_string(n - pods) : ""));
    f.AddPod(i, "uid-" + std::to_string(i) + "-" + std::to_string(n));
    ++n;
  }
  bench::SetLatencyCounters(state, us, empty_us);
  const double rss = RssMib();
  state.counters["rss_mib"] = rss;
  state.counters["rss_harness_mib"] = f.harness_rss_mib;
  state.counters["rss_plugin_mib"] = rss - f.harness_rss_mib;
}

void BM_AllocateGrpc(benchmark::State& state) {
  const int pods = static_cast<int>(state.range(0));
  Fixture f(pods);
  AllocateLoop(state, f, pods);
}
BENCHMARK(BM_AllocateGrpc)
    ->Arg(16)
    ->Arg(160)
    ->Arg(1600)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// kubelet's pod-resources List, as a node with --pod-resources-socket serves
// it: every pending pod listed as being admitted (its container holds no ids
// yet). Allocate asks it on every hit whose slot ids name one waiting pod, to
// confirm kubelet admits that pod (docs/device-plugin.md).
class ListEveryPod final : public v1::PodResourcesLister::Service {
 public:
  explicit ListEveryPod(int pods) {
    for (int i = 0; i < pods; ++i) {
      v1::PodResources* p = answer_.add_pod_resources();
      p->set_namespace_("bench");
      p->set_name("pod-" + std::to_string(i));
      p->add_containers()->set_name("main");
    }
  }
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* resp) override {
    *resp = answer_;
    return grpc::Status::OK;
  }

 private:
  v1::ListPodResourcesResponse answer_;
};

// BM_AllocateGrpc with the plugin reading kubelet's pod-resources API over a
// real unix socket (an in-process server listing every pending pod).
void BM_AllocateGrpcKubeletView(benchmark::State& state) {
  const int pods = static_cast<int>(state.range(0));
  Fixture f(pods);
  ListEveryPod lister(pods);
  const std::string socket = f.dir + "/pod-resources.sock";
  // The pod-resources server stands in for kubelet: part of the harness.
  const double before_lister = RssMib();
  grpc::ServerBuilder b;
  b.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
  b.RegisterService(&lister);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (server == nullptr) {
    state.SkipWithError("the pod-resources server did not start");
    return;
  }
  f.harness_rss_mib += RssMib() - before_lister;
  PodResourcesClient client(socket, std::chrono::milliseconds(1000));
  f.plugin->allocator().SetKubeletView([&client] { return client.List(); });
  AllocateLoop(state, f, pods);
  f.plugin->allocator().SetKubeletView(nullptr);
  server->Shutdown(std::chrono::system_clock::now());
}
BENCHMARK(BM_AllocateGrpcKubeletView)
    ->Arg(16)
    ->Arg(160)
    ->Arg(1600)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_AllocateDirect(benchmark::State& state) {
  Fixture f(160);
  int64_t n = 0;
  for (auto _ : state) {
    const int i = static_cast<int>(n % 160);
    auto r = f.plugin->allocator().Allocate("nvidia.com/gpu", {{f.Slot(i)}});
    benchmark::DoNotOptimize(r);
    state.PauseTiming();
    f.store.Remove("uid-" + std::to_string(i) + (n >= 160 ? "-" + std::to_string(n - 160) : ""));
    f.AddPod(i, "uid-" + std::to_string(i) + "-" + std::to_string(n));
    state.ResumeTiming();
    ++n;
  }
}
BENCHMARK(BM_AllocateDirect)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace accelpool::plugin

BENCHMARK_MAIN();
