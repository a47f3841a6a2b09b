// A KubeClient for tests that forwards every call to another one and runs
// hooks around some of them: to move a clock, to hold a request as a hung
// apiserver would, or to let a watch event land while a read is in flight.
// Header-only, for test targets that link accelpool_kube.
//
// Thread-safety: as the inner client's. A hook is copied before it runs, so
// it may clear itself.
#ifndef ACCELPOOL_KUBE_HOOKED_CLIENT_H_
#define ACCELPOOL_KUBE_HOOKED_CLIENT_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>

#include "kube/client.h"

namespace accelpool::kube::testing {

class HookedClient final : public KubeClient {
 public:
  explicit HookedClient(KubeClient& inner) : inner_(inner) {}
  std::function<void()> before_get, after_get, before_update, after_list;

  StatusOr<ListResult> List(const Resource& r, const std::string& ns,
                            const ListOptions& o) override {
    StatusOr<ListResult> got = inner_.List(r, ns, o);
    if (std::function<void()> hook = after_list) hook();
    return got;
  }
  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
               const std::function<void(WatchEvent&)>& on_event, std::stop_token stop) override {
    return inner_.Watch(r, ns, o, on_event, stop);
  }
  StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                               const std::string& name) override {
    if (std::function<void()> hook = before_get) hook();
    StatusOr<nlohmann::json> got = inner_.Get(r, ns, name);
    if (std::function<void()> hook = after_get) hook();
    return got;
  }
  StatusOr<nlohmann::json> Create(
      const Resource& r, const std::string& ns, const nlohmann::json& object,
      const std::string& name = "", const std::string& subresource = "",
      std::optional<std::chrono::milliseconds> within = std::nullopt) override {
    return inner_.Create(r, ns, object, name, subresource, within);
  }
  StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns, const std::string& name,
                                  const nlohmann::json& object) override {
    if (std::function<void()> hook = before_update) hook();
    return inner_.Update(r, ns, name, object);
  }
  StatusOr<nlohmann::json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                                 PatchType type, const nlohmann::json& patch,
                                 const std::string& subresource) override {
    return inner_.Patch(r, ns, name, type, patch, subresource);
  }
  Status Delete(const Resource& r, const std::string& ns, const std::string& name) override {
    return inner_.Delete(r, ns, name);
  }
  std::chrono::steady_clock::time_point RetryNotBefore() const override {
    return inner_.RetryNotBefore();
  }
  uint64_t RetryAsks() const override { return inner_.RetryAsks(); }

 private:
  KubeClient& inner_;
};

}  // namespace accelpool::kube::testing

#endif  // ACCELPOOL_KUBE_HOOKED_CLIENT_H_
