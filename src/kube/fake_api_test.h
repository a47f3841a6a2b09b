// A gtest fixture for code that talks to the apiserver: an in-process
// FakeApiServer, started for each test, and a KubeClient pointed at it.
// Header-only, for test targets that link accelpool_kube,
// accelpool_kube_fake and GoogleTest.
#ifndef ACCELPOOL_KUBE_FAKE_API_TEST_H_
#define ACCELPOOL_KUBE_FAKE_API_TEST_H_

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/fake_apiserver.h"

namespace accelpool::kube::testing {

class FakeApiTest : public ::testing::Test {
 protected:
  // A derived SetUp calls this first, then returns if it failed
  // (ASSERT_NO_FATAL_FAILURE(FakeApiTest::SetUp())).
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    KubeConfig kc;
    kc.server = api_.url();
    auto c = NewKubeClient(kc);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  void TearDown() override { api_.Stop(); }

  FakeApiServer api_;
  std::unique_ptr<KubeClient> client_;
};

}  // namespace accelpool::kube::testing

#endif  // ACCELPOOL_KUBE_FAKE_API_TEST_H_
