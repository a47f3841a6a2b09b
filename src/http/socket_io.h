// Internal to src/http: sockets with optional TLS (OpenSSL), and HTTP/1.1
// message framing shared by the server and the client. Every socket is
// non-blocking for its whole life: reads, writes and TLS handshakes wait in
// poll() against a deadline, so no peer can hold a thread past its timeout
// (a blocking socket would leave OpenSSL waiting inside read()). Not a
// public interface; include only from src/http.
//
// Thread-safety: a Stream is used by one thread at a time, except Shutdown(),
// which may be called from any thread to wake a blocked reader.
#ifndef ACCELPOOL_HTTP_SOCKET_IO_H_
#define ACCELPOOL_HTTP_SOCKET_IO_H_

#include <netdb.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "common/status.h"
#include "http/http.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace accelpool::http::internal {

// Owns an SSL_CTX.
using SslCtxPtr = std::shared_ptr<SSL_CTX>;

class Stream {
 public:
  virtual ~Stream() = default;
  // Reads up to n bytes, waiting at most `timeout`. Returns bytes read, 0 at
  // end of stream, -1 on error, -2 on timeout.
  virtual long Read(char* buf, size_t n, std::chrono::milliseconds timeout) = 0;
  // Writes all of `data` within `timeout`; false on error or timeout (the
  // stream is then unusable: part of `data` may have gone).
  virtual bool Write(std::string_view data, std::chrono::milliseconds timeout) = 0;
  // Wakes any blocked Read/Write; later calls fail.
  virtual void Shutdown() = 0;
  virtual std::string PeerCertSubject() const { return ""; }
  // True when bytes (or the end of the stream) are waiting to be read, without
  // blocking. An idle kept-alive client connection that is readable was
  // closed by the server (or sent something unasked) and must not be reused.
  virtual bool Readable() = 0;
  // True for a TLS connection whose handshake resumed an earlier session.
  virtual bool TlsResumed() const { return false; }
  // A server-side stream from ServerTls: does the TLS handshake within
  // `timeout`; false when it failed, timed out or Shutdown() was called.
  // Other streams: true at once.
  virtual bool Handshake(std::chrono::milliseconds timeout) { return true; }
};

// Take ownership of `fd` and make it non-blocking.
std::unique_ptr<Stream> PlainStream(int fd);
// A server-side TLS stream before its handshake (see Stream::Handshake),
// which may be shut down from another thread while it waits. Null (and `fd`
// closed) when OpenSSL cannot make the connection object.
std::unique_ptr<Stream> ServerTls(int fd, const SslCtxPtr& ctx);

// Client socket options, set on every connection Connect makes: no Nagle
// delay, and TCP keepalive (first probe after kKeepAliveIdle idle, then every
// kKeepAliveInterval, kKeepAliveProbes unanswered probes end it), as Go's
// dialer keeps its connections alive. A watch that waits on an apiserver that
// vanished without closing (a host crash, a partition) fails within about
// 75 s and is re-established, instead of trailing the cluster until the
// watch's own idle timeout. False when the kernel refused one of them.
inline constexpr int kKeepAliveIdleS = 30;
inline constexpr int kKeepAliveIntervalS = 15;
inline constexpr int kKeepAliveProbes = 3;
bool SetClientSocketOptions(int fd);

// Looks `host` up as getaddrinfo does (numeric addresses at once, without a
// lookup), but gives up at `deadline` or when `stop` is requested: the
// system resolver's own retries (resolv.conf's timeout and attempts, for
// every search domain) can take far longer than a request may. A lookup
// given up on finishes on its own thread, which frees its answer; at most
// kMaxAbandonedLookups of them run at once, past which a lookup is refused
// (kUnavailable) instead of piling up threads behind a resolver that hangs.
inline constexpr int kMaxAbandonedLookups = 8;
using AddrInfoPtr = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
StatusOr<AddrInfoPtr> Resolve(const std::string& host, const std::string& port,
                              std::chrono::steady_clock::time_point deadline,
                              std::stop_token stop = {});
// Tests: replaces the system lookup Resolve runs on its thread (null puts
// getaddrinfo back), and counts the lookups given up on still running.
using LookupFn = int (*)(const char* host, const char* port, const addrinfo* hints, addrinfo** res);
void SetLookupForTest(LookupFn fn);
int AbandonedLookups();

// Connects to host:port within `timeout`; with `tls` set does the client
// handshake with SNI and host-name verification (unless insecure), within
// the same timeout. The addresses of `host` are tried in turn, each with a
// share of the time left (at least 2 s, when that much is left).
// kDeadlineExceeded when the timeout passed (a server that accepts TCP but
// never answers the handshake), kCancelled when `stop` was requested,
// kUnavailable for other failures. `tls_name`, when set, is the name sent as
// SNI and verified instead of `host`.
StatusOr<std::unique_ptr<Stream>> Connect(const std::string& host, uint16_t port,
                                          const SslCtxPtr& tls, bool verify_host,
                                          std::chrono::milliseconds timeout,
                                          std::stop_token stop = {},
                                          const std::string& tls_name = "");

// `what` followed by every queued OpenSSL error (the queue is emptied).
std::string SslError(std::string_view what);

// Server context from PEM files; client CA enables required client certs.
StatusOr<SslCtxPtr> ServerContext(const TlsOptions& tls);
// Client context: CA file/PEM (system store when both empty), client cert,
// and a cache of the last session ticket per server for resumption.
StatusOr<SslCtxPtr> ClientContext(const ClientOptions& o);
// Before the client handshake: records `peer` ("host:port", must outlive
// `ssl`) as where `ssl` connects and offers that peer's cached session, if
// `ssl`'s context was made by ClientContext. A server that no longer accepts
// the session answers with a full handshake.
void OfferSession(SSL* ssl, const std::string* peer);
// After a failed client handshake: the next connection to the peer OfferSession
// recorded on `ssl` starts a full handshake.
void ForgetSession(SSL* ssl);
// Where OpenSSL's default CA paths pointed before DisableDefaultCaPaths;
// nullptr when it was not called.
struct DefaultCaPaths {
  std::string file, dir;
};
const DefaultCaPaths* SavedDefaultCaPaths();
// Gives `to` the trust store, client certificate, key, verification
// parameters (X509_V_FLAG_PARTIAL_CHAIN) and verify mode of `from` (built
// once by ClientContext), by reference: no file is read and no PEM parsed.
// Every new connection of the cpprestsdk client calls this.
void ShareClientContext(SSL_CTX* from, SSL_CTX* to);

// Buffered reading of HTTP/1.1 framing. Each call's timeout bounds the whole
// call, however the peer spreads its bytes (one byte at a time does not
// extend it).
class Reader {
 public:
  explicit Reader(Stream& s) : s_(s) {}
  // Returns once at least one byte is buffered (at once when one is).
  // kDeadlineExceeded on timeout, kOutOfRange on a clean EOF, kUnavailable
  // on error.
  Status Await(std::chrono::milliseconds timeout);
  // Reads through the blank line ending a head; returns the head without it.
  // kResourceExhausted past max bytes, kDeadlineExceeded on timeout,
  // kUnavailable on EOF/error (kOutOfRange on a clean EOF before any byte).
  StatusOr<std::string> ReadHead(size_t max, std::chrono::milliseconds timeout);
  // Reads exactly n bytes.
  Status ReadExact(size_t n, std::string& out, std::chrono::milliseconds timeout);
  // Reads one CRLF/LF-terminated line (without the terminator).
  StatusOr<std::string> ReadLine(size_t max, std::chrono::milliseconds timeout);
  // Reads whatever is available (or waits); empty string at EOF.
  StatusOr<std::string> ReadSome(std::chrono::milliseconds timeout);
  // Bytes read from the stream and not handed out yet.
  size_t buffered() const { return buf_.size(); }

 private:
  Status Fill(std::chrono::milliseconds timeout);
  Stream& s_;
  std::string buf_;
  bool eof_ = false;
};

// The largest response body ReadResponse accepts (a LIST of every pod of a
// very large cluster stays well below it).
constexpr size_t kMaxResponseBody = size_t{1} << 30;

// Reads one HTTP/1.1 response from `r` by `deadline`, skipping up to 8
// interim (1xx) answers; `head_request` when it answers a HEAD (no body).
// The body is framed by chunked encoding (trailers read and dropped),
// content-length, or the end of the stream. Sets *keep_alive to whether the
// connection may carry another request. Errors: kOutOfRange when the stream
// ended before any byte (a kept-alive connection the server had closed),
// kDeadlineExceeded, kUnavailable with what was wrong.
StatusOr<ClientResponse> ReadResponse(Reader& r, bool head_request,
                                      std::chrono::steady_clock::time_point deadline,
                                      bool* keep_alive);

// The size on a chunked body's size line: hex digits, then nothing, a ';'
// extension or blanks. kUnavailable for anything else (no digits, garbage,
// more than 15 digits).
StatusOr<uint64_t> ParseChunkSize(const std::string& line);
// A Content-Length value: decimal digits only (at most 18). kUnavailable
// otherwise, quoting it.
StatusOr<uint64_t> ParseContentLength(const std::string& value);

// The status code of an "HTTP/1.x NNN reason" line; kUnavailable, quoting the
// line, when it is not one.
StatusOr<int> ParseStatusLine(const std::string& line);

// Splits "Name: value" lines into lower-case header names; returns the first line.
// `malformed`, when given, is set to why the head breaks RFC 9112's field
// syntax (a line without a colon, whitespace before the colon, a folded
// line), which a server must refuse: a proxy in front may read such a line
// differently (request smuggling). The lines are skipped either way.
std::string ParseHeaders(const std::string& head, Headers& out, std::string* malformed = nullptr);
std::string_view ReasonPhrase(int status);

}  // namespace accelpool::http::internal

#endif  // ACCELPOOL_HTTP_SOCKET_IO_H_
