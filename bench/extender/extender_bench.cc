// extender_bench: filter + prioritize of one pod over loopback HTTP against a
// cluster of N nodes of 8 devices, with kube-scheduler's nodeCacheCapable
// request shape (NodeNames). Prints one JSON object per cluster size:
//   {"nodes": 5000, "requests": 200, "filter_p50_ms": ..., "filter_p99_ms": ...,
//    "prioritize_p50_ms": ..., "cycle_p50_ms": ..., "cycle_p99_ms": ...,
//    "cycles_per_s": ..., "rss_mib": ..., "scrape_p50_ms": ...,
//    "transport_p50_ms": ..., "cycle_over_transport_p50": ..., ...}
// A "cycle" is one filter followed by one prioritize of the feasible nodes, as
// kube-scheduler sends them. cycles_per_s is measured with --clients
// concurrent clients. rss_mib is the whole process (server, cache and client).
// scrape_p50_ms is one /metrics render: the per-node and per-device gauges
// refreshed from the cache (fragmentation included) and the page serialised.
//
// usage: extender_bench [--nodes=1250,5000] [--requests=200] [--clients=2]
//                       [--policy=accelpool] [--filter-threads=0 (one per core, at most 4)]
//                       [--shapes=1]
//                       [--client=socket|cpprest] [--workload-shapes=0] [--host]
//                       [--heartbeats=R]
// --workload-shapes=N scores against N synthetic learned shapes (devices,
// compute, host CPU and memory varied) instead of the built-in mix (0);
// --host gives every node an allocatable and tracks host requests.
// --heartbeats=R measures node updates instead (HeartbeatBench below).
// --client: http::HttpClient's transport: socket (default) = kept-alive
// connections with blocking I/O in the calling thread, as kube-scheduler's
// client; cpprest = cpprestsdk's asynchronous client.
// --shapes=N cycles N request shapes: 1 = one shape repeated (plans are reused
// from the memo while nodes do not change), large = every request new.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/inventory_codec.h"
#include "core/profiles.h"
#include "extender/convert.h"
#include "extender/handlers.h"
#include "extender/kube_adapters.h"
#include "extender/server.h"
#include "extender/wire.h"
#include "http/http.h"

namespace accelpool::extender {
namespace {

double RssMib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
    }
  }
  return -1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Fills the cluster: every node is an 8-GPU node; about half carry shares.
void FillCluster(Cache& cache, int n, bool host) {
  std::mt19937 rng(7);
  cache.TrackHost(host);
  for (int i = 0; i < n; ++i) {
    const std::string name = "node-" + std::to_string(i);
    StatusOr<core::NodeInventory> inv = core::MakeProfileNode("nvidia-hgx-8", name);
    if (!inv.ok()) {
      std::fprintf(stderr, "%s\n", inv.status().ToString().c_str());
      std::exit(1);
    }
    for (core::Device& d : inv->devices) d.max_shares = 4;
    cache.UpsertNode(name, std::vector<core::NodeInventory>{*inv}, 1,
                     NodeDomains{"sn-" + std::to_string(i / 48), "", ""},
                     host ? std::optional(core::HostResources{96000, 1 << 20}) : std::nullopt);
    if (host) {
      cache.ObserveHostPod("cpu-" + std::to_string(i), name,
                           core::HostResources{static_cast<int64_t>(rng() % 96) * 1000,
                                               static_cast<int64_t>(rng() % 1024) * 1024});
    }
    if (rng() % 2 == 0) {
      PodAssignment a;
      a.node = name;
      core::Placement p;
      const int32_t dev = static_cast<int32_t>(rng() % 8);
      p.containers.push_back(core::ContainerPlacement{
          "main", core::ContainerKind::kRegular,
          {core::Grant{dev, 8192 * (1 + static_cast<int64_t>(rng() % 4)), 250, false}}});
      a.parts.push_back(AssignmentPart{core::Vendor::kNvidia, p, {{0}}, {}});
      (void)cache.Reserve(PodRef{"fill-" + std::to_string(i), "bench", "fill", ""}, a, 0);
    }
  }
}

// Request shapes: shape k asks for 16 GiB + k MiB, so `--shapes=1` repeats one
// shape (a ReplicaSet scaling out: the plan memo answers) and a large
// `--shapes` makes every request new (every node is planned afresh).
struct Shapes {
  int count = 1;
  std::atomic<int> next{0};
};

std::string ArgsBody(const std::string& uid, const std::vector<std::string>& names, int shape) {
  Json pod = {{"metadata", {{"name", "bench-" + uid}, {"namespace", "bench"}, {"uid", uid}}},
              {"spec",
               {{"schedulerName", "accelpool-scheduler"},
                {"containers",
                 {{{"name", "main"},
                   {"image", "x"},
                   {"resources",
                    {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", std::to_string(16384 + shape)},
                                 {"nvidia.com/gpucores", "30"}, {"cpu", "4"}}}}}}}}}}};
  return Json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
}


struct Sample {
  double filter_ms, prioritize_ms;
};

Sample Cycle(http::HttpClient& client, const std::string& uid,
             const std::vector<std::string>& names, Shapes& shapes) {
  using Clock = std::chrono::steady_clock;
  http::ClientRequest req;
  req.method = "POST";
  req.path = "/filter";
  req.headers["content-type"] = "application/json";
  const int shape = shapes.next.fetch_add(1) % shapes.count;
  req.body = ArgsBody(uid, names, shape);
  const auto t0 = Clock::now();
  StatusOr<http::ClientResponse> f = client.Send(req);
  const auto t1 = Clock::now();
  if (!f.ok() || f->status != 200) {
    std::fprintf(stderr, "filter failed: %s\n", f.ok() ? f->body.c_str() : f.status().ToString().c_str());
    std::exit(1);
  }
  StatusOr<FilterResult> fr = DecodeFilterResult(f->body);
  if (!fr.ok() || !fr->node_names.has_value()) {
    std::fprintf(stderr, "filter answer unreadable\n");
    std::exit(1);
  }
  req.path = "/prioritize";
  req.body = ArgsBody(uid, *fr->node_names, shape);
  const auto t2 = Clock::now();
  StatusOr<http::ClientResponse> p = client.Send(req);
  const auto t3 = Clock::now();
  if (!p.ok() || p->status != 200) {
    std::fprintf(stderr, "prioritize failed\n");
    std::exit(1);
  }
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  return Sample{ms(t1 - t0), ms(t3 - t2)};
}

// The baseline, in the same process and over the same client: the cycle's
// two requests, with the filter's body both times (an upper bound of the
// prioritize body, which names only the feasible nodes), to a handler that
// answers at once. What is left of a cycle above it is the extender's work.
double TransportCycle(http::HttpClient& client, const std::string& uid,
                      const std::vector<std::string>& names, Shapes& shapes) {
  using Clock = std::chrono::steady_clock;
  http::ClientRequest req;
  req.method = "POST";
  req.path = "/noop";
  req.headers["content-type"] = "application/json";
  req.body = ArgsBody(uid, names, shapes.next.fetch_add(1) % shapes.count);
  const auto t0 = Clock::now();
  for (int i = 0; i < 2; ++i) {
    StatusOr<http::ClientResponse> r = client.Send(req);
    if (!r.ok() || r->status != 200) {
      std::fprintf(stderr, "baseline request failed\n");
      std::exit(1);
    }
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// N task shapes as a learned workload would hold them.
std::vector<core::TaskShape> SyntheticWorkload(int n) {
  std::vector<core::TaskShape> out;
  const int32_t counts[] = {1, 1, 1, 1, 2, 4, 8, 0};
  const int32_t computes[] = {1000, 500, 250, 810, 1000, 1000, 1000, 0};
  for (int i = 0; i < n; ++i) {
    core::TaskShape t;
    t.count = counts[i % 8];
    t.compute = computes[i % 8];
    t.cpu_milli = 1000 * (1 + i % 16);
    t.host_memory_mib = 4096 * (1 + i % 13);
    t.weight = 1.0 + static_cast<double>(n - i);
    out.push_back(t);
  }
  return out;
}

// --heartbeats=R: node updates while pods are planned, R a second over the
// cluster, fed through CacheFeeder as the node watch feeds them. Three runs of
// `requests` filter+prioritize cycles (called in process, no HTTP) on one
// cluster: with no updates (the baseline), with status-only updates (a
// kubelet heartbeat: skipped, nothing rebuilt) and with updates that change a
// label (applied: the node's snapshot is rebuilt, its pods counted again and
// its plans dropped from the memo, as every heartbeat was before unchanged
// updates were skipped). Prints one JSON line with each run's cycle
// percentiles, their ratios to the baseline, and what one update cost.
int HeartbeatBench(int nodes, int requests, int rate, int shape_count) {
  Cache cache;
  FillCluster(cache, nodes, false);
  CacheFeeder feeder(cache, Logger());
  std::vector<Json> objects;
  for (int i = 0; i < nodes; ++i) {
    const std::string name = "node-" + std::to_string(i);
    StatusOr<core::NodeInventory> inv = core::MakeProfileNode("nvidia-hgx-8", name);
    if (!inv.ok()) return 1;
    for (core::Device& d : inv->devices) d.max_shares = 4;
    api::InventoryDocument doc;
    doc.generation = 1;
    doc.inventories.push_back(*inv);
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata",
                  {{"name", name},
                   {"labels", {{kSuperNodeLabel, "sn-" + std::to_string(i / 48)}, {"beat", "0"}}},
                   {"annotations", {{api::kInventoryAnnotation, api::SerializeInventory(doc)}}}}},
                 {"status", {{"conditions", Json::array()}}}};
    feeder.OnNode(node);  // the reservations FillCluster made stay counted
    objects.push_back(std::move(node));
  }
  ExtenderOptions eo;
  auto ext = Extender::Create(cache, eo, nullptr, nullptr, nullptr, Logger());
  if (!ext.ok()) return 1;
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("node-" + std::to_string(i));
  std::vector<PodInfo> pods;
  for (int k = 0; k < shape_count; ++k) {
    StatusOr<PodInfo> pod = PodInfoFromJson(Json::parse(ArgsBody("hb", {}, k))["Pod"]);
    if (!pod.ok()) {
      std::fprintf(stderr, "%s\n", pod.status().ToString().c_str());
      return 1;
    }
    pods.push_back(*pod);
  }
  struct Run {
    std::vector<double> cycle_ms, update_us;
  };
  auto run = [&](const std::string& kind) {
    Run out;
    std::atomic<bool> stop{false};
    std::thread updates([&] {
      if (kind == "none") return;
      const auto period = std::chrono::microseconds(1000000 / std::max(1, rate));
      auto next = std::chrono::steady_clock::now();
      for (uint64_t n = 0; !stop.load(); ++n) {
        Json& node = objects[n % objects.size()];
        const std::string beat = std::to_string(n);
        if (kind == "status") {
          node["status"]["conditions"] = {{{"type", "Ready"}, {"lastHeartbeatTime", beat}}};
        } else {
          node["metadata"]["labels"]["beat"] = beat;
        }
        const auto t0 = std::chrono::steady_clock::now();
        feeder.OnNode(node);
        out.update_us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
        next += period;
        std::this_thread::sleep_until(next);
      }
    });
    for (int i = 0; i < requests; ++i) {
      PodInfo pod = pods[static_cast<size_t>(i % shape_count)];
      pod.ref.uid = kind + "-" + std::to_string(i);
      const auto t0 = std::chrono::steady_clock::now();
      FilterDecision d = (*ext)->Filter(pod, names);
      (void)(*ext)->Prioritize(pod, d.fits);
      out.cycle_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    stop = true;
    updates.join();
    return out;
  };
  for (int i = 0; i < 5; ++i) (void)run("none");  // warm the memo
  const Run quiet = run("none");
  const Run status = run("status");
  const Run labels = run("labels");
  const double q50 = std::max(1e-6, Percentile(quiet.cycle_ms, 0.5));
  const double q99 = std::max(1e-6, Percentile(quiet.cycle_ms, 0.99));
  std::printf(
      "{\"heartbeats\": true, \"nodes\": %d, \"updates_per_s\": %d, \"shapes\": %d, "
      "\"requests\": %d, \"quiet_cycle_p50_ms\": %.3f, \"quiet_cycle_p99_ms\": %.3f, "
      "\"status_cycle_p50_ms\": %.3f, \"status_cycle_p99_ms\": %.3f, "
      "\"changing_cycle_p50_ms\": %.3f, \"changing_cycle_p99_ms\": %.3f, "
      "\"status_over_quiet_p50\": %.2f, \"status_over_quiet_p99\": %.2f, "
      "\"changing_over_quiet_p50\": %.2f, \"changing_over_quiet_p99\": %.2f, "
      "\"status_update_p50_us\": %.1f, \"changing_update_p50_us\": %.1f, "
      "\"updates_skipped\": %llu, \"updates_applied\": %llu}\n",
      nodes, rate, shape_count, requests, q50, q99, Percentile(status.cycle_ms, 0.5),
      Percentile(status.cycle_ms, 0.99), Percentile(labels.cycle_ms, 0.5),
      Percentile(labels.cycle_ms, 0.99), Percentile(status.cycle_ms, 0.5) / q50,
      Percentile(status.cycle_ms, 0.99) / q99, Percentile(labels.cycle_ms, 0.5) / q50,
      Percentile(labels.cycle_ms, 0.99) / q99, Percentile(status.update_us, 0.5),
      Percentile(labels.update_us, 0.5),
      static_cast<unsigned long long>(feeder.NodeUpdatesUnchanged()),
      static_cast<unsigned long long>(feeder.NodeUpdatesApplied()));
  std::fflush(stdout);
  return 0;
}

int Bench(int nodes, int requests, int clients, const std::string& policy, int filter_threads,
          int shape_count, const std::string& client_kind, int workload_shapes, bool host) {
  Shapes shapes;
  shapes.count = shape_count;
  Cache cache;
  FillCluster(cache, nodes, host);
  ExtenderOptions eo;
  eo.policy_context.workload = SyntheticWorkload(workload_shapes);
  eo.policy = policy;
  eo.filter_threads = filter_threads;
  MetricsRegistry registry;
  StatusOr<ExtenderMetrics> metrics = ExtenderMetrics::Register(registry);
  if (!metrics.ok()) {
    std::fprintf(stderr, "%s\n", metrics.status().ToString().c_str());
    return 1;
  }
  auto ext = Extender::Create(cache, eo, nullptr, nullptr, &*metrics, Logger());
  if (!ext.ok()) {
    std::fprintf(stderr, "%s\n", ext.status().ToString().c_str());
    return 1;
  }
  Handlers handlers(**ext, nullptr, nullptr, Logger());
  http::ServerOptions so;
  so.host = "127.0.0.1";
  so.max_body_bytes = 64 << 20;
  std::unique_ptr<http::HttpServer> server = http::NewHttpServer(so);
  RegisterRoutes(*server, Routes{&handlers, nullptr, nullptr, {}, {}, {}});
  server->Handle("POST", "/noop",
                 [](const http::Request&) { return http::Response::Json(200, "{}"); });
  if (Status st = server->Start(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(server->port());
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("node-" + std::to_string(i));

  // socket: http::HttpClient's own transport (blocking I/O on the calling
  // thread over a kept-alive connection, as kube-scheduler's Go client);
  // cpprest: its cpprestsdk transport, which hands every request between the
  // threads of its pool and adds those wake-ups to the measured latency.
  http::ClientOptions co;
  co.base_url = url;
  co.transport = client_kind == "cpprest" ? http::ClientOptions::Transport::kCpprestsdk
                                          : http::ClientOptions::Transport::kSockets;
  auto new_client = [&] { return http::NewHttpClient(co); };
  auto client = new_client();
  if (!client.ok()) return 1;
  for (int i = 0; i < 5; ++i) Cycle(**client, "warm-" + std::to_string(i), names, shapes);
  // Latency: one client, sequential cycles.
  std::vector<double> filter, prio, cycle;
  for (int i = 0; i < requests; ++i) {
    Sample s = Cycle(**client, "lat-" + std::to_string(i), names, shapes);
    filter.push_back(s.filter_ms);
    prio.push_back(s.prioritize_ms);
    cycle.push_back(s.filter_ms + s.prioritize_ms);
  }
  // The baseline, right after, on the same connection.
  std::vector<double> transport;
  for (int i = 0; i < requests; ++i) {
    transport.push_back(TransportCycle(**client, "base-" + std::to_string(i), names, shapes));
  }
  // Throughput: `clients` concurrent clients.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  const int per_client = std::max(1, requests / 2);
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto cl = new_client();
      if (!cl.ok()) std::exit(1);
      for (int i = 0; i < per_client; ++i) {
        Cycle(**cl, "tp-" + std::to_string(c) + "-" + std::to_string(i), names, shapes);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double rss = RssMib();
  server->Stop();
  // What Prometheus's scrape costs, with the cluster as the cycles left it.
  std::vector<double> scrape;
  size_t page_bytes = 0;
  for (int i = 0; i < 20; ++i) {
    const auto s0 = std::chrono::steady_clock::now();
    (*ext)->UpdateGauges();
    page_bytes = registry.Serialize().size();
    scrape.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
  }
  std::printf(
      "{\"nodes\": %d, \"devices_per_node\": 8, \"policy\": \"%s\", \"shapes\": %d, "
      "\"requests\": %d, "
      "\"filter_p50_ms\": %.3f, \"filter_p99_ms\": %.3f, \"prioritize_p50_ms\": %.3f, "
      "\"prioritize_p99_ms\": %.3f, \"cycle_p50_ms\": %.3f, \"cycle_p99_ms\": %.3f, "
      "\"clients\": %d, \"cycles_per_s\": %.1f, \"requests_per_s\": %.1f, \"rss_mib\": %.1f, "
      "\"cpus\": %u, \"filter_threads\": %zu, \"client\": \"%s\", \"workload_shapes\": %d, "
      "\"host\": %s, \"scrape_p50_ms\": %.3f, \"metrics_page_kib\": %.0f, "
      "\"transport_p50_ms\": %.3f, \"transport_p99_ms\": %.3f, "
      "\"cycle_over_transport_p50\": %.2f, \"cycle_over_transport_p99\": %.2f}\n",
      nodes, policy.c_str(), shapes.count, requests, Percentile(filter, 0.5),
      Percentile(filter, 0.99), Percentile(prio, 0.5), Percentile(prio, 0.99),
      Percentile(cycle, 0.5), Percentile(cycle, 0.99), clients, clients * per_client / secs,
      2.0 * clients * per_client / secs, rss, std::thread::hardware_concurrency(),
      FilterThreads(filter_threads), client_kind.c_str(), workload_shapes, host ? "true" : "false",
      Percentile(scrape, 0.5), static_cast<double>(page_bytes) / 1024.0, Percentile(transport, 0.5),
      Percentile(transport, 0.99),
      Percentile(cycle, 0.5) / std::max(1e-6, Percentile(transport, 0.5)),
      Percentile(cycle, 0.99) / std::max(1e-6, Percentile(transport, 0.99)));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace accelpool::extender

int main(int argc, char** argv) {
  std::vector<int> sizes = {1250, 5000};
  int requests = 200;
  int clients = 2;
  int filter_threads = 0;
  std::string policy = "accelpool";
  int shape_count = 1;
  std::string client_kind = "socket";
  int workload_shapes = 0;
  bool host = false;
  int heartbeats = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("nodes")) {
      sizes.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) sizes.push_back(std::atoi(item.c_str()));
    } else if (const char* r = value("requests")) {
      requests = std::max(1, std::atoi(r));
    } else if (const char* c = value("clients")) {
      clients = std::max(1, std::atoi(c));
    } else if (const char* p = value("policy")) {
      policy = p;
    } else if (const char* sh = value("shapes")) {
      shape_count = std::max(1, std::atoi(sh));
    } else if (const char* w = value("workload-shapes")) {
      workload_shapes = std::max(0, std::atoi(w));
    } else if (const char* h = value("heartbeats")) {
      heartbeats = std::max(1, std::atoi(h));
    } else if (a == "--host") {
      host = true;
    } else if (const char* t = value("filter-threads")) {
      filter_threads = std::max(1, std::atoi(t));
    } else if (const char* k = value("client");
               k != nullptr && (std::string(k) == "socket" || std::string(k) == "cpprest")) {
      client_kind = k;
    } else {
      std::fprintf(
          stderr,
          "usage: extender_bench [--nodes=1250,5000] [--requests=200] [--clients=2] "
          "[--policy=accelpool] [--filter-threads=0 (one per core, at most 4)] [--shapes=1] "
          "[--client=socket|cpprest] [--workload-shapes=0] [--host] [--heartbeats=R]\n");
      return 2;
    }
  }
  for (int n : sizes) {
    if (heartbeats > 0) {
      if (int rc = accelpool::extender::HeartbeatBench(n, requests, heartbeats, shape_count);
          rc != 0) {
        return rc;
      }
      continue;
    }
    if (int rc = accelpool::extender::Bench(n, requests, clients, policy, filter_threads,
                                            shape_count, client_kind, workload_shapes, host);
        rc != 0) {
      return rc;
    }
  }
  return 0;
}
