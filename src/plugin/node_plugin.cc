#include "plugin/node_plugin.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "api/inventory_codec.h"
#include "common/strings.h"

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

// Whether something accepts connections on the unix socket `path` (kubelet
// runs): a socket file left by a kubelet that stopped refuses them. True
// when it cannot be told.
bool Accepting(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return true;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return true;
  }
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 ||
                  errno == EAGAIN || errno == EINPROGRESS;
  close(fd);
  return ok;
}

// `text` with every byte outside printable ASCII as \xNN, for a log line.
std::string Printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

// What a backend found, checked as the extender will read it. A figure out of
// the protocol's range (a library's sentinel, such as ~0 for a memory size
// read as MiB, or -1 for a core count) would make the extender refuse the
// node's whole published inventory, every vendor's devices with it; an id
// with a separator or a byte outside printable ASCII would split in a
// comma-separated visible-devices list, or not reach kubelet as a protobuf
// string. The backend is taken as failed instead, naming the field: the
// devices it served before are kept, as for a library that errors.
Status CheckDiscovered(const std::vector<core::NodeInventory>& found, const std::string& node) {
  api::InventoryDocument doc;
  doc.inventories = found;
  StatusOr<api::InventoryDocument> back = api::InventoryFromJson(api::InventoryToJson(doc), node);
  if (!back.ok()) {
    return FailedPreconditionError("the vendor library reported a figure the inventory cannot " +
                                   std::string("carry (") + back.status().message() +
                                   "); check the driver with the vendor's node tool");
  }
  for (const core::NodeInventory& inv : found) {
    for (const core::Device& dev : inv.devices) {
      for (char c : dev.id) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7f || c == ',' || c == ';' || c == '"' || c == '\\') {
          return FailedPreconditionError("device " + std::to_string(dev.index) +
                                         " has an id with a character a " +
                                         "visible-devices list cannot carry (" + Printable(dev.id) +
                                         "); check the driver with the vendor's node tool");
        }
      }
    }
  }
  return Status::Ok();
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
  std::lock_guard<std::mutex> lock(servers_mu_);
  std::vector<std::string> out;
  for (const auto& s : servers_) {
    out.push_back(s->resource());
  }
  return out;
}

NodePlugin::Discovery NodePlugin::DiscoverAll(bool quiet, const Snapshot* served) {
  Discovery out;
  out.keys.resize(drivers_.size());
  out.failed.resize(drivers_.size(), false);
  // Every backend is asked first: which of them fail decides which devices
  // count as served before the others' are looked at.
  std::vector<StatusOr<std::vector<core::NodeInventory>>> results;
  results.reserve(drivers_.size());
  for (size_t i = 0; i < drivers_.size(); ++i) {
    vendors::VendorDriver* d = drivers_[i].get();
    // While none of a backend's devices is served (at start, or at a check
    // after its whole discovery failed so far), a device that cannot be read
    // is left out and the backend's others are served. Once some are served
    // the driver's tables describe them, so a discovery is all or nothing
    // (one that fails keeps them, below); a device left out joins when a
    // check reads it, as any new device does.
    const bool nothing_served = served == nullptr || served_keys_[i].empty();
    StatusOr<std::vector<core::NodeInventory>> found =
        nothing_served ? d->DiscoverPartial() : d->Discover();
    if (found.ok()) {
      if (Status checked = CheckDiscovered(*found, options_.node); !checked.ok()) {
        found = checked;
      }
    }
    if (!found.ok()) {
      out.failed[i] = true;
      if (!quiet) {
        log_.Warn("no devices from backend",
                  {{"backend", std::string(d->Name())}, {"reason", found.status().ToString()}});
      }
      out.reasons += std::string(out.reasons.empty() ? "" : "; ") + std::string(d->Name()) + ": " +
                     found.status().message();
    }
    results.push_back(std::move(found));
  }
  std::map<std::string, std::string> found_by;  // device id -> backend
  // At a device check, a backend that serves devices and fails keeps them,
  // as served. Their ids are taken before any other backend's inventory is
  // looked at: a backend that finds the same devices (--backend=auto,nvidia)
  // must not serve them a second time beside the kept copy.
  auto kept = [&](size_t i) {
    return served != nullptr && out.failed[i] && !served_keys_[i].empty();
  };
  for (size_t i = 0; i < drivers_.size(); ++i) {
    if (!kept(i)) continue;
    for (size_t k = 0; k < served->inventories.size(); ++k) {
      if (served->drivers[k] != drivers_[i].get()) continue;
      for (const core::Device& dev : served->inventories[k].devices) {
        found_by.emplace(dev.id, std::string(drivers_[i]->Name()));
      }
    }
  }
  for (size_t i = 0; i < drivers_.size(); ++i) {
    vendors::VendorDriver* d = drivers_[i].get();
    if (kept(i)) {
      for (size_t k = 0; k < served->inventories.size(); ++k) {
        if (served->drivers[k] == d) {
          out.inventories.push_back(served->inventories[k]);
          out.owners.push_back(d);
          out.devices += served->inventories[k].devices.size();
        }
      }
      out.keys[i] = served_keys_[i];
      continue;
    }
    if (out.failed[i]) {
      continue;
    }
    StatusOr<std::vector<core::NodeInventory>>& found = results[i];
    api::InventoryDocument key;  // what this driver serves, health left out
    for (core::NodeInventory& inv : *found) {
      inv.node = options_.node;
      // Two backends that find the same devices (--backend=auto,nvidia)
      // would serve each slot id twice to kubelet and publish each device
      // twice: the first backend's inventory is kept, whole (its topology
      // describes exactly its devices).
      auto repeated = std::find_if(inv.devices.begin(), inv.devices.end(),
                                   [&](const core::Device& dev) { return found_by.count(dev.id); });
      if (repeated != inv.devices.end()) {
        if (!quiet) {
          log_.Warn("skipping an inventory whose devices another backend already serves",
                    {{"backend", std::string(d->Name())},
                     {"device", repeated->id},
                     {"served_by", found_by.at(repeated->id)}});
        }
        continue;
      }
      for (const core::Device& dev : inv.devices) {
        found_by.emplace(dev.id, std::string(d->Name()));
      }
      if (!quiet) {
        log_.Info("discovered", {{"backend", std::string(d->Name())},
                                 {"vendor", std::string(core::VendorName(inv.vendor))},
                                 {"devices", static_cast<int64_t>(inv.devices.size())},
                                 {"topology", inv.topology.kind}});
      }
      key.inventories.push_back(inv);
      for (core::Device& dev : key.inventories.back().devices) {
        dev.healthy = true;
      }
      out.devices += inv.devices.size();
      out.inventories.push_back(std::move(inv));
      out.owners.push_back(d);
    }
    if (!key.inventories.empty()) {
      out.keys[i] = api::SerializeInventory(key);
    }
  }
  return out;
}

Status NodePlugin::Start() {
  if (supervisor_.joinable()) {
    return FailedPreconditionError("the device plugin is already serving");
  }
  Discovery found = DiscoverAll(/*quiet=*/false, /*served=*/nullptr);
  if (found.devices == 0) {
    return UnavailableError("no accelerator found on node " + options_.node +
                            (found.reasons.empty() ? std::string() : " (" + found.reasons + ")") +
                            "; check --backend and that the vendor driver is installed");
  }
  state_.Reset(std::move(found.inventories), std::move(found.owners));
  served_keys_ = std::move(found.keys);
  candidate_keys_.clear();
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
  {
    std::lock_guard<std::mutex> lock(servers_mu_);
    servers_ = std::move(servers);
    pending_.clear();
    for (const auto& s : servers_) {
      pending_.insert(s->resource());
    }
  }
  allocator_->RefreshUsageMetrics();
  if (on_inventory_ && !publisher_.joinable()) {
    publisher_ = std::jthread([this](std::stop_token stop) { PublishLoop(stop); });
  }
  Publish(snap->inventories);
  health_threads_.resize(drivers_.size());
  for (size_t i = 0; i < drivers_.size(); ++i) {
    WatchHealth(i);
  }
  supervisor_ = std::jthread([this](std::stop_token stop) { Supervise(stop); });
  checker_ = std::jthread([this](std::stop_token stop) { CheckLoop(stop); });
  return Status::Ok();
}

void NodePlugin::WatchHealth(size_t i) {
  vendors::VendorDriver* driver = drivers_[i].get();
  // Assigning over a running watch stops and joins it first.
  // A watch that ends with an error (its vendor library failed for a
  // moment) is started again after a wait that doubles up to
  // health_retry_max, and starts from health_retry again once a watch has
  // run that long: without its watch a backend's devices neither fail nor
  // recover.
  health_threads_[i] = std::jthread([this, driver](std::stop_token stop) {
    std::chrono::milliseconds wait = options_.health_retry;
    while (!stop.stop_requested()) {
      const auto started = std::chrono::steady_clock::now();
      Status st =
          driver->WatchHealth(stop, [this](const vendors::HealthEvent& e) { HealthChanged(e); });
      if (st.ok() || stop.stop_requested()) {
        return;
      }
      if (std::chrono::steady_clock::now() - started >= options_.health_retry_max) {
        wait = options_.health_retry;
      }
      log_.Warn(
          "device health watch failed; it is started again after the wait. If it keeps "
          "failing, check the backend's vendor driver and library",
          {{"backend", std::string(driver->Name())},
           {"reason", st.ToString()},
           {"retry_ms", static_cast<int64_t>(wait.count())}});
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, stop, wait, [] { return false; });
      wait = std::min(wait * 2, options_.health_retry_max);
    }
  });
}

std::vector<std::string> NodePlugin::ServeNewResources() {
  SnapshotPtr snap = state_.Get();
  std::set<std::string> served;
  {
    std::lock_guard<std::mutex> lock(servers_mu_);
    for (const auto& s : servers_) {
      served.insert(s->resource());
    }
  }
  // Only the device checker adds servers after Start: none can appear for
  // these resources while their sockets start, outside the lock.
  std::vector<std::string> started;
  for (const auto& [resource, refs] : snap->resources) {
    if (served.contains(resource)) {
      continue;  // a resource whose devices all went keeps its server, listing none
    }
    ResourceServerOptions o;
    o.plugin_dir = options_.plugin_dir;
    o.resource = resource;
    auto server =
        std::make_unique<ResourceServer>(o, &state_, allocator_.get(), log_.Child("grpc"));
    if (Status st = server->Start(); !st.ok()) {
      log_.Warn("a new resource cannot be served yet; trying again at the next device check",
                {{"resource", resource}, {"error", st.ToString()}});
      continue;
    }
    std::lock_guard<std::mutex> lock(servers_mu_);
    servers_.push_back(std::move(server));
    pending_.insert(resource);
    started.push_back(resource);
  }
  return started;
}

void NodePlugin::CheckDevices(bool at_once) {
  ServeNewResources();  // one that could not be served at the last change
  // A driver that fails now says nothing about its devices: DiscoverAll
  // keeps them, as served, and the other backends' devices are judged on
  // their own.
  SnapshotPtr served = state_.Get();
  Discovery found = DiscoverAll(/*quiet=*/true, served.get());
  auto result = [this](const char* r) {
    if (metrics_ != nullptr) metrics_->DeviceChecked(r);
  };
  bool any_failed = false;
  for (size_t i = 0; i < drivers_.size(); ++i) {
    if (found.failed[i] && !served_keys_[i].empty()) {
      // Said once per reason: a library that keeps failing is one warning.
      if (found.reasons != last_check_failure_) {
        log_.Warn(
            "device check: a backend that serves devices failed; they are kept. Check the vendor "
            "driver on the node",
            {{"backend", std::string(drivers_[i]->Name())}, {"reason", found.reasons}});
        last_check_failure_ = found.reasons;
      }
      any_failed = true;
    }
  }
  if (!any_failed) {
    last_check_failure_.clear();
  }
  if (found.keys == served_keys_) {
    candidate_keys_.clear();
    result(any_failed ? "failed" : "unchanged");
    return;
  }
  if (found.devices == 0) {
    if (found.keys != candidate_keys_) {
      log_.Warn(
          "device check found no device at all; keeping the devices served. If they are really "
          "gone, restart the device plugin (its pod) to stop serving them",
          {{"reason", found.reasons}});
    }
    candidate_keys_ = found.keys;
    result("empty");
    return;
  }
  if (!at_once && found.keys != candidate_keys_) {
    candidate_keys_ = found.keys;
    log_.Info("the devices found differ from those served; serving them if the next check agrees",
              {{"next_check_ms", static_cast<int64_t>(options_.rediscover_every.count())}});
    result("pending");
    return;
  }
  candidate_keys_.clear();
  result("changed");

  SnapshotPtr before = state_.Get();
  std::set<std::string> now_ids;
  for (const core::NodeInventory& inv : found.inventories) {
    for (const core::Device& d : inv.devices) {
      now_ids.insert(d.id);
    }
  }
  std::vector<std::string> added;
  std::vector<std::string> removed;
  for (const std::string& id : now_ids) {
    if (before->by_id.find(id) == before->by_id.end()) {
      added.push_back(id);
    }
  }
  for (const auto& [id, ref] : before->by_id) {
    if (!now_ids.contains(id)) {
      removed.push_back(id);
    }
  }
  // The changed drivers' health watches start again over their new devices;
  // the others go on, and their devices keep the health they have.
  std::vector<size_t> changed;
  std::set<const vendors::VendorDriver*> unchanged;
  for (size_t i = 0; i < drivers_.size(); ++i) {
    if (found.keys[i] != served_keys_[i]) {
      changed.push_back(i);
      health_threads_[i] = std::jthread();  // stops and joins
    } else {
      unchanged.insert(drivers_[i].get());
    }
  }
  state_.Replace(std::move(found.inventories), std::move(found.owners), unchanged);
  served_keys_ = std::move(found.keys);
  for (size_t i : changed) {
    WatchHealth(i);
  }
  std::vector<std::string> resources = ServeNewResources();
  SnapshotPtr snap = state_.Get();
  size_t devices = snap->by_id.size();
  log_.Warn("the node's devices changed; serving the new set",
            {{"added", StrJoin(added, ",")},
             {"removed", StrJoin(removed, ",")},
             {"devices", static_cast<int64_t>(devices)},
             {"new_resources", StrJoin(resources, ",")}});
  // Containers keep what they were granted on a removed device; say which.
  DeviceChange change{added, removed, {}, devices};
  std::set<std::string> gone(removed.begin(), removed.end());
  for (const PodAssignment& p : store_->All()) {
    std::set<std::string> held;
    for (const api::AssignedContainer& c : p.assignment.containers) {
      for (const api::AssignedDevice& d : c.devices) {
        if (gone.contains(d.id) && held.insert(d.id).second) {
          log_.Warn("a pod holds a device that is no longer on the node; delete the pod to move it",
                    {{"pod", p.pod.Key()}, {"container", c.name}, {"device", d.id}});
          change.held.push_back(p.pod.Key() + " (" + d.id + ")");
        }
      }
    }
  }
  allocator_->RefreshUsageMetrics();
  Publish(snap->inventories);
  if (on_devices_changed_) {
    on_devices_changed_(change);
  }
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
  Publish(state_.Get()->inventories);
  if (on_health_changed_) {
    on_health_changed_(e);
  }
}

void NodePlugin::Publish(std::vector<core::NodeInventory> inventories) {
  if (!on_inventory_) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(publish_mu_);
    to_publish_ = std::move(inventories);
  }
  publish_cv_.notify_one();
}

void NodePlugin::PublishLoop(std::stop_token stop) {
  std::unique_lock<std::mutex> lock(publish_mu_);
  // wait() answers the predicate once stop is requested: a publish still
  // waiting then is dropped, not run (the next run publishes what it serves).
  while (publish_cv_.wait(lock, stop, [this] { return to_publish_.has_value(); }) &&
         !stop.stop_requested()) {
    std::vector<core::NodeInventory> inventories = std::move(*to_publish_);
    to_publish_.reset();
    lock.unlock();
    on_inventory_(inventories);
    lock.lock();
  }
}

void NodePlugin::CheckLoop(std::stop_token stop) {
  auto next_check = std::chrono::steady_clock::now() + options_.rediscover_every;
  while (!stop.stop_requested()) {
    const bool asked = check_now_.exchange(false);
    if (asked ||
        (options_.rediscover_every.count() > 0 && std::chrono::steady_clock::now() >= next_check)) {
      if (asked) {
        log_.Info("checking the node's devices now");
      }
      CheckDevices(asked);
      next_check = std::chrono::steady_clock::now() + options_.rediscover_every;
    }
    std::this_thread::sleep_for(options_.kubelet_poll);
  }
}

void NodePlugin::Supervise(std::stop_token stop) {
  // Runs beside the device checker (CheckLoop), whose discovery may take
  // seconds: a kubelet restart is noticed and answered within kubelet_poll
  // whatever it does. Both share servers_ and pending_ under servers_mu_,
  // held here only to read and change them; each registration runs outside
  // it (see servers_mu_), on the servers copied out under it.
  const std::string kubelet =
      (std::filesystem::path(options_.plugin_dir) / kKubeletSocket).string();
  SocketId registered_with;  // kubelet.sock we last registered with
  auto next_try = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    SocketId now = Identify(kubelet);
    std::vector<ResourceServer*> due;  // to serve again if need be and register
    {
      std::lock_guard<std::mutex> lock(servers_mu_);
      if (now.present && !(now == registered_with)) {
        if (registered_with.present) {
          log_.Info("kubelet.sock was recreated; serving again and re-registering");
        }
        for (const auto& s : servers_) {
          pending_.insert(s->resource());
        }
        registered_with = now;
        next_try = std::chrono::steady_clock::now();
      }
      for (const auto& s : servers_) {
        if (!s->SocketPresent() && pending_.count(s->resource()) == 0) {
          log_.Info("plugin socket disappeared; serving again", {{"resource", s->resource()}});
          pending_.insert(s->resource());
        } else if (options_.unwatched_grace.count() > 0 && now.present &&
                   pending_.count(s->resource()) == 0 && s->Unwatched(options_.unwatched_grace) &&
                   Accepting(kubelet)) {
          log_.Warn(
              "kubelet has had no ListAndWatch stream open to this resource since it closed "
              "one; it dropped the endpoint (another plugin registered the resource, or its "
              "registration server started again): registering again",
              {{"resource", s->resource()},
               {"after_ms", static_cast<int64_t>(options_.unwatched_grace.count())}});
          pending_.insert(s->resource());
        }
      }
      if (now.present && !pending_.empty() && std::chrono::steady_clock::now() >= next_try) {
        for (const auto& s : servers_) {
          if (pending_.count(s->resource()) != 0) {
            due.push_back(s.get());
          }
        }
      }
    }
    for (ResourceServer* s : due) {
      Status st = s->SocketPresent() ? Status::Ok() : s->Start();
      if (st.ok()) {
        st = s->Register();
      }
      if (st.ok()) {
        {
          // The device checker adds only resources it has just served,
          // never one in `due`, and a kubelet.sock recreated meanwhile is
          // seen at the next turn: erasing cannot lose a request to register.
          std::lock_guard<std::mutex> lock(servers_mu_);
          pending_.erase(s->resource());
        }
        if (metrics_ != nullptr) {
          metrics_->Registered(s->resource());
        }
      } else {
        log_.Warn("registration failed; retrying",
                  {{"resource", s->resource()}, {"error", st.ToString()}});
      }
    }
    if (!due.empty()) {
      next_try = std::chrono::steady_clock::now() + options_.register_retry;
    }
    std::this_thread::sleep_for(options_.kubelet_poll);
  }
}

void NodePlugin::Stop() {
  // The device checker first: it changes the health watches and servers_.
  // A discovery under way ends first.
  if (checker_.joinable()) {
    checker_.request_stop();
    checker_.join();
  }
  if (supervisor_.joinable()) {
    supervisor_.request_stop();
    supervisor_.join();
  }
  for (std::jthread& t : health_threads_) {
    t.request_stop();
  }
  health_threads_.clear();  // joins
  // A publish under way ends first (its apiserver calls have timeouts); one
  // still waiting is dropped: the next run publishes what it serves.
  publisher_ = std::jthread();
  std::lock_guard<std::mutex> lock(servers_mu_);
  for (auto& s : servers_) {
    s->Stop();
  }
}

}  // namespace accelpool::plugin
