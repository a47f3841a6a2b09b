// Signal sets for the daemons, which block their signals in every thread
// from the start and take them where they wait, with sigwait or sigtimedwait.
//
// Thread-safety: SignalSet is a pure function. BlockDaemonSignals sets the
// calling thread's mask and the process's SIGPIPE disposition: call it in
// main before any thread starts, so that every thread inherits the mask.
#ifndef ACCELPOOL_COMMON_SIGNALS_H_
#define ACCELPOOL_COMMON_SIGNALS_H_

#include <csignal>
#include <initializer_list>

namespace accelpool {

// The set that holds exactly `signals`.
sigset_t SignalSet(std::initializer_list<int> signals);

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, so that only
// sigwait and sigtimedwait see them, and ignores SIGPIPE: a peer that closed
// its connection costs one failed write, never the process.
void BlockDaemonSignals();

}  // namespace accelpool

#endif  // ACCELPOOL_COMMON_SIGNALS_H_
