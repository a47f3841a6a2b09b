#include "plugin/resource_server.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <utility>

#include "api/assignment_codec.h"
#include "deviceplugin/api.grpc.pb.h"

namespace accelpool::plugin {
namespace {

grpc::Status ToGrpc(const Status& st) {
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), st.message());
}

v1beta1::ListAndWatchResponse SlotList(const Snapshot& snap, const std::string& resource) {
  v1beta1::ListAndWatchResponse resp;
  auto it = snap.resources.find(resource);
  if (it == snap.resources.end()) {
    return resp;
  }
  for (const DeviceRef& ref : it->second) {
    const core::Device& d = snap.inventories[ref.inventory].devices[ref.device];
    for (int32_t s = 0; s < std::max(1, d.max_shares); ++s) {
      v1beta1::Device* out = resp.add_devices();
      out->set_id(api::SlotId(d.id, s));
      out->set_health(d.healthy ? "Healthy" : "Unhealthy");
      if (d.numa >= 0) {
        out->mutable_topology()->add_nodes()->set_id(d.numa);
      }
    }
  }
  return resp;
}

}  // namespace

std::string EndpointFor(const std::string& resource) {
  std::string name = "accelpool-" + resource + ".sock";
  for (char& c : name) {
    if (c == '/') {
      c = '_';
    }
  }
  return name;
}

class ResourceServer::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(std::string resource, DeviceState* state, Allocator* allocator,
          std::shared_ptr<std::atomic<bool>> stopping, std::shared_ptr<Watch> watch, Logger log)
      : watch_(std::move(watch)),
        log_(std::move(log)),
        resource_(std::move(resource)),
        state_(state),
        allocator_(allocator),
        stopping_(std::move(stopping)) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    watch_->open.fetch_add(1);
    watch_->since_register.store(true);
    struct Closed {
      Service* self;
      ~Closed() {
        self->watch_->last_closed_ns.store(
            std::chrono::steady_clock::now().time_since_epoch().count());
        self->watch_->open.fetch_sub(1);
      }
    } closed{this};
    int64_t seen = -1;
    // The list last sent. An empty list serialises to "" as well: `sent` makes
    // the first list go out even when it is empty (a resource whose devices
    // all went), so that every stream is answered at once.
    bool sent = false;
    std::string last;
    while (!ctx->IsCancelled() && !stopping_->load()) {
      SnapshotPtr snap = state_->WaitNewer(seen, std::chrono::milliseconds(200));
      if (snap->version == seen) {
        continue;
      }
      seen = snap->version;
      v1beta1::ListAndWatchResponse resp = SlotList(*snap, resource_);
      std::string bytes = resp.SerializeAsString();
      if (sent && bytes == last) {
        continue;  // a change of another resource
      }
      if (!writer->Write(resp)) {
        break;
      }
      sent = true;
      last = std::move(bytes);
    }
    if (!stopping_->load()) {
      log_.Info("kubelet closed its ListAndWatch stream", {{"resource", resource_}});
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override {
    std::vector<PreferredRequest> reqs;
    for (const auto& c : req->container_requests()) {
      PreferredRequest r;
      r.available.assign(c.available_deviceids().begin(), c.available_deviceids().end());
      r.must_include.assign(c.must_include_deviceids().begin(), c.must_include_deviceids().end());
      r.size = c.allocation_size();
      reqs.push_back(std::move(r));
    }
    for (const std::vector<std::string>& ids : allocator_->Preferred(resource_, reqs)) {
      auto* resp = out->add_container_responses();
      for (const std::string& id : ids) {
        resp->add_deviceids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override {
    std::vector<std::vector<std::string>> requests;
    for (const auto& c : req->container_requests()) {
      requests.emplace_back(c.devices_ids().begin(), c.devices_ids().end());
    }
    StatusOr<std::vector<ContainerAnswer>> answers = allocator_->Allocate(resource_, requests);
    if (!answers.ok()) {
      return ToGrpc(answers.status());
    }
    for (const ContainerAnswer& a : *answers) {
      auto* resp = out->add_container_responses();
      for (const auto& [k, v] : a.spec.env) {
        (*resp->mutable_envs())[k] = v;
      }
      for (const vendors::MountSpec& m : a.spec.mounts) {
        auto* mount = resp->add_mounts();
        mount->set_host_path(m.host_path);
        mount->set_container_path(m.container_path);
        mount->set_read_only(m.read_only);
      }
      for (const vendors::DeviceNode& d : a.spec.devices) {
        auto* dev = resp->add_devices();
        dev->set_host_path(d.host_path);
        dev->set_container_path(d.container_path);
        dev->set_permissions(d.permissions);
      }
      for (const std::string& cdi : a.spec.cdi_devices) {
        resp->add_cdi_devices()->set_name(cdi);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  const std::shared_ptr<Watch> watch_;
  const Logger log_;
  const std::string resource_;
  DeviceState* const state_;
  Allocator* const allocator_;
  const std::shared_ptr<std::atomic<bool>> stopping_;
};

ResourceServer::ResourceServer(ResourceServerOptions options, DeviceState* state,
                               Allocator* allocator, Logger log)
    : options_([&] {
        if (options.endpoint.empty()) {
          options.endpoint = EndpointFor(options.resource);
        }
        return options;
      }()),
      state_(state),
      allocator_(allocator),
      log_(std::move(log)),
      stopping_(std::make_shared<std::atomic<bool>>(false)) {}

ResourceServer::~ResourceServer() { Stop(); }

std::string ResourceServer::SocketPath() const {
  return (std::filesystem::path(options_.plugin_dir) / options_.endpoint).string();
}

bool ResourceServer::Unwatched(std::chrono::milliseconds grace) const {
  if (!watch_->since_register.load() || watch_->open.load() > 0) {
    return false;
  }
  const auto closed = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(watch_->last_closed_ns.load()));
  return std::chrono::steady_clock::now() - closed >= grace;
}

int ResourceServer::Watchers() const { return watch_->open.load(); }

bool ResourceServer::SocketPresent() const {
  std::error_code ec;
  return std::filesystem::exists(SocketPath(), ec);
}

Status ResourceServer::Start() {
  Stop();
  stopping_ = std::make_shared<std::atomic<bool>>(false);
  std::error_code ec;
  std::filesystem::remove(SocketPath(), ec);
  service_ =
      std::make_unique<Service>(options_.resource, state_, allocator_, stopping_, watch_, log_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + SocketPath(), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    service_.reset();
    return UnavailableError("cannot serve " + options_.resource + " on " + SocketPath() +
                            "; check that --device-plugin-dir exists and is writable");
  }
  log_.Info("serving", {{"resource", options_.resource}, {"socket", SocketPath()}});
  return Status::Ok();
}

Status ResourceServer::Register() {
  const std::string kubelet =
      (std::filesystem::path(options_.plugin_dir) / kKubeletSocket).string();
  auto channel = grpc::CreateChannel("unix:" + kubelet, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest req;
  req.set_version(kDevicePluginVersion);
  req.set_endpoint(options_.endpoint);
  req.set_resource_name(options_.resource);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  req.mutable_options()->set_pre_start_required(false);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.register_timeout);
  v1beta1::Empty resp;
  // Before the call: kubelet dials back and opens its stream while it runs.
  watch_->since_register.store(false);
  grpc::Status st = stub->Register(&ctx, req, &resp);
  if (!st.ok()) {
    return Status(static_cast<StatusCode>(st.error_code()),
                  "registering " + options_.resource + " with kubelet at " + kubelet +
                      " failed: " + st.error_message() +
                      "; check that kubelet runs and --device-plugin-dir is its directory");
  }
  log_.Info("registered with kubelet", {{"resource", options_.resource}});
  return Status::Ok();
}

void ResourceServer::Stop() {
  if (server_ == nullptr) {
    return;
  }
  stopping_->store(true);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  service_.reset();
  std::error_code ec;
  std::filesystem::remove(SocketPath(), ec);
}

}  // namespace accelpool::plugin
