#include "cuda/testing/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

extern char** environ;

namespace accelpool::cuda::testing {
namespace {

// What the test's own environment must not hand to a child: the shim's and
// the fake libraries' settings, and which devices CUDA shows (a CI machine
// may set CUDA_VISIBLE_DEVICES, even empty to hide its GPUs). And a name the
// test sets itself: the C library's getenv, and the loader, take the first
// of two entries of one name, which would be the parent's.
bool Dropped(const std::string& entry, const std::map<std::string, std::string>& given) {
  for (const char* prefix :
       {"ACCELPOOL_CUDA_", "CUDA_DEVICE_", "CUDA_TASK_PRIORITY=", "CUDA_VISIBLE_DEVICES=",
        "NVIDIA_VISIBLE_DEVICES=", "CUDA_MPS_", "FAKECUDA_", "FAKENVML_", "LD_PRELOAD="}) {
    if (entry.rfind(prefix, 0) == 0) {
      return true;
    }
  }
  const size_t eq = entry.find('=');
  return given.count(entry.substr(0, eq)) != 0;
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void Drain(int fd, std::string* into) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) {
      return;
    }
    into->append(buf, static_cast<size_t>(n));
  }
}

// Appends what one read of `fd` brings to `buffer`; false once `deadline`
// (NowMs) passes first or the pipe ends.
bool ReadMore(int fd, std::string& buffer, int64_t deadline) {
  int64_t left = deadline - NowMs();
  if (left <= 0) {
    return false;
  }
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(left)) <= 0) {
    return false;
  }
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n <= 0) {
    return false;
  }
  buffer.append(buf, static_cast<size_t>(n));
  return true;
}

}  // namespace

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  for (int fd : {in_, out_, err_}) {
    if (fd >= 0) {
      close(fd);
    }
  }
}

bool ChildProcess::Start(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!Dropped(*e, env)) {
      env_strings.emplace_back(*e);
    }
  }
  for (const auto& [k, v] : env) {
    env_strings.push_back(k + "=" + v);
  }
  std::vector<char*> envp;
  for (auto& s : env_strings) {
    envp.push_back(s.data());
  }
  envp.push_back(nullptr);
  // ACCELPOOL_TEST_EXEC_WRAPPER: words put before argv, e.g. the qemu-user
  // that runs a cross-built test's programs (scripts/cross_arm64.sh).
  std::vector<std::string> args;
  if (const char* wrapper = std::getenv("ACCELPOOL_TEST_EXEC_WRAPPER")) {
    std::istringstream words(wrapper);
    for (std::string w; words >> w;) {
      args.push_back(w);
    }
  }
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> argp;
  for (auto& s : args) {
    argp.push_back(s.data());
  }
  argp.push_back(nullptr);

  int in[2];
  int out[2];
  int err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return false;
  }
  pid_ = fork();
  if (pid_ < 0) {
    return false;
  }
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execve(argp[0], argp.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  in_ = in[1];
  out_ = out[0];
  err_ = err[0];
  return true;
}

std::string ChildProcess::ReadLine(int timeout_ms) {
  int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    size_t nl = out_buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_buffer_.substr(0, nl);
      out_buffer_.erase(0, nl + 1);
      return line;
    }
    if (!ReadMore(out_, out_buffer_, deadline)) {
      return "";
    }
  }
}

bool ChildProcess::WaitForStderr(const std::string& text, int timeout_ms) {
  int64_t deadline = NowMs() + timeout_ms;
  while (err_buffer_.find(text) == std::string::npos) {
    if (!ReadMore(err_, err_buffer_, deadline)) {
      return false;
    }
  }
  return true;
}

bool ChildProcess::Write(const std::string& text) {
  size_t done = 0;
  while (in_ >= 0 && done < text.size()) {
    ssize_t n = write(in_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return done == text.size();
}

void ChildProcess::Kill(int sig) {
  if (pid_ > 0) {
    kill(pid_, sig);
  }
}

void ChildProcess::CloseStdin() {
  if (in_ >= 0) {
    close(in_);
    in_ = -1;
  }
}

ProcessResult ChildProcess::Wait(int timeout_ms) {
  ProcessResult result;
  int64_t deadline = NowMs() + timeout_ms;
  int status = 0;
  std::string err_text = std::move(err_buffer_);
  err_buffer_.clear();
  // Keep draining so a chatty child never blocks on a full pipe.
  for (;;) {
    struct pollfd p[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    poll(p, 2, 50);
    if (p[0].revents & POLLIN) {
      char buf[4096];
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n > 0) {
        out_buffer_.append(buf, static_cast<size_t>(n));
      }
    }
    if (p[1].revents & POLLIN) {
      char buf[4096];
      ssize_t n = read(err_, buf, sizeof(buf));
      if (n > 0) {
        err_text.append(buf, static_cast<size_t>(n));
      }
    }
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      break;
    }
    if (NowMs() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
  }
  pid_ = -1;
  Drain(out_, &out_buffer_);
  Drain(err_, &err_text);
  result.out = out_buffer_;
  result.err = err_text;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

ProcessResult Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, int timeout_ms) {
  ChildProcess child;
  if (!child.Start(argv, env)) {
    return ProcessResult{};
  }
  child.CloseStdin();
  return child.Wait(timeout_ms);
}

std::map<std::string, std::string> ParseKeyValues(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    size_t eq = token.find('=');
    if (eq != std::string::npos && eq > 0) {
      kv[token.substr(0, eq)] = token.substr(eq + 1);
    }
  }
  return kv;
}

}  // namespace accelpool::cuda::testing
