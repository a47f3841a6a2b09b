// Latency figures for the device plugin benchmarks, and their same-process
// baseline: an empty call over the same unix-socket gRPC channel.
//
// GetDevicePluginOptions is answered by the plugin's resource server with two
// constant fields and reads no plugin state, so its round trip is what gRPC,
// the unix socket and the scheduling of the client and server threads cost an
// Allocate on the same channel at the same moment. Benchmarks time one empty
// call after each Allocate (outside the benchmark's iteration time) and
// report Allocate's percentiles also as ratios to the empty call's: a figure
// that holds on a loaded machine, where the absolute latencies do not.
#ifndef ACCELPOOL_BENCH_PLUGIN_LATENCY_H_
#define ACCELPOOL_BENCH_PLUGIN_LATENCY_H_

#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "deviceplugin/api.grpc.pb.h"

namespace accelpool::bench {

// Microseconds for one GetDevicePluginOptions on `stub`, client-observed; a
// negative value when the call failed.
inline double EmptyCallMicros(v1beta1::DevicePlugin::Stub& stub) {
  grpc::ClientContext ctx;
  v1beta1::DevicePluginOptions out;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status st = stub.GetDevicePluginOptions(&ctx, v1beta1::Empty(), &out);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return st.ok() ? us : -1;
}

// The `percent`th percentile of sorted `v` (p99 = the largest sample when
// `v` holds fewer than 100). REQUIRES: `v` sorted and not empty.
inline double Percentile(const std::vector<double>& v, size_t percent) {
  return v[std::min(v.size() - 1, v.size() * percent / 100)];
}

// Sets p50_us / p99_us / mean_us from the Allocate samples `us`, and, when
// `empty_us` holds samples, empty_p50_us / empty_p99_us (the baseline) and
// p50_vs_empty_call / p99_vs_empty_call (Allocate's percentile over the
// empty call's). Sorts both vectors; does nothing when `us` is empty.
inline void SetLatencyCounters(benchmark::State& state, std::vector<double>& us,
                               std::vector<double>& empty_us) {
  if (us.empty()) {
    return;
  }
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = Percentile(us, 50);
  state.counters["p99_us"] = Percentile(us, 99);
  state.counters["mean_us"] =
      std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
  if (empty_us.empty()) {
    return;
  }
  std::sort(empty_us.begin(), empty_us.end());
  state.counters["empty_p50_us"] = Percentile(empty_us, 50);
  state.counters["empty_p99_us"] = Percentile(empty_us, 99);
  state.counters["p50_vs_empty_call"] = Percentile(us, 50) / Percentile(empty_us, 50);
  state.counters["p99_vs_empty_call"] = Percentile(us, 99) / Percentile(empty_us, 99);
}

}  // namespace accelpool::bench

#endif  // ACCELPOOL_BENCH_PLUGIN_LATENCY_H_
