// End-to-end HTTPS tests of HttpServer's certificate reload and client
// certificate check, seen from a raw OpenSSL client: which certificate the
// server presents (SHA-256 fingerprint and subject), and whether a request
// gets an answer.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/http.h"
#include "http/test_certs.h"

namespace accelpool::http {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string Hex(const unsigned char* p, unsigned n) {
  std::string out;
  char b[3];
  for (unsigned i = 0; i < n; ++i) {
    std::snprintf(b, sizeof(b), "%02x", p[i]);
    out += b;
  }
  return out;
}

std::string Fingerprint(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (cert == nullptr || X509_digest(cert, EVP_sha256(), md, &n) != 1) return "";
  return Hex(md, n);
}

std::string FileFingerprint(const std::string& pem_file) {
  FILE* f = std::fopen(pem_file.c_str(), "r");
  if (f == nullptr) return "";
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  std::string out = Fingerprint(cert);
  X509_free(cert);
  return out;
}

// Blocks SIGPIPE on the calling (test) thread while alive, so a refused
// client's write is an EPIPE error, and drops a SIGPIPE raised meanwhile
// before restoring the mask. Only this thread: the server's threads keep the
// default disposition, so a SIGPIPE on their side would still end the test.
class NoSigpipeOnThisThread {
 public:
  NoSigpipeOnThisThread() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipeOnThisThread() {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipeOnThisThread(const NoSigpipeOnThisThread&) = delete;
  NoSigpipeOnThisThread& operator=(const NoSigpipeOnThisThread&) = delete;

 private:
  sigset_t pipe_, old_;
};

// One TLS connection to 127.0.0.1:port that does not verify the server (the
// test looks at what it presents instead) and may present a client certificate.
class RawTlsConn {
 public:
  RawTlsConn(uint16_t port, const std::string& cert_file = "", const std::string& key_file = "") {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    if (!cert_file.empty() &&
        (SSL_CTX_use_certificate_chain_file(ctx_, cert_file.c_str()) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx_, key_file.c_str(), SSL_FILETYPE_PEM) != 1)) {
      return;
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};  // no read or write waits longer than this
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1) return;
    X509* cert = SSL_get1_peer_certificate(ssl_);
    fingerprint_ = Fingerprint(cert);
    if (cert != nullptr) {
      char buf[256];
      X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
      subject_ = buf;
    }
    X509_free(cert);
  }
  ~RawTlsConn() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  RawTlsConn(const RawTlsConn&) = delete;
  RawTlsConn& operator=(const RawTlsConn&) = delete;

  // SHA-256 of the certificate the server presented; "" when no handshake.
  const std::string& fingerprint() const { return fingerprint_; }
  const std::string& subject() const { return subject_; }

  // Sends "GET <path>" on this connection (kept alive) and returns the body of
  // a 200 answer, or nullopt when none came (refused, closed, not 200).
  std::optional<std::string> Get(const std::string& path) {
    if (fingerprint_.empty()) return std::nullopt;
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (SSL_write(ssl_, req.data(), static_cast<int>(req.size())) <= 0) return std::nullopt;
    std::string in;
    char buf[4096];
    size_t head_end = std::string::npos;
    size_t want = 0;
    for (;;) {
      if (head_end != std::string::npos && in.size() >= head_end + 4 + want) break;
      const int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      in.append(buf, static_cast<size_t>(n));
      if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
        const size_t cl = in.find("content-length: ");
        if (cl == std::string::npos || cl > head_end) return std::nullopt;
        want = std::stoul(in.substr(cl + 16));
      }
    }
    if (in.rfind("HTTP/1.1 200", 0) != 0) return std::nullopt;
    return in.substr(head_end + 4, want);
  }

 private:
  NoSigpipeOnThisThread no_sigpipe_;  // first: covers every other member's use
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  std::string fingerprint_, subject_;
};

class HttpTlsReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("accelpool-tls");
    ASSERT_FALSE(dir_.empty());
    ca_one_ = std::make_unique<testing::TestCa>(dir_, "one");
    ca_two_ = std::make_unique<testing::TestCa>(dir_, "two");
    ASSERT_TRUE(ca_one_->ok() && ca_two_->ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<HttpServer> Serve(const std::string& cert, const std::string& key,
                                    const std::string& client_ca = "") {
    ServerOptions o;
    o.host = "127.0.0.1";
    TlsOptions tls;
    tls.cert_file = cert;
    tls.key_file = key;
    tls.client_ca_file = client_ca;
    tls.reload_check = 50ms;
    o.tls = tls;
    auto s = NewHttpServer(o);
    s->Handle("GET", "/who", [](const Request& r) {
      return Response::Json(200, "{\"subject\":\"" + r.client_cert_subject + "\"}");
    });
    EXPECT_TRUE(s->Start().ok());
    return s;
  }

  // The fingerprint new connections see once it equals `want`, or the last
  // one seen after 5 s.
  static std::string WaitForServed(uint16_t port, const std::string& want) {
    std::string seen;
    for (auto until = std::chrono::steady_clock::now() + 5s;
         std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms)) {
      RawTlsConn c(port);
      seen = c.fingerprint();
      if (seen == want) break;
    }
    return seen;
  }

  std::string dir_;
  std::unique_ptr<testing::TestCa> ca_one_, ca_two_;
};

void Copy(const std::string& from, const std::string& to) {
  ASSERT_TRUE(testing::WriteFile(to, testing::ReadFile(from))) << to;
}

// Copies and gives the copy the original's timestamps (as cp -p, tar and
// rsync -t do), so only the content, inode or change time tells it apart.
void CopyKeepingTimes(const std::string& from, const std::string& to) {
  struct stat st {};
  ASSERT_EQ(::stat(to.c_str(), &st), 0);
  Copy(from, to);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, to.c_str(), times, 0), 0);
}

TEST_F(HttpTlsReloadTest, NewConnectionsGetTheRotatedCertificateWithoutARestart) {
  struct Case {
    std::string name;
    // Puts the pair `stem`.{crt,key} where the server reads `dir`/tls.{crt,key}.
    std::function<void(const std::string& dir, const std::string& stem)> install;
  };
  const std::vector<Case> cases = {
      {"rewritten in place",
       [](const std::string& d, const std::string& stem) {
         Copy(stem + ".key", d + "/tls.key");
         Copy(stem + ".crt", d + "/tls.crt");
       }},
      {"renamed over",
       [](const std::string& d, const std::string& stem) {
         Copy(stem + ".crt", d + "/new.crt");
         Copy(stem + ".key", d + "/new.key");
         fs::rename(d + "/new.crt", d + "/tls.crt");
         fs::rename(d + "/new.key", d + "/tls.key");
       }},
      {"secret volume symlink swap",  // kubelet's layout: tls.crt -> ..data/tls.crt
       [](const std::string& d, const std::string& stem) {
         static int generation = 0;
         const std::string gen = d + "/..gen-" + std::to_string(++generation);
         fs::create_directory(gen);
         Copy(stem + ".crt", gen + "/tls.crt");
         Copy(stem + ".key", gen + "/tls.key");
         fs::create_directory_symlink(fs::path(gen).filename(), d + "/..data_tmp");
         fs::rename(d + "/..data_tmp", d + "/..data");
         if (!fs::is_symlink(d + "/tls.crt")) {
           fs::remove(d + "/tls.crt");
           fs::remove(d + "/tls.key");
           fs::create_symlink("..data/tls.crt", d + "/tls.crt");
           fs::create_symlink("..data/tls.key", d + "/tls.key");
         }
       }},
      {"copied keeping the old timestamps",
       [](const std::string& d, const std::string& stem) {
         if (!fs::exists(d + "/tls.crt")) {
           Copy(stem + ".crt", d + "/tls.crt");
           Copy(stem + ".key", d + "/tls.key");
           return;
         }
         CopyKeepingTimes(stem + ".key", d + "/tls.key");
         CopyKeepingTimes(stem + ".crt", d + "/tls.crt");
       }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    const std::string d = dir_ + "/case" + std::to_string(i);
    fs::create_directory(d);
    const auto a = ca_one_->Issue("server-a", "case" + std::to_string(i) + "/a", true);
    const auto b = ca_two_->Issue("server-b", "case" + std::to_string(i) + "/b", true);
    const std::string stem_a = d + "/a", stem_b = d + "/b";
    c.install(d, stem_a);
    auto server = Serve(d + "/tls.crt", d + "/tls.key");
    RawTlsConn before(server->port());
    ASSERT_EQ(before.fingerprint(), FileFingerprint(a.cert_file));
    EXPECT_NE(before.subject().find("CN=server-a"), std::string::npos) << before.subject();
    ASSERT_TRUE(before.Get("/who").has_value());

    std::this_thread::sleep_for(10ms);
    c.install(d, stem_b);
    EXPECT_EQ(WaitForServed(server->port(), FileFingerprint(b.cert_file)),
              FileFingerprint(b.cert_file));
    RawTlsConn after(server->port());
    EXPECT_NE(after.subject().find("CN=server-b"), std::string::npos) << after.subject();
    EXPECT_TRUE(after.Get("/who").has_value());
    // The connection opened before the rotation keeps working on cert A.
    EXPECT_TRUE(before.Get("/who").has_value());
    EXPECT_EQ(before.fingerprint(), FileFingerprint(a.cert_file));
  }
}

TEST_F(HttpTlsReloadTest, HalfWrittenPairKeepsServingTheOldCertificate) {
  const auto a = ca_one_->Issue("server-a", "a", true);
  const auto b = ca_two_->Issue("server-b", "b", true);
  Copy(a.cert_file, dir_ + "/tls.crt");
  Copy(a.key_file, dir_ + "/tls.key");
  auto server = Serve(dir_ + "/tls.crt", dir_ + "/tls.key");
  // Certificate B with key A: not a pair, so A stays.
  Copy(b.cert_file, dir_ + "/tls.crt");
  std::this_thread::sleep_for(200ms);
  RawTlsConn mid(server->port());
  EXPECT_EQ(mid.fingerprint(), FileFingerprint(a.cert_file));
  EXPECT_TRUE(mid.Get("/who").has_value());
  // The key arrives: B from then on.
  Copy(b.key_file, dir_ + "/tls.key");
  EXPECT_EQ(WaitForServed(server->port(), FileFingerprint(b.cert_file)),
            FileFingerprint(b.cert_file));
}

TEST_F(HttpTlsReloadTest, ClientCertificateCheckedBeforeAndAfterAReload) {
  const auto a = ca_one_->Issue("server-a", "a", true);
  const auto b = ca_one_->Issue("server-b", "b", true);
  const auto trusted = ca_one_->Issue("scheduler", "trusted", false);
  const auto stranger = ca_two_->Issue("scheduler", "stranger", false);
  Copy(a.cert_file, dir_ + "/tls.crt");
  Copy(a.key_file, dir_ + "/tls.key");
  auto server = Serve(dir_ + "/tls.crt", dir_ + "/tls.key", ca_one_->ca_file());
  struct Case {
    std::string name, cert, key;
    bool want_answer;
  };
  const std::vector<Case> cases = {
      {"no client certificate", "", "", false},
      {"signed by the configured CA", trusted.cert_file, trusted.key_file, true},
      {"signed by another CA", stranger.cert_file, stranger.key_file, false},
  };
  for (const std::string phase : {"before reload", "after reload"}) {
    if (phase == std::string("after reload")) {
      Copy(b.key_file, dir_ + "/tls.key");
      Copy(b.cert_file, dir_ + "/tls.crt");
      ASSERT_EQ(WaitForServed(server->port(), FileFingerprint(b.cert_file)),
                FileFingerprint(b.cert_file));
    }
    for (const Case& c : cases) {
      SCOPED_TRACE(phase + ": " + c.name);
      RawTlsConn conn(server->port(), c.cert, c.key);
      const auto body = conn.Get("/who");
      EXPECT_EQ(body.has_value(), c.want_answer);
      if (body) {
        EXPECT_NE(body->find("CN=scheduler"), std::string::npos) << *body;
      }
    }
  }
}

}  // namespace
}  // namespace accelpool::http
