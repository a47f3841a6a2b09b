#include "plugin/node_plugin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "api/inventory_codec.h"
#include "common/metrics.h"
#include "plugin/test_kubelet.h"
#include "plugin/test_util.h"
#include "vendors/fake/fake_driver.h"

namespace accelpool::plugin {
namespace {

using testing::Ctr;
using testing::Dev;
using testing::Pod;
using testing::TempDir;
using testing::TestKubelet;

constexpr auto kWait = std::chrono::seconds(5);

// Polls `done` every 10 ms for up to `timeout`.
template <typename F>
bool WaitFor(F done, std::chrono::milliseconds timeout = kWait) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// accelpool_plugin_device_checks_total{result="<result>"} as rendered; -1
// when there is no such series.
double DeviceChecks(const MetricsRegistry& registry, const std::string& result) {
  const std::string page = registry.Serialize();
  const std::string series = "accelpool_plugin_device_checks_total{result=\"" + result + "\"} ";
  size_t at = page.find(series);
  return at == std::string::npos ? -1.0 : std::stod(page.substr(at + series.size()));
}

// What most tests below share: one fake backend reading DIR/inv.json for
// node "n", and the plugin's options over DIR.
std::vector<vendors::VendorDriverPtr> FakeDrivers(const TempDir& dir, int copies = 1) {
  std::vector<vendors::VendorDriverPtr> drivers;
  for (int i = 0; i < copies; ++i) {
    drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
        vendors::fake::FakeDriverOptions{dir.File("inv.json"), "n"}));
  }
  return drivers;
}

NodePluginOptions StartOptions(const TempDir& dir) {
  NodePluginOptions o;
  o.node = "n";
  o.plugin_dir = dir.path();
  o.kubelet_poll = std::chrono::milliseconds(20);
  o.register_retry = std::chrono::milliseconds(50);
  o.enforcement.state_root = dir.File("containers");
  return o;
}

class NodePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory());
    ASSERT_TRUE(kubelet_.Start());
    auto m = PluginMetrics::New(registry_);
    ASSERT_TRUE(m.ok());
    metrics_ = std::move(m).value();
    std::vector<vendors::VendorDriverPtr> drivers;
    auto fake = std::make_unique<vendors::fake::FakeDriver>(vendors::fake::FakeDriverOptions{
        dir_.File("inv.json"), "node-a", std::chrono::milliseconds(20)});
    fake_ = fake.get();
    drivers.push_back(std::move(fake));
    NodePluginOptions o;
    o.node = "node-a";
    o.plugin_dir = dir_.path();
    o.kubelet_poll = std::chrono::milliseconds(20);
    o.register_retry = std::chrono::milliseconds(50);
    o.enforcement.state_root = dir_.File("containers");
    plugin_ = std::make_unique<NodePlugin>(o, std::move(drivers), &store_, metrics_.get(),
                                           &reporter_, Logger());
    plugin_->OnHealthChanged([this](const vendors::HealthEvent& e) {
      std::lock_guard<std::mutex> lock(health_mu_);
      health_changes_.push_back(e.device_id + (e.healthy ? " healthy" : " unhealthy"));
    });
    ASSERT_TRUE(plugin_->Start().ok());
  }
  void TearDown() override { plugin_.reset(); }

  // The health changes OnHealthChanged reported, once there are `n`.
  std::vector<std::string> HealthChanges(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(health_mu_);
        if (health_changes_.size() >= n) return health_changes_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::lock_guard<std::mutex> lock(health_mu_);
    return health_changes_;
  }

  std::string EndpointOf(const std::string& resource) {
    for (const auto& r : kubelet_.WaitRegistrations(2, kWait)) {
      if (r.resource_name() == resource) {
        return r.endpoint();
      }
    }
    return "";
  }

  TempDir dir_;
  TestKubelet kubelet_{dir_.path()};
  MetricsRegistry registry_;
  std::unique_ptr<PluginMetrics> metrics_;
  AssignmentStore store_;
  testing::RecordingReporter reporter_;
  vendors::fake::FakeDriver* fake_ = nullptr;
  std::mutex health_mu_;
  std::vector<std::string> health_changes_;  // guarded by health_mu_
  std::unique_ptr<NodePlugin> plugin_;
};

TEST_F(NodePluginTest, RegistersEachResourceWithABareEndpoint) {
  auto regs = kubelet_.WaitRegistrations(2, kWait);
  ASSERT_EQ(regs.size(), 2u);
  std::set<std::string> names;
  for (const auto& r : regs) {
    names.insert(r.resource_name());
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_EQ(r.endpoint().find('/'), std::string::npos);
    EXPECT_TRUE(r.options().get_preferred_allocation_available());
  }
  EXPECT_EQ(names, (std::set<std::string>{"huawei.com/Ascend910C", "nvidia.com/gpu"}));

  auto stub = kubelet_.Dial(EndpointOf("nvidia.com/gpu"));
  grpc::ClientContext ctx;
  v1beta1::DevicePluginOptions opts;
  ASSERT_TRUE(stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &opts).ok());
  EXPECT_TRUE(opts.get_preferred_allocation_available());
}

// The stand-in dials every registering plugin back, as kubelet does, so the
// registrations above prove that each socket was served before Register. A
// registration naming a socket nobody serves is refused.
TEST_F(NodePluginTest, KubeletStandInRefusesAPluginThatDoesNotServeYet) {
  auto ch = grpc::CreateChannel("unix:" + kubelet_.Socket(), grpc::InsecureChannelCredentials());
  auto registration = v1beta1::Registration::NewStub(ch);
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint("nobody-serves-this.sock");
  req.set_resource_name("example.com/gpu");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1beta1::Empty resp;
  grpc::Status st = registration->Register(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
}

TEST_F(NodePluginTest, ReRegistersWhenKubeletSockIsRecreated) {
  ASSERT_EQ(kubelet_.WaitRegistrations(2, kWait).size(), 2u);
  kubelet_.Stop();
  // kubelet removes plugin sockets when it starts again.
  std::filesystem::remove(dir_.File(EndpointFor("nvidia.com/gpu")));
  const auto restarted = std::chrono::steady_clock::now();
  ASSERT_TRUE(kubelet_.Start());
  auto regs = kubelet_.WaitRegistrations(4, kWait);
  ASSERT_EQ(regs.size(), 4u);
  // Noticed within a poll of 20 ms and registered at once. The bound leaves
  // a loaded machine seconds and stays well below the other way a resource
  // is registered again, after the unwatched grace of 10 s.
  EXPECT_LT(std::chrono::steady_clock::now() - restarted, std::chrono::seconds(5));
  EXPECT_TRUE(std::filesystem::exists(dir_.File(EndpointFor("nvidia.com/gpu"))));
  // The re-served socket answers.
  auto stub = kubelet_.Dial(EndpointOf("nvidia.com/gpu"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kWait);
  v1beta1::DevicePluginOptions opts;
  EXPECT_TRUE(stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &opts).ok());
}

// A backend over the fake driver of the file `path` on node "n" whose
// discovery a test changes (Name and Discover); its health and container
// specs are the fake's.
class OverFakeDriver : public vendors::VendorDriver {
 public:
  explicit OverFakeDriver(std::string path) : inner_({std::move(path), "n"}) {}

  // VendorDriver:
  Status WatchHealth(std::stop_token stop, const vendors::HealthSink& sink) override {
    return inner_.WatchHealth(stop, sink);
  }
  StatusOr<vendors::ContainerSpec> BuildContainerSpec(
      const std::vector<vendors::GrantedDevice>& grants) const override {
    return inner_.BuildContainerSpec(grants);
  }

 protected:
  vendors::fake::FakeDriver inner_;
};

// A backend whose discovery takes `slow` from its second call on (the device
// checks; the first is Start's), as NVML can on a sick GPU, until released.
class SlowDriver : public OverFakeDriver {
 public:
  SlowDriver(std::string path, std::chrono::milliseconds slow)
      : OverFakeDriver(std::move(path)), slow_(slow) {}
  std::string_view Name() const override { return "slow"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override {
    if (calls_++ > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      discovering_ = true;
      ++slow_calls_;
      cv_.wait_for(lock, slow_, [&] { return released_; });
      discovering_ = false;
    }
    return inner_.Discover();
  }
  // Whether a slow discovery is under way, and how many began.
  bool Discovering() {
    std::lock_guard<std::mutex> lock(mu_);
    return discovering_;
  }
  int SlowCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    return slow_calls_;
  }
  // Ends the slow discovery under way; later ones answer at once.
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  const std::chrono::milliseconds slow_;
  std::atomic<int> calls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool discovering_ = false;  // guarded by mu_
  int slow_calls_ = 0;        // guarded by mu_
  bool released_ = false;     // guarded by mu_
};

// Device checks run beside the registration: a kubelet restart while a
// discovery stalls for seconds is answered at once, not after it.
TEST(NodePluginRegistrationTest, ASlowDeviceCheckDoesNotHoldBackReRegistration) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), testing::MixedInventory());
  TestKubelet kubelet(dir.path());
  ASSERT_TRUE(kubelet.Start());
  AssignmentStore store;
  NodePluginOptions o = StartOptions(dir);
  o.rediscover_every = std::chrono::milliseconds(50);
  // Registered again only because kubelet.sock was recreated, not after
  // the grace for an endpoint kubelet stopped watching (10 s by default,
  // the bound below).
  o.unwatched_grace = std::chrono::seconds(60);
  std::vector<vendors::VendorDriverPtr> drivers;
  // A discovery of 30 s: far longer than the re-registration may take on a
  // loaded machine (10 s below). The test ends it, however it ends, before
  // the plugin stops (its device checker waits for it).
  auto owned = std::make_unique<SlowDriver>(dir.File("inv.json"), std::chrono::seconds(30));
  SlowDriver* slow = owned.get();
  drivers.push_back(std::move(owned));
  NodePlugin p(o, std::move(drivers), &store, nullptr, nullptr, Logger());
  struct ReleaseAtEnd {
    SlowDriver* slow;
    ~ReleaseAtEnd() { slow->Release(); }
  } release_at_end{slow};
  ASSERT_TRUE(p.Start().ok());
  ASSERT_EQ(kubelet.WaitRegistrations(2, kWait).size(), 2u);
  ASSERT_TRUE(WaitFor([&] { return slow->SlowCalls() >= 1; }));
  ASSERT_TRUE(slow->Discovering());

  kubelet.Stop();  // kubelet restarts: kubelet.sock is recreated
  ASSERT_TRUE(kubelet.Start());
  EXPECT_EQ(kubelet.WaitRegistrations(4, std::chrono::seconds(10)).size(), 4u);
  EXPECT_TRUE(slow->Discovering()) << "re-registered only after the slow discovery";
  EXPECT_EQ(p.Resources().size(), 2u);
}

// Kubelet drops an endpoint while both sockets stay (another plugin
// registered the resource and went, or kubelet's registration server started
// again on the same socket): it closes its ListAndWatch stream and never
// calls again. The plugin registers the resource again once no stream has
// been open for the grace period; a resource kubelet still watches is left
// alone. (It waited for a kubelet.sock of another inode for ever.)
TEST(NodePluginRegistrationTest, AResourceKubeletStoppedWatchingIsRegisteredAgain) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), testing::MixedInventory());
  TestKubelet kubelet(dir.path());
  ASSERT_TRUE(kubelet.Start());
  AssignmentStore store;
  NodePluginOptions o = StartOptions(dir);
  o.unwatched_grace = std::chrono::milliseconds(300);
  NodePlugin p(o, FakeDrivers(dir), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  auto regs = kubelet.WaitRegistrations(2, kWait);
  ASSERT_EQ(regs.size(), 2u);
  std::map<std::string, std::string> endpoint;
  for (const auto& r : regs) endpoint[r.resource_name()] = r.endpoint();

  // Kubelet watches both; then it drops the GPU endpoint.
  auto gpu_stub = kubelet.Dial(endpoint["nvidia.com/gpu"]);
  auto npu_stub = kubelet.Dial(endpoint["huawei.com/Ascend910C"]);
  auto gpu_ctx = std::make_unique<grpc::ClientContext>();
  grpc::ClientContext npu_ctx;
  auto gpu = gpu_stub->ListAndWatch(gpu_ctx.get(), v1beta1::Empty());
  auto npu = npu_stub->ListAndWatch(&npu_ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse resp;
  ASSERT_TRUE(gpu->Read(&resp));
  ASSERT_TRUE(npu->Read(&resp));
  gpu_ctx->TryCancel();
  static_cast<void>(gpu->Finish());
  const auto dropped = std::chrono::steady_clock::now();
  regs = kubelet.WaitRegistrations(3, kWait);
  ASSERT_EQ(regs.size(), 3u);
  EXPECT_GE(std::chrono::steady_clock::now() - dropped, std::chrono::milliseconds(300));
  EXPECT_EQ(regs[2].resource_name(), "nvidia.com/gpu");
  // Registered again and not watched since: no registration loop.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_EQ(kubelet.WaitRegistrations(3, kWait).size(), 3u);
  npu_ctx.TryCancel();
  static_cast<void>(npu->Finish());
}

TEST_F(NodePluginTest, ListAndWatchStreamsHealthChangesBothWays) {
  auto stub = kubelet_.Dial(EndpointOf("nvidia.com/gpu"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  auto health_of = [](const v1beta1::ListAndWatchResponse& r, const std::string& id) {
    for (const auto& d : r.devices()) {
      if (d.id() == id) {
        return d.health();
      }
    }
    return std::string("missing");
  };
  v1beta1::ListAndWatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  ASSERT_EQ(resp.devices_size(), 20);  // 2 GPUs x 10 slots
  EXPECT_EQ(health_of(resp, "GPU-b::9"), "Healthy");
  EXPECT_EQ(resp.devices(10).topology().nodes(0).id(), 1);

  testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory(false));
  fake_->Reload();
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(health_of(resp, "GPU-b::9"), "Unhealthy");
  EXPECT_EQ(health_of(resp, "GPU-a::0"), "Healthy");

  testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory(true));
  fake_->Reload();
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(health_of(resp, "GPU-b::9"), "Healthy");
  ctx.TryCancel();
  // Each change reached OnHealthChanged once (the Node's Events), in order.
  EXPECT_EQ(HealthChanges(2), (std::vector<std::string>{"GPU-b unhealthy", "GPU-b healthy"}));
}

TEST_F(NodePluginTest, PreferredThenAllocateOverGrpc) {
  const std::string npu = "ASCEND-node-a-";
  api::Assignment a;
  a.node = "node-a";
  a.containers = {
      Ctr("main", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 8192, 500, false)})};
  store_.Upsert(Pod("frac"), a, {});
  api::Assignment b;
  b.node = "node-a";
  b.containers = {Ctr("main", "huawei.com/Ascend910C", core::Vendor::kAscend,
                      {Dev(npu + "4", 4, 0), Dev(npu + "5", 5, 0)})};
  store_.Upsert(Pod("npu-pair"), b, {});

  struct Case {
    std::string resource;
    int32_t size;
    std::vector<std::string> want_ids;
    std::string env;
    std::string want_env;
  };
  const std::vector<Case> cases = {
      {"nvidia.com/gpu", 1, {"GPU-b::3"}, "ACCELPOOL_CUDA_MEMORY_LIMIT_0", "8192"},
      {"huawei.com/Ascend910C", 2, {npu + "4::0", npu + "5::0"}, "ASCEND_VISIBLE_DEVICES", "4,5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.resource);
    auto stub = kubelet_.Dial(EndpointOf(c.resource));
    // Every slot of the resource is available, as kubelet would offer them.
    v1beta1::ListAndWatchResponse list;
    {
      grpc::ClientContext lctx;
      auto reader = stub->ListAndWatch(&lctx, v1beta1::Empty());
      ASSERT_TRUE(reader->Read(&list));
      lctx.TryCancel();
    }
    v1beta1::PreferredAllocationRequest preq;
    auto* creq = preq.add_container_requests();
    for (const auto& d : list.devices()) {
      creq->add_available_deviceids(d.id());
    }
    creq->set_allocation_size(c.size);
    v1beta1::PreferredAllocationResponse presp;
    grpc::ClientContext pctx;
    ASSERT_TRUE(stub->GetPreferredAllocation(&pctx, preq, &presp).ok());
    ASSERT_EQ(presp.container_responses_size(), 1);
    std::vector<std::string> got(presp.container_responses(0).deviceids().begin(),
                                 presp.container_responses(0).deviceids().end());
    EXPECT_EQ(got, c.want_ids);

    v1beta1::AllocateRequest areq;
    auto* ac = areq.add_container_requests();
    for (const std::string& id : got) {
      ac->add_devices_ids(id);
    }
    v1beta1::AllocateResponse aresp;
    grpc::ClientContext actx;
    grpc::Status st = stub->Allocate(&actx, areq, &aresp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(aresp.container_responses_size(), 1);
    EXPECT_EQ(aresp.container_responses(0).envs().at(c.env), c.want_env);
  }

  // An unknown slot id is a gRPC error carrying the reason.
  auto stub = kubelet_.Dial(EndpointOf("nvidia.com/gpu"));
  v1beta1::AllocateRequest bad;
  bad.add_container_requests()->add_devices_ids("GPU-nope::0");
  v1beta1::AllocateResponse out;
  grpc::ClientContext ctx;
  grpc::Status st = stub->Allocate(&ctx, bad, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("unknown slot id"), std::string::npos);
}

TEST_F(NodePluginTest, WholeCardsForTwoContainersInOneAllocateCall) {
  api::Assignment a;
  a.node = "node-a";
  a.containers = {Ctr("trainer", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-a", 0, 0)}),
                  Ctr("evaluator", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-b", 1, 0)})};
  store_.Upsert(Pod("duo"), a, {});
  auto stub = kubelet_.Dial(EndpointOf("nvidia.com/gpu"));
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids("GPU-a::0");
  req.add_container_requests()->add_devices_ids("GPU-b::0");
  v1beta1::AllocateResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = stub->Allocate(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.container_responses_size(), 2);
  EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-a");
  EXPECT_EQ(resp.container_responses(1).envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
  // Whole cards carry no enforcement contract.
  EXPECT_EQ(resp.container_responses(0).envs().count("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), 0u);
  EXPECT_EQ(resp.container_responses(0).mounts_size(), 0);
  EXPECT_EQ(store_.PendingContainers(), 0u);
  auto entries = reporter_.entries();
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries.back().containers, (std::vector<std::string>{"trainer", "evaluator"}));
}

// A stream for a resource with no device (all of them went at a device
// check) is answered at once with the empty list, as kubelet expects of
// every ListAndWatch.
TEST(ResourceServerTest, ListAndWatchAnswersAResourceWithNoDevices) {
  TempDir dir;
  DeviceState state;  // no device at all
  AssignmentStore store;
  EnforcementOptions e;
  e.state_root = dir.File("containers");
  Allocator allocator("n", &state, &store, nullptr, nullptr, e, Logger());
  ResourceServerOptions o;
  o.plugin_dir = dir.path();
  o.resource = "nvidia.com/gpu";
  ResourceServer server(o, &state, &allocator, Logger());
  ASSERT_TRUE(server.Start().ok());
  TestKubelet kubelet(dir.path());  // only to dial the plugin
  auto stub = kubelet.Dial(EndpointFor("nvidia.com/gpu"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp)) << "no first list";
  EXPECT_EQ(resp.devices_size(), 0);
  ctx.TryCancel();
}

TEST(NodePluginStartTest, NoDevicesIsUnavailableWithTheReason) {
  TempDir dir;
  std::vector<vendors::VendorDriverPtr> drivers;
  drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
      vendors::fake::FakeDriverOptions{dir.File("missing.json"), "n"}));
  AssignmentStore store;
  NodePluginOptions o;
  o.node = "n";
  o.plugin_dir = dir.path();
  NodePlugin p(o, std::move(drivers), &store, nullptr, nullptr, Logger());
  Status st = p.Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("--fake-inventory"), std::string::npos);
}

TEST(NodePluginStartTest, AFailedStartServesNothingAndCanBeRetried) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), testing::MixedInventory());
  // The second resource's socket path is a non-empty directory: it cannot be
  // removed or bound. The first (huawei.com/Ascend910C) starts fine.
  const std::string blocked = dir.File(EndpointFor("nvidia.com/gpu"));
  std::filesystem::create_directories(blocked + "/x");
  AssignmentStore store;
  NodePlugin p(StartOptions(dir), FakeDrivers(dir), &store, nullptr, nullptr, Logger());
  Status st = p.Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(blocked), std::string::npos) << st.message();
  EXPECT_TRUE(p.Resources().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.File(EndpointFor("huawei.com/Ascend910C"))));

  // As main does: wait, then Start again; each resource is served once.
  std::filesystem::remove_all(blocked);
  st = p.Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(p.Resources(), (std::vector<std::string>{"huawei.com/Ascend910C", "nvidia.com/gpu"}));
  EXPECT_TRUE(std::filesystem::exists(dir.File(EndpointFor("nvidia.com/gpu"))));
  EXPECT_EQ(p.Start().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.Resources().size(), 2u);
}

// Two backends that find the same devices (--backend=auto,nvidia, or a
// backend named twice) must not serve them twice: kubelet would get every
// slot id twice in ListAndWatch (it keeps one, whichever comes last), and the
// Node's inventory would offer each device twice to the extender.
TEST(NodePluginStartTest, ADeviceFoundByTwoBackendsIsServedOnce) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), testing::MixedInventory());
  AssignmentStore store;
  NodePlugin p(StartOptions(dir), FakeDrivers(dir, 2), &store, nullptr, nullptr, Logger());
  std::mutex mu;
  std::vector<core::NodeInventory> published;
  p.OnInventory([&](const std::vector<core::NodeInventory>& invs) {
    std::lock_guard<std::mutex> lock(mu);
    published = invs;
  });
  ASSERT_TRUE(p.Start().ok());
  // Published from the plugin's publisher thread.
  for (auto until = std::chrono::steady_clock::now() + kWait;
       std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    std::lock_guard<std::mutex> lock(mu);
    if (!published.empty()) break;
  }
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::string> ids;
  for (const core::NodeInventory& inv : published) {
    for (const core::Device& d : inv.devices) {
      ids.push_back(d.id);
    }
  }
  EXPECT_EQ(ids.size(), 18u);  // 2 GPUs and 16 dies, once each
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
  EXPECT_EQ(p.state().Get()->resources.at("nvidia.com/gpu").size(), 2u);
}

// A backend that fails its discovery while `fail` is set (a vendor library
// that errors for a moment).
class FailingDriver : public OverFakeDriver {
 public:
  explicit FailingDriver(std::string path) : OverFakeDriver(std::move(path)) {}
  std::string_view Name() const override { return "failing"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override {
    if (fail.load()) return UnavailableError("the library failed");
    return inner_.Discover();
  }
  std::atomic<bool> fail{false};
};

// A backend whose health watch ends with an error the first `failures`
// times it is started (a vendor library that failed for a moment), then
// reports GPU-a unhealthy and watches on.
class WatchFailingDriver : public vendors::VendorDriver {
 public:
  WatchFailingDriver(std::string path, int failures)
      : inner_({std::move(path), "n"}), failures_(failures) {}
  std::string_view Name() const override { return "watch-failing"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override { return inner_.Discover(); }
  Status WatchHealth(std::stop_token stop, const vendors::HealthSink& sink) override {
    if (watches.fetch_add(1) < failures_) {
      return UnavailableError("the library failed");
    }
    sink({core::Vendor::kNvidia, "GPU-a", false, "XID 79"});
    return inner_.WatchHealth(stop, sink);
  }
  StatusOr<vendors::ContainerSpec> BuildContainerSpec(
      const std::vector<vendors::GrantedDevice>& grants) const override {
    return inner_.BuildContainerSpec(grants);
  }
  std::atomic<int> watches{0};

 private:
  vendors::fake::FakeDriver inner_;
  const int failures_;
};

// A health watch that ends with an error is started again (after a wait):
// it used to be logged and never started again, leaving the backend's
// devices without health for the plugin's lifetime.
TEST(NodePluginStartTest, AHealthWatchThatFailsIsStartedAgain) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), testing::MixedInventory());
  AssignmentStore store;
  std::vector<vendors::VendorDriverPtr> drivers;
  auto failing = std::make_unique<WatchFailingDriver>(dir.File("inv.json"), 2);
  WatchFailingDriver* f = failing.get();
  drivers.push_back(std::move(failing));
  NodePluginOptions o = StartOptions(dir);
  o.health_retry = std::chrono::milliseconds(5);
  o.health_retry_max = std::chrono::milliseconds(20);
  NodePlugin p(o, std::move(drivers), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  const auto gpu_a_healthy = [&] {
    SnapshotPtr snap = p.state().Get();
    const auto& ref = snap->by_id.at("GPU-a");
    return snap->inventories[ref.inventory].devices[ref.device].healthy;
  };
  EXPECT_TRUE(WaitFor([&] { return !gpu_a_healthy(); }));
  EXPECT_EQ(f->watches.load(), 3);
  p.Stop();
}

// The backend that serves the devices fails a device check while the other
// backend that finds them succeeds: the failed one keeps what it serves, and
// the other's copy is not served beside it (kubelet would get each slot
// twice, and the Node's inventory would name each vendor twice, which the
// extender refuses whole). When the first backend answers again, nothing
// changes.
TEST(NodePluginStartTest, ADeviceFoundByTwoBackendsStaysServedOnceWhenItsBackendFails) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), testing::MixedInventory());
  AssignmentStore store;
  MetricsRegistry registry;
  auto metrics = PluginMetrics::New(registry);
  ASSERT_TRUE(metrics.ok());
  std::vector<vendors::VendorDriverPtr> drivers;
  auto failing = std::make_unique<FailingDriver>(dir.File("inv.json"));
  FailingDriver* f = failing.get();
  drivers.push_back(std::move(failing));
  drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
      vendors::fake::FakeDriverOptions{dir.File("inv.json"), "n"}));
  NodePlugin p(StartOptions(dir), std::move(drivers), &store, metrics->get(), nullptr, Logger());
  std::mutex mu;
  int publishes = 0;
  std::vector<core::NodeInventory> published;
  p.OnInventory([&](const std::vector<core::NodeInventory>& invs) {
    std::lock_guard<std::mutex> lock(mu);
    ++publishes;
    published = invs;
  });
  ASSERT_TRUE(p.Start().ok());
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return publishes == 1;
  }));
  const auto served_once = [&] {
    SnapshotPtr snap = p.state().Get();
    EXPECT_EQ(snap->inventories.size(), 2u);
    EXPECT_EQ(snap->by_id.size(), 18u);
    size_t listed = 0;  // what ListAndWatch lists, over every resource
    for (const auto& [resource, refs] : snap->resources) listed += refs.size();
    EXPECT_EQ(listed, 18u);
    EXPECT_EQ(snap->resources.at("nvidia.com/gpu").size(), 2u);
    EXPECT_EQ(snap->resources.at("huawei.com/Ascend910C").size(), 16u);
  };

  // Two checks while the first backend fails, one after the other: once the
  // second is counted, the first is over, whatever it served.
  f->fail = true;
  const auto checks = [&] {
    return DeviceChecks(registry, "failed") + DeviceChecks(registry, "changed");
  };
  p.CheckDevicesNow();
  ASSERT_TRUE(WaitFor([&] { return checks() >= 1; }));
  p.CheckDevicesNow();
  ASSERT_TRUE(WaitFor([&] { return checks() >= 2; }));
  // "failed": the failing backend's devices are kept, nothing else changed.
  EXPECT_EQ(DeviceChecks(registry, "changed"), 0);
  served_once();
  // The Node's inventory as published now: each device once, and the
  // extender's reader takes it.
  p.PublishAgain();
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return publishes >= 2;
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    api::InventoryDocument doc;
    doc.inventories = published;
    StatusOr<api::InventoryDocument> back = api::InventoryFromJson(api::InventoryToJson(doc), "n");
    EXPECT_TRUE(back.ok()) << back.status().ToString();
    std::set<std::string> ids;
    size_t devices = 0;
    for (const core::NodeInventory& inv : published) {
      for (const core::Device& d : inv.devices) {
        ids.insert(d.id);
        ++devices;
      }
    }
    EXPECT_EQ(devices, 18u);
    EXPECT_EQ(ids.size(), 18u);
  }

  f->fail = false;
  p.CheckDevicesNow();
  ASSERT_TRUE(WaitFor([&] { return DeviceChecks(registry, "unchanged") >= 1; }));
  EXPECT_EQ(DeviceChecks(registry, "changed"), 0);
  served_once();
}

// A node whose GPU 1 is split into MIG instances serves one resource per MIG
// profile beside nvidia.com/gpu, through kubelet's registration, and answers
// GetPreferredAllocation and Allocate on it with the MIG device the extender
// chose, whole (no enforcement contract).
TEST(NodePluginStartTest, MigInstancesAreServedUnderTheirProfilesResource) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), R"({"version":1,"inventories":[
      {"vendor":"nvidia","count":4,"model":"H200","memory_mib":143771,
       "devices":[{"index":0,"id":"GPU-a"},
                  {"index":1,"id":"MIG-x","partition":"3g.71gb","memory_mib":71424},
                  {"index":2,"id":"MIG-y","partition":"1g.18gb","memory_mib":16384},
                  {"index":3,"id":"MIG-z","partition":"1g.18gb","memory_mib":16384}]}]})");
  TestKubelet kubelet(dir.path());
  ASSERT_TRUE(kubelet.Start());
  AssignmentStore store;
  NodePlugin p(StartOptions(dir), FakeDrivers(dir), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  EXPECT_EQ(p.Resources(), (std::vector<std::string>{"nvidia.com/gpu", "nvidia.com/mig-1g.18gb",
                                                     "nvidia.com/mig-3g.71gb"}));
  std::string endpoint;
  for (const auto& r : kubelet.WaitRegistrations(3, kWait)) {
    if (r.resource_name() == "nvidia.com/mig-1g.18gb") endpoint = r.endpoint();
  }
  ASSERT_EQ(endpoint, EndpointFor("nvidia.com/mig-1g.18gb"));
  auto stub = kubelet.Dial(endpoint);
  v1beta1::ListAndWatchResponse list;
  {
    grpc::ClientContext ctx;
    auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
    ASSERT_TRUE(reader->Read(&list));
    ctx.TryCancel();
  }
  std::set<std::string> listed;
  for (const auto& d : list.devices()) listed.insert(d.id());
  EXPECT_EQ(listed, (std::set<std::string>{"MIG-y::0", "MIG-z::0"}));  // one slot each

  api::Assignment a;
  a.node = "n";
  a.containers = {Ctr("main", "nvidia.com/mig-1g.18gb", core::Vendor::kNvidia,
                      {Dev("MIG-z", 3, 0, 16384, 1000, true)})};
  store.Upsert(Pod("mig-pod"), a, {});
  v1beta1::PreferredAllocationRequest preq;
  auto* creq = preq.add_container_requests();
  for (const std::string& id : listed) creq->add_available_deviceids(id);
  creq->set_allocation_size(1);
  v1beta1::PreferredAllocationResponse presp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetPreferredAllocation(&ctx, preq, &presp).ok());
  }
  ASSERT_EQ(presp.container_responses(0).deviceids_size(), 1);
  EXPECT_EQ(presp.container_responses(0).deviceids(0), "MIG-z::0");
  v1beta1::AllocateRequest areq;
  areq.add_container_requests()->add_devices_ids("MIG-z::0");
  v1beta1::AllocateResponse aresp;
  grpc::ClientContext ctx;
  grpc::Status st = stub->Allocate(&ctx, areq, &aresp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(aresp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "MIG-z");
  EXPECT_EQ(aresp.container_responses(0).envs().count("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), 0u);
  EXPECT_EQ(store.PendingContainers(), 0u);
}

// The device check. An H200 node whose second GPU is split into MIG
// instances; the operator changes the layout (the two 1g.18gb instances go,
// two 2g.35gb come). Devices, resources and the published inventory follow.
std::string MigLayout(bool changed) {
  const std::string mig =
      changed ? R"({"index":1,"id":"MIG-x","partition":"3g.71gb","memory_mib":71424},
                  {"index":2,"id":"MIG-p","partition":"2g.35gb","memory_mib":33792},
                  {"index":3,"id":"MIG-q","partition":"2g.35gb","memory_mib":33792})"
              : R"({"index":1,"id":"MIG-x","partition":"3g.71gb","memory_mib":71424},
                  {"index":2,"id":"MIG-y","partition":"1g.18gb","memory_mib":16384},
                  {"index":3,"id":"MIG-z","partition":"1g.18gb","memory_mib":16384})";
  return R"({"version":1,"inventories":[
      {"vendor":"nvidia","count":4,"model":"H200","memory_mib":143771,
       "devices":[{"index":0,"id":"GPU-a"},)" +
         mig + "]}]}";
}

std::set<std::string> Ids(const Snapshot& snap) {
  std::set<std::string> out;
  for (const auto& [id, ref] : snap.by_id) out.insert(id);
  return out;
}

TEST(NodePluginDeviceCheckTest, AChangedMigLayoutIsServedWithoutARestart) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), MigLayout(false));
  TestKubelet kubelet(dir.path());
  ASSERT_TRUE(kubelet.Start());
  MetricsRegistry registry;
  auto metrics = PluginMetrics::New(registry);
  ASSERT_TRUE(metrics.ok());
  AssignmentStore store;
  // A pod on a 1g.18gb instance that is about to go: it keeps its grant.
  api::Assignment a;
  a.node = "n";
  a.containers = {Ctr("main", "nvidia.com/mig-1g.18gb", core::Vendor::kNvidia,
                      {Dev("MIG-y", 2, 0, 16384, 1000, true)})};
  store.Upsert(Pod("on-mig-y"), a, {{"main", "nvidia.com/mig-1g.18gb"}});
  NodePluginOptions o = StartOptions(dir);
  o.rediscover_every = std::chrono::milliseconds(50);
  NodePlugin p(o, FakeDrivers(dir), &store, metrics->get(), nullptr, Logger());
  std::mutex mu;
  std::vector<core::NodeInventory> published;
  p.OnInventory([&](const std::vector<core::NodeInventory>& invs) {
    std::lock_guard<std::mutex> lock(mu);
    published = invs;
  });
  std::vector<DeviceChange> changes;
  p.OnDevicesChanged([&](const DeviceChange& c) {
    std::lock_guard<std::mutex> lock(mu);
    changes.push_back(c);
  });
  ASSERT_TRUE(p.Start().ok());
  ASSERT_EQ(kubelet.WaitRegistrations(3, kWait).size(), 3u);
  auto stub = kubelet.Dial(EndpointFor("nvidia.com/mig-1g.18gb"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(reader->Read(&list));
  EXPECT_EQ(list.devices_size(), 2);

  testing::WriteFile(dir.File("inv.json"), MigLayout(true));
  ASSERT_TRUE(WaitFor([&] { return Ids(*p.state().Get()).contains("MIG-p"); }));
  EXPECT_EQ(Ids(*p.state().Get()), (std::set<std::string>{"GPU-a", "MIG-x", "MIG-p", "MIG-q"}));
  // The instances that went leave kubelet's list of their resource.
  ASSERT_TRUE(reader->Read(&list));
  EXPECT_EQ(list.devices_size(), 0);
  ctx.TryCancel();
  // The new profile is served (by the device-check thread, a moment after
  // the devices changed) and registered.
  const std::vector<std::string> served = {"nvidia.com/gpu", "nvidia.com/mig-1g.18gb",
                                           "nvidia.com/mig-3g.71gb", "nvidia.com/mig-2g.35gb"};
  EXPECT_TRUE(WaitFor([&] { return p.Resources() == served; }));
  EXPECT_EQ(p.Resources(), served);
  auto regs = kubelet.WaitRegistrations(4, kWait);
  ASSERT_EQ(regs.size(), 4u);
  EXPECT_EQ(regs.back().resource_name(), "nvidia.com/mig-2g.35gb");
  auto stub2 = kubelet.Dial(regs.back().endpoint());
  {
    grpc::ClientContext c2;
    auto r2 = stub2->ListAndWatch(&c2, v1beta1::Empty());
    ASSERT_TRUE(r2->Read(&list));
    c2.TryCancel();
  }
  std::set<std::string> slots;
  for (const auto& d : list.devices()) slots.insert(d.id());
  EXPECT_EQ(slots, (std::set<std::string>{"MIG-p::0", "MIG-q::0"}));
  ASSERT_TRUE(WaitFor([&] {  // published from the plugin's publisher thread
    std::lock_guard<std::mutex> lock(mu);
    return published.size() == 1 && published[0].devices.size() == 4;
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(published.size(), 1u);
    ASSERT_EQ(published[0].devices.size(), 4u);
    EXPECT_EQ(published[0].devices[2].id, "MIG-p");
    EXPECT_EQ(published[0].devices[2].partition, "2g.35gb");
  }
  {
    // One change, said once (for the Node's Event): what came, what went,
    // and the pod that still holds a device that went. Said from the
    // device-check thread, which may publish before it says it.
    ASSERT_TRUE(WaitFor([&] {
      std::lock_guard<std::mutex> lock(mu);
      return !changes.empty();
    }));
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_EQ(changes[0].added, (std::vector<std::string>{"MIG-p", "MIG-q"}));
    EXPECT_EQ(changes[0].removed, (std::vector<std::string>{"MIG-y", "MIG-z"}));
    EXPECT_EQ(changes[0].held, (std::vector<std::string>{"default/on-mig-y (MIG-y)"}));
    EXPECT_EQ(changes[0].devices, 4u);
  }
  // The pod keeps its assignment; the removed devices' series go.
  EXPECT_EQ(store.All().size(), 1u);
  std::string text = registry.Serialize();
  EXPECT_NE(text.find(R"(accelpool_plugin_device_checks_total{result="changed"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(accelpool_plugin_device_checks_total{result="pending"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("device=\"MIG-p\""), std::string::npos);
  EXPECT_EQ(text.find("device=\"MIG-z\""), std::string::npos);
  // An Allocate naming a removed instance is refused with the reason.
  v1beta1::AllocateRequest areq;
  areq.add_container_requests()->add_devices_ids("MIG-y::0");
  v1beta1::AllocateResponse aresp;
  grpc::ClientContext actx;
  grpc::Status st = stub->Allocate(&actx, areq, &aresp);
  EXPECT_FALSE(st.ok());
}

// A discovery that answers one set, then another, then the first again
// (a driver in the middle of a reset, a MIG layout half applied) never sees
// the same new set twice in a row: nothing changes.
class FlappingDriver : public OverFakeDriver {
 public:
  explicit FlappingDriver(std::string path) : OverFakeDriver(std::move(path)) {}
  std::string_view Name() const override { return "flapping"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override {
    auto found = inner_.Discover();
    if (calls_++ % 2 == 1 && found.ok() && !found->empty()) {
      found->front().devices.pop_back();  // every other call misses the last device
    }
    return found;
  }
  int calls() const { return calls_.load(); }

 private:
  std::atomic<int> calls_{0};
};

TEST(NodePluginDeviceCheckTest, ASetSeenOnceOrAFailingBackendChangesNothing) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), MigLayout(false));
  AssignmentStore store;
  NodePluginOptions o = StartOptions(dir);
  o.rediscover_every = std::chrono::milliseconds(20);
  std::vector<vendors::VendorDriverPtr> drivers;
  auto flapping = std::make_unique<FlappingDriver>(dir.File("inv.json"));
  FlappingDriver* f = flapping.get();
  drivers.push_back(std::move(flapping));
  MetricsRegistry registry;
  auto metrics = PluginMetrics::New(registry);
  ASSERT_TRUE(metrics.ok());
  NodePlugin p(o, std::move(drivers), &store, metrics->get(), nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  const std::set<std::string> served = Ids(*p.state().Get());
  auto checks = [&](const std::string& result) { return DeviceChecks(registry, result); };
  const int64_t version = p.state().Get()->version;
  ASSERT_TRUE(WaitFor([&] { return f->calls() >= 12; }));
  EXPECT_EQ(Ids(*p.state().Get()), served);
  EXPECT_EQ(p.state().Get()->version, version);

  // A file that does not parse: the backend fails, its devices stay.
  testing::WriteFile(dir.File("inv.json"), "{not json");
  const int seen = f->calls();
  ASSERT_TRUE(WaitFor([&] { return f->calls() >= seen + 6; }));
  EXPECT_EQ(Ids(*p.state().Get()), served);
  // A node with no device at all is not served as such: a restart says so.
  testing::WriteFile(dir.File("inv.json"), R"({"version":1,"inventories":[]})");
  const int seen2 = f->calls();
  ASSERT_TRUE(WaitFor([&] { return f->calls() >= seen2 + 6; }));
  EXPECT_EQ(Ids(*p.state().Get()), served);
  // Each kind of check was counted, and none served a change.
  for (const char* r : {"unchanged", "pending", "failed", "empty"}) {
    EXPECT_GE(checks(r), 1) << r;
  }
  EXPECT_EQ(checks("changed"), 0);
}

// A backend with one GPU (GPU-d) that cannot be read while `unreadable` is
// set, answering as the vendor drivers do: DiscoverPartial (the plugin's
// start) leaves it out, Discover (a device check) fails.
class UnreadableGpuDriver : public OverFakeDriver {
 public:
  UnreadableGpuDriver(std::string all, std::string readable)
      : OverFakeDriver(std::move(all)), readable_({std::move(readable), "n"}) {}
  std::string_view Name() const override { return "unreadable"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override {
    ++checks_;
    if (down.load()) return UnavailableError("the library is not loaded yet");
    if (unreadable.load()) return UnavailableError("GPU 3: the library failed");
    return inner_.Discover();
  }
  StatusOr<std::vector<core::NodeInventory>> DiscoverPartial() override {
    ++starts_;
    if (down.load()) return UnavailableError("the library is not loaded yet");
    return unreadable.load() ? readable_.Discover() : inner_.Discover();
  }
  int checks() const { return checks_.load(); }
  int starts() const { return starts_.load(); }
  std::atomic<bool> unreadable{true};
  std::atomic<bool> down{false};  // every discovery fails

 private:
  vendors::fake::FakeDriver readable_;
  std::atomic<int> checks_{0};
  std::atomic<int> starts_{0};
};

std::string Gpus(const std::vector<std::string>& ids) {
  std::string devices;
  for (size_t i = 0; i < ids.size(); ++i) {
    devices += std::string(i == 0 ? "" : ",") + R"({"index":)" + std::to_string(i) + R"(,"id":")" +
               ids[i] + R"("})";
  }
  return R"({"version":1,"inventories":[{"vendor":"nvidia","count":)" + std::to_string(ids.size()) +
         R"(,"model":"H200","memory_mib":143771,"devices":[)" + devices + "]}]}";
}

// Start serves the GPUs a backend can read: one that cannot be read does not
// take the others away (it used to fail the backend's discovery: nothing
// served on a node with one vendor). Device checks stay all or nothing: while
// the GPU cannot be read they fail and the GPUs served stay; once it reads,
// it joins as any new device does.
TEST(NodePluginStartTest, StartServesTheDevicesABackendCanRead) {
  TempDir dir;
  testing::WriteFile(dir.File("all.json"), Gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"}));
  testing::WriteFile(dir.File("readable.json"), Gpus({"GPU-a", "GPU-b", "GPU-c"}));
  AssignmentStore store;
  NodePluginOptions o = StartOptions(dir);
  o.rediscover_every = std::chrono::milliseconds(20);
  std::vector<vendors::VendorDriverPtr> drivers;
  auto owned =
      std::make_unique<UnreadableGpuDriver>(dir.File("all.json"), dir.File("readable.json"));
  UnreadableGpuDriver* u = owned.get();
  drivers.push_back(std::move(owned));
  NodePlugin p(o, std::move(drivers), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  const std::set<std::string> readable = {"GPU-a", "GPU-b", "GPU-c"};
  EXPECT_EQ(Ids(*p.state().Get()), readable);
  ASSERT_TRUE(WaitFor([&] { return u->checks() >= 4; }));
  EXPECT_EQ(Ids(*p.state().Get()), readable);
  EXPECT_EQ(u->starts(), 1);

  u->unreadable = false;
  ASSERT_TRUE(WaitFor([&] { return Ids(*p.state().Get()).size() == 4; }));
  EXPECT_EQ(u->starts(), 1);
}

// On a node with two vendors, one backend whose whole discovery failed at
// start serves nothing: the device checks discover it as the start does, so
// that once its library answers, one device it cannot read does not keep
// its others out.
TEST(NodePluginDeviceCheckTest, ABackendServingNothingIsCheckedAsAtStart) {
  TempDir dir;
  testing::WriteFile(dir.File("all.json"), Gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"}));
  testing::WriteFile(dir.File("readable.json"), Gpus({"GPU-a", "GPU-b", "GPU-c"}));
  testing::WriteFile(
      dir.File("npu.json"),
      R"({"version":1,"inventories":[{"vendor":"ascend","count":2,"model":"Ascend910B3",)"
      R"("memory_mib":65536,"devices":[{"index":0,"id":"npu-0"},{"index":1,"id":"npu-1"}]}]})");
  AssignmentStore store;
  NodePluginOptions o = StartOptions(dir);
  o.rediscover_every = std::chrono::milliseconds(20);
  std::vector<vendors::VendorDriverPtr> drivers;
  drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
      vendors::fake::FakeDriverOptions{dir.File("npu.json"), "n"}));
  auto owned =
      std::make_unique<UnreadableGpuDriver>(dir.File("all.json"), dir.File("readable.json"));
  UnreadableGpuDriver* u = owned.get();
  u->down = true;
  drivers.push_back(std::move(owned));
  NodePlugin p(o, std::move(drivers), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  EXPECT_EQ(Ids(*p.state().Get()), (std::set<std::string>{"npu-0", "npu-1"}));
  const int starts = u->starts();
  ASSERT_TRUE(WaitFor([&] { return u->starts() >= starts + 3; }));

  u->down = false;  // the library answers; GPU-d still cannot be read
  ASSERT_TRUE(WaitFor([&] { return Ids(*p.state().Get()).size() == 5; }))
      << Ids(*p.state().Get()).size();
  EXPECT_EQ(Ids(*p.state().Get()),
            (std::set<std::string>{"npu-0", "npu-1", "GPU-a", "GPU-b", "GPU-c"}));
  // Now that some are served, checks are all or nothing: the three stay.
  const int checks = u->checks();
  ASSERT_TRUE(WaitFor([&] { return u->checks() >= checks + 3; }));
  EXPECT_EQ(Ids(*p.state().Get()).size(), 5u);
  u->unreadable = false;
  ASSERT_TRUE(WaitFor([&] { return Ids(*p.state().Get()).size() == 6; }));
}

// A backend whose library, on demand, reports a figure out of the
// protocol's range or an id that would split in a visible-devices list.
class GarbledDriver : public OverFakeDriver {
 public:
  enum Garble { kNone, kMemory, kUnits, kComma, kNonAscii };
  explicit GarbledDriver(std::string path) : OverFakeDriver(std::move(path)) {}
  std::string_view Name() const override { return "garbled"; }
  StatusOr<std::vector<core::NodeInventory>> Discover() override {
    auto found = inner_.Discover();
    ++calls_;
    if (found.ok() && !found->empty() && !found->front().devices.empty()) {
      core::Device& dev = found->front().devices.back();
      switch (garble.load()) {
        case kMemory:
          dev.memory_mib = int64_t{1} << 44;
          break;  // ~0 bytes read as MiB
        case kUnits:
          dev.compute_units = -1;
          break;  // 0xFFFFFFFF as a count
        case kComma:
          dev.id = "GPU-a,GPU-b";
          break;
        case kNonAscii:
          dev.id = "GPU-\xff\x01";
          break;
        case kNone:
          break;
      }
    }
    return found;
  }
  int calls() const { return calls_.load(); }
  std::atomic<Garble> garble{kNone};

 private:
  std::atomic<int> calls_{0};
};

// A figure out of the inventory's range would make the extender refuse the
// node's whole published inventory: the backend is taken as failed, with
// the field named, at start (nothing served from it) and at a device check
// (what it served is kept, unchanged).
TEST(NodePluginDeviceCheckTest, AFigureOrIdTheInventoryCannotCarryFailsTheBackend) {
  TempDir dir;
  testing::WriteFile(dir.File("inv.json"), MigLayout(false));
  const std::pair<GarbledDriver::Garble, const char*> cases[] = {
      {GarbledDriver::kMemory, "memory_mib"},
      {GarbledDriver::kUnits, "compute_units"},
      {GarbledDriver::kComma, "GPU-a,GPU-b"},
      {GarbledDriver::kNonAscii, "GPU-\\xff\\x01"}};
  for (const auto& [garble, named] : cases) {
    SCOPED_TRACE(named);
    AssignmentStore store;
    std::vector<vendors::VendorDriverPtr> drivers;
    auto owned = std::make_unique<GarbledDriver>(dir.File("inv.json"));
    owned->garble = garble;
    drivers.push_back(std::move(owned));
    NodePlugin refused(StartOptions(dir), std::move(drivers), &store, nullptr, nullptr, Logger());
    Status st = refused.Start();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(named), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("vendor's node tool"), std::string::npos) << st.ToString();
  }

  AssignmentStore store;
  NodePluginOptions o = StartOptions(dir);
  o.rediscover_every = std::chrono::milliseconds(20);
  std::vector<vendors::VendorDriverPtr> drivers;
  auto owned = std::make_unique<GarbledDriver>(dir.File("inv.json"));
  GarbledDriver* g = owned.get();
  drivers.push_back(std::move(owned));
  NodePlugin p(o, std::move(drivers), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  const std::set<std::string> served = Ids(*p.state().Get());
  const int64_t version = p.state().Get()->version;
  g->garble = GarbledDriver::kMemory;
  const int seen = g->calls();
  ASSERT_TRUE(WaitFor([&] { return g->calls() >= seen + 6; }));
  EXPECT_EQ(Ids(*p.state().Get()), served);
  EXPECT_EQ(p.state().Get()->version, version);
  for (const core::NodeInventory& inv : p.state().Get()->inventories) {
    for (const core::Device& dev : inv.devices) {
      EXPECT_LT(dev.memory_mib, int64_t{1} << 40) << dev.id;
    }
  }
}

// Two backends from files in `dir`: the GPUs of inv.json (MIG layout off)
// and a 910C node's NPUs from npu.json.
std::vector<vendors::VendorDriverPtr> GpuAndNpuDrivers(const TempDir& dir) {
  testing::WriteFile(dir.File("inv.json"), MigLayout(false));
  testing::WriteFile(dir.File("npu.json"), R"({"version":1,"inventories":[
      {"vendor":"ascend","profile":"ascend-910c-x16","super_node":"sp-3"}]})");
  std::vector<vendors::VendorDriverPtr> drivers = FakeDrivers(dir);
  drivers.push_back(std::make_unique<vendors::fake::FakeDriver>(
      vendors::fake::FakeDriverOptions{dir.File("npu.json"), "n"}));
  return drivers;
}

// SIGHUP (CheckDevicesNow) serves a change at once, without a second look or
// a periodic check. Only the changed backend's devices take the health its
// discovery reads; the other backend's devices keep the health their watch
// gave them.
TEST(NodePluginDeviceCheckTest, CheckNowServesAtOnceAndKeepsTheOtherBackendsHealth) {
  TempDir dir;
  AssignmentStore store;
  NodePlugin p(StartOptions(dir), GpuAndNpuDrivers(dir), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  const std::string npu = p.state().Get()->inventories[1].devices[0].id;
  ASSERT_TRUE(p.state().SetHealth(npu, false));      // as its health watch would
  ASSERT_TRUE(p.state().SetHealth("MIG-x", false));  // likewise, on the backend that changes

  testing::WriteFile(dir.File("inv.json"), MigLayout(true));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(Ids(*p.state().Get()).contains("MIG-p"));  // no periodic check configured
  p.CheckDevicesNow();
  ASSERT_TRUE(WaitFor([&] { return Ids(*p.state().Get()).contains("MIG-p"); }));
  SnapshotPtr snap = p.state().Get();
  EXPECT_FALSE(snap->Find(npu)->healthy);
  EXPECT_TRUE(snap->Find("MIG-x")->healthy);  // read again, as after a restart
  EXPECT_EQ(snap->by_id.size(), 4u + 16u);
}

// One backend that starts failing keeps what it serves, and does not hold
// back the others: a new MIG layout on the GPUs is served while the NPUs'
// library fails, and the NPUs stay served, with the health they had.
TEST(NodePluginDeviceCheckTest, AFailingBackendDoesNotHoldBackTheOthersChanges) {
  TempDir dir;
  AssignmentStore store;
  NodePlugin p(StartOptions(dir), GpuAndNpuDrivers(dir), &store, nullptr, nullptr, Logger());
  ASSERT_TRUE(p.Start().ok());
  const std::string npu = p.state().Get()->inventories[1].devices[0].id;
  ASSERT_TRUE(p.state().SetHealth(npu, false));

  testing::WriteFile(dir.File("npu.json"), "{not json");
  testing::WriteFile(dir.File("inv.json"), MigLayout(true));
  p.CheckDevicesNow();
  ASSERT_TRUE(WaitFor([&] { return Ids(*p.state().Get()).contains("MIG-p"); }));
  SnapshotPtr snap = p.state().Get();
  EXPECT_EQ(snap->by_id.size(), 4u + 16u);
  ASSERT_NE(snap->Find(npu), nullptr);
  EXPECT_FALSE(snap->Find(npu)->healthy);
}

// The publish tests' set-up: the mixed inventory in DIR/inv.json, a kubelet,
// and one fake backend over the file that re-reads it every 20 ms.
class NodePluginPublishTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory());
    ASSERT_TRUE(kubelet_.Start());
    auto fake = std::make_unique<vendors::fake::FakeDriver>(vendors::fake::FakeDriverOptions{
        dir_.File("inv.json"), "n", std::chrono::milliseconds(20)});
    fake_ = fake.get();
    drivers_.push_back(std::move(fake));
  }

  TempDir dir_;
  TestKubelet kubelet_{dir_.path()};
  AssignmentStore store_;
  std::vector<vendors::VendorDriverPtr> drivers_;
  vendors::fake::FakeDriver* fake_ = nullptr;  // the backend in drivers_
};

// The inventory is published on the Node from a thread of its own: with the
// apiserver not answering (a publish that waits), the plugin still starts and
// registers, and each health change reaches ListAndWatch at once. What
// changed meanwhile is published afterwards, folded into the latest.
TEST_F(NodePluginPublishTest, AnApiserverThatDoesNotAnswerHoldsUpNoHealthChange) {
  // Declared before the plugin, whose publish thread waits on them until
  // the plugin stops; the guard below ends that wait first, however the
  // test ends.
  std::mutex mu;
  std::condition_variable cv;
  bool answer = false;
  int calls = 0;
  std::vector<core::NodeInventory> published;
  NodePlugin p(StartOptions(dir_), std::move(drivers_), &store_, nullptr, nullptr, Logger());
  struct Answer {
    std::mutex& mu;
    std::condition_variable& cv;
    bool& answer;
    ~Answer() {
      {
        std::lock_guard<std::mutex> lock(mu);
        answer = true;
      }
      cv.notify_all();
    }
  } answer_on_exit{mu, cv, answer};
  p.OnInventory([&](const std::vector<core::NodeInventory>& invs) {
    std::unique_lock<std::mutex> lock(mu);
    ++calls;
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return answer; });  // the apiserver hangs
    published = invs;
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.Start().ok());
  ASSERT_EQ(kubelet_.WaitRegistrations(2, kWait).size(), 2u);
  auto stub = kubelet_.Dial(EndpointFor("nvidia.com/gpu"));
  grpc::ClientContext ctx;
  // Half the hang: far from it, and far enough from what the start and
  // three reloads take on a loaded machine (a bound of 4 s failed once).
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  const auto unhealthy = [](const v1beta1::ListAndWatchResponse& r) {
    return std::count_if(r.devices().begin(), r.devices().end(),
                         [](const auto& d) { return d.health() == "Unhealthy"; });
  };
  EXPECT_EQ(unhealthy(resp), 0);
  // GPU-b fails, recovers and fails again: every change streams at once.
  for (bool healthy : {false, true, false}) {
    testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory(healthy));
    fake_->Reload();
    ASSERT_TRUE(reader->Read(&resp)) << "a health change waited on the publish";
    EXPECT_EQ(unhealthy(resp), healthy ? 0 : 10);
  }
  ctx.TryCancel();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(calls, 1) << "one publish under way; the changes wait, folded";
    answer = true;
  }
  cv.notify_all();
  // Then the latest inventory is published: GPU-b unhealthy.
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    if (published.empty() || calls < 2) return false;
    for (const core::NodeInventory& inv : published) {
      for (const core::Device& d : inv.devices) {
        if (d.id == "GPU-b") return !d.healthy;
      }
    }
    return false;
  }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(calls, 2);
}

// Stop() while a publish hangs and another waits: the one under way ends
// (its apiserver calls time out), the waiting one is dropped, not run.
TEST_F(NodePluginPublishTest, StopDropsAPublishStillWaiting) {
  auto p = std::make_unique<NodePlugin>(StartOptions(dir_), std::move(drivers_), &store_, nullptr,
                                        nullptr, Logger());
  std::atomic<int> calls{0};
  std::atomic<bool> answer{false};
  p->OnInventory([&](const std::vector<core::NodeInventory>&) {
    ++calls;
    for (int i = 0; i < 2000 && !answer; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_TRUE(p->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  // A change while the first publish hangs: it waits.
  testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory(false));
  fake_->Reload();
  p->PublishAgain();
  // Stop() first joins the device checker, the registration supervisor and
  // the health watch (a poll of 20 ms each here), then stops the publisher:
  // the hung call ends long after that, even on a loaded machine, and
  // before it would end by itself (2 s).
  std::thread answerer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    answer = true;  // the hung publish's call ends
  });
  p->Stop();
  answerer.join();
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace accelpool::plugin
