// HTTP server and client: the one place in accelpool that speaks HTTP.
//
// Everything else (the extender's endpoints, the Kubernetes client, metrics
// pages, the test apiserver) uses only the types in this header; the
// libraries behind them (OpenSSL and POSIX sockets, and cpprestsdk as the
// client's second transport) stay inside src/http so they can be replaced in
// one place.
//
// Server: register handlers by method + exact path or path prefix, then
// Start(). Port 0 binds an ephemeral port readable through port(). With TLS
// options the server serves HTTPS, reloads the certificate and key when the
// files change (checked at most every TlsOptions::reload_check), and, when a
// client CA is given, requires and verifies client certificates. Bodies over
// ServerOptions::max_body_bytes (or the route's RouteOptions::max_body_bytes)
// get 413 without being read; a request without a route, or refused by its
// route's admit check, is answered before its body is read too; and bodies
// being read at once are held to ServerOptions::max_body_bytes_in_flight
// (503 past it). A handler that throws gets a 500 with a JSON error body; no
// exception leaves the server.
//
// Client: blocking requests with headers, bearer token, CA bundle, client
// certificate and a per-request timeout, over a pool of kept-alive
// connections (or cpprestsdk's client, ClientOptions::transport), plus a streaming GET that hands
// the body to a callback line by line (for Kubernetes watches) and stops when the callback returns
// false or the stop token fires.
//
// Thread-safety: HttpServer::Handle must be called before Start(); handlers
// run concurrently on the server's threads. An HttpClient may be used from
// many threads at once.
#ifndef ACCELPOOL_HTTP_HTTP_H_
#define ACCELPOOL_HTTP_HTTP_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace accelpool {
class MetricsRegistry;
}

namespace accelpool::http {

// Header names are stored lower-case; lookups must use lower-case names.
using Headers = std::map<std::string, std::string>;

struct Request {
  std::string method;                        // "GET", "POST", ...
  std::string path;                          // decoded path without the query, "/api/v1/pods"
  std::map<std::string, std::string> query;  // decoded; a repeated key keeps the last value
  Headers headers;
  std::string body;
  std::string peer;                 // "127.0.0.1:53122"
  std::string client_cert_subject;  // verified client certificate subject, "" when none

  // The value of a query parameter, or `fallback`.
  std::string Query(const std::string& key, const std::string& fallback = "") const;
  std::string Header(const std::string& lower_name, const std::string& fallback = "") const;
};

// Writes one chunk of a streamed response body; returns false once the peer
// has gone away (stop writing then).
using ChunkWriter = std::function<bool(std::string_view chunk)>;

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  // When set, the body is streamed: the server sends the headers with
  // chunked transfer encoding and calls stream(write) on the connection's
  // thread; the response ends when it returns. `body` is ignored.
  std::function<void(const ChunkWriter& write)> stream;

  // A response with content-type application/json.
  static Response Json(int status, std::string body);
  // {"error": {"code": status, "message": message}} as JSON.
  static Response Error(int status, std::string_view message);
};

using Handler = std::function<Response(const Request&)>;

// How a route takes its requests' bodies. Checked on the request's head,
// before a byte of its body is read: a client never makes the server hold a
// body the route would refuse.
struct RouteOptions {
  // Larger bodies get 413; 0, or more than ServerOptions::max_body_bytes:
  // the server's limit.
  size_t max_body_bytes = 0;
  // Asked with the request's head (method, path, query, headers, peer,
  // client certificate; the body empty): a response it returns is sent as the
  // answer, and a body that came with the request is not read (the
  // connection then closes). Null or nullopt: the body is read and the
  // handler called.
  std::function<std::optional<Response>(const Request& head)> admit;
};

struct TlsOptions {
  std::string cert_file;  // PEM server certificate chain
  std::string key_file;   // PEM private key
  // When set, clients must present a certificate signed by this CA bundle.
  std::string client_ca_file;
  // With client_ca_file: a client may also come without a certificate (its
  // Request::client_cert_subject is then empty); one it presents must still
  // be signed by the bundle, or the handshake fails. For endpoints that serve
  // both clients with certificates and callers without (an admission
  // webhook called by an apiserver that has no client certificate for it).
  bool client_cert_optional = false;
  // How often the three files are checked for a change (inode, size,
  // modification or change time) that reloads them. A pair that does not load
  // (half written) keeps the old context until it does; open connections keep
  // the certificate they were made with.
  std::chrono::milliseconds reload_check{1000};
};

struct ServerOptions {
  // "127.0.0.1" in tests; "" is every address: IPv6 and IPv4 on one socket,
  // or IPv4 alone where the kernel has no IPv6.
  std::string host = "0.0.0.0";
  uint16_t port = 0;             // 0: an ephemeral port, see HttpServer::port()
  std::optional<TlsOptions> tls;
  size_t max_body_bytes = 8 << 20;  // larger bodies get 413 (a route may set less)
  // The bodies of the requests being read and handled at once, all
  // connections together, at most this many bytes (each counted by its
  // Content-Length until its handler returns); a request that would pass it
  // gets 503 with Retry-After, unread. 0: twice max_body_bytes. Never less
  // than max_body_bytes. The routes with an admit check (RouteOptions::admit)
  // have this budget to themselves, and the other routes another of the
  // same size: requests nobody vouched for cannot hold the admitted ones'.
  size_t max_body_bytes_in_flight = 0;
  size_t max_header_bytes = 64 << 10;  // larger headers get 431
  // At the cap, the connection idle longest between requests is closed and
  // its thread takes the new one; with none idle, the new one gets 503.
  int max_connections = 256;
  // A connection idle this long between requests is closed.
  std::chrono::milliseconds idle_timeout{60000};
  // Once the first byte of a request came, its whole head must arrive within
  // this, and its body within this plus 1 s per 64 kB of Content-Length; a
  // client that sends more slowly is disconnected (one byte a minute would
  // hold a connection thread for weeks otherwise).
  std::chrono::milliseconds header_timeout{10000};
  // Each response (each chunk of a streamed one) must be taken by the client
  // within this; a client that stops reading is disconnected.
  std::chrono::milliseconds send_timeout{30000};
  // With TLS: a client that has not completed the handshake this long after
  // its connection was accepted is dropped (one that sends nothing, or half a
  // ClientHello, would otherwise hold a connection thread).
  std::chrono::milliseconds handshake_timeout{10000};
  // Stop() closes idle connections at once and gives requests being answered
  // up to this long to send their answers (with `Connection: close`) before
  // it closes those too. Streamed responses end at once.
  std::chrono::milliseconds stop_grace{10000};
  // When set (it must outlive the server), every request is counted in
  // <metrics_prefix>_requests_total{method,route,code} and timed in
  // <metrics_prefix>_request_duration_seconds{method,route}. `route` is the
  // registered path or prefix ("unmatched" otherwise) and `method` one of
  // GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS or "other", so raw paths and
  // invented methods never become label values. A method that is not an HTTP
  // token gets 400.
  MetricsRegistry* metrics = nullptr;
  std::string metrics_prefix = "accelpool_http";
  // Where the server reports trouble of its own (out of descriptors, no
  // thread for a connection); the default drops the lines.
  Logger log;
  // Starts a connection thread running `body`; null: std::thread. A starter
  // that throws (std::system_error at the process's or the pod's thread
  // limit) turns that connection away (503 on plain HTTP) and the server
  // goes on; tests inject one.
  std::function<std::thread(std::function<void()> body)> start_thread;
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;

  // Routes `method` + exact `path` to `handler`. A later registration for the
  // same route replaces the earlier one. Unknown paths get 404, a known path
  // with another method 405.
  virtual void Handle(std::string method, std::string path, Handler handler,
                      RouteOptions options) = 0;
  void Handle(std::string method, std::string path, Handler handler) {
    Handle(std::move(method), std::move(path), std::move(handler), RouteOptions{});
  }
  // Routes every path starting with `prefix` (longest prefix wins; exact
  // routes win over prefixes).
  virtual void HandlePrefix(std::string method, std::string prefix, Handler handler) = 0;

  // Binds and starts serving. kInvalidArgument for a bad host or unreadable
  // TLS files (the message names the file); kUnavailable when the port is taken.
  virtual Status Start() = 0;
  // The bound port (the ephemeral one when ServerOptions::port was 0); 0 before Start.
  virtual uint16_t port() const = 0;
  // Stops accepting, closes idle connections, lets requests being answered
  // finish (up to ServerOptions::stop_grace), closes every connection
  // (streams see their writer fail at once) and joins the server's threads.
  // Idempotent; also done by the destructor.
  virtual void Stop() = 0;
};

std::unique_ptr<HttpServer> NewHttpServer(ServerOptions options);

// Registers GET /metrics on `server`, answering registry.Serialize() in the
// Prometheus text format. `registry` must outlive the server.
void ServeMetrics(HttpServer& server, const MetricsRegistry& registry);

struct ClientOptions {
  // "https://10.0.0.1:6443" or "http://127.0.0.1:8080"; paths are appended.
  std::string base_url;
  std::string bearer_token;                       // sent as "Authorization: Bearer ..." when set
  std::string ca_file;                            // PEM CA bundle; "" uses the system store
  std::string ca_pem;                             // PEM CA bundle given inline (kubeconfig data)
  std::string client_cert_file, client_key_file;  // PEM client certificate
  std::string client_cert_pem, client_key_pem;    // inline alternatives
  bool insecure_skip_verify = false;
  // The name sent as SNI and checked against the server's certificate, when
  // it is not the URL's host (a kubeconfig's tls-server-name: an apiserver
  // reached by an address its certificate does not name). Sockets only.
  std::string tls_server_name;
  std::chrono::milliseconds timeout{30000};  // per request, default for Send()
  std::string user_agent = "accelpool";
  // How Send() reaches the server:
  //  kSockets (default): HTTP/1.1 on the calling thread over a pool of
  //    kept-alive connections (at most max_idle_connections kept idle, each
  //    for at most idle_connection_ttl, and dropped when readable while idle:
  //    the server closed it); when writing to a kept-alive connection fails,
  //    or it ends before any byte of the answer for a GET, HEAD, PUT, DELETE,
  //    OPTIONS or TRACE, the request is sent once more on a new connection
  //    (any other method gets the error: the server may have acted on it);
  //  kCpprestsdk: cpprestsdk's asynchronous client, which hands every request
  //    to its thread pool and back.
  // Watches (StreamLines) always use a connection of their own.
  //    At most max_connections requests are in flight at once (0: no limit);
  //    more callers wait for a free connection within their timeout.
  enum class Transport { kSockets, kCpprestsdk };
  Transport transport = Transport::kSockets;
  size_t max_connections = 0;
  size_t max_idle_connections = 64;
  std::chrono::milliseconds idle_connection_ttl{30000};
};

// "sockets" / "cpprestsdk"; kInvalidArgument for any other name.
StatusOr<ClientOptions::Transport> ParseTransport(std::string_view name);

struct ClientRequest {
  std::string method = "GET";
  std::string path;  // "/api/v1/nodes?labelSelector=a%3Db"; already encoded
  Headers headers;
  std::string body;
  std::optional<std::chrono::milliseconds> timeout;  // overrides ClientOptions::timeout
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;

  // Sends one request. An HTTP error status is a successful call (look at
  // status); the Status is not OK only when no response arrived:
  // kDeadlineExceeded on timeout, kUnavailable when the connection failed,
  // kInvalidArgument for a malformed URL or path.
  virtual StatusOr<ClientResponse> Send(const ClientRequest& request) = 0;

  // Sends a GET and hands each line of the body (without the newline) to
  // `on_line` as it arrives. Returns when the server ends the body, when
  // on_line returns false, or when `stop` is requested (then kCancelled).
  // The response head is reported through `on_head` before any line (may be
  // null); a non-2xx body is delivered as lines too. `idle_timeout` bounds the
  // wait for each next piece of body (kDeadlineExceeded).
  virtual Status StreamLines(const ClientRequest& request,
                             const std::function<void(const ClientResponse& head)>& on_head,
                             const std::function<bool(std::string_view line)>& on_line,
                             std::stop_token stop, std::chrono::milliseconds idle_timeout) = 0;
};

// kInvalidArgument when base_url is not http(s)://host[:port] or an inline PEM
// or file cannot be read (the message names it).
StatusOr<std::unique_ptr<HttpClient>> NewHttpClient(ClientOptions options);

// cpprestsdk loads OpenSSL's default CA file (every system CA: tens of
// milliseconds of CPU with OpenSSL 3) into each new connection's TLS context
// before the client's own trust store replaces it (ShareClientContext). A
// process calls this once at start-up, before it starts threads: OpenSSL's
// default paths (SSL_CERT_FILE, SSL_CERT_DIR) then point at nothing, and a
// client built without a CA still trusts the system CAs, loaded once from where
// the defaults pointed before.
void DisableDefaultCaPaths();

// Percent-encodes a query component ("a=b,c" -> "a%3Db%2Cc").
std::string UrlEncode(std::string_view s);
// Decodes %XX and '+' (as space in queries); invalid escapes are kept as is.
std::string UrlDecode(std::string_view s, bool plus_is_space);

}  // namespace accelpool::http

#endif  // ACCELPOOL_HTTP_HTTP_H_
