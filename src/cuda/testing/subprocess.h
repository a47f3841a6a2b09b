// ChildProcess: runs a test helper binary with a chosen environment and
// captures its output, for tests that must preload the shim into a process
// other than the test itself.
//
// The child's environment is the parent's minus every ACCELPOOL_CUDA_*,
// CUDA_DEVICE_*, CUDA_TASK_PRIORITY, CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES, CUDA_MPS_*, FAKECUDA_*, FAKENVML_* and LD_PRELOAD
// variable and every variable given, plus the ones given. stdout and
// stderr are pipes; stdin is a pipe the test can close to let a waiting
// child finish.
//
// Thread-safety: one object per thread.
#ifndef ACCELPOOL_CUDA_TESTING_SUBPROCESS_H_
#define ACCELPOOL_CUDA_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace accelpool::cuda::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal.
  int signal = 0;
  std::string out;
  std::string err;
};

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv[0] with `env` added (behind ACCELPOOL_TEST_EXEC_WRAPPER's words, if
  // set). Returns false if fork/exec setup failed.
  bool Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  // Reads stdout until a newline or `timeout_ms`; returns the line ("" on timeout).
  std::string ReadLine(int timeout_ms);
  // Reads stderr until what was read holds `text`; false if `timeout_ms`
  // passes or stderr ends first. What it read stays in Wait's result.
  bool WaitForStderr(const std::string& text, int timeout_ms);
  // Writes `text` to the child's stdin; false if it could not all be written.
  bool Write(const std::string& text);
  void Kill(int sig);
  void CloseStdin();
  // Waits (up to timeout_ms, then SIGKILL) and collects the remaining output.
  ProcessResult Wait(int timeout_ms);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::string out_buffer_;
  std::string err_buffer_;  // stderr read by WaitForStderr, not yet by Wait
};

// Start + CloseStdin + Wait.
ProcessResult Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, int timeout_ms = 60000);

// Parses "k=v k2=v2" tokens from every line of `text`; later keys win.
std::map<std::string, std::string> ParseKeyValues(const std::string& text);

}  // namespace accelpool::cuda::testing

#endif  // ACCELPOOL_CUDA_TESTING_SUBPROCESS_H_
