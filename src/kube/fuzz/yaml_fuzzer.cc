// libFuzzer target for the kubeconfig YAML reader (block and flow style):
// clang, -DACCELPOOL_FUZZ=ON (see scripts/fuzz.sh). Any input must give a
// value or an InvalidArgument error that names a line; a parsed value must
// serialise as JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/yaml_subset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto y = accelpool::kube::ParseYamlSubset(text);
  if (y.ok()) {
    (void)y->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else if (y.status().code() != accelpool::StatusCode::kInvalidArgument ||
             y.status().message().rfind("line ", 0) != 0) {
    std::abort();  // every rejection is a bad-input error that says where
  }
  return 0;
}
