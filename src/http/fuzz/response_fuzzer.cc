// libFuzzer target for the HTTP/1.1 client's response reader (what the
// apiserver, or anything posing as it, sends back): clang, -DACCELPOOL_FUZZ=ON
// (see scripts/fuzz.sh). The first byte chooses a HEAD request (bit 0); the
// rest is the byte stream the server writes. Any input must end in a
// response or an error with a reason, within the size limit, never a crash;
// responses on a kept-alive stream are read one after another.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "http/socket_io.h"

namespace {

// A stream that hands out the fuzz input in small reads, then ends.
class MemoryStream final : public accelpool::http::internal::Stream {
 public:
  explicit MemoryStream(std::string_view data) : data_(data) {}
  long Read(char* buf, size_t n, std::chrono::milliseconds) override {
    // Short reads (at most 7 bytes) split heads, chunk sizes and CRLFs.
    const size_t take = std::min({n, data_.size(), size_t{7}});
    std::memcpy(buf, data_.data(), take);
    data_.remove_prefix(take);
    return static_cast<long>(take);
  }
  bool Write(std::string_view, std::chrono::milliseconds) override { return true; }
  void Shutdown() override {}
  bool Readable() override { return !data_.empty(); }

 private:
  std::string_view data_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace in = accelpool::http::internal;
  const bool head_request = (data[0] & 1) != 0;
  MemoryStream stream(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  in::Reader reader(stream);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int i = 0; i < 16; ++i) {
    bool keep = false;
    auto resp = in::ReadResponse(reader, head_request, deadline, &keep);
    if (!resp.ok()) {
      if (resp.status().message().empty()) std::abort();  // every error says what was wrong
      break;
    }
    if (resp->status < 101 || resp->status > 599) std::abort();
    if (resp->body.size() > in::kMaxResponseBody) std::abort();
    if (head_request && !resp->body.empty()) std::abort();
    if (!keep) break;
  }
  return 0;
}
