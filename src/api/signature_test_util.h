// Test helper: a temporary assignment key directory (the files the chart's
// key Secret holds), removed with the object.
#ifndef ACCELPOOL_API_SIGNATURE_TEST_UTIL_H_
#define ACCELPOOL_API_SIGNATURE_TEST_UTIL_H_

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "api/assignment_signature.h"

namespace accelpool::api::testing {

inline const std::string kTestKey = "test-key-0123456789-0123456789-0123456789";

class TempKeyDir {
 public:
  explicit TempKeyDir(const std::map<std::string, std::string>& files = {{"signing", "k1"},
                                                                         {"k1", kTestKey}}) {
    static std::atomic<int> seq{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("accelpool-keydir-" + std::to_string(getpid()) + "-" + std::to_string(seq++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const auto& [name, content] : files) std::ofstream(dir_ / name) << content;
  }
  ~TempKeyDir() { std::filesystem::remove_all(dir_); }
  TempKeyDir(const TempKeyDir&) = delete;
  TempKeyDir& operator=(const TempKeyDir&) = delete;

  std::string path() const { return dir_.string(); }
  std::unique_ptr<AssignmentKeyRing> Ring() const {
    return std::move(AssignmentKeyRing::Open(path())).value();
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace accelpool::api::testing

#endif  // ACCELPOOL_API_SIGNATURE_TEST_UTIL_H_
