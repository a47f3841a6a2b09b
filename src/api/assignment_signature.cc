#include "api/assignment_signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

namespace accelpool::api {
namespace {

constexpr std::string_view kVersion = "v1";
constexpr std::string_view kSigningFile = "signing";
constexpr size_t kMaxKeyFileBytes = 4096;

bool IsKeyId(std::string_view s) {
  if (s.empty() || s.size() > 32 || s == kSigningFile) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string Base64Url(const unsigned char* data, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((n * 4 + 2) / 3);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t{data[i]} << 16) | (i + 1 < n ? uint32_t{data[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{data[i + 2]} : 0);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    if (i + 1 < n) out += kAlphabet[(b >> 6) & 63];
    if (i + 2 < n) out += kAlphabet[b & 63];
  }
  return out;
}

// The base64url HMAC-SHA256 of the signed message.
std::string Mac(std::string_view key, std::string_view uid, std::string_view node,
                std::string_view assignment) {
  std::string msg = "accelpool.io/assignment v1\n";
  msg.append(uid).append("\n").append(node).append("\n").append(assignment);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), md, &len) == nullptr) {
    return "";
  }
  return Base64Url(md, len);
}

struct Parsed {
  std::string_view kid, mac;
};

bool Split(std::string_view sig, Parsed* out) {
  const size_t a = sig.find('.');
  if (a == std::string_view::npos || sig.substr(0, a) != kVersion) return false;
  const size_t b = sig.find('.', a + 1);
  if (b == std::string_view::npos) return false;
  out->kid = sig.substr(a + 1, b - a - 1);
  out->mac = sig.substr(b + 1);
  return IsKeyId(out->kid) && !out->mac.empty();
}

}  // namespace

StatusOr<SigningKeys> ParseSigningKeys(const std::map<std::string, std::string>& files) {
  SigningKeys k;
  auto signing = files.find(std::string(kSigningFile));
  if (signing == files.end()) {
    return InvalidArgumentError(
        "no file \"signing\" naming the key id to sign with; the key Secret holds \"signing\" "
        "and one entry per key (scripts/accelpool-certgen.sh key creates it)");
  }
  std::string_view id = TrimRight(signing->second);
  while (!id.empty() && (id.front() == ' ' || id.front() == '\t')) id.remove_prefix(1);
  for (const auto& [name, content] : files) {
    if (!IsKeyId(name)) continue;
    std::string_view key = TrimRight(content);
    if (key.size() < kMinSigningKeyBytes) {
      return InvalidArgumentError("key \"" + name + "\" has " + std::to_string(key.size()) +
                                  " bytes; a key needs at least " +
                                  std::to_string(kMinSigningKeyBytes) +
                                  " (for example: head -c 48 /dev/urandom | base64 -w0)");
    }
    k.keys.emplace(name, std::string(key));
  }
  if (!IsKeyId(id)) {
    return InvalidArgumentError("\"signing\" must hold a key id (1-32 of a-z, 0-9, -), got \"" +
                                std::string(id.substr(0, 40)) + "\"");
  }
  if (k.keys.count(std::string(id)) == 0) {
    return InvalidArgumentError("\"signing\" names key \"" + std::string(id) +
                                "\", which is not in the key set; add it first");
  }
  k.signing = std::string(id);
  return k;
}

StatusOr<std::string> SignAssignment(const SigningKeys& keys, std::string_view uid,
                                     std::string_view node, std::string_view assignment) {
  if (uid.empty() || node.empty()) {
    return InvalidArgumentError("an assignment is signed for a pod uid and a node; one is empty");
  }
  auto it = keys.keys.find(keys.signing);
  if (it == keys.keys.end()) {
    return FailedPreconditionError("no signing key \"" + keys.signing + "\"");
  }
  std::string mac = Mac(it->second, uid, node, assignment);
  if (mac.empty()) return InternalError("HMAC-SHA256 failed");
  return std::string(kVersion) + "." + keys.signing + "." + mac;
}

bool AwaitsAdmission(const nlohmann::json& pod) {
  using Ptr = nlohmann::json::json_pointer;
  const Ptr phase_ptr("/status/phase");
  const nlohmann::json* phase = pod.contains(phase_ptr) ? &pod.at(phase_ptr) : nullptr;
  if ((phase != nullptr && phase->is_string() && !phase->get_ref<const std::string&>().empty() &&
       phase->get_ref<const std::string&>() != "Pending") ||
      pod.contains(Ptr("/metadata/deletionTimestamp"))) {
    return false;
  }
  for (const char* statuses : {"/status/containerStatuses", "/status/initContainerStatuses"}) {
    const Ptr ptr(statuses);
    if (pod.contains(ptr) && pod.at(ptr).is_array() && !pod.at(ptr).empty()) {
      return false;  // admitted: kubelet has made its Allocate calls
    }
  }
  return true;
}

std::string SignatureKeyId(std::string_view signature) {
  Parsed p;
  return Split(signature, &p) ? std::string(p.kid) : std::string();
}

Status VerifyAssignment(const SigningKeys& keys, std::string_view uid, std::string_view node,
                        std::string_view assignment, std::string_view signature) {
  if (signature.empty()) {
    return PermissionDeniedError(std::string("the assignment has no ") +
                                 kAssignmentSignatureAnnotation +
                                 ": it was not written by the extender (or by one without the "
                                 "signing key)");
  }
  Parsed p;
  if (!Split(signature, &p)) {
    return PermissionDeniedError(std::string(kAssignmentSignatureAnnotation) +
                                 " is not a v1 signature (v1.<key id>.<mac>)");
  }
  auto it = keys.keys.find(std::string(p.kid));
  if (it == keys.keys.end()) {
    return NotFoundError("the assignment is signed with key \"" + std::string(p.kid) +
                         "\", which this node does not have; a key added to the Secret reaches "
                         "the nodes within about a minute");
  }
  const std::string want = Mac(it->second, uid, node, assignment);
  if (want.empty() || want.size() != p.mac.size() ||
      CRYPTO_memcmp(want.data(), p.mac.data(), want.size()) != 0) {
    return PermissionDeniedError(
        "the assignment's signature does not match it: the assignment or the signature was "
        "changed after the extender wrote them, or was copied from another pod");
  }
  return Status::Ok();
}

StatusOr<SigningKeys> LoadSigningKeys(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    return FailedPreconditionError("cannot read the assignment key directory " + dir + ": " +
                                   ec.message() + "; mount the key Secret there");
  }
  std::map<std::string, std::string> files;
  for (const std::filesystem::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || (name != kSigningFile && !IsKeyId(name))) continue;
    if (!e.is_regular_file(ec)) continue;  // follows the Secret volume's symlinks
    std::ifstream in(e.path(), std::ios::binary);
    std::string content(kMaxKeyFileBytes + 1, '\0');
    in.read(content.data(), static_cast<std::streamsize>(content.size()));
    if (in.bad()) {
      return FailedPreconditionError("cannot read " + e.path().string());
    }
    content.resize(static_cast<size_t>(in.gcount()));
    if (content.size() > kMaxKeyFileBytes) {
      return InvalidArgumentError(e.path().string() + " is over " +
                                  std::to_string(kMaxKeyFileBytes) + " bytes; is it a key?");
    }
    files.emplace(name, std::move(content));
  }
  StatusOr<SigningKeys> keys = ParseSigningKeys(files);
  if (!keys.ok()) return keys.status().WithPrefix("assignment key directory " + dir);
  return keys;
}

AssignmentKeyRing::AssignmentKeyRing(std::string dir, std::chrono::seconds interval,
                                     std::chrono::milliseconds unknown_key_reread, SigningKeys keys)
    : dir_(std::move(dir)),
      interval_(interval),
      unknown_key_reread_(unknown_key_reread),
      keys_(std::make_shared<const SigningKeys>(std::move(keys))),
      read_at_(std::chrono::steady_clock::now()) {}

StatusOr<std::unique_ptr<AssignmentKeyRing>> AssignmentKeyRing::Open(
    std::string dir, std::chrono::seconds reload_interval,
    std::chrono::milliseconds unknown_key_reread) {
  StatusOr<SigningKeys> keys = LoadSigningKeys(dir);
  if (!keys.ok()) return keys.status();
  return std::unique_ptr<AssignmentKeyRing>(new AssignmentKeyRing(
      std::move(dir), reload_interval, unknown_key_reread, std::move(keys).value()));
}

std::shared_ptr<const SigningKeys> AssignmentKeyRing::Current(
    std::chrono::steady_clock::duration max_age) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - read_at_ < max_age) return keys_;
    read_at_ = now;  // one reader re-reads; the others use the keys they have
  }
  StatusOr<SigningKeys> fresh = LoadSigningKeys(dir_);
  std::shared_ptr<const SigningKeys> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fresh.ok()) {
      keys_ = std::make_shared<const SigningKeys>(std::move(fresh).value());
      last_error_ = Status::Ok();
    } else {
      last_error_ = fresh.status();
    }
    keys = keys_;
  }
  if (!fresh.ok() && on_reload_error_) on_reload_error_(fresh.status());
  return keys;
}

StatusOr<std::string> AssignmentKeyRing::Sign(std::string_view uid, std::string_view node,
                                              std::string_view assignment) {
  return SignAssignment(*Current(interval_), uid, node, assignment);
}

Status AssignmentKeyRing::Verify(std::string_view uid, std::string_view node,
                                 std::string_view assignment, std::string_view signature) {
  Status st = VerifyAssignment(*Current(interval_), uid, node, assignment, signature);
  if (st.code() == StatusCode::kNotFound) {
    st = VerifyAssignment(*Current(unknown_key_reread_), uid, node, assignment, signature);
  }
  return st;
}

std::string AssignmentKeyRing::SigningKeyId() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_->signing;
}

std::vector<std::string> AssignmentKeyRing::KeyIds() {
  std::shared_ptr<const SigningKeys> keys = Current(interval_);
  std::vector<std::string> ids;
  ids.reserve(keys->keys.size());
  for (const auto& [id, key] : keys->keys) ids.push_back(id);
  return ids;  // a std::map is sorted
}

std::string AssignmentKeyRing::CurrentSigningKeyId() { return Current(interval_)->signing; }

Status AssignmentKeyRing::LastError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

}  // namespace accelpool::api
