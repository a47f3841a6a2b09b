// HttpClient: ordinary requests go through cpprestsdk's http_client; the
// streaming GET used for watches runs on the socket layer in socket_io.h,
// because a cpprestsdk response body being read cannot be interrupted
// promptly when the caller wants to stop.
#include <cpprest/http_client.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "http/http.h"
#include "http/socket_io.h"

namespace accelpool::http {

namespace {

using Ms = std::chrono::milliseconds;

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
  web::http::client::http_client& ClientFor(Ms timeout);

  const ClientOptions opts_;
  const Url url_;
  const internal::SslCtxPtr tls_;  // StreamLines' context; Send's connections share it
  std::mutex mu_;
  // One cpprestsdk client per timeout value (its timeout is per client).
  std::map<int64_t, std::unique_ptr<web::http::client::http_client>> clients_;  // guarded by mu_
};

web::http::client::http_client& ClientImpl::ClientFor(Ms timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = clients_[timeout.count()];
  if (!slot) {
    web::http::client::http_client_config cfg;
    cfg.set_timeout(timeout);
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
    slot = std::make_unique<web::http::client::http_client>(web::uri(base), cfg);
  }
  return *slot;
}

StatusOr<ClientResponse> ClientImpl::Send(const ClientRequest& request) {
  const Ms timeout = request.timeout.value_or(opts_.timeout);
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
    web::http::http_response resp = ClientFor(timeout).request(req).get();
    ClientResponse out;
    out.status = resp.status_code();
    for (const auto& [k, v] : resp.headers()) out.headers[Lower(k)] = v;
    const std::vector<unsigned char> bytes = resp.extract_vector().get();
    out.body.assign(bytes.begin(), bytes.end());
    return out;
  } catch (const web::http::http_exception& e) {
    const std::string what = request.method + " " + request.path + ": " + e.what();
    if (e.error_code() == std::errc::timed_out) {
      return DeadlineExceededError(what + "; the server did not answer in " +
                                   std::to_string(timeout.count()) + " ms");
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
  const Ms connect_timeout = request.timeout.value_or(opts_.timeout);
  auto conn =
      internal::Connect(url_.host, url_.port, tls_, !opts_.insecure_skip_verify, connect_timeout);
  if (!conn.ok()) return conn.status();
  internal::Stream& s = **conn;
  // Wake the blocked read when the caller stops.
  std::stop_callback on_stop(stop, [&s] { s.Shutdown(); });
  std::string head = request.method + " " + url_.base_path + request.path + " HTTP/1.1\r\n";
  head += "Host: " + url_.host + ":" + std::to_string(url_.port) + "\r\n";
  head += "User-Agent: " + opts_.user_agent + "\r\nConnection: close\r\n";
  if (!opts_.bearer_token.empty() && request.headers.count("authorization") == 0) {
    head += "Authorization: Bearer " + opts_.bearer_token + "\r\n";
  }
  for (const auto& [k, v] : request.headers) head += k + ": " + v + "\r\n";
  if (!request.body.empty())
    head += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  head += "\r\n";
  if (!s.Write(head + request.body)) {
    return stop.stop_requested() ? Status(StatusCode::kCancelled, "stopped")
                                 : UnavailableError("connection lost sending " + request.path);
  }
  internal::Reader reader(s);
  auto fail = [&](const Status& st) {
    if (stop.stop_requested()) return Status(StatusCode::kCancelled, "stopped");
    return Status(st.code(), request.path + ": " + st.message());
  };
  auto resp_head = reader.ReadHead(64 << 10, connect_timeout);
  if (!resp_head.ok()) return fail(resp_head.status());
  ClientResponse h;
  const std::string status_line = internal::ParseHeaders(*resp_head, h.headers);
  if (status_line.size() < 12 || status_line.rfind("HTTP/1.", 0) != 0) {
    return UnavailableError("malformed response from " + url_.host + ": " + status_line);
  }
  h.status = std::atoi(status_line.c_str() + 9);
  if (on_head) on_head(h);

  const bool chunked = Lower(h.headers["transfer-encoding"]).find("chunked") != std::string::npos;
  int64_t remaining = -1;  // content-length body
  if (!chunked && h.headers.count("content-length") != 0) {
    remaining = std::atoll(h.headers["content-length"].c_str());
  }
  std::string pending;  // partial line
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
    return true;
  };
  for (;;) {
    if (stop.stop_requested()) return Status(StatusCode::kCancelled, "stopped");
    if (chunked) {
      auto size_line = reader.ReadLine(1024, idle_timeout);
      if (!size_line.ok()) return fail(size_line.status());
      const size_t n = std::strtoull(size_line->c_str(), nullptr, 16);
      if (n == 0) break;
      if (n > (size_t{64} << 20)) {
        return UnavailableError(request.path + ": a response chunk of " + std::to_string(n) +
                                " bytes exceeds the 64 MiB limit");
      }
      std::string chunk;
      Status st = reader.ReadExact(n + 2, chunk, idle_timeout);  // data + CRLF
      if (!st.ok()) return fail(st);
      chunk.resize(n);
      if (!deliver(chunk)) return Status::Ok();
    } else {
      if (remaining == 0) break;
      auto some = reader.ReadSome(idle_timeout);
      if (!some.ok()) return fail(some.status());
      if (some->empty()) {
        if (remaining > 0) return fail(UnavailableError("connection closed mid-body"));
        break;
      }
      if (remaining > 0) remaining -= static_cast<int64_t>(some->size());
      if (!deliver(*some)) return Status::Ok();
    }
  }
  if (!pending.empty()) on_line(pending);
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<HttpClient>> NewHttpClient(ClientOptions options) {
  auto url = ParseBaseUrl(options.base_url);
  if (!url.ok()) return url.status();
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
