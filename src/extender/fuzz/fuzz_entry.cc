#include "extender/fuzz/fuzz_entry.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "core/profiles.h"
#include "extender/handlers.h"
#include "extender/webhook.h"

namespace accelpool::extender::fuzz {
namespace {

// A cluster of four 8-GPU nodes (one with an inventory that did not parse),
// an extender without Kubernetes writes, and its handlers.
struct Fixture {
  Fixture() {
    for (const char* name : {"node-a", "node-b", "node-c"}) {
      StatusOr<core::NodeInventory> inv = core::MakeProfileNode("nvidia-hgx-8", name);
      if (!inv.ok()) std::abort();
      for (core::Device& d : inv->devices) d.max_shares = 4;
      cache.UpsertNode(name, std::vector<core::NodeInventory>{*inv}, 1, {});
    }
    cache.UpsertNode("node-bad",
                     StatusOr<std::vector<core::NodeInventory>>(InvalidArgumentError("bad")), 0, {});
    auto e = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
    if (!e.ok()) std::abort();
    ext = std::move(e).value();
    handlers = std::make_unique<Handlers>(*ext, nullptr, nullptr, Logger());
    webhook = std::make_unique<Webhook>(WebhookOptions{}, &cache, Logger());
  }
  Cache cache;
  std::unique_ptr<Extender> ext;
  std::unique_ptr<Handlers> handlers;
  std::unique_ptr<Webhook> webhook;
};

Fixture& Get() {
  static Fixture* f = new Fixture();  // lives for the process, as libFuzzer expects
  return *f;
}

int Check(const char* verb, const Reply& r) {
  if (r.status != 200 && r.status != 400) {
    std::fprintf(stderr, "%s: unexpected status %d: %s\n", verb, r.status, r.body.c_str());
    std::abort();
  }
  if (!nlohmann::json::accept(r.body)) {
    std::fprintf(stderr, "%s: reply is not JSON: %s\n", verb, r.body.c_str());
    std::abort();
  }
  return r.status;
}

std::string_view View(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace

int FuzzFilter(const uint8_t* data, size_t size) {
  return Check("filter", Get().handlers->Filter(View(data, size)));
}
int FuzzPrioritize(const uint8_t* data, size_t size) {
  return Check("prioritize", Get().handlers->Prioritize(View(data, size)));
}
int FuzzBind(const uint8_t* data, size_t size) {
  return Check("bind", Get().handlers->Bind(View(data, size)));
}
int FuzzPreempt(const uint8_t* data, size_t size) {
  return Check("preempt", Get().handlers->Preempt(View(data, size)));
}
int FuzzMutate(const uint8_t* data, size_t size) {
  return Check("mutate", Get().webhook->Mutate(View(data, size)));
}

}  // namespace accelpool::extender::fuzz
