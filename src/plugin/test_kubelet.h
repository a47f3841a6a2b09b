// A kubelet stand-in for tests: kubelet's Registration service on
// <dir>/kubelet.sock, recording every RegisterRequest, plus helpers to dial a
// registered plugin's DevicePlugin service over its unix socket. Like kubelet,
// it dials the plugin back (GetDevicePluginOptions) inside Register and
// refuses the registration if the plugin does not answer.
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_TEST_KUBELET_H_
#define ACCELPOOL_PLUGIN_TEST_KUBELET_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "deviceplugin/api.grpc.pb.h"

namespace accelpool::plugin::testing {

class TestKubelet final : public v1beta1::Registration::Service {
 public:
  explicit TestKubelet(std::string dir) : dir_(std::move(dir)) {}
  ~TestKubelet() override { Stop(); }

  bool Start() {
    std::error_code ec;
    std::filesystem::remove(Socket(), ec);
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + Socket(), grpc::InsecureServerCredentials());
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    return server_ != nullptr;
  }
  // Stops and removes kubelet.sock, as a kubelet restart does.
  void Stop() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
      server_.reset();
    }
    std::error_code ec;
    std::filesystem::remove(Socket(), ec);
  }

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                        v1beta1::Empty*) override {
    if (req->version() != "v1beta1") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version");
    }
    if (req->endpoint().find('/') != std::string::npos) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "endpoint must be a bare name");
    }
    // As kubelet does, dial the plugin back before accepting: a plugin that
    // registers before it serves its socket fails registration here.
    auto stub = Dial(req->endpoint());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1beta1::Empty empty;
    v1beta1::DevicePluginOptions options;
    grpc::Status dialed = stub->GetDevicePluginOptions(&ctx, empty, &options);
    if (!dialed.ok()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "cannot dial the plugin back at " + req->endpoint() + ": " +
                              dialed.error_message());
    }
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(*req);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // Waits until `n` registrations arrived in total; returns a copy of all.
  std::vector<v1beta1::RegisterRequest> WaitRegistrations(size_t n,
                                                          std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
    return requests_;
  }

  std::unique_ptr<v1beta1::DevicePlugin::Stub> Dial(const std::string& endpoint) const {
    auto ch = grpc::CreateChannel("unix:" + (std::filesystem::path(dir_) / endpoint).string(),
                                  grpc::InsecureChannelCredentials());
    return v1beta1::DevicePlugin::NewStub(ch);
  }

  std::string Socket() const { return (std::filesystem::path(dir_) / "kubelet.sock").string(); }

 private:
  const std::string dir_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::RegisterRequest> requests_;
};

}  // namespace accelpool::plugin::testing

#endif  // ACCELPOOL_PLUGIN_TEST_KUBELET_H_
