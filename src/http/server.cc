// HttpServer on plain sockets + OpenSSL, one thread per connection.
//
// cpprestsdk's http_listener cannot report the port it bound for port 0,
// cannot require and verify client certificates through its public
// configuration, and has no incremental (chunked) response writer for watch
// streams, so the server side is implemented here directly.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/metrics.h"
#include "http/http.h"
#include "http/socket_io.h"

namespace accelpool::http {

namespace {

using internal::Reader;
using internal::SslCtxPtr;
using internal::Stream;
using Ms = std::chrono::milliseconds;

struct Route {
  std::string method;
  std::string path;
  bool prefix = false;
  Handler handler;
  RouteOptions options;
};

// A file's version: inode, size, modification and change time. The change
// time catches a copy that kept the old mtime (cp -p, tar, rsync -t); the
// inode catches a rename over the file and a Secret volume's symlink swap.
std::string FileStamp(const std::string& path) {
  struct stat st {};
  if (path.empty()) return "";
  if (::stat(path.c_str(), &st) != 0) return "missing";
  auto ns = [](const timespec& t) {
    return std::to_string(static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec);
  };
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" + ns(st.st_mtim) + ":" +
         ns(st.st_ctim);
}

// The versions of every file a server context is built from.
std::string TlsFilesStamp(const TlsOptions& t) {
  return FileStamp(t.cert_file) + "|" + FileStamp(t.key_file) + "|" + FileStamp(t.client_ca_file);
}

void ParseQuery(std::string_view q, std::map<std::string, std::string>& out) {
  while (!q.empty()) {
    const size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    std::string key = UrlDecode(part.substr(0, eq), true);
    std::string value = eq == std::string_view::npos ? "" : UrlDecode(part.substr(eq + 1), true);
    out[std::move(key)] = std::move(value);
  }
}

// A method is an RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~.
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// The method as a metric label: the standard methods by name, every other one
// "other", so that clients cannot add series by inventing methods.
std::string MethodLabel(std::string_view method) {
  for (std::string_view known : {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}) {
    if (method == known) return std::string(known);
  }
  return "other";
}

// Whether a comma-separated header value (Connection, Expect) lists `token`;
// tokens compare without regard to case.
bool HasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.size() == token.size() &&
        std::equal(item.begin(), item.end(), token.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return true;
    }
  }
  return false;
}

std::string SerializeHead(int status, const Headers& headers) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(internal::ReasonPhrase(status)) + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  return out;
}

class ServerImpl final : public HttpServer {
 public:
  explicit ServerImpl(ServerOptions o) : opts_(std::move(o)) {}
  ~ServerImpl() override { Stop(); }

  using HttpServer::Handle;
  void Handle(std::string method, std::string path, Handler handler,
              RouteOptions options) override {
    routes_.push_back(
        {std::move(method), std::move(path), false, std::move(handler), std::move(options)});
  }
  void HandlePrefix(std::string method, std::string prefix, Handler handler) override {
    routes_.push_back({std::move(method), std::move(prefix), true, std::move(handler), {}});
  }

  Status Start() override;
  uint16_t port() const override { return port_.load(); }
  void Stop() override;

 private:
  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
    std::mutex mu;
    Stream* stream = nullptr;  // guarded by mu; set while serving
    // Guarded by mu: a request's first byte came and its answer is not yet
    // sent (Stop() lets it finish). False while a response streams.
    bool busy = false;
    // Guarded by mu: since when the connection waits for a request (set
    // when it starts and after each answer).
    std::chrono::steady_clock::time_point idle_since{};
    bool streaming = false;  // guarded by mu: a streamed response is being sent
    // Guarded by mu: closed to make room at the cap (the accept loop never
    // picks it again), and whether it has answered a request yet.
    bool evicting = false;
    bool served = false;
  };

  void AcceptLoop();
  // Whether `c` (its mu held) waits between requests and may be closed to
  // make room at the cap.
  static bool Evictable(const Conn& c) {
    return c.stream != nullptr && !c.busy && !c.streaming && !c.evicting;
  }
  // A connection thread: serves `fd`, then waits up to kWorkerIdle for the
  // next accepted connection instead of exiting, so a client that opens
  // connections at a high rate does not cost a thread start and exit each.
  void Work(int fd, std::string peer, Conn* conn);
  void Serve(int fd, std::string peer, Conn* conn);
  // The route of `req`: the last exact route registered for its method and
  // path, else the longest prefix; null when none (*missing then 404, or 405
  // for a known path with another method).
  const Route* FindRoute(const Request& req, int* missing) const;
  // The route's handler, and its admit check, with every exception turned
  // into an error response.
  static Response Call(const Route& route, const Request& req);
  static std::optional<Response> Admit(const Route& route, const Request& head);
  // Takes `n` bytes of the in-flight body budget; false when they would pass
  // it while another body is in flight (one body alone always fits).
  bool ReserveBody(std::atomic<size_t>& pool, size_t n);
  // The in-flight count a route's bodies are held to.
  std::atomic<size_t>& BodyPool(const Route& route) {
    return route.options.admit ? body_in_flight_ : open_body_in_flight_;
  }
  // Reads and drops what is left of a refused request's body (at most
  // kDrainBytes, within kDrainTime) so that closing the connection does not
  // reset it before the client has read the answer.
  static void Drain(Reader& reader, uint64_t left);
  void Record(const Request& req, const std::string& route, int status,
              std::chrono::steady_clock::time_point start);
  SslCtxPtr CurrentTls();
  void Reap(bool all);

  const ServerOptions opts_;
  std::vector<Route> routes_;  // fixed after Start
  int listen_fd_ = -1;
  std::atomic<uint16_t> port_{0};
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;

  std::mutex tls_mu_;
  SslCtxPtr tls_;                                     // guarded by tls_mu_
  std::string tls_stamp_;                             // guarded by tls_mu_; TlsFilesStamp
  std::string failed_stamp_;  // guarded by tls_mu_; the stamp of files that did not load
  std::chrono::steady_clock::time_point last_check_;  // guarded by tls_mu_

  std::mutex conns_mu_;
  std::list<std::unique_ptr<Conn>> conns_;  // guarded by conns_mu_ (acceptor thread adds)

  static constexpr std::chrono::seconds kWorkerIdle{10};
  // The acceptor's pause after it could not take a connection (out of
  // descriptors, memory or threads): the connection stays queued, or the
  // next one comes at once, and retrying without a pause spins a core.
  static constexpr Ms kAcceptBackoff{100};
  // How long a connection that has answered nothing yet is kept from being
  // closed to make room at the cap: its first request may be on the way, or
  // arrived and not yet read.
  static constexpr Ms kFirstRequestGrace{1000};
  // The slowest a request body may come (64 kB/s) beyond header_timeout.
  static constexpr uint64_t kMinBodyBytesPerMs = 64;
  static constexpr uint64_t kDrainBytes = 1 << 20;
  static constexpr Ms kDrainTime{1000};
  size_t body_budget_ = 0;                 // set in Start
  // Bytes of the bodies read or handled now: of routes with an admit check,
  // and of the others, each held to the budget on its own, so that requests
  // nobody vouched for (a webhook's, anyone's) cannot take it from those the
  // check let through (kube-scheduler's).
  std::atomic<size_t> body_in_flight_{0};
  std::atomic<size_t> open_body_in_flight_{0};
  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  std::deque<std::pair<int, std::string>> pending_;  // guarded by pending_mu_: accepted, not taken
  int idle_workers_ = 0;                             // guarded by pending_mu_

  CounterFamily* requests_ = nullptr;     // set in Start when metrics are on
  HistogramFamily* durations_ = nullptr;  // set in Start when metrics are on
  CounterFamily* connections_ = nullptr;  // set in Start when metrics are on
  CounterFamily* evicted_ = nullptr;      // set in Start when metrics are on
};

void ServerImpl::Record(const Request& req, const std::string& route, int status,
                        std::chrono::steady_clock::time_point start) {
  if (requests_ == nullptr) return;
  const std::string method = MethodLabel(req.method);
  requests_->WithLabels({method, route, std::to_string(status)}).Inc();
  durations_->WithLabels({method, route})
      .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

Status ServerImpl::Start() {
  if (opts_.metrics != nullptr) {
    auto c = opts_.metrics->AddCounter(opts_.metrics_prefix + "_requests_total",
                                       "HTTP requests served, by method, route and status code.",
                                       {"method", "route", "code"});
    if (!c.ok()) return c.status();
    auto h = opts_.metrics->AddHistogram(opts_.metrics_prefix + "_request_duration_seconds",
                                         "Time to produce an HTTP response, in seconds.",
                                         {"method", "route"});
    if (!h.ok()) return h.status();
    auto conns = opts_.metrics->AddCounter(
        opts_.metrics_prefix + "_connections_total",
        "Connections accepted; a count close to the request count means clients do not keep "
        "connections alive (a TLS handshake per request).");
    if (!conns.ok()) return conns.status();
    auto evicted = opts_.metrics->AddCounter(
        opts_.metrics_prefix + "_connections_evicted_total",
        "Idle kept-alive connections closed to make room for a new one at the connection cap.");
    if (!evicted.ok()) return evicted.status();
    requests_ = *c;
    durations_ = *h;
    connections_ = *conns;
    evicted_ = *evicted;
  }
  body_budget_ = std::max(opts_.max_body_bytes_in_flight != 0 ? opts_.max_body_bytes_in_flight
                                                              : 2 * opts_.max_body_bytes,
                          opts_.max_body_bytes);
  if (opts_.tls) {
    auto ctx = internal::ServerContext(*opts_.tls);
    if (!ctx.ok()) return ctx.status();
    tls_ = *ctx;
    tls_stamp_ = TlsFilesStamp(*opts_.tls);
    last_check_ = std::chrono::steady_clock::now();
  }
  const std::string port_s = std::to_string(opts_.port);
  // An empty host is every address of the node: IPv6 and IPv4 on one socket
  // (IPv6-only and dual-stack clusters probe and call pods on their IPv6
  // address), else IPv4 alone where the kernel has no IPv6.
  const bool any = opts_.host.empty();
  std::string err = "no usable address";
  for (const std::string& name :
       any ? std::vector<std::string>{"::", "0.0.0.0"} : std::vector<std::string>{opts_.host}) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(name.c_str(), port_s.c_str(), &hints, &res); rc != 0) {
      if (any) continue;
      return InvalidArgumentError("cannot resolve listen address \"" + opts_.host +
                                  "\": " + gai_strerror(rc) + "; use an IP address or host name");
    }
    for (addrinfo* ai = res; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        err = std::strerror(errno);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (any && ai->ai_family == AF_INET6) {
        int zero = 0;  // IPv4 too, whatever net.ipv6.bindv6only says
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      }
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
        listen_fd_ = fd;
        break;
      }
      err = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (listen_fd_ >= 0) break;
  }
  if (listen_fd_ < 0) {
    return UnavailableError("cannot listen on " + (any ? std::string("*") : opts_.host) + ":" +
                            port_s + ": " + err + "; pick a free port or stop the other listener");
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void ServerImpl::Stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  // Idle connections end now; those answering a request send the answer
  // (with Connection: close) first, within stop_grace.
  const auto deadline = std::chrono::steady_clock::now() + opts_.stop_grace;
  for (;;) {
    const bool past = std::chrono::steady_clock::now() >= deadline;
    bool answering = false;
    {
      std::lock_guard<std::mutex> lock(conns_mu_);
      for (auto& c : conns_) {
        std::lock_guard<std::mutex> cl(c->mu);
        if (c->stream == nullptr) continue;
        if (c->busy && !past) {
          answering = true;
        } else {
          c->stream->Shutdown();
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      pending_cv_.notify_all();  // idle connection threads end (stopping_ is set)
    }
    if (!answering) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Reap(true);
  // Accepted but never taken (the threads ended first): close them.
  for (auto& [fd, peer] : pending_) ::close(fd);
  pending_.clear();
}

void ServerImpl::Reap(bool all) {
  std::list<std::unique_ptr<Conn>> finished;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all || (*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    if (c->thread.joinable()) c->thread.join();
  }
}

SslCtxPtr ServerImpl::CurrentTls() {
  std::lock_guard<std::mutex> lock(tls_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_check_ >= opts_.tls->reload_check) {
    last_check_ = now;
    std::string stamp = TlsFilesStamp(*opts_.tls);
    if (stamp != tls_stamp_) {
      auto fresh = internal::ServerContext(*opts_.tls);
      if (fresh.ok()) {  // a half-written pair keeps the old context until it loads
        tls_ = *fresh;
        tls_stamp_ = std::move(stamp);
        if (!failed_stamp_.empty()) opts_.log.Info("TLS certificate reloaded");
        failed_stamp_.clear();
      } else if (stamp != failed_stamp_) {
        // Said once per new state of the files: a rotation that left a bad
        // pair is seen before the old certificate expires.
        opts_.log.Warn(
            "the changed TLS certificate or key does not load; the old one is served "
            "until they do",
            {{"cert", opts_.tls->cert_file},
             {"key", opts_.tls->key_file},
             {"error", fresh.status().message()}});
        failed_stamp_ = std::move(stamp);
      }
    }
  }
  return tls_;
}

void ServerImpl::AcceptLoop() {
  bool accept_failing = false;  // logged once per run of failures
  bool thread_failing = false;
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    Reap(false);
    if (r <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        if (!accept_failing) {
          opts_.log.Warn("cannot accept connections; retrying every 100 ms",
                         {{"error", std::strerror(err)}, {"port", static_cast<int>(port_.load())}});
        }
        accept_failing = true;
        std::this_thread::sleep_for(kAcceptBackoff);
      }
      continue;
    }
    if (accept_failing) opts_.log.Info("accepting connections again");
    accept_failing = false;
    // Answers are whole messages written at once: send them now. Without this
    // a write that follows another unacknowledged one (a TLS 1.3 session
    // ticket, a second TLS record) waits for the peer's delayed ACK, up to
    // 40 ms per request on Linux.
    int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connections_ != nullptr) connections_->WithLabels({}).Inc();
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    std::string peer = std::string(host) + ":" + serv;
    {
      // A waiting connection thread takes it when one is free.
      std::lock_guard<std::mutex> lock(pending_mu_);
      if (idle_workers_ > static_cast<int>(pending_.size())) {
        pending_.emplace_back(fd, std::move(peer));
        pending_cv_.notify_one();
        continue;
      }
    }
    const std::string busy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n";
    std::string thread_error;
    {
      std::lock_guard<std::mutex> lock(conns_mu_);
      if (static_cast<int>(conns_.size()) >= opts_.max_connections) {
        // Full: the connection idle longest between requests makes room, and
        // its thread takes this one. Kept-alive connections that send nothing
        // (a client opening many, or one a minute to stay under the idle
        // timeout) cannot lock kube-scheduler or the apiserver out.
        // One that has answered a request goes first; one that has not only
        // after kFirstRequestGrace, as its request may be on the way or
        // unread. Picked and closed under its lock, and marked, so that it is
        // never picked twice for two new connections (only one thread is
        // freed).
        bool evicted = false;
        for (size_t tries = 0; !evicted && tries <= conns_.size(); ++tries) {
          Conn* oldest = nullptr;
          bool oldest_served = false;
          auto since = std::chrono::steady_clock::time_point::max();
          const auto young = std::chrono::steady_clock::now() - kFirstRequestGrace;
          for (auto& c : conns_) {
            std::lock_guard<std::mutex> cl(c->mu);
            if (!Evictable(*c) || (!c->served && c->idle_since > young)) continue;
            if (oldest == nullptr || (c->served && !oldest_served) ||
                (c->served == oldest_served && c->idle_since < since)) {
              since = c->idle_since;
              oldest_served = c->served;
              oldest = c.get();
            }
          }
          if (oldest == nullptr) break;
          std::lock_guard<std::mutex> cl(oldest->mu);
          if (!Evictable(*oldest)) continue;  // a request came meanwhile
          oldest->evicting = true;
          oldest->stream->Shutdown();
          evicted = true;
        }
        if (evicted) {
          if (evicted_ != nullptr) evicted_->WithLabels({}).Inc();
          std::lock_guard<std::mutex> pl(pending_mu_);
          pending_.emplace_back(fd, std::move(peer));
          pending_cv_.notify_one();
          continue;
        }
        if (!opts_.tls) (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
        ::close(fd);
        continue;
      }
      auto conn = std::make_unique<Conn>();
      Conn* raw = conn.get();
      conns_.push_back(std::move(conn));
      std::function<void()> body = [this, fd, peer = std::move(peer), raw]() mutable {
        Work(fd, std::move(peer), raw);
        raw->done = true;
      };
      try {
        raw->thread =
            opts_.start_thread ? opts_.start_thread(std::move(body)) : std::thread(std::move(body));
        if (thread_failing) opts_.log.Info("connection threads start again");
        thread_failing = false;
        continue;
      } catch (const std::exception& e) {
        conns_.pop_back();  // the one just added: only this thread adds
        thread_error = e.what();
      }
    }
    // No thread for it (the process's or the pod's limit): turn it away and
    // pause, as threads may be freed soon.
    if (!opts_.tls) (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
    ::close(fd);
    if (!thread_failing) {
      opts_.log.Warn("cannot start a connection thread; turning connections away",
                     {{"error", thread_error}, {"port", static_cast<int>(port_.load())}});
    }
    thread_failing = true;
    std::this_thread::sleep_for(kAcceptBackoff);
  }
}

const Route* ServerImpl::FindRoute(const Request& req, int* missing) const {
  const Route* exact = nullptr;
  const Route* best_prefix = nullptr;
  bool path_known = false;
  for (const Route& r : routes_) {
    const bool match = r.prefix ? req.path.rfind(r.path, 0) == 0 : req.path == r.path;
    if (!match) continue;
    path_known = true;
    if (r.method != req.method) continue;
    if (!r.prefix) {
      exact = &r;
    } else if (best_prefix == nullptr || r.path.size() > best_prefix->path.size()) {
      best_prefix = &r;
    }
  }
  const Route* route = exact != nullptr ? exact : best_prefix;
  if (route == nullptr) *missing = path_known ? 405 : 404;
  return route;
}

std::optional<Response> ServerImpl::Admit(const Route& route, const Request& head) {
  if (!route.options.admit) return std::nullopt;
  try {
    return route.options.admit(head);
  } catch (const std::exception& e) {
    return Response::Error(500, std::string("internal error: ") + e.what());
  } catch (...) {
    return Response::Error(500, "internal error");
  }
}

bool ServerImpl::ReserveBody(std::atomic<size_t>& pool, size_t n) {
  if (n == 0) return true;
  size_t now = pool.load();
  do {
    if (now != 0 && now + n > body_budget_) return false;
  } while (!pool.compare_exchange_weak(now, now + n));
  return true;
}

void ServerImpl::Drain(Reader& reader, uint64_t left) {
  const auto deadline = std::chrono::steady_clock::now() + kDrainTime;
  left = std::min(left, kDrainBytes);
  while (left > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return;
    auto chunk = reader.ReadSome(std::chrono::duration_cast<Ms>(deadline - now));
    if (!chunk.ok() || chunk->empty()) return;
    left -= std::min<uint64_t>(left, chunk->size());
  }
}

Response ServerImpl::Call(const Route& route, const Request& req) {
  try {
    return route.handler(req);
  } catch (const nlohmann::json::exception& e) {
    return Response::Error(400, std::string("bad JSON in request: ") + e.what());
  } catch (const std::exception& e) {
    return Response::Error(500, std::string("internal error: ") + e.what());
  } catch (...) {
    return Response::Error(500, "internal error");
  }
}

void ServerImpl::Work(int fd, std::string peer, Conn* conn) {
  for (;;) {
    Serve(fd, std::move(peer), conn);
    std::unique_lock<std::mutex> lock(pending_mu_);
    ++idle_workers_;
    pending_cv_.wait_for(lock, kWorkerIdle,
                         [this] { return !pending_.empty() || stopping_.load(); });
    --idle_workers_;
    if (pending_.empty()) return;  // idle too long, or stopping
    fd = pending_.front().first;
    peer = std::move(pending_.front().second);
    pending_.pop_front();
  }
}

void ServerImpl::Serve(int fd, std::string peer, Conn* conn) {
  // OpenSSL writes with write(), which raises SIGPIPE when the client has
  // gone (e.g. before its session ticket is sent). Blocked on this connection
  // thread, that is an EPIPE error here, whatever the process does with the
  // signal, instead of ending a process that did not ignore it.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  std::unique_ptr<Stream> stream =
      opts_.tls ? internal::ServerTls(fd, CurrentTls()) : internal::PlainStream(fd);
  if (!stream) return;
  // Registered before the handshake, so that Stop() can end a client that
  // never finishes it; unregistered (guard destroyed first) before the
  // stream closes the descriptor.
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    conn->stream = stream.get();
    conn->busy = false;
    conn->streaming = false;
    conn->evicting = false;
    conn->served = false;
    conn->idle_since = std::chrono::steady_clock::now();
  }
  struct Unregister {
    Conn* conn;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(conn->mu);
      conn->stream = nullptr;
    }
  } unregister{conn};
  if (stopping_.load()) stream->Shutdown();
  // Fails for a client that sends no or an untrusted certificate, or that
  // does not finish within the handshake timeout.
  if (!stream->Handshake(opts_.handshake_timeout)) return;
  Reader reader(*stream);
  const std::string cert_subject = stream->PeerCertSubject();
  for (;;) {
    // Idle up to idle_timeout between requests; from a request's first byte,
    // its head within header_timeout.
    if (!reader.Await(opts_.idle_timeout).ok()) break;
    // Busy from the request's first byte until its answer is sent.
    struct Busy {
      Conn* conn;
      explicit Busy(Conn* c) : conn(c) { Set(true); }
      ~Busy() { Set(false); }
      void Set(bool v) {
        std::lock_guard<std::mutex> lock(conn->mu);
        conn->busy = v;
        if (!v) {
          conn->idle_since = std::chrono::steady_clock::now();
          conn->served = true;
        }
      }
    } busy{conn};
    auto head = reader.ReadHead(opts_.max_header_bytes, opts_.header_timeout);
    if (!head.ok()) {
      if (head.status().code() == StatusCode::kResourceExhausted) {
        stream->Write(SerializeHead(431, {{"content-length", "0"}, {"connection", "close"}}),
                      opts_.send_timeout);
      }
      break;
    }
    Request req;
    req.peer = peer;
    req.client_cert_subject = cert_subject;
    std::string malformed;
    const std::string first = internal::ParseHeaders(*head, req.headers, &malformed);
    const size_t sp1 = first.find(' ');
    const size_t sp2 = first.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
    const std::string_view line_version =
        sp2 == std::string::npos ? std::string_view() : std::string_view(first).substr(sp2 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos ||
        !IsToken(std::string_view(first).substr(0, sp1))) {
      malformed = "malformed request line";
    } else if (line_version != "HTTP/1.1" && line_version != "HTTP/1.0") {
      malformed = "unsupported HTTP version \"" + std::string(line_version.substr(0, 20)) +
                  "\" (HTTP/1.1 or HTTP/1.0 only)";
    } else if (!malformed.empty()) {
      malformed = "malformed request header: " + malformed;
    }
    if (!malformed.empty()) {
      // Refused, and the connection ends: what follows cannot be trusted to
      // start where this request ends.
      Response bad = Response::Error(400, malformed);
      bad.headers["connection"] = "close";
      bad.headers["content-length"] = std::to_string(bad.body.size());
      stream->Write(SerializeHead(400, bad.headers) + bad.body, opts_.send_timeout);
      break;
    }
    req.method = first.substr(0, sp1);
    const std::string target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string version = first.substr(sp2 + 1);
    const size_t q = target.find('?');
    req.path = UrlDecode(target.substr(0, q), false);
    if (q != std::string::npos) ParseQuery(std::string_view(target).substr(q + 1), req.query);
    bool keep_alive = version == "HTTP/1.1" && !HasToken(req.Header("connection"), "close");

    const auto started = std::chrono::steady_clock::now();
    std::string route_name = "unmatched";
    const Route* route = nullptr;
    Response resp;
    bool have_resp = false;
    uint64_t unread = 0;  // body bytes of a request answered without reading them
    // The body's share of the in-flight budget, given back once the handler
    // has answered (or when the body could not be read).
    struct BodyReservation {
      std::atomic<size_t>* in_flight = nullptr;
      size_t bytes = 0;
      ~BodyReservation() {
        if (bytes != 0) in_flight->fetch_sub(bytes);
      }
    } reservation{&body_in_flight_, 0};
    if (req.headers.count("transfer-encoding") != 0) {
      resp = Response::Error(411, "chunked request bodies are not accepted; send Content-Length");
      keep_alive = false;
      have_resp = true;
    } else {
      uint64_t length = 0;
      const std::string cl = req.Header("content-length", "0");
      bool bad_length = cl.empty() || cl.size() > 18;
      for (char c : cl) bad_length |= c < '0' || c > '9';
      if (!bad_length) length = std::stoull(cl);
      int missing = 404;
      if (!bad_length) route = FindRoute(req, &missing);
      if (route != nullptr) route_name = route->path;
      const size_t limit = route != nullptr && route->options.max_body_bytes != 0
                               ? std::min(route->options.max_body_bytes, opts_.max_body_bytes)
                               : opts_.max_body_bytes;
      std::optional<Response> refused;
      if (bad_length) {
        resp = Response::Error(400, "invalid Content-Length");
        keep_alive = false;
        have_resp = true;
      } else if (route == nullptr) {
        resp = missing == 405
                   ? Response::Error(405, "method " + req.method + " is not allowed on " + req.path)
                   : Response::Error(404, "no handler for " + req.path);
        have_resp = true;
        unread = length;
      } else if (refused = Admit(*route, req); refused.has_value()) {
        resp = std::move(*refused);
        have_resp = true;
        unread = length;
      } else if (length > limit) {
        resp = Response::Error(413, "request body of " + cl + " bytes exceeds the limit of " +
                                        std::to_string(limit) + " on " + route->path);
        have_resp = true;
        unread = length;
      } else if (!ReserveBody(BodyPool(*route), length)) {
        resp = Response::Error(503, "too many request bodies being read at once (" +
                                        std::to_string(body_budget_) +
                                        " bytes in all); retry shortly");
        resp.headers["retry-after"] = "1";
        have_resp = true;
        unread = length;
      } else {
        reservation.in_flight = &BodyPool(*route);
        reservation.bytes = length;
        if (HasToken(req.Header("expect"), "100-continue")) {
          stream->Write("HTTP/1.1 100 Continue\r\n\r\n", opts_.send_timeout);
        }
        const Ms body_timeout =
            opts_.header_timeout + Ms(static_cast<int64_t>(length / kMinBodyBytesPerMs));
        if (!reader.ReadExact(length, req.body, body_timeout).ok()) break;
      }
    }
    // A body left unread cannot be told from the next request: the connection
    // ends after the answer.
    if (unread != 0) keep_alive = false;
    if (!have_resp) resp = Call(*route, req);
    // The body is done with: its memory and its share of the budget go back
    // before the answer is sent (a slow reader of the answer holds neither).
    std::string().swap(req.body);
    if (reservation.bytes != 0) {
      reservation.in_flight->fetch_sub(reservation.bytes);
      reservation.bytes = 0;
    }
    Record(req, route_name, resp.status, started);
    if (resp.stream) {
      busy.Set(false);  // a stream has no end to wait for: Stop() ends it
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        conn->streaming = true;  // but it is no idle connection to evict
      }
      if (stopping_.load()) break;
      resp.headers["transfer-encoding"] = "chunked";
      resp.headers["connection"] = "close";
      if (!stream->Write(SerializeHead(resp.status, resp.headers), opts_.send_timeout)) break;
      Stream* s = stream.get();
      const ChunkWriter write = [s, timeout = opts_.send_timeout](std::string_view chunk) {
        if (chunk.empty()) return true;
        char size[32];
        std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
        std::string frame = size;
        frame.append(chunk);
        frame += "\r\n";
        return s->Write(frame, timeout);
      };
      try {
        resp.stream(write);
      } catch (...) {
        // A failing stream ends the response; the client sees it end early.
      }
      stream->Write("0\r\n\r\n", opts_.send_timeout);
      break;
    }
    resp.headers["content-length"] = std::to_string(resp.body.size());
    if (stopping_.load()) keep_alive = false;
    if (!keep_alive) resp.headers["connection"] = "close";
    const bool head_only = req.method == "HEAD";
    if (!stream->Write(SerializeHead(resp.status, resp.headers) + (head_only ? "" : resp.body),
                       opts_.send_timeout)) {
      break;
    }
    if (unread != 0) Drain(reader, unread);
    if (!keep_alive || stopping_.load()) break;
  }
}

}  // namespace

std::unique_ptr<HttpServer> NewHttpServer(ServerOptions options) {
  return std::make_unique<ServerImpl>(std::move(options));
}

void ServeMetrics(HttpServer& server, const MetricsRegistry& registry) {
  server.Handle("GET", "/metrics", [&registry](const Request&) {
    Response r;
    r.headers["content-type"] = kMetricsContentType;
    r.body = registry.Serialize();
    return r;
  });
}

}  // namespace accelpool::http
