#include "http/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include "common/metrics.h"
#include "http/socket_io.h"
#include "http/test_certs.h"

namespace accelpool::http {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<HttpClient> ClientFor(const std::string& url, ClientOptions o = {}) {
  o.base_url = url;
  auto c = NewHttpClient(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

std::string Local(uint16_t port, bool tls = false) {
  return std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port);
}

// Builders (designated initializers would trip -Wmissing-field-initializers).
ClientOptions CaFile(const std::string& f) {
  ClientOptions o;
  o.ca_file = f;
  return o;
}
ClientOptions CaPem(const std::string& pem) {
  ClientOptions o;
  o.ca_pem = pem;
  return o;
}
ClientOptions Insecure() {
  ClientOptions o;
  o.insecure_skip_verify = true;
  return o;
}
ClientOptions Bearer(const std::string& t) {
  ClientOptions o;
  o.bearer_token = t;
  return o;
}
ServerOptions LocalServer(uint16_t port = 0) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  return o;
}
TlsOptions Tls(const std::string& cert, const std::string& key, const std::string& client_ca = "",
               std::chrono::milliseconds reload = std::chrono::milliseconds(1000)) {
  TlsOptions t;
  t.cert_file = cert;
  t.key_file = key;
  t.client_ca_file = client_ca;
  t.reload_check = reload;
  return t;
}

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = 1024;
    server_ = NewHttpServer(o);
    server_->Handle("GET", "/echo", [](const Request& r) {
      nlohmann::json j = {{"method", r.method},
                          {"path", r.path},
                          {"q", r.Query("q")},
                          {"auth", r.Header("authorization")},
                          {"x", r.Header("x-test")}};
      return Response::Json(200, j.dump());
    });
    for (const char* m : {"POST", "PUT", "PATCH", "DELETE"}) {
      server_->Handle(m, "/echo", [](const Request& r) {
        nlohmann::json j = {
            {"method", r.method}, {"body", r.body}, {"ct", r.Header("content-type")}};
        return Response::Json(201, j.dump());
      });
    }
    server_->HandlePrefix("GET", "/api/", [](const Request& r) {
      return Response::Json(200, "{\"prefix\":\"" + r.path + "\"}");
    });
    server_->Handle("GET", "/throw",
                    [](const Request&) -> Response { throw std::runtime_error("boom"); });
    server_->Handle("POST", "/json", [](const Request& r) {
      auto j = nlohmann::json::parse(r.body);  // throws on bad input
      return Response::Json(200, j.dump());
    });
    server_->Handle("GET", "/slow", [](const Request&) {
      std::this_thread::sleep_for(600ms);
      return Response::Json(200, "{}");
    });
    server_->Handle("GET", "/stream", [this](const Request&) {
      Response r;
      r.headers["content-type"] = "application/json";
      r.stream = [this](const ChunkWriter& write) {
        write("{\"n\":1}\n{\"n\":");  // a line split over two chunks
        write("2}\n");
        // Wait for the test to release the third line, proving delivery is incremental.
        release_.get_future().wait_for(5s);
        write("{\"n\":3}\n");
      };
      return r;
    });
    server_->Handle("GET", "/forever", [](const Request&) {
      Response r;
      r.stream = [](const ChunkWriter& write) {
        while (write("tick\n")) std::this_thread::sleep_for(20ms);
      };
      return r;
    });
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
    client_ = ClientFor(Local(server_->port()));
  }

  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HttpClient> client_;
  std::promise<void> release_;
};

TEST_F(HttpTest, MethodsHeadersQueryAndRouting) {
  struct Case {
    std::string method, path, body;
    int want_status;
    std::string want_substr;
  };
  const std::vector<Case> cases = {
      {"GET", "/echo?q=a%3Db%2Cc&x=1", "", 200, "\"q\":\"a=b,c\""},
      {"POST", "/echo", "{\"a\":1}", 201, "\"body\":\"{\\\"a\\\":1}\""},
      {"PUT", "/echo", "x", 201, "\"method\":\"PUT\""},
      {"PATCH", "/echo", "y", 201, "\"method\":\"PATCH\""},
      {"DELETE", "/echo", "", 201, "\"method\":\"DELETE\""},
      {"GET", "/api/v1/nodes", "", 200, "\"prefix\":\"/api/v1/nodes\""},
      {"GET", "/missing", "", 404, "no handler for /missing"},
      {"POST", "/throw", "", 405, "not allowed"},
      {"GET", "/throw", "", 500, "internal error: boom"},
      {"POST", "/json", "{not json", 400, "bad JSON"},
  };
  // The same answers through either transport.
  ClientOptions via_cpprest;
  via_cpprest.transport = ClientOptions::Transport::kCpprestsdk;
  auto cpprest = ClientFor(Local(server_->port()), via_cpprest);
  for (HttpClient* client : {client_.get(), cpprest.get()}) {
    for (const auto& c : cases) {
      ClientRequest req;
      req.method = c.method;
      req.path = c.path;
      req.body = c.body;
      req.headers["X-Test"] = "hello";
      auto resp = client->Send(req);
      ASSERT_TRUE(resp.ok()) << c.method << " " << c.path << ": " << resp.status().ToString();
      EXPECT_EQ(resp->status, c.want_status) << c.method << " " << c.path << " " << resp->body;
      EXPECT_NE(resp->body.find(c.want_substr), std::string::npos)
          << c.method << " " << c.path << " " << resp->body;
      if (c.want_status >= 400) {
        auto j = nlohmann::json::parse(resp->body, nullptr, false);
        EXPECT_EQ(j["error"]["code"], c.want_status) << resp->body;
      }
    }
  }
}

TEST_F(HttpTest, BearerTokenAndCustomHeaders) {
  auto c = ClientFor(Local(server_->port()), Bearer("s3cret"));
  ClientRequest req;
  req.path = "/echo";
  req.headers["X-Test"] = "v";
  auto resp = c->Send(req);
  ASSERT_TRUE(resp.ok());
  auto j = nlohmann::json::parse(resp->body);
  EXPECT_EQ(j["auth"], "Bearer s3cret");
  EXPECT_EQ(j["x"], "v");
  EXPECT_EQ(resp->headers["content-type"], "application/json");
}

TEST_F(HttpTest, BodyLimitGives413) {
  ClientRequest req;
  req.method = "POST";
  req.path = "/echo";
  req.body = std::string(4096, 'x');
  auto resp = client_->Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->status, 413);
  EXPECT_NE(resp->body.find("exceeds the limit of 1024"), std::string::npos);
}

TEST_F(HttpTest, TimeoutIsDeadlineExceeded) {
  ClientRequest req;
  req.path = "/slow";
  req.timeout = 150ms;
  auto resp = client_->Send(req);
  EXPECT_EQ(resp.status().code(), StatusCode::kDeadlineExceeded) << resp.status().ToString();
}

TEST_F(HttpTest, StreamDeliversLinesIncrementally) {
  std::vector<std::string> lines;
  ClientRequest req;
  req.path = "/stream";
  int head_status = 0;
  Status st = client_->StreamLines(
      req, [&](const ClientResponse& h) { head_status = h.status; },
      [&](std::string_view line) {
        lines.emplace_back(line);
        if (lines.size() == 2) release_.set_value();  // the server waits for this
        return true;
      },
      {}, 5s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(head_status, 200);
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"n\":1}", "{\"n\":2}", "{\"n\":3}"}));
}

TEST_F(HttpTest, StreamStopsOnCallbackFalseAndOnStopToken) {
  ClientRequest req;
  req.path = "/forever";
  int seen = 0;
  Status st = client_->StreamLines(
      req, nullptr, [&](std::string_view) { return ++seen < 3; }, {}, 5s);
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(seen, 3);

  std::stop_source stop;
  std::atomic<int> ticks{0};
  std::thread stopper([&] {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (ticks.load() < 2 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_GE(ticks.load(), 2) << "the stream never delivered the lines to stop after";
    stop.request_stop();
  });
  st = client_->StreamLines(
      req, nullptr,
      [&](std::string_view) {
        ++ticks;
        return true;
      },
      stop.get_token(), 5s);
  stopper.join();
  EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.ToString();
}

TEST_F(HttpTest, StopEndsOpenStreams) {
  ClientRequest req;
  req.path = "/forever";
  auto fut = std::async(std::launch::async, [&] {
    return client_->StreamLines(
        req, nullptr, [](std::string_view) { return true; }, {}, 5s);
  });
  std::this_thread::sleep_for(100ms);
  server_->Stop();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  Status st = fut.get();
  // The server ends the stream: either a clean end or a cut connection.
  EXPECT_TRUE(st.ok() || st.code() == StatusCode::kUnavailable) << st.ToString();
}

TEST(HttpClientTest, BadUrlsAndRefusedConnections) {
  for (const std::string url : {"ftp://x", "http://", "https://h:99999", "127.0.0.1:80"}) {
    ClientOptions o;
    o.base_url = url;
    auto c = NewHttpClient(o);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << url;
  }
  // A port that was just free: nothing listens there.
  auto s = NewHttpServer(LocalServer());
  ASSERT_TRUE(s->Start().ok());
  const uint16_t port = s->port();
  s->Stop();
  auto c = ClientFor(Local(port));
  ClientRequest req;
  req.path = "/";
  req.timeout = 2s;
  EXPECT_EQ(c->Send(req).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(c->StreamLines(
                 req, nullptr, [](std::string_view) { return true; }, {}, 1s)
                .code(),
            StatusCode::kUnavailable);
}

TEST(HttpServerTest, PortInUseAndBadTlsFiles) {
  auto a = NewHttpServer(LocalServer());
  ASSERT_TRUE(a->Start().ok());
  auto b = NewHttpServer(LocalServer(a->port()));
  EXPECT_EQ(b->Start().code(), StatusCode::kUnavailable);
  ServerOptions o = LocalServer();
  o.tls = Tls("/nonexistent/cert.pem", "/nonexistent/key.pem");
  Status st = NewHttpServer(o)->Start();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("/nonexistent/cert.pem"), std::string::npos) << st.message();
}

// The status line a plain GET of `path` gets over a fresh connection to
// `addr` ("" when the connection fails).
std::string RawGet(const sockaddr* addr, socklen_t len, const std::string& path) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string line;
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (::connect(fd, addr, len) == 0 &&
      ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) line.assign(buf, static_cast<size_t>(n));
    line = line.substr(0, line.find("\r\n"));
  }
  ::close(fd);
  return line;
}

// An empty host serves every address: IPv4, and IPv6 where the kernel has
// it (IPv6-only and dual-stack clusters probe pods on their IPv6 address).
TEST(HttpServerTest, AnEmptyHostServesIpv4AndIpv6) {
  ServerOptions o;
  o.host = "";
  auto s = NewHttpServer(o);
  s->Handle("GET", "/x", [](const Request&) { return Response::Json(200, "{}"); });
  ASSERT_TRUE(s->Start().ok());
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(s->port());
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(RawGet(reinterpret_cast<sockaddr*>(&v4), sizeof(v4), "/x"), "HTTP/1.1 200 OK");
  const int probe = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) GTEST_SKIP() << "no IPv6 on this machine";
  ::close(probe);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(s->port());
  v6.sin6_addr = in6addr_loopback;
  // A socket may exist where ::1 does not (containers with IPv6 disabled on
  // their interfaces): the server then serves IPv4, which is checked above.
  const std::string got = RawGet(reinterpret_cast<sockaddr*>(&v6), sizeof(v6), "/x");
  if (got.empty()) GTEST_SKIP() << "::1 is not reachable on this machine";
  EXPECT_EQ(got, "HTTP/1.1 200 OK");
}

// A local server, not started yet, that counts its requests in `reg`,
// answers GET /api/... with {} and serves `reg` at /metrics.
std::unique_ptr<HttpServer> MeteredApiServer(MetricsRegistry& reg) {
  ServerOptions o = LocalServer();
  o.metrics = &reg;
  auto s = NewHttpServer(o);
  s->HandlePrefix("GET", "/api/", [](const Request&) { return Response::Json(200, "{}"); });
  ServeMetrics(*s, reg);
  return s;
}

TEST(HttpServerTest, MetricsCountRequestsByRoute) {
  MetricsRegistry reg;
  auto s = MeteredApiServer(reg);
  ASSERT_TRUE(s->Start().ok());
  auto c = ClientFor(Local(s->port()));
  ClientRequest req;
  for (const char* path : {"/api/v1/nodes/a", "/api/v1/nodes/b", "/nope"}) {
    req.path = path;
    ASSERT_TRUE(c->Send(req).ok());
  }
  req.path = "/metrics";
  auto page = c->Send(req);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->headers["content-type"], kMetricsContentType);
  EXPECT_NE(page->body.find(
                "accelpool_http_requests_total{method=\"GET\",route=\"/api/\",code=\"200\"} 2"),
            std::string::npos)
      << page->body;
  EXPECT_NE(page->body.find(
                "accelpool_http_requests_total{method=\"GET\",route=\"unmatched\",code=\"404\"} 1"),
            std::string::npos)
      << page->body;
  EXPECT_NE(page->body.find(
                "accelpool_http_request_duration_seconds_count{method=\"GET\",route=\"/api/\"} 2"),
            std::string::npos)
      << page->body;
  // Four requests from one keep-alive client: fewer connections than requests.
  const size_t at = page->body.find("\naccelpool_http_connections_total ");
  ASSERT_NE(at, std::string::npos) << page->body;
  const int conns =
      std::atoi(page->body.c_str() + at + std::strlen("\naccelpool_http_connections_total "));
  EXPECT_GE(conns, 1);
  EXPECT_LT(conns, 4);
}

// One request on a fresh connection that the server closes after answering
// (Connection: close); returns the body, "" on any failure.
std::string OneShot(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    in.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t body = in.find("\r\n\r\n");
  return body == std::string::npos ? "" : in.substr(body + 4);
}

// A raw TCP client of a local port: it sends and reads bytes as the test says.
class RawConn {
 public:
  explicit RawConn(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Close();
  }
  ~RawConn() { Close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(std::string_view bytes) {
    return ok() && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                       static_cast<ssize_t>(bytes.size());
  }
  // Reads until `want` is among the bytes read, the peer closes or `wait`
  // passes; returns what was read (also kept in received()).
  std::string ReadUntil(std::string_view want, std::chrono::milliseconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (ok() && !closed_ && in_.find(want) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[16384];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;  // end of stream or reset
        break;
      }
      in_.append(buf, static_cast<size_t>(n));
    }
    return in_;
  }
  // True when the server ended the connection within `wait`.
  bool ClosedWithin(std::chrono::milliseconds wait) {
    ReadUntil("\xff\xfe never sent \xfd", wait);
    return closed_;
  }
  const std::string& received() const { return in_; }

 private:
  int fd_;
  bool closed_ = false;
  std::string in_;
};

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(HttpServerTest, MethodLabelsAreBoundedAndBadMethodsRefused) {
  MetricsRegistry reg;
  auto s = MeteredApiServer(reg);
  ASSERT_TRUE(s->Start().ok());
  auto c = ClientFor(Local(s->port()));
  ClientRequest req;
  req.path = "/api/x";
  for (int i = 0; i < 200; ++i) {
    req.method = "M" + std::to_string(i);
    auto r = c->Send(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 405) << req.method;
  }
  for (const std::string m : {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "get"}) {
    req.method = m;
    ASSERT_TRUE(c->Send(req).ok()) << m;
  }
  // Not a token: refused with 400 and not counted.
  for (const std::string line :
       {"G{T /api/x HTTP/1.1", "G\x01T /api/x HTTP/1.1", " /api/x HTTP/1.1"}) {
    RawConn raw(s->port());
    ASSERT_TRUE(raw.Send(line + "\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(raw.ReadUntil("\r\n", 5s).rfind("HTTP/1.1 400 ", 0), 0u) << raw.received();
  }
  req.method = "GET";
  req.path = "/metrics";
  auto page = c->Send(req);
  ASSERT_TRUE(page.ok());
  std::set<std::string> methods;
  std::istringstream lines(page->body);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("method=\"");
    if (line.rfind("accelpool_http_", 0) != 0 || at == std::string::npos) continue;
    methods.insert(line.substr(at + 8, line.find('"', at + 8) - at - 8));
  }
  EXPECT_EQ(methods, (std::set<std::string>{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD",
                                            "OPTIONS", "other"}))
      << page->body;
  EXPECT_NE(page->body.find("accelpool_http_requests_total{method=\"other\",route=\"unmatched\","
                            "code=\"405\"} 201"),
            std::string::npos)
      << page->body;
}

// Header lines a proxy in front could read otherwise (RFC 9112 5.1, 5.2)
// are refused with 400 and the connection closed, so a body can never be
// served as a second request; an unknown version is refused too.
TEST(HttpServerTest, AmbiguousHeaderLinesAreRefused) {
  auto s = NewHttpServer(LocalServer());
  std::atomic<int> served{0};
  s->Handle("GET", "/echo", [&served](const Request&) {
    ++served;
    return Response::Json(200, "{}");
  });
  s->Handle("POST", "/echo", [&served](const Request& r) {
    ++served;
    return Response::Json(200, r.body);
  });
  ASSERT_TRUE(s->Start().ok());
  const std::string smuggled = "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length : " + std::to_string(smuggled.size()) +
           "\r\n\r\n" + smuggled,
       "before its colon"},
      {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
       "before its colon"},
      {"GET /echo HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", "obs-fold"},
      {"GET /echo HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", "without a name"},
      {"GET /echo FOO/9\r\nHost: x\r\n\r\n", "unsupported HTTP version"},
  };
  for (const auto& [bytes, why] : cases) {
    SCOPED_TRACE(bytes);
    RawConn raw(s->port());
    ASSERT_TRUE(raw.Send(bytes));
    EXPECT_TRUE(raw.ClosedWithin(5s));
    EXPECT_EQ(raw.received().rfind("HTTP/1.1 400 ", 0), 0u) << raw.received();
    EXPECT_NE(raw.received().find(why), std::string::npos) << raw.received();
    EXPECT_EQ(raw.received().find("HTTP/1.1 200"), std::string::npos) << raw.received();
  }
  EXPECT_EQ(served.load(), 0);

  // Two pipelined requests, the first ending in bare "\n\n": two answers.
  RawConn two(s->port());
  ASSERT_TRUE(
      two.Send("GET /echo HTTP/1.1\nHost: a\n\nGET /echo HTTP/1.1\r\nX-Second: 1\r\n"
               "Connection: close\r\n\r\n"));
  EXPECT_TRUE(two.ClosedWithin(5s));
  size_t answers = 0;
  for (size_t at = two.received().find("HTTP/1.1 200"); at != std::string::npos;
       at = two.received().find("HTTP/1.1 200", at + 1)) {
    ++answers;
  }
  EXPECT_EQ(answers, 2u) << two.received();

  // An empty line before a request (a CRLF a client sent after a POST body)
  // is skipped.
  RawConn lead(s->port());
  ASSERT_TRUE(
      lead.Send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}\r\n"
                "GET /echo HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"));
  EXPECT_TRUE(lead.ClosedWithin(5s));
  EXPECT_EQ(lead.received().find("400"), std::string::npos) << lead.received();
  EXPECT_EQ(served.load(), 4);
}

TEST(HttpServerTest, ConnectionAndExpectTokensIgnoreCase) {
  auto s = NewHttpServer(LocalServer());
  s->Handle("POST", "/echo", [](const Request& r) { return Response::Json(201, r.body); });
  ASSERT_TRUE(s->Start().ok());
  {
    // Connection: Close ends the connection after the answer (the idle
    // timeout is 60 s, far past the wait).
    RawConn raw(s->port());
    ASSERT_TRUE(
        raw.Send("POST /echo HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, Close\r\n"
                 "Content-Length: 2\r\n\r\n{}"));
    EXPECT_TRUE(raw.ClosedWithin(5s)) << raw.received();
    EXPECT_EQ(raw.received().rfind("HTTP/1.1 201 ", 0), 0u) << raw.received();
    EXPECT_NE(raw.received().find("connection: close\r\n"), std::string::npos) << raw.received();
  }
  {
    // Expect: 100-Continue gets its interim answer before the body is sent.
    RawConn raw(s->port());
    ASSERT_TRUE(
        raw.Send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n"
                 "Content-Length: 2\r\n\r\n"));
    EXPECT_EQ(raw.ReadUntil("\r\n\r\n", 5s), "HTTP/1.1 100 Continue\r\n\r\n");
    ASSERT_TRUE(raw.Send("[]"));
    EXPECT_NE(raw.ReadUntil("[]", 5s).find("HTTP/1.1 201 "), std::string::npos) << raw.received();
  }
}

TEST(HttpServerTest, ConnectionThreadsServeTheNextConnection) {
  // A thread whose connection ended waits for the next one instead of
  // exiting: sequential short connections are served by one thread.
  auto s = NewHttpServer(LocalServer());
  std::atomic<int> calls{0};
  s->Handle("GET", "/who", [&calls](const Request&) {
    ++calls;
    std::ostringstream id;
    id << std::this_thread::get_id();
    return Response::Json(200, "\"" + id.str() + "\"");
  });
  ASSERT_TRUE(s->Start().ok());
  std::set<std::string> threads;
  for (int i = 0; i < 5; ++i) {
    const std::string who = OneShot(s->port(), "/who");
    ASSERT_FALSE(who.empty()) << i;
    threads.insert(who);
    // The thread is idle again: after the client saw the connection end, it
    // still tidies up and goes back to wait. Nothing outside the server shows
    // when it has, so the pause is generous (a loaded machine or
    // ThreadSanitizer slows that step).
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(threads.size(), 1u);
  // Concurrent connections still get a thread each; Stop ends idle threads.
  std::vector<std::future<std::string>> many;
  for (int i = 0; i < 6; ++i) {
    many.push_back(std::async(std::launch::async, [&s] { return OneShot(s->port(), "/who"); }));
  }
  for (auto& f : many) EXPECT_FALSE(f.get().empty());
  s->Stop();
  EXPECT_TRUE(OneShot(s->port(), "/who").empty());  // no longer served
}

// Stop() during a request: the handler's answer still reaches the client
// (with Connection: close), an idle kept-alive connection is closed at once,
// and a handler that outlives stop_grace is cut at the grace.
TEST(HttpServerTest, StopLetsARequestBeingAnsweredFinish) {
  // Declared before the servers: their handlers use them until Stop() ends.
  std::atomic<bool> entered{false};
  std::atomic<bool> release{false};
  ServerOptions o = LocalServer();
  // Far longer than the test waits for anything: a Stop() that waited out
  // the grace instead of ending at the answer fails the bound below.
  o.stop_grace = 30s;
  auto s = NewHttpServer(o);
  // The handler answers only once the test saw the idle connection closed:
  // the idle one is shown closed while the busy one is still being answered,
  // however slow the machine.
  s->Handle("POST", "/bind", [&entered, &release](const Request&) {
    entered = true;
    for (int i = 0; i < 15000 && !release; ++i) std::this_thread::sleep_for(2ms);
    return Response::Json(200, "{\"bound\":true}");
  });
  s->Handle("GET", "/ping", [](const Request&) { return Response::Json(200, "{}"); });
  ASSERT_TRUE(s->Start().ok());
  RawConn idle(s->port());
  ASSERT_TRUE(idle.Send("GET /ping HTTP/1.1\r\nHost: a\r\n\r\n"));
  ASSERT_NE(idle.ReadUntil("{}", 5s).find("200 OK"), std::string::npos);
  RawConn busy(s->port());
  ASSERT_TRUE(busy.Send("POST /bind HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}"));
  for (int i = 0; i < 2500 && !entered; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(entered);
  const auto start = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&s] { s->Stop(); });
  // Generous: Stop() first joins the acceptor, which polls every 100 ms, and
  // a loaded machine or ThreadSanitizer slows it further.
  EXPECT_TRUE(idle.ClosedWithin(5s));
  release = true;
  const std::string answer = busy.ReadUntil("{\"bound\":true}", 5s);
  EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
  EXPECT_NE(answer.find("{\"bound\":true}"), std::string::npos) << answer;
  EXPECT_NE(answer.find("onnection: close"), std::string::npos) << answer;
  EXPECT_TRUE(busy.ClosedWithin(5s));
  ASSERT_EQ(stopped.wait_for(10s), std::future_status::ready);
  // Well below stop_grace (30 s): Stop() returned once the answer was sent.
  EXPECT_LT(SecondsSince(start), 10.0);

  // A handler longer than the grace: Stop() returns after the grace, and the
  // client sees its connection end without an answer.
  o.stop_grace = 100ms;
  auto slow = NewHttpServer(o);
  release = false;
  entered = false;
  slow->Handle("POST", "/bind", [&entered, &release](const Request&) {
    entered = true;
    for (int i = 0; i < 15000 && !release; ++i) std::this_thread::sleep_for(2ms);
    return Response::Json(200, "{}");
  });
  ASSERT_TRUE(slow->Start().ok());
  RawConn late(slow->port());
  ASSERT_TRUE(late.Send("POST /bind HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"));
  for (int i = 0; i < 2500 && !entered; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(entered);
  auto cut = std::async(std::launch::async, [&slow] { slow->Stop(); });
  // The handler runs until released (up to 30 s): the connection ends at the
  // grace, not at an answer.
  EXPECT_TRUE(late.ClosedWithin(10s));
  EXPECT_EQ(late.received(), "");
  release = true;
  ASSERT_EQ(cut.wait_for(10s), std::future_status::ready);
}

// At the connection cap, kept-alive connections that send nothing make room:
// the one idle longest is closed and the new one served. One with a request
// in flight is never closed for it; with every connection busy the new one
// gets 503.
TEST(HttpServerTest, AtTheCapTheConnectionIdleLongestMakesRoom) {
  MetricsRegistry reg;
  // Declared before the server: its handlers use them until Stop() ends.
  std::atomic<bool> release{false};
  std::atomic<int> slow_entered{0};
  ServerOptions o = LocalServer();
  o.max_connections = 2;
  o.metrics = &reg;
  auto s = NewHttpServer(o);
  s->Handle("GET", "/ping", [](const Request&) { return Response::Json(200, "{}"); });
  s->Handle("GET", "/slow", [&release, &slow_entered](const Request&) {
    ++slow_entered;
    for (int i = 0; i < 15000 && !release; ++i) std::this_thread::sleep_for(2ms);
    return Response::Json(200, "{}");
  });
  ServeMetrics(*s, reg);
  ASSERT_TRUE(s->Start().ok());
  const std::string ping = "GET /ping HTTP/1.1\r\nHost: a\r\n\r\n";
  RawConn first(s->port());
  ASSERT_TRUE(first.Send(ping));
  ASSERT_NE(first.ReadUntil("{}", 5s).find("200 OK"), std::string::npos);
  // Orders the two connections' idle times: the server marks a connection
  // idle after it sent the answer, which the client may read first.
  std::this_thread::sleep_for(200ms);
  RawConn second(s->port());
  ASSERT_TRUE(second.Send(ping));
  ASSERT_NE(second.ReadUntil("{}", 5s).find("200 OK"), std::string::npos);
  RawConn third(s->port());
  ASSERT_TRUE(third.Send(ping));
  EXPECT_NE(third.ReadUntil("{}", 5s).find("200 OK"), std::string::npos) << third.received();
  EXPECT_TRUE(first.ClosedWithin(5s));  // idle longest
  EXPECT_FALSE(second.ClosedWithin(200ms));
  // Both connections busy: nothing to evict, the next one is turned away.
  ASSERT_TRUE(second.Send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"));
  ASSERT_TRUE(third.Send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"));
  // Both requests are being answered: one sent but not read yet still
  // counts as idle and could be evicted for the next connection.
  const auto sent = std::chrono::steady_clock::now();
  while (slow_entered.load() < 2 && SecondsSince(sent) < 5) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(slow_entered.load(), 2);
  RawConn fourth(s->port());
  ASSERT_TRUE(fourth.Send(ping));
  EXPECT_NE(fourth.ReadUntil("\r\n\r\n", 5s).find("503"), std::string::npos) << fourth.received();
  release = true;
  EXPECT_NE(second.ReadUntil("{}", 5s).find("200 OK"), std::string::npos);
  for (int i = 0; i < 250 && third.received().find("200 OK", third.received().find("200 OK") + 1) ==
                                 std::string::npos;
       ++i) {
    third.ReadUntil("\xff never sent", 20ms);
  }
  EXPECT_NE(third.received().find("200 OK", third.received().find("200 OK") + 1), std::string::npos)
      << third.received();
  EXPECT_NE(reg.Serialize().find("accelpool_http_connections_evicted_total 1"), std::string::npos)
      << reg.Serialize();
}

// At the cap, two connections that come back to back never both take the
// place of the one idle connection (only one thread is freed), and one whose
// request is not read yet is not closed for the next: each is answered, 200
// or 503, and none waits without an answer.
TEST(HttpServerTest, AtTheCapTwoNewConnectionsNeverEvictTheSameOne) {
  ServerOptions o = LocalServer();
  o.max_connections = 1;
  auto s = NewHttpServer(o);
  s->Handle("GET", "/ping", [](const Request&) { return Response::Json(200, "{}"); });
  ASSERT_TRUE(s->Start().ok());
  const std::string ping = "GET /ping HTTP/1.1\r\nHost: a\r\n\r\n";
  auto answered = [](RawConn& c) {
    const std::string got = c.ReadUntil("\r\n\r\n", 10s);
    return got.rfind("HTTP/1.1 200 ", 0) == 0 || got.rfind("HTTP/1.1 503 ", 0) == 0;
  };
  for (int round = 0; round < 20; ++round) {
    // A: served once and kept alive (the connections of the round before
    // may still hold the one place for a moment).
    std::unique_ptr<RawConn> a;
    const auto start = std::chrono::steady_clock::now();
    while (SecondsSince(start) < 5) {
      a = std::make_unique<RawConn>(s->port());
      if (a->Send(ping) && a->ReadUntil("{}", 2s).rfind("HTTP/1.1 200 ", 0) == 0) break;
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(a->received().rfind("HTTP/1.1 200 ", 0), 0u) << round << ": " << a->received();
    RawConn b(s->port());
    RawConn c(s->port());
    ASSERT_TRUE(b.Send(ping));
    ASSERT_TRUE(c.Send(ping));
    EXPECT_TRUE(answered(b)) << round << ": B got \"" << b.received() << "\"";
    EXPECT_TRUE(answered(c)) << round << ": C got \"" << c.received() << "\"";
    if (HasFailure()) break;
  }
}

TEST(HttpServerTest, ARequestTrickledInIsCutAtItsDeadline) {
  ServerOptions o = LocalServer();
  o.header_timeout = 1s;
  auto s = NewHttpServer(o);
  s->Handle("POST", "/echo", [](const Request& r) { return Response::Json(201, r.body); });
  ASSERT_TRUE(s->Start().ok());
  // A byte of head every 100 ms: each comes well inside the idle timeout
  // (60 s), the whole head never within the header timeout.
  {
    RawConn raw(s->port());
    ASSERT_TRUE(raw.Send("POST /echo HTTP/1.1\r\n"));
    const auto start = std::chrono::steady_clock::now();
    bool closed = false;
    while (!closed && SecondsSince(start) < 20) closed = !raw.Send("X") || raw.ClosedWithin(100ms);
    EXPECT_TRUE(closed);
    EXPECT_GE(SecondsSince(start), 0.9);
    EXPECT_LT(SecondsSince(start), 10.0);  // far inside the idle timeout
  }
  // The same for a body: 100 bytes are due within about 1 s.
  {
    RawConn raw(s->port());
    ASSERT_TRUE(raw.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"));
    const auto start = std::chrono::steady_clock::now();
    bool closed = false;
    while (!closed && SecondsSince(start) < 20) closed = !raw.Send("x") || raw.ClosedWithin(100ms);
    EXPECT_TRUE(closed);
    EXPECT_GE(SecondsSince(start), 0.9);
    EXPECT_LT(SecondsSince(start), 10.0);
    EXPECT_EQ(raw.received(), "");  // never answered
  }
  // A head and body sent at once are served.
  RawConn raw(s->port());
  ASSERT_TRUE(raw.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"));
  EXPECT_EQ(raw.ReadUntil("{}", 5s).rfind("HTTP/1.1 201 ", 0), 0u) << raw.received();
}

TEST(HttpServerTest, AClientThatStopsReadingIsDisconnectedAfterTheSendTimeout) {
  ServerOptions o = LocalServer();
  o.max_connections = 1;  // the reader's thread must be freed for anyone else to be served
  o.send_timeout = 500ms;
  auto s = NewHttpServer(o);
  std::atomic<bool> answered{false};
  s->Handle("GET", "/big", [&answered](const Request&) {
    Response r;
    r.body.assign(size_t{16} << 20, 'x');  // past what the socket buffers hold
    answered = true;
    return r;
  });
  s->Handle("GET", "/who", [](const Request&) { return Response::Json(200, "\"me\""); });
  ASSERT_TRUE(s->Start().ok());
  const int small = 4096;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(s->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string req = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!answered.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(answered.load());
  const auto start = std::chrono::steady_clock::now();
  // Turned away (503) while the thread writes; served once it gave up.
  std::string who;
  while (who.empty() && SecondsSince(start) < 20) {
    who = OneShot(s->port(), "/who");
    if (who.empty()) std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(who, "\"me\"");
  EXPECT_LT(SecondsSince(start), 10.0);  // the writer would hold on forever
  ::close(fd);
}

// Collects the lines of a Logger.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  Logger logger() {
    auto log = NewLogger("test", {.level = "info", .sink = [this](std::string_view line) {
                                    std::lock_guard<std::mutex> lock(mu);
                                    lines.emplace_back(line);
                                  }});
    EXPECT_TRUE(log.ok());
    return log.ok() ? *log : Logger();
  }
  int Count(std::string_view what) {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(what) != std::string::npos;
    }));
  }
};

TEST(HttpServerTest, AConnectionWithoutAThreadIsTurnedAway) {
  LogLines log;
  ServerOptions o = LocalServer();
  o.max_connections = 1;
  o.log = log.logger();
  std::atomic<int> refusals{3};
  o.start_thread = [&refusals](std::function<void()> body) {
    if (refusals.fetch_sub(1) > 0) {
      throw std::system_error(EAGAIN, std::generic_category(), "thread limit");
    }
    return std::thread(std::move(body));
  };
  auto s = NewHttpServer(o);
  s->Handle("GET", "/who", [](const Request&) { return Response::Json(200, "\"me\""); });
  ASSERT_TRUE(s->Start().ok());
  for (int i = 0; i < 3; ++i) {
    RawConn raw(s->port());
    ASSERT_TRUE(raw.Send("GET /who HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(raw.ReadUntil("\r\n", 5s).rfind("HTTP/1.1 503 ", 0), 0u) << raw.received();
    EXPECT_TRUE(raw.ClosedWithin(5s)) << i;
  }
  // Threads start again, and the refused connections hold none of the one slot.
  EXPECT_EQ(OneShot(s->port(), "/who"), "\"me\"");
  // The acceptor logs the recovery after the thread has started, which may
  // answer first: stopping the server (it joins the acceptor) orders the two.
  s->Stop();
  EXPECT_EQ(log.Count("cannot start a connection thread"), 1);
  EXPECT_EQ(log.Count("connection threads start again"), 1);
}

TEST(HttpServerTest, OutOfDescriptorsTheAcceptorWaitsInsteadOfSpinning) {
  LogLines log;
  ServerOptions o = LocalServer();
  o.log = log.logger();
  auto s = NewHttpServer(o);
  s->Handle("GET", "/who", [](const Request&) { return Response::Json(200, "\"me\""); });
  ASSERT_TRUE(s->Start().ok());
  // The client's socket first: out of descriptors, the test cannot make one either.
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  struct Limit {
    rlimit old{};
    std::vector<int> fillers;
    ~Limit() {
      for (int f : fillers) ::close(f);
      ::setrlimit(RLIMIT_NOFILE, &old);
    }
  } limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit.old), 0);
  int highest = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    highest = std::max(highest, std::atoi(e.path().filename().c_str()));
  }
  rlimit low = limit.old;
  low.rlim_cur = static_cast<rlim_t>(highest) + 16;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  for (int f; (f = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) limit.fillers.push_back(f);
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(s->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  // The connection waits in the listen queue; the acceptor cannot take it.
  auto cpu = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  const double cpu_before = cpu();
  std::this_thread::sleep_for(1s);
  const double used = cpu() - cpu_before;
  for (int f : limit.fillers) ::close(f);
  limit.fillers.clear();
  ::setrlimit(RLIMIT_NOFILE, &limit.old);
  EXPECT_LT(used, 0.25) << "CPU seconds spent in one second out of descriptors";
  EXPECT_EQ(log.Count("cannot accept connections"), 1);
  // Descriptors free again: the queued connection is served.
  const std::string req = "GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(client, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  timeval tv{5, 0};
  ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = ::recv(client, buf, sizeof(buf), 0)) > 0;)
    in.append(buf, static_cast<size_t>(n));
  ::close(client);
  EXPECT_EQ(in.rfind("HTTP/1.1 200 ", 0), 0u) << in;
  EXPECT_EQ(log.Count("accepting connections again"), 1);
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("accelpool-http");
    ASSERT_FALSE(dir_.empty());
    ca_ = std::make_unique<testing::TestCa>(dir_, "one");
    ASSERT_TRUE(ca_->ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<HttpServer> Serve(const TlsOptions& tls, uint16_t port = 0) {
    ServerOptions o = LocalServer(port);
    o.tls = tls;
    auto s = NewHttpServer(o);
    s->Handle("GET", "/who", [](const Request& r) {
      return Response::Json(200, "{\"subject\":\"" + r.client_cert_subject + "\"}");
    });
    EXPECT_TRUE(s->Start().ok());
    return s;
  }

  std::string dir_;
  std::unique_ptr<testing::TestCa> ca_;
};

TEST_F(TlsTest, ServerCertVerifiedByCa) {
  auto server_cert = ca_->Issue("server", "server", true);
  auto s = Serve(Tls(server_cert.cert_file, server_cert.key_file));
  ClientRequest req;
  req.path = "/who";

  struct Case {
    std::string name;
    ClientOptions opts;
    bool want_ok;
  };
  std::vector<Case> cases = {
      {"ca file", CaFile(ca_->ca_file()), true},
      {"ca pem", CaPem(ca_->ca_pem()), true},
      {"system store only", ClientOptions(), false},
      {"insecure", Insecure(), true},
      // A kubeconfig's tls-server-name: the certificate (SANs 127.0.0.1 and
      // localhost) is checked against that name, not the URL's host.
      {"server name it names", CaFile(ca_->ca_file()), true},
      {"server name it does not name", CaFile(ca_->ca_file()), false},
  };
  cases[cases.size() - 2].opts.tls_server_name = "localhost";
  cases[cases.size() - 1].opts.tls_server_name = "apiserver.example";
  for (auto c : cases) {
    c.opts.base_url = Local(s->port(), true);
    auto client = NewHttpClient(c.opts);
    ASSERT_TRUE(client.ok()) << c.name << client.status().ToString();
    auto resp = (*client)->Send(req);
    EXPECT_EQ(resp.ok(), c.want_ok) << c.name << ": " << resp.status().ToString();
    int streamed = 0;
    Status st = (*client)->StreamLines(
        req, nullptr, [&](std::string_view) { return ++streamed; }, {}, 2s);
    EXPECT_EQ(st.ok(), c.want_ok) << c.name << ": " << st.ToString();
  }
}

// A bundle holding only an intermediate CA trusts what that CA issued (as
// kubectl does with such a kubeconfig), in both directions: the client
// verifying the server, and the server verifying a client certificate.
TEST_F(TlsTest, AnIntermediateCaInTheBundleIsATrustAnchor) {
  testing::TestCa mid(dir_, "mid", *ca_);
  ASSERT_TRUE(mid.ok());
  auto server_cert = mid.Issue("server", "mid-server", true);
  auto client_cert = mid.Issue("scheduler", "mid-client", false);
  auto s = Serve(Tls(server_cert.cert_file, server_cert.key_file, mid.ca_file()));
  ClientRequest req;
  req.path = "/who";
  // Both transports: cpprestsdk's per-connection context takes the bundle's
  // verification flags too.
  for (auto transport :
       {ClientOptions::Transport::kSockets, ClientOptions::Transport::kCpprestsdk}) {
    SCOPED_TRACE(transport == ClientOptions::Transport::kSockets ? "sockets" : "cpprestsdk");
    ClientOptions o = CaFile(mid.ca_file());
    o.transport = transport;
    o.client_cert_file = client_cert.cert_file;
    o.client_key_file = client_cert.key_file;
    auto resp = ClientFor(Local(s->port(), true), o)->Send(req);
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_NE(resp->body.find("CN=scheduler"), std::string::npos) << resp->body;
    ClientOptions pem = CaPem(mid.ca_pem());
    pem.transport = transport;
    pem.client_cert_pem = client_cert.cert_pem;
    pem.client_key_pem = client_cert.key_pem;
    EXPECT_TRUE(ClientFor(Local(s->port(), true), pem)->Send(req).ok());
    // Anchors are still what the bundle holds: another CA verifies nothing.
    testing::TestCa other(dir_, std::string("other-") +
                                    (transport == ClientOptions::Transport::kSockets ? "s" : "c"));
    ASSERT_TRUE(other.ok());
    ClientOptions foreign = CaFile(other.ca_file());
    foreign.transport = transport;
    foreign.client_cert_file = client_cert.cert_file;
    foreign.client_key_file = client_cert.key_file;
    EXPECT_FALSE(ClientFor(Local(s->port(), true), foreign)->Send(req).ok());
  }
}

TEST_F(TlsTest, ClientCertificateRequired) {
  auto server_cert = ca_->Issue("server", "server", true);
  auto client_cert = ca_->Issue("scheduler", "client", false);
  auto s = Serve(Tls(server_cert.cert_file, server_cert.key_file, ca_->ca_file()));
  ClientRequest req;
  req.path = "/who";
  auto without = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  EXPECT_FALSE(without->Send(req).ok());
  ClientOptions files = CaFile(ca_->ca_file());
  files.client_cert_file = client_cert.cert_file;
  files.client_key_file = client_cert.key_file;
  auto with_files = ClientFor(Local(s->port(), true), files);
  auto resp = with_files->Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_NE(resp->body.find("CN=scheduler"), std::string::npos) << resp->body;
  ClientOptions pems = CaPem(ca_->ca_pem());
  pems.client_cert_pem = client_cert.cert_pem;
  pems.client_key_pem = client_cert.key_pem;
  auto with_pem = ClientFor(Local(s->port(), true), pems);
  resp = with_pem->Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->status, 200);
}

// An optional client certificate: a client without one is served (and named
// by no subject), one with a certificate of the bundle is named by it, and
// one with a certificate of another CA is refused in the handshake.
TEST_F(TlsTest, ClientCertificateOptional) {
  auto server_cert = ca_->Issue("server", "server", true);
  auto client_cert = ca_->Issue("scheduler", "client", false);
  testing::TestCa other(dir_, "two");
  ASSERT_TRUE(other.ok());
  auto stranger = other.Issue("stranger", "stranger", false);
  TlsOptions tls = Tls(server_cert.cert_file, server_cert.key_file, ca_->ca_file());
  tls.client_cert_optional = true;
  auto s = Serve(tls);
  ClientRequest req;
  req.path = "/who";
  auto without = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  auto resp = without->Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->body, "{\"subject\":\"\"}");
  ClientOptions with = CaFile(ca_->ca_file());
  with.client_cert_file = client_cert.cert_file;
  with.client_key_file = client_cert.key_file;
  resp = ClientFor(Local(s->port(), true), with)->Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_NE(resp->body.find("CN=scheduler"), std::string::npos) << resp->body;
  ClientOptions foreign = CaFile(ca_->ca_file());
  foreign.client_cert_file = stranger.cert_file;
  foreign.client_key_file = stranger.key_file;
  resp = ClientFor(Local(s->port(), true), foreign)->Send(req);
  EXPECT_FALSE(resp.ok()) << "a certificate of another CA was let in: " << resp->body;
}

TEST_F(TlsTest, CertificateReloadedWhenFilesChange) {
  auto first = ca_->Issue("server", "server", true);
  auto s = Serve(Tls(first.cert_file, first.key_file, "", std::chrono::milliseconds(0)));
  testing::TestCa other(dir_, "two");
  ASSERT_TRUE(other.ok());
  ClientRequest req;
  req.path = "/who";
  auto trusts_one = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  auto trusts_two = ClientFor(Local(s->port(), true), CaFile(other.ca_file()));
  EXPECT_TRUE(trusts_one->Send(req).ok());
  EXPECT_FALSE(trusts_two->Send(req).ok());
  // Rotate: same file names, certificate from the other CA. mtime granularity
  // is fine-grained on Linux, but make sure the timestamps differ.
  std::this_thread::sleep_for(20ms);
  other.Issue("server", "server", true);
  // Fresh clients so no pooled connection from before the rotation is reused.
  auto after_two = ClientFor(Local(s->port(), true), CaFile(other.ca_file()));
  auto after_one = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  EXPECT_TRUE(after_two->Send(req).ok());
  EXPECT_FALSE(after_one->Send(req).ok());
}

// A client context resumes the session of a server it already verified: the
// second connection skips the certificate exchange, and the server still sees
// the client's certificate. A context of its own starts from a full handshake.
// A rotation that leaves files that do not load keeps the old certificate
// and says so once (not at every check), and says when the files load again.
TEST_F(TlsTest, ACertificateThatDoesNotLoadIsLoggedOnceAndTheOldOneServed) {
  auto first = ca_->Issue("server", "server", true);
  std::mutex mu;
  std::vector<std::string> lines;
  LogOptions lo;
  lo.sink = [&](std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(line);
  };
  StatusOr<Logger> log = NewLogger("test", lo);
  ASSERT_TRUE(log.ok());
  ServerOptions o = LocalServer();
  o.tls = Tls(first.cert_file, first.key_file, "", std::chrono::milliseconds(0));
  o.log = *log;
  auto s = NewHttpServer(o);
  s->Handle("GET", "/who", [](const Request&) { return Response::Json(200, "{}"); });
  ASSERT_TRUE(s->Start().ok());
  ClientRequest req;
  req.path = "/who";
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(testing::WriteFile(first.key_file, "not a key"));
  for (int i = 0; i < 3; ++i) {
    auto c = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
    EXPECT_TRUE(c->Send(req).ok());  // the old pair still serves
  }
  auto count = [&](std::string_view what) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  EXPECT_EQ(count("does not load"), 1);
  std::this_thread::sleep_for(20ms);
  ca_->Issue("server", "server", true);
  auto c = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  EXPECT_TRUE(c->Send(req).ok());
  EXPECT_EQ(count("TLS certificate reloaded"), 1);
}

TEST_F(TlsTest, ReconnectionResumesTheSessionAndKeepsTheClientIdentity) {
  auto server_cert = ca_->Issue("server", "server", true);
  auto client_cert = ca_->Issue("scheduler", "client", false);
  auto s = Serve(Tls(server_cert.cert_file, server_cert.key_file, ca_->ca_file()));
  ClientOptions opts = CaFile(ca_->ca_file());
  opts.client_cert_file = client_cert.cert_file;
  opts.client_key_file = client_cert.key_file;
  // One request on a new connection: whether it resumed, and the answer.
  auto request = [&](const internal::SslCtxPtr& ctx) -> std::pair<bool, std::string> {
    auto conn = internal::Connect("127.0.0.1", s->port(), ctx, true, 2s);
    if (!conn.ok()) return {false, conn.status().ToString()};
    (*conn)->Write("GET /who HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 2s);
    std::string got;
    char buf[4096];
    for (long n; (n = (*conn)->Read(buf, sizeof(buf), 2s)) > 0;) got.append(buf, n);
    return {(*conn)->TlsResumed(), got};
  };
  auto ctx = internal::ClientContext(opts);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  auto [first_resumed, first] = request(*ctx);
  EXPECT_FALSE(first_resumed);
  EXPECT_NE(first.find("CN=scheduler"), std::string::npos) << first;
  for (int i = 0; i < 3; ++i) {
    auto [resumed, body] = request(*ctx);
    EXPECT_TRUE(resumed) << "connection " << i + 2;
    EXPECT_NE(body.find("CN=scheduler"), std::string::npos) << body;
  }
  auto other = internal::ClientContext(opts);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(request(*other).first);
  // A server that no longer knows the session (a restart: new ticket keys)
  // answers with a full handshake, and the request goes through.
  const uint16_t port = s->port();
  s->Stop();
  s.reset();
  auto again = Serve(Tls(server_cert.cert_file, server_cert.key_file, ca_->ca_file()), port);
  auto conn = internal::Connect("127.0.0.1", port, *ctx, true, 2s);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_FALSE((*conn)->TlsResumed());
}

// Declared last: it changes the process's environment for the tests after it.
TEST_F(TlsTest, TrustIsUnchangedWhenOpenSslDefaultPathsAreDisabled) {
  const char* before = std::getenv("SSL_CERT_FILE");
  const std::string before_file = before != nullptr ? before : "";
  DisableDefaultCaPaths();
  DisableDefaultCaPaths();  // idempotent: the saved paths stay the first ones
  EXPECT_STREQ(std::getenv("SSL_CERT_FILE"), "/dev/null");
  EXPECT_STREQ(std::getenv("SSL_CERT_DIR"), "/dev/null");
  const internal::DefaultCaPaths* saved = internal::SavedDefaultCaPaths();
  ASSERT_NE(saved, nullptr);
  EXPECT_FALSE(saved->file.empty());
  EXPECT_NE(saved->file, "/dev/null");
  if (!before_file.empty()) {
    EXPECT_EQ(saved->file, before_file);
  }
  // Every trust setting behaves as before, over several connections each
  // (the per-connection contexts share the client's store and identity).
  auto server_cert = ca_->Issue("server", "server", true);
  auto client_cert = ca_->Issue("scheduler", "client", false);
  auto s = Serve(Tls(server_cert.cert_file, server_cert.key_file, ca_->ca_file()));
  ClientRequest req;
  req.path = "/who";
  ClientOptions with_identity = CaFile(ca_->ca_file());
  with_identity.client_cert_file = client_cert.cert_file;
  with_identity.client_key_file = client_cert.key_file;
  struct Case {
    std::string name;
    ClientOptions opts;
    bool want_ok;
  };
  const std::vector<Case> cases = {
      {"ca and identity", with_identity, true},
      {"ca without identity", CaFile(ca_->ca_file()), false},
      {"system store only", ClientOptions(), false},
  };
  for (const Case& c : cases) {
    auto client = ClientFor(Local(s->port(), true), c.opts);
    for (int i = 0; i < 3; ++i) {
      auto resp = client->Send(req);
      EXPECT_EQ(resp.ok(), c.want_ok) << c.name << ": " << resp.status().ToString();
    }
  }
}

TEST_F(TlsTest, AClientThatNeverFinishesTheHandshakeIsDropped) {
  auto cert = ca_->Issue("server", "server", true);
  ServerOptions o = LocalServer();
  o.tls = Tls(cert.cert_file, cert.key_file);
  o.handshake_timeout = 500ms;
  auto s = NewHttpServer(o);
  s->Handle("GET", "/who", [](const Request&) { return Response::Json(200, "{}"); });
  ASSERT_TRUE(s->Start().ok());
  const auto start = std::chrono::steady_clock::now();
  RawConn silent(s->port());
  RawConn half(s->port());
  // A TLS record header and the first bytes of a ClientHello, then nothing.
  ASSERT_TRUE(half.Send(std::string("\x16\x03\x01\x02\x00\x01\x00", 7)));
  EXPECT_TRUE(silent.ClosedWithin(5s));
  EXPECT_TRUE(half.ClosedWithin(5s));
  EXPECT_GE(SecondsSince(start), 0.45);
  // The server still serves a client that completes the handshake.
  auto c = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  ClientRequest req;
  req.path = "/who";
  auto r = c->Send(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
}

TEST_F(TlsTest, StopEndsAHandshakeInProgress) {
  auto cert = ca_->Issue("server", "server", true);
  ServerOptions o = LocalServer();
  o.tls = Tls(cert.cert_file, cert.key_file);
  o.handshake_timeout = 600s;
  auto s = NewHttpServer(o);
  ASSERT_TRUE(s->Start().ok());
  RawConn silent(s->port());
  ASSERT_TRUE(silent.ok());
  std::this_thread::sleep_for(200ms);  // accepted: a thread waits for the ClientHello
  const auto start = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&s] { s->Stop(); });
  const bool prompt = stopped.wait_for(5s) == std::future_status::ready;
  silent.Close();  // what ends the handshake when Stop cannot
  stopped.wait();
  EXPECT_TRUE(prompt);
  EXPECT_LT(SecondsSince(start), 5.0);
}

// A listening socket that never accepts: the kernel completes the TCP
// handshake of a client, and nothing ever answers it.
class SilentListener {
 public:
  SilentListener() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      Close();
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { Close(); }
  // Resets the connections waiting in the queue.
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  uint16_t port() const { return port_; }

 private:
  int fd_;
  uint16_t port_ = 0;
};

TEST(HttpClientTest, AServerThatNeverAnswersTheTlsHandshakeTimesOut) {
  SilentListener silent;
  ASSERT_NE(silent.port(), 0);
  auto c = ClientFor(Local(silent.port(), true), Insecure());
  ClientRequest req;
  req.path = "/";
  req.timeout = 200ms;
  auto start = std::chrono::steady_clock::now();
  auto sent = std::async(std::launch::async, [&] { return c->Send(req); });
  bool prompt = sent.wait_for(10s) == std::future_status::ready;
  if (!prompt) silent.Close();  // the reset ends the call
  const StatusOr<ClientResponse> r = sent.get();
  EXPECT_TRUE(prompt);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_LT(SecondsSince(start), 10.0);

  // A watch being set up ends when its caller stops, before its own timeout.
  req.timeout = 60s;
  std::stop_source stop;
  auto watched = std::async(std::launch::async, [&] {
    return c->StreamLines(
        req, nullptr, [](std::string_view) { return true; }, stop.get_token(), 60s);
  });
  std::this_thread::sleep_for(200ms);
  start = std::chrono::steady_clock::now();
  stop.request_stop();
  prompt = watched.wait_for(10s) == std::future_status::ready;
  if (!prompt) silent.Close();
  const Status st = watched.get();
  EXPECT_TRUE(prompt);
  EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.ToString();
  EXPECT_LT(SecondsSince(start), 10.0);
}

TEST_F(TlsTest, ASlowAnswerTimesOutOverTls) {
  // As HttpTest.TimeoutIsDeadlineExceeded, over TLS: the session tickets the
  // server sends after the handshake must not make the client wait for the
  // answer past its deadline.
  auto cert = ca_->Issue("server", "server", true);
  // Declared before the server: its handler uses it until Stop() ends.
  std::atomic<bool> release{false};
  ServerOptions o = LocalServer();
  o.tls = Tls(cert.cert_file, cert.key_file);
  auto s = NewHttpServer(o);
  // The answer comes only when released (after the client gave up) or after
  // 30 s: a client that waited past its deadline for it fails the bound below.
  s->Handle("GET", "/slow", [&release](const Request&) {
    for (int i = 0; i < 15000 && !release; ++i) std::this_thread::sleep_for(2ms);
    return Response::Json(200, "{}");
  });
  ASSERT_TRUE(s->Start().ok());
  auto c = ClientFor(Local(s->port(), true), CaFile(ca_->ca_file()));
  ClientRequest req;
  req.path = "/slow";
  req.timeout = 500ms;
  const auto start = std::chrono::steady_clock::now();
  auto r = c->Send(req);
  const double took = SecondsSince(start);
  release = true;
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  // Generous (a loaded machine or ThreadSanitizer slows the handshake), and
  // far below the 30 s the answer would take.
  EXPECT_LT(took, 10.0);
}

// A request without a route, refused by its route's admit check, or over its
// route's limit is answered from its head: the test sends only the head, and
// the answer comes (so nothing waited for the body), then the connection ends.
TEST(HttpServerTest, RefusedBodiesAreAnsweredWithoutBeingRead) {
  ServerOptions o = LocalServer();
  o.max_body_bytes = 1 << 20;
  auto s = NewHttpServer(o);
  std::atomic<int> handled{0};
  auto echo = [&handled](const Request& r) {
    ++handled;
    return Response::Json(200, std::to_string(r.body.size()));
  };
  RouteOptions small;
  small.max_body_bytes = 1024;
  s->Handle("POST", "/small", echo, small);
  RouteOptions big;
  big.max_body_bytes = size_t{64} << 20;  // above the server's limit: the server's holds
  s->Handle("POST", "/big", echo, big);
  RouteOptions gated;
  gated.admit = [](const Request& head) -> std::optional<Response> {
    EXPECT_TRUE(head.body.empty());
    if (head.Header("x-allow") == "yes") return std::nullopt;
    return Response::Error(403, "not you, " + head.peer);
  };
  s->Handle("POST", "/gated", echo, gated);
  ASSERT_TRUE(s->Start().ok());
  struct Case {
    std::string head;
    std::string status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"POST /nowhere HTTP/1.1\r\nContent-Length: 900000\r\n\r\n", "404", "no handler"},
      {"GET /small HTTP/1.1\r\nContent-Length: 900000\r\n\r\n", "405", "not allowed"},
      {"POST /small HTTP/1.1\r\nContent-Length: 4096\r\n\r\n", "413",
       "exceeds the limit of 1024 on /small"},
      {"POST /big HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", "413",
       "exceeds the limit of 1048576 on /big"},
      {"POST /gated HTTP/1.1\r\nContent-Length: 900000\r\n\r\n", "403", "not you, 127.0.0.1:"},
  };
  for (const Case& c : cases) {
    RawConn raw(s->port());
    ASSERT_TRUE(raw.Send(c.head));
    EXPECT_NE(raw.ReadUntil(c.says, 5s).find(c.says), std::string::npos) << raw.received();
    EXPECT_EQ(raw.received().rfind("HTTP/1.1 " + c.status + " ", 0), 0u) << raw.received();
    EXPECT_NE(raw.received().find("connection: close\r\n"), std::string::npos) << raw.received();
    EXPECT_TRUE(raw.ClosedWithin(5s)) << c.head;
  }
  EXPECT_EQ(handled.load(), 0);
  // Admitted, the body is read and handled; a small body with a refusal is
  // drained, so the answer is not lost to a reset.
  auto client = ClientFor(Local(s->port()));
  ClientRequest req;
  req.method = "POST";
  req.path = "/gated";
  req.headers["x-allow"] = "yes";
  req.body = std::string(300000, 'b');
  auto ok = client->Send(req);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "300000");
  req.headers.clear();
  auto refused = client->Send(req);
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->status, 403);
  EXPECT_EQ(handled.load(), 1);
}

// Bodies read at once stay within max_body_bytes_in_flight: past it a request
// gets 503 with Retry-After before its body is read; one body alone always
// fits; the budget comes back when the handler is done.
TEST(HttpServerTest, BodiesInFlightAreHeldToTheBudget) {
  ServerOptions o = LocalServer();
  o.max_body_bytes = 1 << 20;
  o.max_body_bytes_in_flight = (1 << 20) + (1 << 19);
  auto s = NewHttpServer(o);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> holding{0};
  s->Handle("POST", "/hold", [&](const Request& r) {
    if (r.Header("x-hold") == "yes") {
      ++holding;
      released.wait_for(10s);
    }
    return Response::Json(200, std::to_string(r.body.size()));
  });
  ASSERT_TRUE(s->Start().ok());
  const std::string mib(1 << 20, 'm');
  RawConn first(s->port());
  ASSERT_TRUE(first.Send("POST /hold HTTP/1.1\r\nX-Hold: yes\r\nContent-Length: " +
                         std::to_string(mib.size()) + "\r\n\r\n" + mib));
  for (int i = 0; i < 500 && holding.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(holding.load(), 1);
  {
    RawConn second(s->port());
    ASSERT_TRUE(second.Send("POST /hold HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n"));
    second.ReadUntil("retry shortly", 5s);
    EXPECT_EQ(second.received().rfind("HTTP/1.1 503 ", 0), 0u) << second.received();
    EXPECT_NE(second.received().find("retry-after: 1\r\n"), std::string::npos) << second.received();
    EXPECT_TRUE(second.ClosedWithin(5s));
  }
  // Within what is left of the budget: read and answered while the first waits.
  auto client = ClientFor(Local(s->port()));
  ClientRequest req;
  req.method = "POST";
  req.path = "/hold";
  req.body = std::string(400000, 'x');
  auto fits = client->Send(req);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->status, 200);
  EXPECT_EQ(fits->body, "400000");
  release.set_value();
  EXPECT_NE(first.ReadUntil("1048576", 5s).find("HTTP/1.1 200 "), std::string::npos)
      << first.received();
  // The first body's share came back: a full-size body is taken again.
  req.body = mib;
  auto again = client->Send(req);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(again->body, "1048576");
}

// Routes with an admit check have the budget to themselves: bodies of the
// other routes (a webhook's, open to anyone who reaches the port) that fill
// theirs do not turn away an admitted route's body.
TEST(HttpServerTest, OpenRoutesCannotTakeTheAdmittedRoutesBodyBudget) {
  ServerOptions o = LocalServer();
  o.max_body_bytes = 1 << 20;
  o.max_body_bytes_in_flight = 1 << 20;
  auto s = NewHttpServer(o);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> holding{0};
  auto handler = [&](const Request& r) {
    if (r.Header("x-hold") == "yes") {
      ++holding;
      released.wait_for(10s);
    }
    return Response::Json(200, std::to_string(r.body.size()));
  };
  s->Handle("POST", "/open", handler);
  RouteOptions admitted;
  admitted.admit = [](const Request&) { return std::optional<Response>(); };
  s->Handle("POST", "/verb", handler, admitted);
  ASSERT_TRUE(s->Start().ok());
  const std::string mib(1 << 20, 'm');
  RawConn open(s->port());
  ASSERT_TRUE(open.Send("POST /open HTTP/1.1\r\nX-Hold: yes\r\nContent-Length: " +
                        std::to_string(mib.size()) + "\r\n\r\n" + mib));
  for (int i = 0; i < 500 && holding.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(holding.load(), 1);
  auto client = ClientFor(Local(s->port()));
  ClientRequest req;
  req.method = "POST";
  req.path = "/open";
  req.body = std::string(1000, 'x');
  auto refused = client->Send(req);
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->status, 503) << "the open routes' budget is full";
  req.path = "/verb";
  req.body = mib;
  auto verb = client->Send(req);
  ASSERT_TRUE(verb.ok()) << verb.status().ToString();
  EXPECT_EQ(verb->status, 200);
  EXPECT_EQ(verb->body, "1048576");
  release.set_value();
  EXPECT_NE(open.ReadUntil("1048576", 5s).find("HTTP/1.1 200 "), std::string::npos)
      << open.received();
}

TEST(SocketOptionsTest, ClientConnectionsProbeAnIdlePeer) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(internal::SetClientSocketOptions(fd));
  auto get = [fd](int level, int name) {
    int v = -1;
    socklen_t len = sizeof(v);
    EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0);
    return v;
  };
  EXPECT_EQ(get(SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPIDLE), internal::kKeepAliveIdleS);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPINTVL), internal::kKeepAliveIntervalS);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPCNT), internal::kKeepAliveProbes);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_NODELAY), 1);
  ::close(fd);
}

}  // namespace
}  // namespace accelpool::http
