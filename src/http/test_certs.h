// Test helper: a throw-away certificate authority that issues server and
// client certificates (RSA 2048, SAN 127.0.0.1 and localhost) into a folder.
// For tests only.
//
// Thread-safety: one TestCa per thread.
#ifndef ACCELPOOL_HTTP_TEST_CERTS_H_
#define ACCELPOOL_HTTP_TEST_CERTS_H_

#include <memory>
#include <string>

#include "http/http.h"

namespace accelpool::http::testing {

class TestCa {
 public:
  // Creates the CA key and certificate; writes <dir>/<name>-ca.pem.
  TestCa(std::string dir, std::string name);
  // An intermediate CA signed by `parent`: its ca_file() holds only its own
  // certificate, and what it issues chains to `parent` through it.
  TestCa(std::string dir, std::string name, const TestCa& parent);
  ~TestCa();
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  bool ok() const { return ok_; }
  const std::string& ca_file() const { return ca_file_; }
  std::string ca_pem() const;

  struct Issued {
    std::string cert_file, key_file;
    std::string cert_pem, key_pem;
  };
  // Issues a certificate with common name `cn` into <dir>/<file_stem>.{crt,key}.
  Issued Issue(const std::string& cn, const std::string& file_stem, bool server);
  // An HTTPS server on 127.0.0.1 (not started yet) with `server`'s
  // certificate, requiring client certificates signed by this CA.
  std::unique_ptr<HttpServer> MutualTlsServer(const Issued& server) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dir_;
  std::string ca_file_;
  bool ok_ = false;
};

// A fresh empty folder under the system temp dir.
std::string MakeTempDir(const std::string& prefix);
std::string ReadFile(const std::string& path);
bool WriteFile(const std::string& path, const std::string& data);

}  // namespace accelpool::http::testing

#endif  // ACCELPOOL_HTTP_TEST_CERTS_H_
