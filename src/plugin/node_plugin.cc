#include "plugin/node_plugin.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

namespace accelpool::plugin {
namespace {

// Identity of kubelet.sock: a recreated socket has a new inode or ctime.
struct SocketId {
  bool present = false;
  ino_t inode = 0;
  int64_t ctime_ns = 0;
  bool operator==(const SocketId&) const = default;
};

SocketId Identify(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return {};
  }
  return {true, st.st_ino,
          static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

}  // namespace

NodePlugin::NodePlugin(NodePluginOptions options, std::vector<vendors::VendorDriverPtr> drivers,
                       AssignmentStore* store, PluginMetrics* metrics, PodReporter* reporter,
                       Logger log, std::function<Status()> refresh)
    : options_(std::move(options)),
      drivers_(std::move(drivers)),
      store_(store),
      metrics_(metrics),
      log_(std::move(log)) {
  allocator_ =
      std::make_unique<Allocator>(options_.node, &state_, store_, metrics_, reporter,
                                  options_.enforcement, log_.Child("allocate"), std::move(refresh));
}

NodePlugin::~NodePlugin() { Stop(); }

std::vector<std::string> NodePlugin::Resources() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) {
    out.push_back(s->resource());
  }
  return out;
}

Status NodePlugin::Start() {
  if (supervisor_.joinable()) {
    return FailedPreconditionError("the device plugin is already serving");
  }
  std::vector<core::NodeInventory> inventories;
  std::vector<vendors::VendorDriver*> owners;
  std::string reasons;
  std::map<std::string, std::string> found_by;  // device id -> backend
  for (const vendors::VendorDriverPtr& d : drivers_) {
    StatusOr<std::vector<core::NodeInventory>> found = d->Discover();
    if (!found.ok()) {
      log_.Warn("no devices from backend",
                {{"backend", std::string(d->Name())}, {"reason", found.status().ToString()}});
      reasons += std::string(reasons.empty() ? "" : "; ") + std::string(d->Name()) + ": " +
                 found.status().message();
      continue;
    }
    for (core::NodeInventory& inv : *found) {
      inv.node = options_.node;
      // Two backends that find the same devices (--backend=auto,nvidia)
      // would serve each slot id twice to kubelet and publish each device
      // twice: the first backend's inventory is kept, whole (its topology
      // describes exactly its devices).
      auto repeated = std::find_if(inv.devices.begin(), inv.devices.end(),
                                   [&](const core::Device& dev) { return found_by.count(dev.id); });
      if (repeated != inv.devices.end()) {
        log_.Warn("skipping an inventory whose devices another backend already serves",
                  {{"backend", std::string(d->Name())},
                   {"device", repeated->id},
                   {"served_by", found_by.at(repeated->id)}});
        continue;
      }
      for (const core::Device& dev : inv.devices) {
        found_by.emplace(dev.id, std::string(d->Name()));
      }
      log_.Info("discovered", {{"backend", std::string(d->Name())},
                               {"vendor", std::string(core::VendorName(inv.vendor))},
                               {"devices", static_cast<int64_t>(inv.devices.size())},
                               {"topology", inv.topology.kind}});
      inventories.push_back(std::move(inv));
      owners.push_back(d.get());
    }
  }
  size_t devices = 0;
  for (const core::NodeInventory& inv : inventories) {
    devices += inv.devices.size();
  }
  if (devices == 0) {
    return UnavailableError("no accelerator found on node " + options_.node +
                            (reasons.empty() ? std::string() : " (" + reasons + ")") +
                            "; check --backend and that the vendor driver is installed");
  }
  state_.Reset(std::move(inventories), std::move(owners));
  SnapshotPtr snap = state_.Get();
  // All or nothing: the caller retries Start, and servers left behind from a
  // failed try would be served and registered twice on the same sockets.
  std::vector<std::unique_ptr<ResourceServer>> servers;
  for (const auto& [resource, refs] : snap->resources) {
    ResourceServerOptions o;
    o.plugin_dir = options_.plugin_dir;
    o.resource = resource;
    servers.push_back(
        std::make_unique<ResourceServer>(o, &state_, allocator_.get(), log_.Child("grpc")));
    if (Status st = servers.back()->Start(); !st.ok()) {
      for (auto& s : servers) {
        s->Stop();  // removes the sockets served so far
      }
      return st;
    }
  }
  servers_ = std::move(servers);
  allocator_->RefreshUsageMetrics();
  if (on_inventory_) {
    on_inventory_(snap->inventories);
  }
  for (const vendors::VendorDriverPtr& d : drivers_) {
    vendors::VendorDriver* driver = d.get();
    health_threads_.emplace_back([this, driver](std::stop_token stop) {
      Status st =
          driver->WatchHealth(stop, [this](const vendors::HealthEvent& e) { HealthChanged(e); });
      if (!st.ok()) {
        log_.Warn("device health is not watched",
                  {{"backend", std::string(driver->Name())}, {"reason", st.ToString()}});
      }
    });
  }
  supervisor_ = std::jthread([this](std::stop_token stop) { Supervise(stop); });
  return Status::Ok();
}

void NodePlugin::HealthChanged(const vendors::HealthEvent& e) {
  if (!state_.SetHealth(e.device_id, e.healthy)) {
    return;
  }
  log_.Log(e.healthy ? LogLevel::kInfo : LogLevel::kWarn, "device health changed",
           {{"device", e.device_id}, {"healthy", e.healthy}, {"reason", e.reason}});
  if (metrics_ != nullptr) {
    metrics_->SetHealth(std::string(core::VendorName(e.vendor)), e.device_id, e.healthy);
  }
  if (on_inventory_) {
    on_inventory_(state_.Get()->inventories);
  }
}

void NodePlugin::Supervise(std::stop_token stop) {
  const std::string kubelet =
      (std::filesystem::path(options_.plugin_dir) / kKubeletSocket).string();
  SocketId registered_with;  // kubelet.sock we last registered with
  std::set<std::string> pending;
  for (const auto& s : servers_) {
    pending.insert(s->resource());
  }
  auto next_try = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    SocketId now = Identify(kubelet);
    if (now.present && !(now == registered_with)) {
      if (registered_with.present) {
        log_.Info("kubelet.sock was recreated; serving again and re-registering");
      }
      for (const auto& s : servers_) {
        pending.insert(s->resource());
      }
      registered_with = now;
      next_try = std::chrono::steady_clock::now();
    }
    for (const auto& s : servers_) {
      if (!s->SocketPresent() && pending.count(s->resource()) == 0) {
        log_.Info("plugin socket disappeared; serving again", {{"resource", s->resource()}});
        pending.insert(s->resource());
      }
    }
    if (now.present && !pending.empty() && std::chrono::steady_clock::now() >= next_try) {
      for (const auto& s : servers_) {
        if (pending.count(s->resource()) == 0) {
          continue;
        }
        Status st = s->SocketPresent() ? Status::Ok() : s->Start();
        if (st.ok()) {
          st = s->Register();
        }
        if (st.ok()) {
          pending.erase(s->resource());
          if (metrics_ != nullptr) {
            metrics_->Registered(s->resource());
          }
        } else {
          log_.Warn("registration failed; retrying",
                    {{"resource", s->resource()}, {"error", st.ToString()}});
        }
      }
      next_try = std::chrono::steady_clock::now() + options_.register_retry;
    }
    std::this_thread::sleep_for(options_.kubelet_poll);
  }
}

void NodePlugin::Stop() {
  if (supervisor_.joinable()) {
    supervisor_.request_stop();
    supervisor_.join();
  }
  for (std::jthread& t : health_threads_) {
    t.request_stop();
  }
  health_threads_.clear();  // joins
  for (auto& s : servers_) {
    s->Stop();
  }
}

}  // namespace accelpool::plugin
