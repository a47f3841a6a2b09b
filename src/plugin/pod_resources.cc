#include "plugin/pod_resources.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <utility>

#include "podresources/podresources.grpc.pb.h"

namespace accelpool::plugin {

KubeletView ViewFromList(const v1::ListPodResourcesResponse& list) {
  KubeletView view;
  for (const v1::PodResources& pod : list.pod_resources()) {
    auto& containers = view[pod.namespace_() + "/" + pod.name()];
    for (const v1::ContainerResources& c : pod.containers()) {
      auto& held = containers[c.name()];
      for (const v1::ContainerDevices& d : c.devices()) {
        if (d.device_ids_size() > 0) {
          held.insert(d.resource_name());
        }
      }
    }
  }
  return view;
}

struct PodResourcesClient::Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub;
};

PodResourcesClient::PodResourcesClient(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {}

PodResourcesClient::~PodResourcesClient() = default;

StatusOr<KubeletView> PodResourcesClient::List() {
  struct stat st {};
  if (::stat(socket_path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return UnavailableError("kubelet's pod-resources socket " + socket_path_ +
                            " is missing: mount the host's /var/lib/kubelet/pod-resources into "
                            "the device plugin (the chart does), or pass "
                            "--pod-resources-socket");
  }
  v1::PodResourcesLister::Stub* stub = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (channel_ == nullptr) {
      auto c = std::make_unique<Channel>();
      c->channel =
          grpc::CreateChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials());
      c->stub = v1::PodResourcesLister::NewStub(c->channel);
      channel_ = std::move(c);
    }
    stub = channel_->stub.get();
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
  v1::ListPodResourcesRequest req;
  v1::ListPodResourcesResponse resp;
  grpc::Status s = stub->List(&ctx, req, &resp);
  if (!s.ok()) {
    return UnavailableError("kubelet's pod-resources List on " + socket_path_ + " failed (" +
                            std::to_string(static_cast<int>(s.error_code())) + ": " +
                            s.error_message() + ")");
  }
  return ViewFromList(resp);
}

}  // namespace accelpool::plugin
