#include "http/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace accelpool::http::testing {

namespace {

EVP_PKEY* NewKey() { return EVP_RSA_gen(2048); }

std::string PemOf(X509* cert) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

std::string PemOf(EVP_PKEY* key) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext != nullptr) {
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
}

X509* NewCert(const std::string& cn, EVP_PKEY* key, long serial) {
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

}  // namespace

struct TestCa::Impl {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  long serial = 1;
  ~Impl() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

TestCa::TestCa(std::string dir, std::string name) : impl_(std::make_unique<Impl>()), dir_(dir) {
  impl_->key = NewKey();
  if (impl_->key == nullptr) return;
  impl_->cert = NewCert(name + " test CA", impl_->key, impl_->serial++);
  X509_set_issuer_name(impl_->cert, X509_get_subject_name(impl_->cert));
  AddExt(impl_->cert, impl_->cert, NID_basic_constraints, "critical,CA:TRUE");
  AddExt(impl_->cert, impl_->cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  X509_sign(impl_->cert, impl_->key, EVP_sha256());
  ca_file_ = dir_ + "/" + name + "-ca.pem";
  ok_ = WriteFile(ca_file_, PemOf(impl_->cert));
}

TestCa::TestCa(std::string dir, std::string name, const TestCa& parent)
    : impl_(std::make_unique<Impl>()), dir_(dir) {
  impl_->key = NewKey();
  if (impl_->key == nullptr || !parent.ok()) return;
  impl_->cert = NewCert(name + " intermediate CA", impl_->key, parent.impl_->serial++);
  X509_set_issuer_name(impl_->cert, X509_get_subject_name(parent.impl_->cert));
  AddExt(impl_->cert, parent.impl_->cert, NID_basic_constraints, "critical,CA:TRUE");
  AddExt(impl_->cert, parent.impl_->cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  X509_sign(impl_->cert, parent.impl_->key, EVP_sha256());
  ca_file_ = dir_ + "/" + name + "-ca.pem";
  ok_ = WriteFile(ca_file_, PemOf(impl_->cert));
}

TestCa::~TestCa() = default;

std::string TestCa::ca_pem() const { return PemOf(impl_->cert); }

TestCa::Issued TestCa::Issue(const std::string& cn, const std::string& file_stem, bool server) {
  EVP_PKEY* key = NewKey();
  X509* cert = NewCert(cn, key, impl_->serial++);
  X509_set_issuer_name(cert, X509_get_subject_name(impl_->cert));
  AddExt(cert, impl_->cert, NID_basic_constraints, "critical,CA:FALSE");
  if (server) {
    AddExt(cert, impl_->cert, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    AddExt(cert, impl_->cert, NID_ext_key_usage, "serverAuth");
  } else {
    AddExt(cert, impl_->cert, NID_ext_key_usage, "clientAuth");
  }
  X509_sign(cert, impl_->key, EVP_sha256());
  Issued out;
  out.cert_pem = PemOf(cert);
  out.key_pem = PemOf(key);
  out.cert_file = dir_ + "/" + file_stem + ".crt";
  out.key_file = dir_ + "/" + file_stem + ".key";
  // Write to temp names and rename, so a reloading reader never sees half a file.
  WriteFile(out.key_file + ".tmp", out.key_pem);
  WriteFile(out.cert_file + ".tmp", out.cert_pem);
  std::filesystem::rename(out.key_file + ".tmp", out.key_file);
  std::filesystem::rename(out.cert_file + ".tmp", out.cert_file);
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  char* d = ::mkdtemp(tmpl.data());
  return d == nullptr ? "" : std::string(d);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  return static_cast<bool>(out);
}

std::unique_ptr<HttpServer> TestCa::MutualTlsServer(const Issued& server) const {
  ServerOptions so;
  so.host = "127.0.0.1";
  TlsOptions tls;
  tls.cert_file = server.cert_file;
  tls.key_file = server.key_file;
  tls.client_ca_file = ca_file_;
  so.tls = tls;
  return NewHttpServer(so);
}

}  // namespace accelpool::http::testing
