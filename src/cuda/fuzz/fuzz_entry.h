// Fuzz entry points for what reaches libaccelpool-cuda from outside: the env
// contract (a container's user can set any of its variables) and the
// /proc/<pid>/stat lines it reads (the command name in them is the
// process's own choice). Each returns 1 when the input was accepted as
// well-formed, 0 otherwise, and aborts on a broken invariant so that
// libFuzzer records it. corpus_replay_test.cc runs them over the seeds in the
// plain test suite; scripts/fuzz.sh runs the libFuzzer targets.
#ifndef ACCELPOOL_CUDA_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_CUDA_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::cuda::fuzz {

// The input is an environment, one NAME=VALUE per line.
int FuzzShimEnv(const uint8_t* data, size_t size);
// The input is one /proc/<pid>/stat line.
int FuzzProcStat(const uint8_t* data, size_t size);

}  // namespace accelpool::cuda::fuzz

#endif  // ACCELPOOL_CUDA_FUZZ_FUZZ_ENTRY_H_
