#include "http/socket_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace accelpool::http::internal {

namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Waits for `events` on fd. 1 ready, 0 timeout, -1 error.
int WaitFd(int fd, short events, Ms timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(timeout.count(), 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    return r == 0 ? 0 : 1;
  }
}

// The time left until `deadline`, rounded up to whole milliseconds (a wait
// never ends just before it); zero once it passed.
Ms Left(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  return left <= Clock::duration::zero() ? Ms(0) : std::chrono::ceil<Ms>(left);
}

// WaitFd until `deadline`.
int WaitUntil(int fd, short events, Clock::time_point deadline) {
  return WaitFd(fd, events, Left(deadline));
}

void SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK; }

// Runs a TLS handshake step (SSL_accept or SSL_connect) until it completes,
// waiting for the socket by `deadline`. `stop`, when requested, ends it
// (checked at least every 50 ms). 1 done, 0 timed out, -2 stopped, -1 failed.
template <typename Step>
int DriveHandshake(SSL* ssl, int fd, Step step, Clock::time_point deadline,
                   const std::stop_token& stop) {
  for (;;) {
    ERR_clear_error();
    const int r = step(ssl);
    if (r == 1) return 1;
    const int err = SSL_get_error(ssl, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) return -1;
    const short events = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    for (;;) {
      if (stop.stop_requested()) return -2;
      const Ms left = Left(deadline);
      if (left == Ms(0)) return 0;
      const int w = WaitFd(fd, events, stop.stop_possible() ? std::min(left, Ms(50)) : left);
      if (w < 0) return -1;
      if (w == 1) break;
    }
  }
}

class PlainImpl final : public Stream {
 public:
  explicit PlainImpl(int fd) : fd_(fd) { SetNonBlocking(fd_); }
  ~PlainImpl() override { ::close(fd_); }
  long Read(char* buf, size_t n, Ms timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const ssize_t r = ::recv(fd_, buf, n, 0);
      if (r >= 0) return static_cast<long>(r);
      if (errno == EINTR) continue;
      if (!WouldBlock()) return -1;
      const int w = WaitUntil(fd_, POLLIN, deadline);
      if (w == 0) return -2;
      if (w < 0) return -1;
    }
  }
  bool Write(std::string_view data, Ms timeout) override {
    const auto deadline = Clock::now() + timeout;
    while (!data.empty()) {
      const ssize_t r = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (r > 0) {
        data.remove_prefix(static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || !WouldBlock() || WaitUntil(fd_, POLLOUT, deadline) != 1) return false;
    }
    return true;
  }
  void Shutdown() override { ::shutdown(fd_, SHUT_RDWR); }
  bool Readable() override { return WaitFd(fd_, POLLIN, Ms(0)) != 0; }

 private:
  const int fd_;
};

class TlsImpl final : public Stream {
 public:
  TlsImpl(int fd, SSL* ssl, SslCtxPtr ctx, std::string peer = "")
      : fd_(fd), ssl_(ssl), ctx_(std::move(ctx)), peer_(std::move(peer)) {
    SetNonBlocking(fd_);
  }
  ~TlsImpl() override {
    // Closing without a close_notify would mark the connection's session as
    // not resumable (OpenSSL's truncation guard); HTTP framing already tells
    // a truncated answer, so the session stays usable for the next connection.
    SSL_set_quiet_shutdown(ssl_, 1);
    SSL_shutdown(ssl_);
    SSL_free(ssl_);
    ::close(fd_);
  }
  // A record that carries no application data (a TLS 1.3 session ticket,
  // part of a record) makes SSL_read ask for more: that wait is against the
  // same deadline.
  long Read(char* buf, size_t n, Ms timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      ERR_clear_error();
      const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1 << 20)));
      if (r > 0) return r;
      const int err = SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        const int w = WaitUntil(fd_, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
        if (w == 0) return -2;
        if (w < 0) return -1;
        continue;
      }
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      ERR_clear_error();
      return err == SSL_ERROR_SYSCALL && r == 0 ? 0 : -1;
    }
  }
  bool Write(std::string_view data, Ms timeout) override {
    const auto deadline = Clock::now() + timeout;
    while (!data.empty()) {
      // A retry after a wait passes the same bytes, as OpenSSL requires.
      ERR_clear_error();
      const int r =
          SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 20)));
      if (r > 0) {
        data.remove_prefix(static_cast<size_t>(r));
        continue;
      }
      const int err = SSL_get_error(ssl_, r);
      if ((err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) &&
          WaitUntil(fd_, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) == 1) {
        continue;
      }
      ERR_clear_error();
      return false;
    }
    return true;
  }
  bool Handshake(Ms timeout) override {
    const int r = DriveHandshake(ssl_, fd_, SSL_accept, Clock::now() + timeout, {});
    ERR_clear_error();
    return r == 1;
  }
  void Shutdown() override { ::shutdown(fd_, SHUT_RDWR); }
  bool Readable() override { return SSL_pending(ssl_) > 0 || WaitFd(fd_, POLLIN, Ms(0)) != 0; }
  bool TlsResumed() const override { return SSL_session_reused(ssl_) == 1; }
  // The peer key OfferSession records on ssl_ (stable: the object is on the heap).
  const std::string* peer() const { return &peer_; }
  std::string PeerCertSubject() const override {
    // Only a certificate the handshake verified names the client.
    if (SSL_get_verify_result(ssl_) != X509_V_OK) return "";
    X509* cert = SSL_get1_peer_certificate(ssl_);
    if (cert == nullptr) return "";
    char buf[512];
    X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
    X509_free(cert);
    return buf;
  }

 private:
  const int fd_;
  SSL* const ssl_;
  const SslCtxPtr ctx_;
  const std::string peer_;
};

}  // namespace

std::unique_ptr<Stream> PlainStream(int fd) { return std::make_unique<PlainImpl>(fd); }

std::unique_ptr<Stream> ServerTls(int fd, const SslCtxPtr& ctx) {
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) {
    ERR_clear_error();
    ::close(fd);
    return nullptr;
  }
  SSL_set_fd(ssl, fd);
  return std::make_unique<TlsImpl>(fd, ssl, ctx);
}

// A dead peer is given up on well inside a watch's own idle timeout (330 s).
static_assert(kKeepAliveIdleS + kKeepAliveIntervalS * kKeepAliveProbes <= 120);

bool SetClientSocketOptions(int fd) {
  const int one = 1;
  bool ok = ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0;
  ok = ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0 && ok;
  ok = ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepAliveIdleS, sizeof(int)) == 0 && ok;
  ok = ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepAliveIntervalS, sizeof(int)) == 0 && ok;
  ok = ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepAliveProbes, sizeof(int)) == 0 && ok;
  return ok;
}

namespace {

std::atomic<LookupFn> g_lookup{nullptr};
std::atomic<int> g_abandoned{0};

// One lookup on its own thread; the last of it and its waiter frees it.
struct Lookup {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  bool abandoned = false;
  int rc = 0;
  addrinfo* res = nullptr;
  ~Lookup() {
    if (res != nullptr) ::freeaddrinfo(res);
  }
};

void FreeAddrInfo(addrinfo* ai) {
  if (ai != nullptr) ::freeaddrinfo(ai);
}

}  // namespace

void SetLookupForTest(LookupFn fn) { g_lookup.store(fn); }
int AbandonedLookups() { return g_abandoned.load(); }

StatusOr<AddrInfoPtr> Resolve(const std::string& host, const std::string& port,
                              Clock::time_point deadline, std::stop_token stop) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const auto failed = [&](int rc) {
    return UnavailableError("cannot resolve " + host + ": " + gai_strerror(rc) +
                            "; check the server address");
  };
  // An address literal (the in-cluster apiserver, most kubeconfigs) needs
  // no lookup and no thread.
  {
    addrinfo numeric = hints;
    numeric.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), port.c_str(), &numeric, &res) == 0) {
      return AddrInfoPtr(res, FreeAddrInfo);
    }
  }
  if (g_abandoned.load() >= kMaxAbandonedLookups) {
    return UnavailableError("cannot resolve " + host + ": " + std::to_string(kMaxAbandonedLookups) +
                            " earlier lookups are still waiting on the system resolver; check "
                            "the node's DNS (resolv.conf) or give the server as an address");
  }
  auto lookup = std::make_shared<Lookup>();
  try {
    std::thread([lookup, host, port, hints, fn = g_lookup.load()] {
      addrinfo* res = nullptr;
      const int rc = fn != nullptr ? fn(host.c_str(), port.c_str(), &hints, &res)
                                   : ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
      std::lock_guard<std::mutex> lock(lookup->mu);
      lookup->rc = rc;
      lookup->res = rc == 0 ? res : nullptr;
      lookup->done = true;
      if (lookup->abandoned) g_abandoned.fetch_sub(1);
      lookup->done_cv.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    return UnavailableError("cannot resolve " + host + ": no thread for the lookup (" + e.what() +
                            "); the request is retried");
  }
  std::unique_lock<std::mutex> lock(lookup->mu);
  while (!lookup->done) {
    const Ms left = Left(deadline);
    if (left == Ms(0) || stop.stop_requested()) {
      lookup->abandoned = true;
      g_abandoned.fetch_add(1);
      if (stop.stop_requested()) return Status(StatusCode::kCancelled, "stopped");
      return DeadlineExceededError("resolving " + host +
                                   " took longer than the request's time; check the node's DNS "
                                   "(resolv.conf) or give the server as an address");
    }
    lookup->done_cv.wait_for(lock, stop.stop_possible() ? std::min(left, Ms(50)) : left);
  }
  if (lookup->rc != 0) return failed(lookup->rc);
  addrinfo* res = std::exchange(lookup->res, nullptr);
  return AddrInfoPtr(res, FreeAddrInfo);
}

StatusOr<std::unique_ptr<Stream>> Connect(const std::string& host, uint16_t port,
                                          const SslCtxPtr& tls, bool verify_host, Ms timeout,
                                          std::stop_token stop, const std::string& tls_name) {
  const auto deadline = Clock::now() + timeout;
  const std::string port_s = std::to_string(port);
  const std::string where = host + ":" + port_s;
  const auto timed_out = [&](std::string_view what) {
    return DeadlineExceededError(std::string(what) + " " + where + " took longer than " +
                                 std::to_string(timeout.count()) +
                                 " ms; check that the server is up and answers");
  };
  const auto stopped = [] { return Status(StatusCode::kCancelled, "stopped"); };
  StatusOr<AddrInfoPtr> resolved = Resolve(host, port_s, deadline, stop);
  if (!resolved.ok()) return resolved.status();
  addrinfo* const res = resolved->get();
  int addresses = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) ++addresses;
  int fd = -1;
  bool out_of_time = false, was_stopped = false;
  std::string last = "no address";
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next, --addresses) {
    // Each address gets its share of the time left, so one that drops
    // packets leaves time for the next (at least 2 s, as Go's dialer).
    const Ms left = Left(deadline);
    if (left == Ms(0)) {
      out_of_time = true;
      break;
    }
    const auto until = Clock::now() + std::max(std::min(left, Ms(2000)), left / addresses);
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      int w = 0;
      while (w == 0 && !(was_stopped = stop.stop_requested()) && Left(until) > Ms(0)) {
        w = WaitFd(fd, POLLOUT, stop.stop_possible() ? std::min(Left(until), Ms(50)) : Left(until));
      }
      if (w == 1) {
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        rc = soerr == 0 ? 0 : -1;
        errno = soerr;
      } else {
        errno = ETIMEDOUT;
        out_of_time = Left(deadline) == Ms(0);
      }
    }
    if (rc != 0) {
      last = std::strerror(errno);
      ::close(fd);
      fd = -1;
      if (was_stopped) break;
      continue;
    }
    (void)SetClientSocketOptions(fd);  // best effort: the connection works without
  }
  if (fd < 0) {
    if (was_stopped) return stopped();
    if (out_of_time) return timed_out("connecting to");
    return UnavailableError("cannot connect to " + where + ": " + last +
                            "; check that the server is up and reachable");
  }
  if (!tls) return PlainStream(fd);
  SSL* ssl = SSL_new(tls.get());
  if (ssl == nullptr) {
    ::close(fd);
    return InternalError(SslError("SSL_new failed"));
  }
  SSL_set_fd(ssl, fd);
  const std::string& name = tls_name.empty() ? host : tls_name;
  SSL_set_tlsext_host_name(ssl, name.c_str());
  if (verify_host) SSL_set1_host(ssl, name.c_str());
  auto stream = std::make_unique<TlsImpl>(fd, ssl, tls, where);
  OfferSession(ssl, stream->peer());
  const int r = DriveHandshake(ssl, fd, SSL_connect, deadline, stop);
  if (r == 1) return std::unique_ptr<Stream>(std::move(stream));
  if (r == 0 || r == -2) {
    ERR_clear_error();
    return r == 0 ? timed_out("the TLS handshake with") : stopped();
  }
  ForgetSession(ssl);
  const long verify = SSL_get_verify_result(ssl);
  std::string msg = SslError("TLS handshake with " + where + " failed");
  if (verify != X509_V_OK) {
    msg += std::string(" (certificate: ") + X509_verify_cert_error_string(verify) +
           "); check the CA bundle and the server name";
  }
  return UnavailableError(msg);
}

Status Reader::Fill(Ms timeout) {
  if (eof_) return UnavailableError("connection closed");
  char tmp[16384];
  const long r = s_.Read(tmp, sizeof(tmp), timeout);
  if (r == -2) return DeadlineExceededError("timed out waiting for data");
  if (r < 0) return UnavailableError("connection error");
  if (r == 0) {
    eof_ = true;
    return UnavailableError("connection closed");
  }
  buf_.append(tmp, static_cast<size_t>(r));
  return Status::Ok();
}

Status Reader::Await(Ms timeout) {
  if (!buf_.empty()) return Status::Ok();
  Status st = Fill(timeout);
  if (!st.ok() && eof_) return OutOfRangeError("connection closed");
  return st;
}

StatusOr<std::string> Reader::ReadHead(size_t max, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    // Empty lines before a message are skipped (RFC 9112 2.2: a client may
    // send a CRLF after a POST body).
    size_t lead = 0;
    while (lead < buf_.size() && lead < 64 && (buf_[lead] == '\r' || buf_[lead] == '\n')) ++lead;
    if (lead == buf_.size() && lead < 64) lead = 0;  // only line ends so far: wait for more
    if (lead != 0) buf_.erase(0, lead);
    // The head ends at its first empty line, "\r\n" or a bare "\n" alike
    // (whichever comes first: a request ending "\n\n" followed by one ending
    // "\r\n\r\n" is two requests).
    size_t pos = std::string::npos;
    size_t skip = 0;
    for (size_t nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n', nl + 1)) {
      if (nl + 1 < buf_.size() && buf_[nl + 1] == '\n') {
        pos = nl;
        skip = 2;
        break;
      }
      if (nl + 2 < buf_.size() && buf_[nl + 1] == '\r' && buf_[nl + 2] == '\n') {
        pos = nl;
        skip = 3;
        break;
      }
    }
    if (pos != std::string::npos) {
      std::string head = buf_.substr(0, pos > 0 && buf_[pos - 1] == '\r' ? pos - 1 : pos);
      buf_.erase(0, pos + skip);
      return head;
    }
    if (buf_.size() > max) return ResourceExhaustedError("header too large");
    const bool empty = buf_.empty();
    Status st = Fill(Left(deadline));
    if (!st.ok()) {
      if (empty && eof_) return OutOfRangeError("connection closed");
      return st;
    }
  }
}

Status Reader::ReadExact(size_t n, std::string& out, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  // What is buffered first, then straight into `out`, sized once: a large
  // body costs its own size, not that again in a buffer grown to hold it
  // (and kept as long as the connection).
  const size_t buffered = std::min(n, buf_.size());
  out.reserve(out.size() + n);
  out.append(buf_, 0, buffered);
  buf_.erase(0, buffered);
  for (size_t left = n - buffered; left > 0;) {
    if (eof_) return UnavailableError("connection closed");
    const size_t at = out.size();
    const size_t want = std::min<size_t>(left, 65536);
    out.resize(at + want);
    const long r = s_.Read(out.data() + at, want, Left(deadline));
    out.resize(at + (r > 0 ? static_cast<size_t>(r) : 0));
    if (r == -2) return DeadlineExceededError("timed out waiting for data");
    if (r < 0) return UnavailableError("connection error");
    if (r == 0) {
      eof_ = true;
      return UnavailableError("connection closed");
    }
    left -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

StatusOr<std::string> Reader::ReadLine(size_t max, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const size_t pos = buf_.find('\n');
    if (pos != std::string::npos) {
      std::string line = buf_.substr(0, pos);
      buf_.erase(0, pos + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    if (buf_.size() > max) return ResourceExhaustedError("line too long");
    ACCELPOOL_RETURN_IF_ERROR(Fill(Left(deadline)));
  }
}

StatusOr<std::string> Reader::ReadSome(Ms timeout) {
  if (buf_.empty()) {
    Status st = Fill(timeout);
    if (!st.ok()) {
      if (eof_) return std::string();
      return st;
    }
  }
  std::string out;
  out.swap(buf_);
  return out;
}

StatusOr<int> ParseStatusLine(const std::string& line) {
  if (line.size() < 12 || line.rfind("HTTP/1.", 0) != 0) {
    return UnavailableError("malformed answer: \"" + line.substr(0, 80) + "\"");
  }
  const int status = std::atoi(line.c_str() + 9);
  if (status < 100 || status > 599) {
    return UnavailableError("malformed status in \"" + line.substr(0, 80) + "\"");
  }
  return status;
}

StatusOr<ClientResponse> ReadResponse(Reader& r, bool head_request,
                                      std::chrono::steady_clock::time_point deadline,
                                      bool* keep_alive) {
  auto left = [&] {
    return std::max(Ms(1),
                    std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now()));
  };
  auto lower = [](std::string v) {
    std::transform(v.begin(), v.end(), v.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return v;
  };
  *keep_alive = false;
  ClientResponse resp;
  for (int interim = 0;; ++interim) {
    auto head = r.ReadHead(64 << 10, left());
    if (!head.ok()) return head.status();
    resp.headers.clear();
    const std::string status_line = ParseHeaders(*head, resp.headers);
    StatusOr<int> status = ParseStatusLine(status_line);
    if (!status.ok()) return status.status();
    resp.status = *status;
    if (resp.status >= 200 || resp.status == 101) {
      *keep_alive = status_line.rfind("HTTP/1.1", 0) == 0;
      break;
    }
    if (interim == 8) return UnavailableError("more than 8 interim (1xx) answers");
  }
  if (lower(resp.headers["connection"]).find("close") != std::string::npos) *keep_alive = false;
  const bool no_body =
      head_request || resp.status == 204 || resp.status == 304 || resp.status < 200;
  auto te = resp.headers.find("transfer-encoding");
  auto cl = resp.headers.find("content-length");
  if (no_body) {
    // nothing to read
  } else if (te != resp.headers.end() && lower(te->second).find("chunked") != std::string::npos) {
    for (;;) {
      auto size_line = r.ReadLine(1024, left());
      if (!size_line.ok()) return size_line.status();
      StatusOr<uint64_t> size = ParseChunkSize(*size_line);
      if (!size.ok()) return size.status();
      const uint64_t n = *size;
      if (n > kMaxResponseBody || resp.body.size() + n > kMaxResponseBody) {
        return UnavailableError("answer larger than 1 GiB");
      }
      if (n == 0) {
        for (;;) {  // trailers up to the blank line
          auto trailer = r.ReadLine(64 << 10, left());
          if (!trailer.ok()) return trailer.status();
          if (trailer->empty()) break;
        }
        break;
      }
      ACCELPOOL_RETURN_IF_ERROR(r.ReadExact(n, resp.body, left()));
      auto crlf = r.ReadLine(2, left());
      if (!crlf.ok() || !crlf->empty()) return UnavailableError("malformed chunk");
    }
  } else if (cl != resp.headers.end()) {
    StatusOr<uint64_t> length = ParseContentLength(cl->second);
    if (!length.ok()) return length.status();
    const uint64_t n = *length;
    if (n > kMaxResponseBody) return UnavailableError("answer larger than 1 GiB");
    ACCELPOOL_RETURN_IF_ERROR(r.ReadExact(n, resp.body, left()));
  } else {
    *keep_alive = false;  // the body ends when the server closes the connection
    for (;;) {
      auto some = r.ReadSome(left());
      if (!some.ok()) return some.status();
      if (some->empty()) break;
      if (resp.body.size() + some->size() > kMaxResponseBody) {
        return UnavailableError("answer larger than 1 GiB");
      }
      resp.body += *some;
    }
  }
  return resp;
}

StatusOr<uint64_t> ParseChunkSize(const std::string& line) {
  uint64_t n = 0;
  size_t i = 0;
  for (; i < line.size() && std::isxdigit(static_cast<unsigned char>(line[i])) != 0; ++i) {
    if (i == 15) return UnavailableError("chunk size \"" + line.substr(0, 40) + "\" is too long");
    const char ch = static_cast<char>(std::tolower(static_cast<unsigned char>(line[i])));
    n = n * 16 + static_cast<uint64_t>(ch <= '9' ? ch - '0' : ch - 'a' + 10);
  }
  if (i == 0 || (i < line.size() && line[i] != ';' && line[i] != ' ' && line[i] != '\t')) {
    return UnavailableError("malformed chunk size \"" + line.substr(0, 40) + "\"");
  }
  return n;
}

StatusOr<uint64_t> ParseContentLength(const std::string& value) {
  uint64_t n = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    if (i == 18 || std::isdigit(static_cast<unsigned char>(value[i])) == 0) {
      return UnavailableError("malformed content-length \"" + value.substr(0, 40) + "\"");
    }
    n = n * 10 + static_cast<uint64_t>(value[i] - '0');
  }
  if (value.empty()) return UnavailableError("malformed content-length \"\"");
  return n;
}

std::string ParseHeaders(const std::string& head, Headers& out, std::string* malformed) {
  size_t start = 0;
  std::string first;
  bool is_first = true;
  while (start <= head.size()) {
    size_t end = head.find('\n', start);
    if (end == std::string::npos) end = head.size();
    std::string line = head.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    start = end + 1;
    if (is_first) {
      first = line;
      is_first = false;
      continue;
    }
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    const char* bad = nullptr;
    if (line[0] == ' ' || line[0] == '\t') {
      bad = "a folded header line (obs-fold)";
    } else if (colon == std::string::npos || colon == 0) {
      bad = "a header line without a name and colon";
    } else if (std::string_view(line).substr(0, colon).find_first_of(" \t") !=
               std::string_view::npos) {
      bad = "whitespace in a header name or before its colon";
    }
    if (bad != nullptr) {
      if (malformed != nullptr && malformed->empty()) *malformed = bad;
      continue;
    }
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    size_t v = colon + 1;
    while (v < line.size() && (line[v] == ' ' || line[v] == '\t')) ++v;
    std::string value = line.substr(v);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    auto it = out.find(name);
    if (it != out.end()) {
      it->second += ", " + value;
    } else {
      out.emplace(std::move(name), std::move(value));
    }
  }
  return first;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

}  // namespace accelpool::http::internal
