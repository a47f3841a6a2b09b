// A gtest fixture for code that talks to the apiserver: an in-process
// FakeApiServer, started for each test, and a KubeClient pointed at it;
// and WaitUntil, a bounded wait for what such a test waits to see.
// Header-only, for test targets that link accelpool_kube,
// accelpool_kube_fake and GoogleTest.
#ifndef ACCELPOOL_KUBE_FAKE_API_TEST_H_
#define ACCELPOOL_KUBE_FAKE_API_TEST_H_

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/fake_apiserver.h"

namespace accelpool::kube::testing {

// Polls `done` every 5 ms until it holds or `timeout` passes, and says
// whether it held. The caller asserts on the answer and says what never
// came, so that a wait that cannot end fails at once with a message instead
// of running into ctest's timeout:
//   ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
//       << "the informer never opened its watch";
inline bool WaitUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

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
