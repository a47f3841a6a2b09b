// DlLibrary: a vendor management library opened at run time with dlopen, so
// one binary runs on every node and an absent library means "no devices of
// that vendor" rather than a failed start.
//
// Thread-safety: after Open() returns, Symbol() may be called from any thread.
// The library is closed when the object is destroyed; function pointers taken
// from it must not outlive it.
#ifndef ACCELPOOL_VENDORS_DL_LIBRARY_H_
#define ACCELPOOL_VENDORS_DL_LIBRARY_H_

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace accelpool::vendors {

class DlLibrary {
 public:
  // Opens the first of `candidates` that loads (names are searched the way
  // dlopen searches; paths are used as given). kUnavailable when none loads;
  // the message lists what was tried and dlopen's last error.
  static StatusOr<std::unique_ptr<DlLibrary>> Open(const std::vector<std::string>& candidates);

  ~DlLibrary();
  DlLibrary(const DlLibrary&) = delete;
  DlLibrary& operator=(const DlLibrary&) = delete;

  // The address of `name` cast to the function type Fn, or kUnimplemented
  // when the library does not export it (older driver).
  template <typename Fn>
  StatusOr<Fn*> Symbol(const std::string& name) const {
    void* p = RawSymbol(name);
    if (p == nullptr) {
      return UnimplementedError(path_ + " does not export " + name +
                                "; update the vendor driver to a version that has it");
    }
    return reinterpret_cast<Fn*>(p);
  }

  // Like Symbol() but nullptr when absent (optional functions).
  template <typename Fn>
  Fn* OptionalSymbol(const std::string& name) const {
    return reinterpret_cast<Fn*>(RawSymbol(name));
  }

  const std::string& path() const { return path_; }

 private:
  DlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* RawSymbol(const std::string& name) const;

  void* handle_;
  std::string path_;
};

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_DL_LIBRARY_H_
