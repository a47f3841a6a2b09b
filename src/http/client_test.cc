// The client's connection pool against a scripted server that writes raw
// bytes: keep-alive reuse, a server closing a kept-alive connection, the
// body framings of HTTP/1.1, malformed answers and unsafe request input.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/http.h"
#include "http/socket_io.h"

namespace accelpool::http {
namespace {

using namespace std::chrono_literals;

// What the scripted server does with one request: the bytes to write (empty:
// write nothing) and whether to close the connection afterwards.
struct Answer {
  std::string bytes;
  bool close = false;
};

// Accepts connections on 127.0.0.1 and answers each request it reads with
// script(connection index, request index on that connection, request head).
class ScriptedServer {
 public:
  using Script = std::function<Answer(int conn, int req, const std::string& head)>;

  explicit ScriptedServer(Script script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen";
      return;
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~ScriptedServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int c : open_) ::shutdown(c, SHUT_RDWR);
    }
    for (auto& t : conns_) t.join();  // no new ones: the acceptor has ended
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return accepted_.load(); }
  int requests() const { return requests_.load(); }
  // Connections this server has closed (after an answer, or at the client's end).
  int closed() const { return closed_.load(); }

 private:
  void Accept() {
    for (int n = 0;; ++n) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      ++accepted_;
      std::lock_guard<std::mutex> lock(mu_);
      open_.push_back(c);
      conns_.emplace_back([this, c, n] { Serve(c, n); });
    }
  }
  void Serve(int c, int conn) {
    std::string in;
    char buf[4096];
    for (int req = 0;; ++req) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t r = ::recv(c, buf, sizeof(buf), 0);
        if (r <= 0) return Close(c);
        in.append(buf, static_cast<size_t>(r));
      }
      std::string head = in.substr(0, end);
      size_t body = 0;
      if (auto p = head.find("Content-Length: "); p != std::string::npos) {
        body = std::stoul(head.substr(p + 16));
      }
      while (in.size() < end + 4 + body) {
        const ssize_t r = ::recv(c, buf, sizeof(buf), 0);
        if (r <= 0) return Close(c);
        in.append(buf, static_cast<size_t>(r));
      }
      in.erase(0, end + 4 + body);
      ++requests_;
      const Answer a = script_(conn, req, head);
      if (!a.bytes.empty()) (void)!::send(c, a.bytes.data(), a.bytes.size(), MSG_NOSIGNAL);
      if (a.close) return Close(c);
    }
  }
  void Close(int c) {
    std::lock_guard<std::mutex> lock(mu_);
    ::shutdown(c, SHUT_RDWR);
    ::close(c);
    std::erase(open_, c);
    ++closed_;
  }

  Script script_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0}, requests_{0}, closed_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> open_;
  std::vector<std::thread> conns_;
};

std::string Ok(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::unique_ptr<HttpClient> Client(const std::string& url) {
  ClientOptions o;
  o.base_url = url;
  o.timeout = 3s;
  auto c = NewHttpClient(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

StatusOr<ClientResponse> Get(HttpClient& c, const std::string& path, std::string method = "GET",
                             std::string body = "") {
  ClientRequest r;
  r.method = std::move(method);
  r.path = path;
  r.body = std::move(body);
  return c.Send(r);
}

TEST(HttpClientPoolTest, SequentialRequestsShareOneConnection) {
  ScriptedServer s([](int, int req, const std::string&) { return Answer{Ok(std::to_string(req))}; });
  auto c = Client(s.url());
  for (int i = 0; i < 20; ++i) {
    auto r = Get(*c, "/x", i % 2 ? "POST" : "GET", i % 2 ? "{}" : "");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, std::to_string(i));  // the i-th request on the one connection
  }
  EXPECT_EQ(s.connections(), 1);
  // Concurrent callers each get a connection; afterwards they are kept.
  std::vector<std::future<bool>> many;
  for (int i = 0; i < 6; ++i) {
    many.push_back(std::async(std::launch::async, [&c] { return Get(*c, "/y").ok(); }));
  }
  for (auto& f : many) EXPECT_TRUE(f.get());
  const int after_burst = s.connections();
  EXPECT_LE(after_burst, 7);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Get(*c, "/z").ok());
  EXPECT_EQ(s.connections(), after_burst);
}

// cpprestsdk fixes a timeout per client: requests whose timeouts differ by
// milliseconds (the extender's bind, bounded by its lease) share a client and
// its kept-alive connection instead of making one each, and the clients kept
// are bounded.
TEST(HttpClientCpprestTest, TimeoutsThatDifferByMillisecondsShareAConnection) {
  ScriptedServer s([](int, int, const std::string&) { return Answer{Ok("ok")}; });
  ClientOptions o;
  o.base_url = s.url();
  o.transport = ClientOptions::Transport::kCpprestsdk;
  auto c = NewHttpClient(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int ms = 1000; ms < 1020; ++ms) {
    ClientRequest r;
    r.path = "/x";
    r.timeout = std::chrono::milliseconds(ms);
    auto resp = (*c)->Send(r);
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_EQ(resp->body, "ok");
    // cpprestsdk hands a connection back to its pool on its own thread, after
    // the answer reached the caller: a pause lets it, on a loaded machine too.
    std::this_thread::sleep_for(20ms);
  }
  // 1 s and 2 s, and now and then one more (a hand-back still late). One
  // client per timeout made 20.
  EXPECT_LE(s.connections(), 8);
  // Ten more whole seconds: the cache keeps the eight most recent and lets
  // the others go; requests through a client made again are answered.
  auto send = [&](std::chrono::milliseconds timeout) {
    ClientRequest r;
    r.path = "/y";
    r.timeout = timeout;
    return (*c)->Send(r).ok();
  };
  for (int sec = 3; sec <= 12; ++sec) ASSERT_TRUE(send(std::chrono::seconds(sec)));
  EXPECT_TRUE(send(1000ms));
  EXPECT_TRUE(send(12s));
}

// A streamed answer (a watch) with broken framing is an error, never the end
// of the stream, and a line that never ends is refused, not kept in memory.
TEST(HttpClientStreamTest, BrokenFramingIsAnErrorNotTheEnd) {
  struct Case {
    const char* name;
    std::string answer;
    StatusCode want;
    size_t lines;  // delivered before the error
  };
  const std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const Case cases[] = {
      {"good", chunked + "4\r\nab\nc\r\n2\r\nd\n\r\n0\r\n\r\n", StatusCode::kOk, 2},
      {"size not hex", chunked + "4\r\nab\nc\r\nzz\r\n", StatusCode::kUnavailable, 1},
      {"no CRLF after data", chunked + "3\r\nab\nXY", StatusCode::kUnavailable, 0},
      {"content-length not a number", "HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\nab\n",
       StatusCode::kUnavailable, 0},
      // Closed before any answer (a server shutting down gracefully): not
      // kOutOfRange, which a watch's caller takes for an expired version.
      {"closed before an answer", "", StatusCode::kUnavailable, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScriptedServer s([&](int, int, const std::string&) { return Answer{c.answer, true}; });
    auto client = Client(s.url());
    ClientRequest r;
    r.path = "/watch";
    size_t lines = 0;
    const Status st = client->StreamLines(
        r, nullptr, [&](std::string_view) { return ++lines, true; }, std::stop_token(), 2s);
    EXPECT_EQ(st.code(), c.want) << st.ToString();
    EXPECT_EQ(lines, c.lines);
  }
  // 65 MiB without a newline, in 1 MiB chunks.
  std::string endless = chunked;
  const std::string mib(size_t{1} << 20, 'x');
  for (int i = 0; i < 65; ++i) endless += "100000\r\n" + mib + "\r\n";
  ScriptedServer s([&](int, int, const std::string&) { return Answer{endless, true}; });
  auto client = Client(s.url());
  ClientRequest r;
  r.path = "/watch";
  const Status st = client->StreamLines(
      r, nullptr, [](std::string_view) { return true; }, std::stop_token(), 5s);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
}

TEST(HttpClientPoolTest, AConnectionTheServerClosedIsReplaced) {
  // Connection 0 answers one request, then reads the next and closes without
  // an answer (a server's idle timeout racing the request): the client sends
  // an idempotent request once more on a new connection.
  ScriptedServer s([](int conn, int req, const std::string&) {
    if (conn == 0 && req == 1) return Answer{"", true};
    return Answer{Ok("c" + std::to_string(conn))};
  });
  auto c = Client(s.url());
  ASSERT_TRUE(Get(*c, "/a").ok());
  auto r = Get(*c, "/b", "PUT", "{\"once\":1}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "c1");
  EXPECT_EQ(s.connections(), 2);
  EXPECT_EQ(s.requests(), 3);

  // A connection the server closed while it sat idle is noticed before use.
  ScriptedServer closes([](int conn, int, const std::string&) {
    return Answer{Ok("c" + std::to_string(conn)), true};  // answers, then closes
  });
  auto c2 = Client(closes.url());
  ASSERT_TRUE(Get(*c2, "/a").ok());
  std::this_thread::sleep_for(50ms);
  auto r2 = Get(*c2, "/b");
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->body, "c1");
  EXPECT_EQ(closes.requests(), 2);  // nothing sent twice

  // A new connection closed without an answer is an error, not a retry.
  ScriptedServer mute([](int, int, const std::string&) { return Answer{"", true}; });
  auto c3 = Client(mute.url());
  auto r3 = Get(*c3, "/a", "POST", "{}");
  EXPECT_EQ(r3.status().code(), StatusCode::kUnavailable) << r3.status().ToString();
  EXPECT_NE(r3.status().message().find("POST /a"), std::string::npos) << r3.status().message();
  EXPECT_EQ(mute.requests(), 1);
}

// A server that reads a POST on a kept-alive connection and closes it
// without an answer may have acted on it (an apiserver that ended after
// committing a binding): the POST is not sent again, and the caller gets the
// error.
TEST(HttpClientPoolTest, APostTheServerReadAndClosedOnIsNotSentAgain) {
  std::atomic<int> posts{0};
  ScriptedServer s([&posts](int conn, int req, const std::string& head) {
    if (head.rfind("POST ", 0) == 0) ++posts;
    if (conn == 0 && req == 1) return Answer{"", true};
    return Answer{Ok("c" + std::to_string(conn))};
  });
  auto c = Client(s.url());
  ASSERT_TRUE(Get(*c, "/a").ok());
  auto r = Get(*c, "/bind", "POST", "{}");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("POST /bind"), std::string::npos) << r.status().message();
  EXPECT_EQ(posts.load(), 1);
  EXPECT_EQ(s.connections(), 1);
  // The next request takes a new connection.
  auto next = Get(*c, "/a");
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->body, "c1");
}

// A kept-alive connection the server closed while it sat idle (an
// apiserver's idle timeout) is noticed before use: a POST goes on a new
// connection, once, and succeeds.
TEST(HttpClientPoolTest, APostAfterTheServerClosedAnIdleConnectionGoesOnANewOne) {
  std::atomic<int> posts{0};
  ScriptedServer s([&posts](int conn, int, const std::string& head) {
    if (head.rfind("POST ", 0) == 0) ++posts;
    return Answer{Ok("c" + std::to_string(conn)), conn == 0};  // connection 0 closes after it
  });
  auto c = Client(s.url());
  auto first = Get(*c, "/a");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The server closes connection 0 after sending its answer, which the
  // client may read first: wait until it has.
  const auto answered = std::chrono::steady_clock::now();
  while (s.closed() < 1 && std::chrono::steady_clock::now() - answered < 5s) {
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_EQ(s.closed(), 1);
  auto r = Get(*c, "/bind", "POST", "{}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "c1");
  EXPECT_EQ(posts.load(), 1);
  EXPECT_EQ(s.connections(), 2);
}

TEST(HttpClientPoolTest, BodyFramings) {
  ScriptedServer s([](int, int, const std::string& head) {
    const std::string path = head.substr(head.find(' ') + 1, head.find(" HTTP") - head.find(' ') - 1);
    if (path == "/chunked") {
      return Answer{
          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"};
    }
    if (path == "/until-close") {
      return Answer{"HTTP/1.1 200 OK\r\n\r\nall of it", true};
    }
    if (path == "/no-content") return Answer{"HTTP/1.1 204 No Content\r\n\r\n"};
    if (path == "/continue") {
      return Answer{"HTTP/1.1 100 Continue\r\n\r\n" + Ok("after 100")};
    }
    if (path == "/close-header") {
      return Answer{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true};
    }
    return Answer{Ok(path)};
  });
  auto c = Client(s.url());
  auto chunked = Get(*c, "/chunked");
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  EXPECT_EQ(chunked->body, "hello, world");
  auto cont = Get(*c, "/continue");
  ASSERT_TRUE(cont.ok()) << cont.status().ToString();
  EXPECT_EQ(cont->status, 200);
  EXPECT_EQ(cont->body, "after 100");
  auto none = Get(*c, "/no-content", "DELETE");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->status, 204);
  EXPECT_EQ(none->body, "");
  EXPECT_EQ(s.connections(), 1);  // all three kept the connection
  auto until_close = Get(*c, "/until-close");
  ASSERT_TRUE(until_close.ok()) << until_close.status().ToString();
  EXPECT_EQ(until_close->body, "all of it");
  auto closing = Get(*c, "/close-header");
  ASSERT_TRUE(closing.ok()) << closing.status().ToString();
  EXPECT_EQ(closing->body, "ok");
  ASSERT_TRUE(Get(*c, "/next").ok());
  EXPECT_EQ(s.connections(), 3);  // neither closing answer left its connection behind
}

TEST(HttpClientPoolTest, MalformedAnswersAreErrorsWithTheReason) {
  struct Case {
    std::string bytes, want;
  };
  const std::vector<Case> cases = {
      {"SMTP ready\r\n\r\n", "malformed answer"},
      {"HTTP/1.1 9999 Odd\r\n\r\n", "malformed status"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", "malformed content-length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "larger than 1 GiB"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "connection closed"},
  };
  for (const Case& tc : cases) {
    ScriptedServer s([&tc](int, int, const std::string&) { return Answer{tc.bytes, true}; });
    auto c = Client(s.url());
    auto r = Get(*c, "/x");
    ASSERT_FALSE(r.ok()) << tc.want;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
    EXPECT_NE(r.status().message().find(tc.want), std::string::npos) << r.status().message();
  }
}

TEST(HttpClientPoolTest, UnsafePathsAndHeadersAreRefusedBeforeSending) {
  ScriptedServer s([](int, int, const std::string&) { return Answer{Ok("")}; });
  auto c = Client(s.url());
  for (const std::string& path : std::vector<std::string>{
           "", "x", "/a b", "/a\r\nX-Injected: 1", std::string("/a\0b", 4)}) {
    auto r = Get(*c, path);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << path;
  }
  ClientRequest req;
  req.path = "/ok";
  req.headers["X-Bad"] = "v\r\nX-Injected: 1";
  EXPECT_EQ(c->Send(req).status().code(), StatusCode::kInvalidArgument);
  req.headers.clear();
  req.headers["Bad Name"] = "v";
  EXPECT_EQ(c->Send(req).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.requests(), 0);
}

TEST(HttpClientPoolTest, SlowAnswerIsDeadlineExceededAndTheConnectionDropped) {
  ScriptedServer s([](int conn, int, const std::string&) {
    if (conn == 0) std::this_thread::sleep_for(400ms);
    return Answer{Ok("c" + std::to_string(conn))};
  });
  auto c = Client(s.url());
  ClientRequest req;
  req.path = "/slow";
  req.timeout = 100ms;
  auto r = c->Send(req);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("100 ms"), std::string::npos) << r.status().message();
  // The late answer of the timed-out request must not be read as the next one's.
  auto next = Get(*c, "/next");
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->body, "c1");
}

TEST(HttpClientPoolTest, TransportNames) {
  EXPECT_EQ(*ParseTransport("sockets"), ClientOptions::Transport::kSockets);
  EXPECT_EQ(*ParseTransport("cpprestsdk"), ClientOptions::Transport::kCpprestsdk);
  auto bad = ParseTransport("curl");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("sockets or cpprestsdk"), std::string::npos);
}

// A system resolver that hangs until released, and one that counts calls.
std::atomic<bool> g_release_lookups{false};
std::atomic<int> g_lookups{0};

int HangingLookup(const char*, const char* port, const addrinfo* hints, addrinfo** res) {
  g_lookups.fetch_add(1);
  while (!g_release_lookups.load()) std::this_thread::sleep_for(5ms);
  return ::getaddrinfo("127.0.0.1", port, hints, res);
}

int LoopbackLookup(const char*, const char* port, const addrinfo* hints, addrinfo** res) {
  g_lookups.fetch_add(1);
  return ::getaddrinfo("127.0.0.1", port, hints, res);
}

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_release_lookups = false;
    g_lookups = 0;
  }
  void TearDown() override {
    g_release_lookups = true;
    for (int i = 0; i < 2000 && internal::AbandonedLookups() > 0; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(internal::AbandonedLookups(), 0) << "a lookup given up on never finished";
    internal::SetLookupForTest(nullptr);
  }
};

TEST_F(ResolveTest, AHangingLookupEndsAtTheDeadline) {
  internal::SetLookupForTest(HangingLookup);
  const auto start = std::chrono::steady_clock::now();
  auto r = internal::Resolve("dns.example", "443", start + 100ms);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("resolv.conf"), std::string::npos) << r.status().message();
  EXPECT_LT(took, 10s);  // the lookup itself never ends
  EXPECT_EQ(internal::AbandonedLookups(), 1);
}

TEST_F(ResolveTest, AStopEndsTheWait) {
  internal::SetLookupForTest(HangingLookup);
  std::stop_source stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    stop.request_stop();
  });
  auto r = internal::Resolve("dns.example", "443", std::chrono::steady_clock::now() + 30s,
                             stop.get_token());
  stopper.join();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
}

TEST_F(ResolveTest, LookupsGivenUpOnAreBoundedThenRefused) {
  internal::SetLookupForTest(HangingLookup);
  for (int i = 0; i < internal::kMaxAbandonedLookups; ++i) {
    auto r = internal::Resolve("dns.example", "443", std::chrono::steady_clock::now() + 5ms);
    ASSERT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << i;
  }
  auto refused = internal::Resolve("dns.example", "443", std::chrono::steady_clock::now() + 5s);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("still waiting"), std::string::npos);
  // A lookup given up on after 5 ms may not have begun yet (a loaded
  // machine, a sanitizer): wait for all of them before counting.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (g_lookups.load() < internal::kMaxAbandonedLookups &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);  // one more would have begun by now
  EXPECT_EQ(g_lookups.load(), internal::kMaxAbandonedLookups) << "the refused one started a lookup";
}

TEST_F(ResolveTest, AddressLiteralsNeedNoLookupAndNamesGetTheirAnswer) {
  internal::SetLookupForTest(LoopbackLookup);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (const char* literal : {"127.0.0.1", "::1"}) {
    auto r = internal::Resolve(literal, "80", deadline);
    ASSERT_TRUE(r.ok()) << literal << ": " << r.status().ToString();
    EXPECT_NE(r->get(), nullptr);
  }
  EXPECT_EQ(g_lookups.load(), 0);
  auto named = internal::Resolve("apiserver.example", "6443", deadline);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  ASSERT_NE(named->get(), nullptr);
  EXPECT_EQ(named->get()->ai_family, AF_INET);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(named->get()->ai_addr)->sin_port), 6443);
  EXPECT_EQ(g_lookups.load(), 1);
}

TEST_F(ResolveTest, AClientRequestToAHostWhoseLookupHangsEndsAtItsTimeout) {
  internal::SetLookupForTest(HangingLookup);
  std::unique_ptr<HttpClient> c = Client("http://dns.example:8080");
  ASSERT_NE(c, nullptr);
  ClientRequest req;
  req.method = "GET";
  req.path = "/";
  req.timeout = 150ms;
  const auto start = std::chrono::steady_clock::now();
  auto r = c->Send(req);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << r.status().ToString();
}

}  // namespace
}  // namespace accelpool::http
