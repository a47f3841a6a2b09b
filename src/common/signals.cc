#include "common/signals.h"

#include <pthread.h>

namespace accelpool {

sigset_t SignalSet(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) {
    sigaddset(&set, sig);
  }
  return set;
}

void BlockDaemonSignals() {
  const sigset_t set = SignalSet({SIGTERM, SIGINT, SIGHUP});
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace accelpool
