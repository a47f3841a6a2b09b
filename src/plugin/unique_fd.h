// UniqueFd: a file descriptor closed when it goes out of scope.
//
// Thread-safety: a plain value; one owner.
#ifndef ACCELPOOL_PLUGIN_UNIQUE_FD_H_
#define ACCELPOOL_PLUGIN_UNIQUE_FD_H_

#include <unistd.h>

namespace accelpool::plugin {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  // Gives the descriptor up without closing it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_UNIQUE_FD_H_
