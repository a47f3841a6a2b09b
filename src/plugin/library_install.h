// Installing libaccelpool-cuda.so and the ld.so.preload file that names it
// on a node, from the image (`accelpool-device-plugin --install-cuda-library`,
// the chart's init container on NVIDIA nodes).
//
// Containers bind-mount both host files (Allocator, EnforcementOptions), so a
// running container has them open for as long as it lives, and its processes
// map the library. The install therefore never writes into an installed file:
// each is written whole beside the old one and renamed over it
// (ReplaceFileIfChanged). Running containers keep the version they started
// with, every process of one container the same; containers created later get
// the new one. An install of the same bytes writes nothing.
#ifndef ACCELPOOL_PLUGIN_LIBRARY_INSTALL_H_
#define ACCELPOOL_PLUGIN_LIBRARY_INSTALL_H_

#include <cstdint>
#include <string>

#include "common/status.h"

namespace accelpool::plugin {

struct LibraryInstall {
  std::string source;         // the library shipped in the image
  std::string library;        // where it goes on the host (--cuda-library)
  std::string preload_file;   // the host file mounted at /etc/ld.so.preload
  std::string preload_entry;  // the path it names: the library inside containers
};

struct LibraryInstallResult {
  bool library_written = false;  // false: the same bytes were installed already
  bool preload_written = false;
  int64_t library_bytes = 0;
};

// Checks that `source` is an ELF shared object (not empty, not a script or a
// truncated copy: glibc would refuse to preload it in every container, the
// failure HAMi users meet as "cannot be preloaded (cannot read file data)"),
// makes the target directories, and installs both files. Removes temporary
// files an interrupted install left. Errors say which file and what to do.
StatusOr<LibraryInstallResult> InstallEnforcementLibrary(const LibraryInstall& install);

// What a container granted a fractional NVIDIA share would miss on this node:
// "" when both files are there, else which is missing and how to install it.
std::string MissingEnforcementFiles(const std::string& library, const std::string& preload_file,
                                    bool preload);

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_LIBRARY_INSTALL_H_
