// Loopback figures for the HTTP layer and the Kubernetes client: one request
// round trip, a 500-object list from the test apiserver, and rendering a
// metrics page. Measured on whatever machine runs it; nothing is asserted.
//
// BM_HttpRoundTrip's baseline, measured in the same process: after each HTTP
// round trip (not timed), the same exchange without HTTP, on a kept-alive
// loopback TCP connection to a thread of this process that reads the
// request's body and writes a short answer, blocking calls on both sides as
// the HTTP server's connection threads and the socket client make them.
// Counters: p50_us and raw_p50_us (medians of the two), p50_vs_raw_socket
// (their ratio: what HTTP, its parsing and routing add to the kernel's
// loopback and the thread hand-offs).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "http/http.h"
#include "kube/client.h"
#include "kube/fake_apiserver.h"

namespace accelpool {
namespace {

// Writes all of `data` to `fd`; false on an error.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) {
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes from `fd` into `out`; false on an error or EOF.
bool ReadAll(int fd, char* out, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, out, size, 0);
    if (n <= 0) {
      return false;
    }
    out += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// One kept-alive loopback TCP connection to a thread that, for each request
// of `request_bytes`, answers kAnswerBytes. Not thread-safe: one caller.
class RawLoopback {
 public:
  // About the size of the HTTP answer the round trip gets (status line,
  // headers, the short JSON body).
  static constexpr size_t kAnswerBytes = 128;

  explicit RawLoopback(size_t request_bytes) : request_(request_bytes, 'x') {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 1) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    server_ = std::thread([this] { Serve(); });
    client_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (client_fd_ >= 0 &&
        ::connect(client_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(client_fd_);
      client_fd_ = -1;
    }
    NoDelay(client_fd_);
  }
  ~RawLoopback() {
    if (client_fd_ >= 0) {
      ::shutdown(client_fd_, SHUT_RDWR);
    }
    if (listen_fd_ >= 0) {
      ::shutdown(listen_fd_, SHUT_RDWR);
    }
    if (server_.joinable()) {
      server_.join();
    }
    for (int fd : {client_fd_, listen_fd_}) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  RawLoopback(const RawLoopback&) = delete;
  RawLoopback& operator=(const RawLoopback&) = delete;

  // Sends one request and reads its answer; false when the connection failed.
  bool Exchange() {
    char answer[kAnswerBytes];
    return client_fd_ >= 0 && WriteAll(client_fd_, request_.data(), request_.size()) &&
           ReadAll(client_fd_, answer, sizeof(answer));
  }

 private:
  static void NoDelay(int fd) {
    const int one = 1;
    if (fd >= 0) {
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
  }

  void Serve() {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      return;
    }
    NoDelay(fd);
    std::string in(request_.size(), '\0');
    const std::string answer(kAnswerBytes, 'y');
    while (ReadAll(fd, in.data(), in.size()) && WriteAll(fd, answer.data(), answer.size())) {
    }
    ::close(fd);
  }

  const std::string request_;
  int listen_fd_ = -1;
  int client_fd_ = -1;
  std::thread server_;
};

double Median(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void BM_HttpRoundTrip(benchmark::State& state) {
  http::ServerOptions so;
  so.host = "127.0.0.1";
  auto server = http::NewHttpServer(so);
  const std::string body(static_cast<size_t>(state.range(0)), 'x');
  server->Handle("POST", "/filter", [](const http::Request& r) {
    return http::Response::Json(200, "{\"n\":" + std::to_string(r.body.size()) + "}");
  });
  if (!server->Start().ok()) {
    state.SkipWithError("server did not start");
    return;
  }
  http::ClientOptions co;
  co.base_url = "http://127.0.0.1:" + std::to_string(server->port());
  auto client = http::NewHttpClient(co);
  http::ClientRequest req;
  req.method = "POST";
  req.path = "/filter";
  req.body = body;
  RawLoopback raw(body.size());
  std::vector<double> us;
  std::vector<double> raw_us;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto resp = (*client)->Send(req);
    const auto end = std::chrono::steady_clock::now();
    if (!resp.ok() || resp->status != 200) {
      state.SkipWithError("request failed");
      break;
    }
    state.PauseTiming();
    us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    const auto raw_start = std::chrono::steady_clock::now();
    if (!raw.Exchange()) {
      state.SkipWithError("the raw loopback exchange failed");
      state.ResumeTiming();
      break;
    }
    raw_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - raw_start)
            .count());
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  if (!us.empty() && !raw_us.empty()) {
    const double p50 = Median(us);
    const double raw_p50 = Median(raw_us);
    state.counters["p50_us"] = p50;
    state.counters["raw_p50_us"] = raw_p50;
    state.counters["p50_vs_raw_socket"] = p50 / raw_p50;
  }
}
BENCHMARK(BM_HttpRoundTrip)->Arg(256)->Arg(64 << 10)->UseRealTime();

void BM_KubeList500Pods(benchmark::State& state) {
  kube::FakeApiServer api;
  if (!api.Start().ok()) {
    state.SkipWithError("fake apiserver did not start");
    return;
  }
  for (int i = 0; i < 500; ++i) {
    api.Put("/api/v1/namespaces/ml/pods",
            {{"metadata", {{"name", "p" + std::to_string(i)}, {"namespace", "ml"}}},
             {"spec", {{"nodeName", "node-" + std::to_string(i % 50)}}}});
  }
  kube::KubeConfig cfg;
  cfg.server = api.url();
  cfg.qps = 0;
  auto client = kube::NewKubeClient(cfg);
  kube::ListOptions lo;
  lo.limit = 500;
  for (auto _ : state) {
    auto r = (*client)->List(kube::Pods(), "ml", lo);
    if (!r.ok() || r->items.size() != 500) state.SkipWithError("list failed");
  }
}
BENCHMARK(BM_KubeList500Pods)->UseRealTime();

void BM_MetricsSerialize(benchmark::State& state) {
  MetricsRegistry reg;
  auto c = reg.AddCounter("accelpool_requests_total", "Requests.", {"verb", "code"});
  auto h = reg.AddHistogram("accelpool_request_seconds", "Latency.", {"verb"});
  for (const char* verb : {"filter", "prioritize", "bind"}) {
    for (const char* code : {"200", "400", "500"}) (*c)->WithLabels({verb, code}).Inc();
    (*h)->WithLabels({verb}).Observe(0.003);
  }
  for (int n = 0; n < state.range(0); ++n) {
    auto g = reg.AddGauge("accelpool_node_free_" + std::to_string(n), "Free.", {"node"});
    for (int i = 0; i < 10; ++i) (*g)->WithLabels({"node-" + std::to_string(i)}).Set(i);
  }
  for (auto _ : state) benchmark::DoNotOptimize(reg.Serialize());
}
BENCHMARK(BM_MetricsSerialize)->Arg(10)->Arg(100);

}  // namespace
}  // namespace accelpool

BENCHMARK_MAIN();
