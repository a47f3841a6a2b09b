#include "extender/ca_injector.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "kube/config.h"
#include "kube/fake_api_test.h"

namespace accelpool::extender {
namespace {

constexpr const char* kCollection =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
constexpr const char* kPem = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n";

class CaInjectorTest : public kube::testing::FakeApiTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(FakeApiTest::SetUp());
    ca_file_ = ::testing::TempDir() + "ca-injector-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".crt";
    WriteCa(kPem);
  }
  void TearDown() override {
    std::remove(ca_file_.c_str());
    FakeApiTest::TearDown();
  }
  void WriteCa(const std::string& text) { std::ofstream(ca_file_, std::ios::binary) << text; }
  // Our webhook configuration: one webhook without a caBundle, one with a stale one.
  void PutWebhook() {
    api_.Put(kCollection,
             {{"apiVersion", "admissionregistration.k8s.io/v1"},
              {"kind", "MutatingWebhookConfiguration"},
              {"metadata", {{"name", "accelpool-webhook"}}},
              {"webhooks",
               {{{"name", "pods.mutate.accelpool.io"},
                 {"clientConfig", {{"service", {{"name", "s"}, {"namespace", "ns"}}}}}},
                {{"name", "other.mutate.accelpool.io"},
                 {"clientConfig", {{"caBundle", "c3RhbGU="}, {"url", "https://x"}}}}}}});
  }
  std::string Bundle(size_t i) const {
    std::optional<nlohmann::json> obj = api_.Object(kCollection, "accelpool-webhook");
    if (!obj.has_value()) return "<no object>";
    return (*obj)["webhooks"][i]["clientConfig"].value("caBundle", std::string("<none>"));
  }
  CaInjectorOptions Options() const {
    CaInjectorOptions o;
    o.webhook = "accelpool-webhook";
    o.ca_file = ca_file_;
    return o;
  }
  int Patches() const {
    int n = 0;
    for (const std::string& r : api_.Requests()) n += r.rfind("PATCH ", 0) == 0 ? 1 : 0;
    return n;
  }

  std::string ca_file_;
};

TEST_F(CaInjectorTest, WritesTheCaIntoEveryWebhookAndThenLeavesItAlone) {
  PutWebhook();
  MetricsRegistry registry;
  CounterFamily* writes = *registry.AddCounter("w", "w", {"result"});
  CaInjector inj(*client_, Options(), Logger(), writes);
  EXPECT_FALSE(inj.Current());
  StatusOr<int> n = inj.SyncOnce();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2);
  EXPECT_TRUE(inj.Current());
  EXPECT_EQ(Bundle(0), kube::Base64Encode(kPem));
  EXPECT_EQ(Bundle(1), kube::Base64Encode(kPem));
  EXPECT_EQ(writes->WithLabels({"written"}).Value(), 1);

  n = inj.SyncOnce();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0);
  EXPECT_EQ(Patches(), 1) << "a current caBundle is not written again";

  // Edited by hand (or by an old hook with another CA): put back.
  nlohmann::json obj = *api_.Object(kCollection, "accelpool-webhook");
  obj["webhooks"][0]["clientConfig"]["caBundle"] = "b3RoZXI=";
  api_.Put(kCollection, obj);
  n = inj.SyncOnce();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(Bundle(0), kube::Base64Encode(kPem));
}

TEST_F(CaInjectorTest, AFollowerOnlyChecks) {
  PutWebhook();
  CaInjectorOptions o = Options();
  o.may_write = [] { return false; };
  CaInjector inj(*client_, o, Logger());
  StatusOr<int> n = inj.SyncOnce();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0);
  EXPECT_FALSE(inj.Current());
  EXPECT_EQ(Bundle(0), "<none>");
  EXPECT_EQ(Patches(), 0);
}

TEST_F(CaInjectorTest, ABadCaFileOrAMissingWebhookIsAnErrorThatWritesNothing) {
  PutWebhook();
  CaInjector inj(*client_, Options(), Logger());
  for (const char* bad : {"", "not a certificate", "-----BEGIN CERTIFICATE-----\nMIIB\n"}) {
    WriteCa(bad);
    StatusOr<int> n = inj.SyncOnce();
    EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(n.status().message().find("holds no PEM certificate"), std::string::npos)
        << n.status().ToString();
  }
  std::remove(ca_file_.c_str());
  StatusOr<int> n = inj.SyncOnce();
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(n.status().message().find("cannot read the webhook CA file"), std::string::npos);
  EXPECT_EQ(Patches(), 0);
  EXPECT_EQ(Bundle(0), "<none>");

  WriteCa(kPem);
  api_.Remove(kCollection, "accelpool-webhook");
  n = inj.SyncOnce();
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound) << n.status().ToString();
  EXPECT_FALSE(inj.Current());
}

TEST_F(CaInjectorTest, ForbiddenNamesTheRbacRule) {
  PutWebhook();
  CaInjector inj(*client_, Options(), Logger());
  api_.FailNext(1, 403);
  StatusOr<int> n = inj.SyncOnce();
  EXPECT_EQ(n.status().code(), StatusCode::kPermissionDenied) << n.status().ToString();
  EXPECT_NE(n.status().message().find("get and patch on mutatingwebhookconfigurations/"
                                      "accelpool-webhook"),
            std::string::npos)
      << n.status().ToString();
}

TEST_F(CaInjectorTest, TheLoopRetriesUntilTheCaArrives) {
  std::remove(ca_file_.c_str());
  PutWebhook();
  CaInjectorOptions o = Options();
  o.retry = std::chrono::milliseconds(20);
  CaInjector inj(*client_, o, Logger());
  inj.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(inj.Current());
  WriteCa(kPem);
  for (int i = 0; i < 500 && !inj.Current(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(inj.Current());
  EXPECT_EQ(Bundle(0), kube::Base64Encode(kPem));
  const auto t0 = std::chrono::steady_clock::now();
  inj.Stop();
  // Stop does not wait out the loop's period (60 s).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace accelpool::extender
