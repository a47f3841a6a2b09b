#include "common/signals.h"

#include <gtest/gtest.h>
#include <pthread.h>

namespace accelpool {
namespace {

TEST(SignalsTest, SignalSetHoldsExactlyTheSignalsNamed) {
  const sigset_t set = SignalSet({SIGTERM, SIGINT});
  EXPECT_EQ(sigismember(&set, SIGTERM), 1);
  EXPECT_EQ(sigismember(&set, SIGINT), 1);
  EXPECT_EQ(sigismember(&set, SIGHUP), 0);
  EXPECT_EQ(sigismember(&set, SIGPIPE), 0);
  const sigset_t none = SignalSet({});
  EXPECT_EQ(sigismember(&none, SIGTERM), 0);
}

TEST(SignalsTest, BlockDaemonSignalsBlocksTheStopSignalsAndIgnoresSigpipe) {
  sigset_t before;
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, nullptr, &before), 0);
  struct sigaction pipe_before {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &pipe_before), 0);

  BlockDaemonSignals();
  sigset_t now;
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, nullptr, &now), 0);
  EXPECT_EQ(sigismember(&now, SIGTERM), 1);
  EXPECT_EQ(sigismember(&now, SIGINT), 1);
  EXPECT_EQ(sigismember(&now, SIGHUP), 1);
  struct sigaction pipe_now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &pipe_now), 0);
  EXPECT_EQ(pipe_now.sa_handler, SIG_IGN);

  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  sigaction(SIGPIPE, &pipe_before, nullptr);
}

}  // namespace
}  // namespace accelpool
