#include "extender/ca_injector.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "kube/config.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

constexpr size_t kMaxCaBytes = 1 << 20;
constexpr const char* kPemBegin = "-----BEGIN CERTIFICATE-----";
constexpr const char* kPemEnd = "-----END CERTIFICATE-----";

// The CA file as the caBundle carries it (base64 of the PEM text), or why not.
StatusOr<std::string> ReadCaBundle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError("cannot read the webhook CA file " + path +
                                "; mount the TLS Secret's ca.crt there or drop "
                                "--webhook-ca-bundle");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string pem = ss.str();
  if (pem.size() > kMaxCaBytes) {
    return InvalidArgumentError("the webhook CA file " + path + " is larger than 1 MiB");
  }
  const size_t begin = pem.find(kPemBegin);
  if (begin == std::string::npos || pem.find(kPemEnd, begin) == std::string::npos) {
    return InvalidArgumentError("the webhook CA file " + path +
                                " holds no PEM certificate (-----BEGIN CERTIFICATE----- ... "
                                "-----END CERTIFICATE-----); check the TLS Secret's ca.crt");
  }
  return kube::Base64Encode(pem);
}

}  // namespace

const kube::Resource& MutatingWebhookConfigurations() {
  static const kube::Resource kR{"/apis/admissionregistration.k8s.io/v1",
                                 "mutatingwebhookconfigurations", false};
  return kR;
}

CaInjector::CaInjector(kube::KubeClient& client, CaInjectorOptions options, Logger log,
                       CounterFamily* writes)
    : client_(client), options_(std::move(options)), log_(std::move(log)), writes_(writes) {}

CaInjector::~CaInjector() { Stop(); }

StatusOr<int> CaInjector::SyncOnce() {
  StatusOr<std::string> bundle = ReadCaBundle(options_.ca_file);
  if (!bundle.ok()) {
    current_ = false;
    return bundle.status();
  }
  StatusOr<nlohmann::json> obj = client_.Get(MutatingWebhookConfigurations(), "", options_.webhook);
  if (!obj.ok()) {
    current_ = false;
    if (obj.status().code() == StatusCode::kPermissionDenied) {
      return obj.status().WithPrefix("reading MutatingWebhookConfiguration " + options_.webhook +
                                     " (give the extender's service account get and patch on "
                                     "mutatingwebhookconfigurations/" +
                                     options_.webhook + ")");
    }
    return obj.status().WithPrefix("reading MutatingWebhookConfiguration " + options_.webhook);
  }
  const nlohmann::json* hooks = nullptr;
  if (auto it = obj->find("webhooks"); it != obj->end() && it->is_array()) {
    hooks = &*it;
  }
  nlohmann::json patch = nlohmann::json::array();
  patch.push_back(
      {{"op", "test"},
       {"path", "/metadata/resourceVersion"},
       {"value", kube::StringAt(*obj, nlohmann::json::json_pointer("/metadata/resourceVersion"))}});
  int stale = 0;
  for (size_t i = 0; hooks != nullptr && i < hooks->size(); ++i) {
    const nlohmann::json& h = (*hooks)[i];
    const nlohmann::json* cc = nullptr;
    if (h.is_object()) {
      if (auto it = h.find("clientConfig"); it != h.end() && it->is_object()) cc = &*it;
    }
    if (cc == nullptr) continue;
    auto have = cc->find("caBundle");
    if (have != cc->end() && have->is_string() && *have == *bundle) continue;
    patch.push_back({{"op", "add"},
                     {"path", "/webhooks/" + std::to_string(i) + "/clientConfig/caBundle"},
                     {"value", *bundle}});
    ++stale;
  }
  if (stale == 0) {
    current_ = true;
    return 0;
  }
  if (options_.may_write && !options_.may_write()) {
    current_ = false;
    return 0;
  }
  StatusOr<nlohmann::json> patched = client_.Patch(MutatingWebhookConfigurations(), "",
                                                   options_.webhook, kube::PatchType::kJson, patch);
  if (!patched.ok()) {
    current_ = false;
    if (writes_ != nullptr) writes_->WithLabels({"failed"}).Inc();
    if (patched.status().code() == StatusCode::kPermissionDenied) {
      return patched.status().WithPrefix(
          "writing the caBundle of MutatingWebhookConfiguration " + options_.webhook +
          " (give the extender's service account patch on mutatingwebhookconfigurations/" +
          options_.webhook + ")");
    }
    return patched.status().WithPrefix("writing the caBundle of MutatingWebhookConfiguration " +
                                       options_.webhook);
  }
  if (writes_ != nullptr) writes_->WithLabels({"written"}).Inc();
  current_ = true;
  log_.Info("wrote the webhook's caBundle from the CA file",
            {{"webhook", options_.webhook},
             {"ca_file", options_.ca_file},
             {"webhooks", static_cast<int64_t>(stale)}});
  return stale;
}

void CaInjector::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void CaInjector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CaInjector::Loop() {
  for (;;) {
    StatusOr<int> r = SyncOnce();
    if (!r.ok()) {
      const std::string msg = r.status().ToString();
      if (msg != last_error_) {
        log_.Warn("cannot keep the webhook's caBundle current; retrying",
                  {{"webhook", options_.webhook}, {"error", msg}});
        last_error_ = msg;
      }
    } else if (!last_error_.empty()) {
      log_.Info("the webhook's caBundle check succeeds again", {{"webhook", options_.webhook}});
      last_error_.clear();
    }
    // Until the caBundle is current (an error, or a follower waiting for the
    // active replica to write it) check again soon.
    const auto wait = Current() ? options_.period : options_.retry;
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, wait, [this] { return stop_; })) return;
  }
}

}  // namespace accelpool::extender
