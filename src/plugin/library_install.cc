#include "plugin/library_install.h"

#include <filesystem>
#include <system_error>

#include "plugin/file_replace.h"

namespace accelpool::plugin {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxLibraryBytes = int64_t{256} << 20;  // far above any build of the shim

// An ELF file of type ET_DYN (a shared object): the magic, then e_type at
// byte 16 in the file's own byte order (e_ident[EI_DATA]: 1 little, 2 big).
Status CheckSharedObject(const std::string& path, const std::string& bytes) {
  const std::string what = "the enforcement library " + path;
  if (bytes.size() < 64 || bytes.compare(0, 4,
                                         "\x7f"
                                         "ELF") != 0) {
    return InvalidArgumentError(what + " is not an ELF file (" + std::to_string(bytes.size()) +
                                " bytes); the image is broken: pull or rebuild it");
  }
  const auto b16 = static_cast<unsigned char>(bytes[16]);
  const auto b17 = static_cast<unsigned char>(bytes[17]);
  const int type = bytes[5] == 2 ? (b16 << 8) | b17 : (b17 << 8) | b16;
  if (type != 3) {  // ET_DYN
    return InvalidArgumentError(what + " is an ELF file of type " + std::to_string(type) +
                                ", not a shared object; the image is broken: pull or rebuild it");
  }
  return Status::Ok();
}

// Removes what an install killed between write and rename left beside `path`.
void RemoveLeftovers(const std::string& path) {
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp-";
  std::error_code ec;
  for (fs::directory_iterator it(p.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(prefix, 0) == 0) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

Status MakeParent(const std::string& path, const char* flag) {
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) {
    return UnavailableError("cannot make " + parent.string() + " for " + flag + ": " +
                            ec.message() + "; mount the host directory writable");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LibraryInstallResult> InstallEnforcementLibrary(const LibraryInstall& install) {
  for (const auto& [value, flag] : {std::pair{&install.library, "--cuda-library"},
                                    std::pair{&install.preload_file, "--preload-file"},
                                    std::pair{&install.source, "--install-cuda-library"}}) {
    if (value->empty() || (*value)[0] != '/') {
      return InvalidArgumentError(std::string(flag) + " must be an absolute path, not \"" + *value +
                                  "\"");
    }
  }
  if (install.preload_entry.empty() ||
      install.preload_entry.find_first_of(" \t\n:") != std::string::npos) {
    return InvalidArgumentError("the preload entry \"" + install.preload_entry +
                                "\" must be one path without spaces or colons");
  }
  StatusOr<std::string> read = ReadRegularFile(install.source, kMaxLibraryBytes);
  if (!read.ok()) {
    const bool absent = read.status().code() == StatusCode::kNotFound;
    return Status(read.status().code(),
                  "cannot read the enforcement library " + install.source + ": " +
                      read.status().message() +
                      (absent ? "; the image does not ship it (build it with the CUDA shim, the "
                                "Dockerfile's default)"
                              : "; the image is broken: pull or rebuild it"));
  }
  const std::string& bytes = *read;
  ACCELPOOL_RETURN_IF_ERROR(CheckSharedObject(install.source, bytes));

  LibraryInstallResult result;
  result.library_bytes = static_cast<int64_t>(bytes.size());
  ACCELPOOL_RETURN_IF_ERROR(MakeParent(install.library, "--cuda-library"));
  ACCELPOOL_RETURN_IF_ERROR(MakeParent(install.preload_file, "--preload-file"));
  RemoveLeftovers(install.library);
  RemoveLeftovers(install.preload_file);
  ReplaceOptions library_options;
  library_options.durable = true;
  library_options.perms = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                          fs::perms::others_read | fs::perms::others_exec;
  ACCELPOOL_RETURN_IF_ERROR(
      ReplaceFileIfChanged(install.library, bytes, library_options, &result.library_written));
  // The library first: a preload file never names a library not yet there.
  ReplaceOptions preload_options;
  preload_options.durable = true;
  ACCELPOOL_RETURN_IF_ERROR(ReplaceFileIfChanged(install.preload_file, install.preload_entry + "\n",
                                                 preload_options, &result.preload_written));
  return result;
}

std::string MissingEnforcementFiles(const std::string& library, const std::string& preload_file,
                                    bool preload) {
  std::error_code ec;
  std::string missing;
  if (!fs::is_regular_file(library, ec)) {
    missing = library;
  }
  if (preload && !fs::is_regular_file(preload_file, ec)) {
    missing += (missing.empty() ? "" : " and ") + preload_file;
  }
  if (missing.empty()) {
    return "";
  }
  return missing +
         " not found on this node: containers granted a fractional NVIDIA share cannot start "
         "(their runtime cannot mount it). Install it with accelpool-device-plugin "
         "--install-cuda-library (the chart's init container, devicePlugin.installCudaLibrary), "
         "or run the plugin with --no-enforcement";
}

}  // namespace accelpool::plugin
