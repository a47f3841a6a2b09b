#include "vendors/dl_library.h"

#include <dlfcn.h>

#include <utility>

namespace accelpool::vendors {

StatusOr<std::unique_ptr<DlLibrary>> DlLibrary::Open(const std::vector<std::string>& candidates) {
  std::string tried;
  std::string last_error;
  for (const std::string& name : candidates) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      return std::unique_ptr<DlLibrary>(new DlLibrary(h, name));
    }
    const char* err = dlerror();
    last_error = err != nullptr ? err : "unknown dlopen error";
    tried += (tried.empty() ? "" : ", ") + name;
  }
  return UnavailableError("no vendor library could be loaded (tried " + tried +
                          "; last error: " + last_error +
                          "); install the vendor driver or mount its library into the plugin");
}

DlLibrary::~DlLibrary() {
  if (handle_ != nullptr) {
    dlclose(handle_);
  }
}

void* DlLibrary::RawSymbol(const std::string& name) const {
  dlerror();
  return dlsym(handle_, name.c_str());
}

}  // namespace accelpool::vendors
