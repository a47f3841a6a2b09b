// HttpClient. Requests run on the calling thread over a pool of kept-alive
// connections of the socket layer (socket_io.h), as Go's HTTP/1.1 transport
// does; ClientOptions::Transport::kCpprestsdk sends them through cpprestsdk's
// http_client instead. The streaming GET used for watches always runs on a
// connection of its own, because a cpprestsdk response body being read
// cannot be interrupted promptly when the caller wants to stop.
//
// Why the pool is the default: under a burst (hundreds of Bindings at once)
// cpprestsdk hands every request from the caller to an I/O thread, then to a
// task thread for the answer and back, and the thread switches cost more CPU
// than the requests themselves (docs/benchmarks/e2e-load.md).
#include <cpprest/http_client.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "http/http.h"
#include "http/socket_io.h"

// ThreadSanitizer and cpprestsdk. Debian's libcpprest is not built with
// ThreadSanitizer, so the hand-over of an answer from its I/O thread to the
// caller (atomics inside the library) is invisible to it, and a caller that
// copies the answer's headers after the task completed is reported as racing
// with the I/O thread that parsed them. A report is suppressed when a frame
// of either access, or of where either thread was made, is inside
// libcpprest: so also one in this project's code run on cpprestsdk's threads
// (only the TLS context callback, which calls OpenSSL alone), and a
// use-after-free on that path. Races elsewhere in this project's code,
// including its other transport, are still reported.
#if defined(__SANITIZE_THREAD__)
#define ACCELPOOL_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ACCELPOOL_TSAN_BUILD 1
#endif
#endif
#if defined(ACCELPOOL_TSAN_BUILD)
extern "C" const char* __tsan_default_suppressions() { return "race:libcpprest.so\n"; }
#endif

namespace accelpool::http {

namespace {

using Ms = std::chrono::milliseconds;

// cpprestsdk clients (one per whole-second timeout) a client keeps.
constexpr size_t kMaxCpprestClients = 8;

struct Url {
  bool tls = false;
  std::string host;
  uint16_t port = 0;
  std::string base_path;  // "" or "/prefix" without trailing slash
};

StatusOr<Url> ParseBaseUrl(const std::string& s) {
  Url u;
  std::string rest;
  if (s.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = s.substr(8);
  } else if (s.rfind("http://", 0) == 0) {
    rest = s.substr(7);
  } else {
    return InvalidArgumentError("server URL \"" + s + "\" must start with https:// or http://");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.base_path = rest.substr(slash);
  while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
  std::string port_s;
  if (!authority.empty() && authority.front() == '[') {  // [::1]:6443
    const size_t close = authority.find(']');
    if (close == std::string::npos) return InvalidArgumentError("bad IPv6 host in " + s);
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') {
      port_s = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) port_s = authority.substr(colon + 1);
  }
  if (u.host.empty()) return InvalidArgumentError("server URL \"" + s + "\" has no host");
  if (port_s.empty()) {
    u.port = u.tls ? 443 : 80;
  } else {
    int p = 0;
    for (char c : port_s) {
      if (c < '0' || c > '9' || p > 65535) return InvalidArgumentError("bad port in " + s);
      p = p * 10 + (c - '0');
    }
    if (p <= 0 || p > 65535) return InvalidArgumentError("bad port in " + s);
    u.port = static_cast<uint16_t>(p);
  }
  return u;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A request target may not carry bytes that would end the request line or
// start another header.
bool ValidPath(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  return std::none_of(path.begin(), path.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

bool ValidHeader(const std::string& name, const std::string& value) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c == ':' || static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
  }
  return value.find_first_of("\r\n") == std::string::npos;
}

// kInvalidArgument for a path or header that would change the request's framing.
Status CheckRequest(const ClientRequest& request) {
  if (!ValidPath(request.path)) {
    return InvalidArgumentError("bad request path \"" + request.path +
                                "\": it must start with / and carry no spaces or control "
                                "characters (percent-encode them)");
  }
  for (const auto& [k, v] : request.headers) {
    if (!ValidHeader(k, v)) {
      return InvalidArgumentError("bad request header \"" + k + "\" on " + request.path);
    }
  }
  return Status::Ok();
}

// `what` (method and path, maybe a cause) did not get its answer in time.
Status TimedOut(const std::string& what, Ms timeout) {
  return DeadlineExceededError(what + "; the server did not answer in " +
                               std::to_string(timeout.count()) + " ms");
}

// One kept-alive connection and the reader holding any bytes it buffered.
struct Conn {
  std::unique_ptr<internal::Stream> stream;
  std::unique_ptr<internal::Reader> reader;
  std::chrono::steady_clock::time_point idle_since;
};

class ClientImpl final : public HttpClient {
 public:
  ClientImpl(ClientOptions o, Url url, internal::SslCtxPtr tls)
      : opts_(std::move(o)), url_(std::move(url)), tls_(std::move(tls)) {}

  StatusOr<ClientResponse> Send(const ClientRequest& request) override;
  Status StreamLines(const ClientRequest& request,
                     const std::function<void(const ClientResponse& head)>& on_head,
                     const std::function<bool(std::string_view line)>& on_line,
                     std::stop_token stop, Ms idle_timeout) override;

 private:
  // The outcome of one try on one connection.
  enum class Try { kDone, kRetry, kFailed };

  StatusOr<ClientResponse> SendCpprest(const ClientRequest& request, Ms timeout);
  // The cpprestsdk client for `timeout`: cpprestsdk fixes a timeout per
  // client, not per request, so requests share the client of their timeout
  // rounded up to whole seconds (one may wait up to a second longer than it
  // asked), and at most kMaxCpprestClients stay cached, the least recently
  // used going first (a request in flight keeps its own alive). Without
  // that, a caller whose timeouts vary by the millisecond (the extender's
  // bind, bounded by its lease) made a client, a connection pool and a TLS
  // handshake per request, and kept them all.
  std::shared_ptr<web::http::client::http_client> ClientFor(Ms timeout);

  StatusOr<ClientResponse> SendPooled(const ClientRequest& request, Ms timeout);
  Try SendOn(Conn& c, bool reused, const std::string& wire, const ClientRequest& request,
             std::chrono::steady_clock::time_point deadline, Ms timeout,
             StatusOr<ClientResponse>& out, bool& keep);
  // The request line and headers, through the blank line; `close` asks the
  // server to end the connection after its answer.
  std::string Head(const ClientRequest& request, bool close) const;
  std::optional<Conn> TakeIdle();
  void PutIdle(Conn c);

  const ClientOptions opts_;
  const Url url_;
  const internal::SslCtxPtr tls_;  // the connections' TLS context (null for http://)
  std::mutex mu_;
  // cpprestsdk clients by timeout in whole seconds, the most recently used
  // first; at most kMaxCpprestClients.
  std::list<std::pair<int64_t, std::shared_ptr<web::http::client::http_client>>>
      clients_;             // guarded by mu_
  std::vector<Conn> idle_;  // guarded by mu_; the most recently used last
  size_t active_ = 0;       // guarded by mu_; requests holding a connection
  std::condition_variable slot_free_;
};

// Methods whose request may be sent twice to the same effect (RFC 9110,
// 9.2.2).
bool Idempotent(std::string_view method) {
  for (std::string_view m : {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"}) {
    if (method == m) return true;
  }
  return false;
}

std::optional<Conn> ClientImpl::TakeIdle() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Conn> stale;  // closed outside the lock
  std::optional<Conn> found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!idle_.empty()) {
      Conn c = std::move(idle_.back());
      idle_.pop_back();
      // Too old (the server may be about to close it), or readable while idle
      // (the server closed it): not worth a request.
      if (now - c.idle_since > opts_.idle_connection_ttl || c.stream->Readable()) {
        stale.push_back(std::move(c));
        continue;
      }
      found = std::move(c);
      break;
    }
  }
  return found;
}

void ClientImpl::PutIdle(Conn c) {
  c.idle_since = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() >= opts_.max_idle_connections) return;  // c closes on return
  idle_.push_back(std::move(c));
}

std::string ClientImpl::Head(const ClientRequest& request, bool close) const {
  std::string head;
  head.reserve(256 + request.path.size());
  head += request.method;
  head += ' ';
  head += url_.base_path;
  head += request.path;
  head += " HTTP/1.1\r\nHost: ";
  head += url_.host.find(':') != std::string::npos ? "[" + url_.host + "]" : url_.host;
  head += ':';
  head += std::to_string(url_.port);
  head += "\r\nUser-Agent: ";
  head += opts_.user_agent;
  head += close ? "\r\nConnection: close\r\n" : "\r\n";
  bool has_auth = false, has_type = false;
  for (const auto& [k, v] : request.headers) {
    const std::string name = Lower(k);
    if (name == "content-length" || name == "host" || name == "connection" ||
        name == "transfer-encoding") {
      continue;  // framing is the client's
    }
    has_auth |= name == "authorization";
    has_type |= name == "content-type";
    head += k;
    head += ": ";
    head += v;
    head += "\r\n";
  }
  if (!opts_.bearer_token.empty() && !has_auth) {
    head += "Authorization: Bearer " + opts_.bearer_token + "\r\n";
  }
  if (!request.body.empty() && !has_type) head += "Content-Type: application/json\r\n";
  if (!request.body.empty() || (request.method != "GET" && request.method != "HEAD" &&
                                request.method != "DELETE")) {
    head += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  head += "\r\n";
  return head;
}

StatusOr<ClientResponse> ClientImpl::SendPooled(const ClientRequest& request, Ms timeout) {
  ACCELPOOL_RETURN_IF_ERROR(CheckRequest(request));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (opts_.max_connections > 0) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!slot_free_.wait_until(lock, deadline,
                               [&] { return active_ < opts_.max_connections; })) {
      return DeadlineExceededError(request.method + " " + request.path + ": all " +
                                   std::to_string(opts_.max_connections) +
                                   " connections stayed busy for " +
                                   std::to_string(timeout.count()) + " ms");
    }
    ++active_;
  }
  struct Slot {
    ClientImpl* self;
    ~Slot() {
      if (self->opts_.max_connections == 0) return;
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        --self->active_;
      }
      self->slot_free_.notify_one();
    }
  } slot{this};
  const std::string wire = Head(request, /*close=*/false) + request.body;
  // A kept-alive connection first; when the server turns out to have closed
  // it, once more on a new connection: when writing the request failed, or
  // for an idempotent method when the connection ended before any byte of
  // the answer.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::optional<Conn> c = attempt == 0 ? TakeIdle() : std::nullopt;
    const bool reused = c.has_value();
    if (!reused) {
      const Ms left = std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now());
      if (left <= Ms(0)) break;
      auto stream = internal::Connect(url_.host, url_.port, tls_, !opts_.insecure_skip_verify, left,
                                      {}, opts_.tls_server_name);
      if (!stream.ok()) return stream.status().WithPrefix(request.method + " " + request.path);
      c.emplace();
      c->stream = std::move(*stream);
      c->reader = std::make_unique<internal::Reader>(*c->stream);
    }
    StatusOr<ClientResponse> out = UnavailableError("no answer");
    bool keep = false;
    const Try t = SendOn(*c, reused, wire, request, deadline, timeout, out, keep);
    if (t == Try::kRetry) continue;
    if (t == Try::kDone && keep && c->reader->buffered() == 0) PutIdle(std::move(*c));
    return out;
  }
  return TimedOut(request.method + " " + request.path, timeout);
}

ClientImpl::Try ClientImpl::SendOn(Conn& c, bool reused, const std::string& wire,
                                   const ClientRequest& request,
                                   std::chrono::steady_clock::time_point deadline, Ms timeout,
                                   StatusOr<ClientResponse>& out, bool& keep) {
  const std::string what = request.method + " " + request.path;
  auto failed = [&](const Status& st) {
    if (st.code() == StatusCode::kDeadlineExceeded) {
      out = TimedOut(what, timeout);
    } else {
      out = UnavailableError(what + ": " + st.message() + "; check that the server is reachable");
    }
    return Try::kFailed;
  };
  const Ms left =
      std::max(Ms(0), std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now()));
  if (!c.stream->Write(wire, left)) {
    if (reused) return Try::kRetry;
    return failed(UnavailableError("connection lost while sending"));
  }
  auto resp = internal::ReadResponse(*c.reader, request.method == "HEAD", deadline, &keep);
  if (!resp.ok()) {
    // Closed before any byte of an answer on a kept-alive connection: most
    // often the server closed it while idle and never read the request, but
    // it may have acted on it and ended before answering. Only a request
    // that may be repeated goes once more (as Go's transport does); the
    // common idle close is caught before sending (TakeIdle drops a
    // connection that is readable while idle).
    if (reused && resp.status().code() == StatusCode::kOutOfRange && Idempotent(request.method)) {
      return Try::kRetry;
    }
    return failed(resp.status());
  }
  out = std::move(resp);
  return Try::kDone;
}

std::shared_ptr<web::http::client::http_client> ClientImpl::ClientFor(Ms timeout) {
  const int64_t seconds = std::max<int64_t>(1, (timeout.count() + 999) / 1000);
  std::shared_ptr<web::http::client::http_client> evicted;  // destroyed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = clients_.begin(); it != clients_.end(); ++it) {
    if (it->first == seconds) {
      clients_.splice(clients_.begin(), clients_, it);
      return clients_.front().second;
    }
  }
  {
    web::http::client::http_client_config cfg;
    cfg.set_timeout(std::chrono::seconds(seconds));
    cfg.set_validate_certificates(!opts_.insecure_skip_verify);
    // cpprestsdk builds a TLS context per connection. It takes the trust
    // store and client identity NewHttpClient loaded once (reading the PEM
    // files per connection cost milliseconds of CPU each under load).
    if (tls_ != nullptr) {
      cfg.set_ssl_context_callback([tls = tls_](boost::asio::ssl::context& ctx) {
        internal::ShareClientContext(tls.get(), ctx.native_handle());
      });
    }
    const std::string base =
        std::string(url_.tls ? "https://" : "http://") +
        (url_.host.find(':') != std::string::npos ? "[" + url_.host + "]" : url_.host) + ":" +
        std::to_string(url_.port);
    clients_.emplace_front(seconds,
                           std::make_shared<web::http::client::http_client>(web::uri(base), cfg));
  }
  if (clients_.size() > kMaxCpprestClients) {
    evicted = std::move(clients_.back().second);
    clients_.pop_back();
  }
  return clients_.front().second;
}

StatusOr<ClientResponse> ClientImpl::Send(const ClientRequest& request) {
  const Ms timeout = request.timeout.value_or(opts_.timeout);
  if (opts_.transport == ClientOptions::Transport::kSockets) return SendPooled(request, timeout);
  return SendCpprest(request, timeout);
}

StatusOr<ClientResponse> ClientImpl::SendCpprest(const ClientRequest& request, Ms timeout) {
  try {
    web::http::http_request req(web::http::method(request.method));
    req.set_request_uri(web::uri(url_.base_path + request.path));
    std::string content_type;
    for (const auto& [k, v] : request.headers) {
      if (Lower(k) == "content-type") {
        content_type = v;
      } else {
        req.headers().add(k, v);
      }
    }
    if (!opts_.bearer_token.empty() && request.headers.count("authorization") == 0) {
      req.headers().add("Authorization", "Bearer " + opts_.bearer_token);
    }
    req.headers().add("User-Agent", opts_.user_agent);
    if (!request.body.empty() || !content_type.empty()) {
      req.set_body(request.body, content_type.empty() ? "application/json" : content_type);
    }
    // Held until the body is read: an eviction meanwhile must not end it.
    const std::shared_ptr<web::http::client::http_client> client = ClientFor(timeout);
    web::http::http_response resp = client->request(req).get();
    ClientResponse out;
    out.status = resp.status_code();
    for (const auto& [k, v] : resp.headers()) out.headers[Lower(k)] = v;
    const std::vector<unsigned char> bytes = resp.extract_vector().get();
    out.body.assign(bytes.begin(), bytes.end());
    return out;
  } catch (const web::http::http_exception& e) {
    const std::string what = request.method + " " + request.path + ": " + e.what();
    if (e.error_code() == std::errc::timed_out) {
      return TimedOut(what, timeout);
    }
    return UnavailableError(what + "; check that the server is reachable");
  } catch (const web::uri_exception& e) {
    return InvalidArgumentError("bad request path \"" + request.path + "\": " + e.what());
  } catch (const std::exception& e) {
    return UnavailableError(request.method + " " + request.path + ": " + e.what());
  }
}

Status ClientImpl::StreamLines(const ClientRequest& request,
                               const std::function<void(const ClientResponse& head)>& on_head,
                               const std::function<bool(std::string_view line)>& on_line,
                               std::stop_token stop, Ms idle_timeout) {
  ACCELPOOL_RETURN_IF_ERROR(CheckRequest(request));
  const Ms connect_timeout = request.timeout.value_or(opts_.timeout);
  // `stop` ends the connection attempt too (kCancelled).
  auto conn = internal::Connect(url_.host, url_.port, tls_, !opts_.insecure_skip_verify,
                                connect_timeout, stop, opts_.tls_server_name);
  if (!conn.ok()) return conn.status();
  internal::Stream& s = **conn;
  // Wake the blocked read when the caller stops.
  std::stop_callback on_stop(stop, [&s] { s.Shutdown(); });
  if (!s.Write(Head(request, /*close=*/true) + request.body, connect_timeout)) {
    return stop.stop_requested() ? Status(StatusCode::kCancelled, "stopped")
                                 : UnavailableError("connection lost sending " + request.path);
  }
  internal::Reader reader(s);
  auto fail = [&](const Status& st) {
    if (stop.stop_requested()) return Status(StatusCode::kCancelled, "stopped");
    // A connection the server closed (before the answer, or within it) is
    // unavailable, never kOutOfRange: a caller such as the informer reads
    // that code as an expired resource version and relists.
    const StatusCode code =
        st.code() == StatusCode::kOutOfRange ? StatusCode::kUnavailable : st.code();
    return Status(code, request.path + ": " + st.message());
  };
  auto resp_head = reader.ReadHead(64 << 10, connect_timeout);
  if (!resp_head.ok()) return fail(resp_head.status());
  ClientResponse h;
  StatusOr<int> status = internal::ParseStatusLine(internal::ParseHeaders(*resp_head, h.headers));
  if (!status.ok()) return status.status().WithPrefix("answer from " + url_.host);
  h.status = *status;
  if (on_head) on_head(h);

  const bool chunked = Lower(h.headers["transfer-encoding"]).find("chunked") != std::string::npos;
  int64_t remaining = -1;  // content-length body
  if (!chunked && h.headers.count("content-length") != 0) {
    StatusOr<uint64_t> length = internal::ParseContentLength(h.headers["content-length"]);
    if (!length.ok()) return fail(length.status());
    remaining = static_cast<int64_t>(std::min<uint64_t>(*length, uint64_t{INT64_MAX}));
  }
  // One line (one watch event) may be as large as one chunk: a stream that
  // never ends its line is refused rather than held in memory without end.
  constexpr size_t kMaxLine = size_t{64} << 20;
  std::string pending;  // partial line
  Status line_error;
  auto deliver = [&](std::string_view data) {
    pending.append(data);
    size_t start = 0;
    for (;;) {
      const size_t nl = pending.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(pending.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      start = nl + 1;
      if (!on_line(line)) return false;
    }
    pending.erase(0, start);
    if (pending.size() > kMaxLine) {
      line_error = Status(StatusCode::kResourceExhausted, "a line of the answer runs past " +
                                                              std::to_string(kMaxLine >> 20) +
                                                              " MiB without ending");
      return false;
    }
    return true;
  };
  auto delivered = [&](std::string_view data) -> std::optional<Status> {
    if (deliver(data)) return std::nullopt;
    return line_error.ok() ? Status::Ok() : fail(line_error);
  };
  std::string chunk;  // one buffer for every chunk (a fresh large one per event was costly)
  for (;;) {
    if (stop.stop_requested()) return Status(StatusCode::kCancelled, "stopped");
    if (chunked) {
      auto size_line = reader.ReadLine(1024, idle_timeout);
      if (!size_line.ok()) return fail(size_line.status());
      StatusOr<uint64_t> size = internal::ParseChunkSize(*size_line);
      if (!size.ok()) return fail(size.status());  // garbage is not the end of the stream
      const uint64_t n = *size;
      if (n == 0) break;
      if (n > (uint64_t{64} << 20)) {
        return UnavailableError(request.path + ": a response chunk of " + std::to_string(n) +
                                " bytes exceeds the 64 MiB limit");
      }
      chunk.clear();
      Status st = reader.ReadExact(n + 2, chunk, idle_timeout);  // data + CRLF
      if (!st.ok()) return fail(st);
      if (chunk[n] != '\r' || chunk[n + 1] != '\n') {
        return fail(UnavailableError("malformed chunk (no CRLF after its data)"));
      }
      chunk.resize(n);
      if (auto end = delivered(chunk)) return *end;
    } else {
      if (remaining == 0) break;
      auto some = reader.ReadSome(idle_timeout);
      if (!some.ok()) return fail(some.status());
      if (some->empty()) {
        if (remaining > 0) return fail(UnavailableError("connection closed mid-body"));
        break;
      }
      if (remaining > 0) remaining -= static_cast<int64_t>(some->size());
      if (auto end = delivered(*some)) return *end;
    }
  }
  if (!pending.empty()) on_line(pending);
  return Status::Ok();
}

}  // namespace

StatusOr<ClientOptions::Transport> ParseTransport(std::string_view name) {
  if (name == "sockets") return ClientOptions::Transport::kSockets;
  if (name == "cpprestsdk") return ClientOptions::Transport::kCpprestsdk;
  return InvalidArgumentError("unknown apiserver client transport \"" + std::string(name) +
                              "\"; use sockets or cpprestsdk");
}

StatusOr<std::unique_ptr<HttpClient>> NewHttpClient(ClientOptions options) {
  auto url = ParseBaseUrl(options.base_url);
  if (!url.ok()) return url.status();
  if (!options.tls_server_name.empty() && options.transport != ClientOptions::Transport::kSockets) {
    return InvalidArgumentError("a TLS server name (" + options.tls_server_name +
                                ", a kubeconfig's tls-server-name) needs the sockets transport");
  }
  internal::SslCtxPtr tls;
  if (url->tls) {
    auto ctx = internal::ClientContext(options);
    if (!ctx.ok()) return ctx.status();
    tls = *ctx;
  }
  return std::unique_ptr<HttpClient>(
      std::make_unique<ClientImpl>(std::move(options), std::move(*url), std::move(tls)));
}

}  // namespace accelpool::http
