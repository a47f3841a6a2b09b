// PodResourcesClient against an in-process pod-resources server on a real
// unix socket.
#include "plugin/pod_resources.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "plugin/test_util.h"
#include "podresources/podresources.grpc.pb.h"

namespace accelpool::plugin {
namespace {

class FakeLister final : public v1::PodResourcesLister::Service {
 public:
  // Answers after `delay`, or at once once the client has given up (so a
  // slow answer does not hold up the server's shutdown).
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* resp) override {
    const auto until = std::chrono::steady_clock::now() + delay;
    while (std::chrono::steady_clock::now() < until && !ctx->IsCancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    *resp = answer;
    return grpc::Status::OK;
  }
  v1::ListPodResourcesResponse answer;
  std::chrono::milliseconds delay{0};
};

class PodResourcesTest : public ::testing::Test {
 protected:
  void Serve() {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    b.RegisterService(&lister_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }
  testing::TempDir dir_;
  std::string socket_ = dir_.File("kubelet.sock");
  FakeLister lister_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(PodResourcesTest, ListsPodsWithTheResourcesTheirContainersHold) {
  v1::PodResources* running = lister_.answer.add_pod_resources();
  running->set_namespace_("ml");
  running->set_name("train-0");
  v1::ContainerResources* c = running->add_containers();
  c->set_name("main");
  v1::ContainerDevices* d = c->add_devices();
  d->set_resource_name("nvidia.com/gpu");
  d->add_device_ids("GPU-a::1");
  v1::ContainerDevices* none = c->add_devices();  // listed without ids: holds nothing
  none->set_resource_name("huawei.com/Ascend910C");
  v1::PodResources* admitting = lister_.answer.add_pod_resources();
  admitting->set_namespace_("ml");
  admitting->set_name("train-1");
  admitting->add_containers()->set_name("main");
  Serve();

  PodResourcesClient client(socket_, std::chrono::milliseconds(2000));
  StatusOr<KubeletView> view = client.List();
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(*view, (KubeletView{{"ml/train-0", {{"main", {"nvidia.com/gpu"}}}},
                                {"ml/train-1", {{"main", {}}}}}));
}

TEST_F(PodResourcesTest, AMissingSocketOrASlowKubeletIsUnavailableNotAHang) {
  PodResourcesClient missing(dir_.File("none.sock"), std::chrono::milliseconds(200));
  StatusOr<KubeletView> v = missing.List();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find("mount the host's /var/lib/kubelet/pod-resources"),
            std::string::npos);

  // A kubelet that answers after 10 s: the call gives up at its deadline of
  // 200 ms. The bound leaves a loaded machine seconds past the deadline and
  // stays well below the answer.
  lister_.delay = std::chrono::seconds(10);
  Serve();
  PodResourcesClient slow(socket_, std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  v = slow.List();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(took, std::chrono::seconds(5));
}

}  // namespace
}  // namespace accelpool::plugin
