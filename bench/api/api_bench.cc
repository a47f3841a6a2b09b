// Codec throughput: what the extender pays per node inventory and per pod.
#include <benchmark/benchmark.h>

#include "api/assignment_codec.h"
#include "api/assignment_signature.h"
#include "api/inventory_codec.h"
#include "api/pod_request.h"

namespace accelpool::api {
namespace {

InventoryDocument EightGpuNode(int devices) {
  InventoryDocument doc;
  doc.generation = 3;
  core::NodeInventory inv;
  inv.node = "node-a";
  inv.vendor = core::Vendor::kNvidia;
  inv.topology.kind = "nvidia-hgx";
  for (int i = 0; i < devices; ++i) {
    core::Device d;
    d.id = "GPU-" + std::to_string(1000000 + i);
    d.index = i;
    d.vendor = inv.vendor;
    d.model = "H200";
    d.memory_mib = 143771;
    d.compute_units = 132;
    d.numa = i < devices / 2 ? 0 : 1;
    d.pci_bus = "0000:18:00.0";
    d.max_shares = 10;
    inv.devices.push_back(d);
    for (int j = 0; j < devices; ++j) inv.topology.links.push_back(i == j ? 0 : 100);
  }
  doc.inventories.push_back(inv);
  return doc;
}

void BM_ParseInventory(benchmark::State& state) {
  const std::string text = SerializeInventory(EightGpuNode(static_cast<int>(state.range(0))));
  for (auto _ : state) {
    auto doc = ParseInventory(text, "node-a");
    benchmark::DoNotOptimize(doc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["doc_bytes"] = static_cast<double>(text.size());
}
BENCHMARK(BM_ParseInventory)->Arg(8)->Arg(16);

void BM_SerializeInventory(benchmark::State& state) {
  const InventoryDocument doc = EightGpuNode(8);
  for (auto _ : state) benchmark::DoNotOptimize(SerializeInventory(doc));
}
BENCHMARK(BM_SerializeInventory);

// Three containers of two device shares each, as the extender writes it.
std::string ThreeContainerAssignment() {
  Assignment a;
  a.node = "node-a";
  a.policy = "accelpool";
  for (int c = 0; c < 3; ++c) {
    AssignedContainer ac;
    ac.name = "c" + std::to_string(c);
    ac.vendor = core::Vendor::kNvidia;
    ac.resource = "nvidia.com/gpu";
    for (int d = 0; d < 2; ++d) {
      ac.devices.push_back(
          {"GPU-" + std::to_string(d), d, SlotId("GPU-" + std::to_string(d), c), 4096, 250, false});
    }
    a.containers.push_back(ac);
  }
  return SerializeAssignment(a);
}

void BM_ParseAssignment(benchmark::State& state) {
  const std::string text = ThreeContainerAssignment();
  for (auto _ : state) benchmark::DoNotOptimize(ParseAssignment(text));
}
BENCHMARK(BM_ParseAssignment);

// What signing adds per pod: the device plugin verifies each unadmitted pod's
// assignment once per pod version, beside parsing it (BM_ParseAssignment).
void BM_VerifyAssignment(benchmark::State& state) {
  const std::string text = ThreeContainerAssignment();
  StatusOr<SigningKeys> keys =
      ParseSigningKeys({{"signing", "k1"}, {"k1", "bench-key-0123456789-0123456789-0123456789"}});
  const std::string sig = *SignAssignment(*keys, "8c6f7a1e-uid", "node-a", text);
  for (auto _ : state) {
    benchmark::DoNotOptimize(VerifyAssignment(*keys, "8c6f7a1e-uid", "node-a", text, sig));
  }
}
BENCHMARK(BM_VerifyAssignment);

void BM_ParsePodRequest(benchmark::State& state) {
  const nlohmann::json pod = nlohmann::json::parse(R"({
    "metadata": {"name": "train-0", "namespace": "ml",
                 "annotations": {"nvidia.com/use-gputype": "H100,H200", "accelpool.io/policy": "binpack",
                                 "kueue.x-k8s.io/workload": "job-train-1"}},
    "spec": {"initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048"}}}],
             "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "30", "cpu": "8", "memory": "64Gi"}}},
                            {"name": "side", "resources": {"limits": {"cpu": "1"}}}]}})");
  for (auto _ : state) benchmark::DoNotOptimize(ParsePodRequest(pod));
}
BENCHMARK(BM_ParsePodRequest);

}  // namespace
}  // namespace accelpool::api

BENCHMARK_MAIN();
