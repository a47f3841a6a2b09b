// OpenSSL contexts for the server and the client (CA bundles, client
// certificates, inline PEM data).
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "http/socket_io.h"

namespace accelpool::http::internal {

std::string SslError(std::string_view what) {
  std::string out(what);
  unsigned long e = 0;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    out += ": ";
    out += buf;
  }
  return out;
}

namespace {

SslCtxPtr WrapCtx(SSL_CTX* c) {
  return SslCtxPtr(c, [](SSL_CTX* p) { SSL_CTX_free(p); });
}

// The last resumable session of each peer ("host:port") a client context
// connected to. Owned by the SSL_CTX (freed with it through the ex_data free
// callback).
struct SessionCache {
  std::mutex mu;
  std::map<std::string, SSL_SESSION*> by_peer;  // guarded by mu; one reference each
  ~SessionCache() {
    for (auto& [peer, session] : by_peer) SSL_SESSION_free(session);
  }
};

void FreeSessionCache(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/,
                      long /*argl*/, void* /*argp*/) {
  delete static_cast<SessionCache*>(ptr);
}

int SessionCacheIndex() {
  static const int index =
      SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &FreeSessionCache);
  return index;
}

// SSL ex_data: the peer key (a std::string owned by the connection).
int PeerIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

SessionCache* CacheOf(SSL_CTX* ctx) {
  return static_cast<SessionCache*>(SSL_CTX_get_ex_data(ctx, SessionCacheIndex()));
}

// OpenSSL's new-session callback: keeps the session for the next connection
// to the same peer. Returns 1 when it took the reference.
int StoreSession(SSL* ssl, SSL_SESSION* session) {
  SessionCache* cache = CacheOf(SSL_get_SSL_CTX(ssl));
  const auto* peer = static_cast<const std::string*>(SSL_get_ex_data(ssl, PeerIndex()));
  if (cache == nullptr || peer == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  std::lock_guard<std::mutex> lock(cache->mu);
  SSL_SESSION*& slot = cache->by_peer[*peer];
  if (slot != nullptr) SSL_SESSION_free(slot);
  slot = session;
  return 1;
}

// Loads PEM certificates from memory into the context's trust store.
Status AddCaPem(SSL_CTX* ctx, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return InternalError("out of memory reading CA data");
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++added;
    X509_free(cert);
  }
  BIO_free(bio);
  ERR_clear_error();
  if (added == 0) {
    return InvalidArgumentError(
        "CA data holds no PEM certificate; check certificate-authority-data");
  }
  return Status::Ok();
}

Status UseCertPem(SSL_CTX* ctx, const std::string& cert_pem, const std::string& key_pem) {
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO_free(cb);
  BIO* kb = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  Status st;
  if (cert == nullptr || key == nullptr) {
    st = InvalidArgumentError(SslError("client certificate or key data is not valid PEM"));
  } else if (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1 ||
             SSL_CTX_check_private_key(ctx) != 1) {
    st = InvalidArgumentError(SslError("client certificate and key do not match"));
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return st;
}

}  // namespace

StatusOr<SslCtxPtr> ServerContext(const TlsOptions& tls) {
  SslCtxPtr ctx = WrapCtx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return InternalError(SslError("SSL_CTX_new failed"));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert_file.c_str()) != 1) {
    return InvalidArgumentError(SslError("cannot load TLS certificate " + tls.cert_file) +
                                "; pass a readable PEM certificate chain");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return InvalidArgumentError(SslError("cannot load TLS key " + tls.key_file) +
                                "; pass the PEM key matching the certificate");
  }
  if (!tls.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), tls.client_ca_file.c_str(), nullptr) != 1) {
      return InvalidArgumentError(SslError("cannot load client CA " + tls.client_ca_file) +
                                  "; pass a readable PEM CA bundle");
    }
    // Every certificate in the bundle is a trust anchor, an intermediate
    // one too (as Go's crypto/x509 and so kube-apiserver treat a CA pool).
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx.get()), X509_V_FLAG_PARTIAL_CHAIN);
    const int mode = tls.client_cert_optional ? SSL_VERIFY_PEER
                                              : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx.get(), mode, nullptr);
  }
  // Sessions (and the client certificate they carry) resume only within
  // this context: a reload builds a new one, with new ticket keys.
  static constexpr unsigned char kSessionContext[] = "accelpool-http";
  SSL_CTX_set_session_id_context(ctx.get(), kSessionContext, sizeof(kSessionContext) - 1);
  return ctx;
}

namespace {
std::optional<DefaultCaPaths>& DefaultCaPathsSlot() {
  static std::optional<DefaultCaPaths> saved;
  return saved;
}
}  // namespace

const DefaultCaPaths* SavedDefaultCaPaths() {
  const std::optional<DefaultCaPaths>& saved = DefaultCaPathsSlot();
  return saved.has_value() ? &*saved : nullptr;
}

StatusOr<SslCtxPtr> ClientContext(const ClientOptions& o) {
  SslCtxPtr ctx = WrapCtx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return InternalError(SslError("SSL_CTX_new failed"));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), o.ca_file.c_str(), nullptr) != 1) {
      return InvalidArgumentError(SslError("cannot load CA bundle " + o.ca_file) +
                                  "; pass a readable PEM file");
    }
  }
  if (!o.ca_pem.empty()) ACCELPOOL_RETURN_IF_ERROR(AddCaPem(ctx.get(), o.ca_pem));
  if (o.ca_file.empty() && o.ca_pem.empty()) {
    if (const DefaultCaPaths* saved = SavedDefaultCaPaths(); saved != nullptr) {
      // DisableDefaultCaPaths pointed OpenSSL's defaults at nothing: load
      // the system CAs from where the defaults pointed before.
      SSL_CTX_load_verify_locations(ctx.get(), saved->file.c_str(), saved->dir.c_str());
    } else {
      SSL_CTX_set_default_verify_paths(ctx.get());
    }
  }
  if (!o.client_cert_file.empty() || !o.client_key_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.client_cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), o.client_key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1) {
      return InvalidArgumentError(SslError("cannot load client certificate " + o.client_cert_file +
                                           " / key " + o.client_key_file) +
                                  "; pass a matching PEM certificate and key");
    }
  }
  if (!o.client_cert_pem.empty() || !o.client_key_pem.empty()) {
    ACCELPOOL_RETURN_IF_ERROR(UseCertPem(ctx.get(), o.client_cert_pem, o.client_key_pem));
  }
  // A kubeconfig's certificate-authority may be an intermediate CA: every
  // certificate in the bundle is a trust anchor, as kubectl (Go's
  // crypto/x509) treats it, without the chain having to reach a root.
  X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx.get()), X509_V_FLAG_PARTIAL_CHAIN);
  SSL_CTX_set_verify(ctx.get(), o.insecure_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                     nullptr);
  // Session resumption: a new connection to a server this context has
  // already verified offers the server's last session ticket, which skips
  // the certificate exchange and its signature checks on both sides (a burst
  // of requests after an idle spell opens many connections at once).
  if (SessionCacheIndex() >= 0 && PeerIndex() >= 0 &&
      SSL_CTX_set_ex_data(ctx.get(), SessionCacheIndex(), new SessionCache) == 1) {
    SSL_CTX_set_session_cache_mode(ctx.get(),
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    // A server that closes without a close_notify (common over HTTP) would
    // otherwise leave an error that marks the session not resumable; HTTP's
    // own framing tells a truncated answer.
    SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_sess_set_new_cb(ctx.get(), &StoreSession);
  }
  return ctx;
}

void OfferSession(SSL* ssl, const std::string* peer) {
  SessionCache* cache = CacheOf(SSL_get_SSL_CTX(ssl));
  if (cache == nullptr || SSL_set_ex_data(ssl, PeerIndex(), const_cast<std::string*>(peer)) != 1) {
    return;
  }
  std::lock_guard<std::mutex> lock(cache->mu);
  auto it = cache->by_peer.find(*peer);
  if (it != cache->by_peer.end()) SSL_set_session(ssl, it->second);  // takes its own reference
}

void ForgetSession(SSL* ssl) {
  SessionCache* cache = CacheOf(SSL_get_SSL_CTX(ssl));
  const auto* peer = static_cast<const std::string*>(SSL_get_ex_data(ssl, PeerIndex()));
  if (cache == nullptr || peer == nullptr) return;
  std::lock_guard<std::mutex> lock(cache->mu);
  auto it = cache->by_peer.find(*peer);
  if (it == cache->by_peer.end()) return;
  SSL_SESSION_free(it->second);
  cache->by_peer.erase(it);
}

void ShareClientContext(SSL_CTX* from, SSL_CTX* to) {
  SSL_CTX_set1_cert_store(to, SSL_CTX_get_cert_store(from));
  if (X509* cert = SSL_CTX_get0_certificate(from); cert != nullptr) {
    SSL_CTX_use_certificate(to, cert);
    if (EVP_PKEY* key = SSL_CTX_get0_privatekey(from); key != nullptr) {
      SSL_CTX_use_PrivateKey(to, key);
    }
    STACK_OF(X509)* chain = nullptr;
    if (SSL_CTX_get0_chain_certs(from, &chain) == 1 && chain != nullptr) {
      for (int i = 0; i < sk_X509_num(chain); ++i) {
        SSL_CTX_add1_chain_cert(to, sk_X509_value(chain, i));
      }
    }
  }
  // The verification flags too: X509_V_FLAG_PARTIAL_CHAIN makes every
  // bundle certificate (an intermediate CA) a trust anchor.
  X509_VERIFY_PARAM_set1(SSL_CTX_get0_param(to), SSL_CTX_get0_param(from));
  SSL_CTX_set_verify(to, SSL_CTX_get_verify_mode(from), nullptr);
}

}  // namespace accelpool::http::internal

namespace accelpool::http {

void DisableDefaultCaPaths() {
  std::optional<internal::DefaultCaPaths>& saved = internal::DefaultCaPathsSlot();
  if (saved.has_value()) return;
  auto env_or = [](const char* env, const char* fallback) {
    const char* v = std::getenv(env);
    return std::string(v != nullptr && *v != '\0' ? v : fallback);
  };
  saved = internal::DefaultCaPaths{
      env_or(X509_get_default_cert_file_env(), X509_get_default_cert_file()),
      env_or(X509_get_default_cert_dir_env(), X509_get_default_cert_dir())};
  setenv(X509_get_default_cert_file_env(), "/dev/null", 1);
  setenv(X509_get_default_cert_dir_env(), "/dev/null", 1);
}

}  // namespace accelpool::http
