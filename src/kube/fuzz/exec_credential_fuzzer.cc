// libFuzzer target for the reader of an exec credential plugin's answer (the
// plugin's standard output, which the client trusts no more than any other
// program's): clang, -DACCELPOOL_FUZZ=ON (see scripts/fuzz.sh). Any input
// must give a credential with a token or a certificate and key, or an
// InvalidArgument error; the time reader likewise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kube/exec_credential.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = accelpool::kube::ParseExecCredential(text, "client.authentication.k8s.io/v1");
  if (c.ok()) {
    const bool cert = !c->client_cert_pem.empty() && !c->client_key_pem.empty();
    if (c->token.empty() && !cert) std::abort();
  } else if (c.status().code() != accelpool::StatusCode::kInvalidArgument) {
    std::abort();
  }
  auto t = accelpool::kube::ParseRfc3339(text);
  if (!t.ok() && t.status().code() != accelpool::StatusCode::kInvalidArgument) std::abort();
  return 0;
}
