// DiscoveryLog: the log lines one discovery writes, each written only when the
// previous discovery of the same driver did not write it. The device plugin
// discovers again every minute to notice a changed device set; a node that
// stays the same logs what it found (a MIG layout, a missing topology
// profile) once, and again only when it changes.
//
// Thread-safety: one DiscoveryLog per discovery; the LoggedLines it shares
// with the next one is guarded by its own mutex.
#ifndef ACCELPOOL_VENDORS_DISCOVERY_LOG_H_
#define ACCELPOOL_VENDORS_DISCOVERY_LOG_H_

#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace accelpool::vendors {

// What the last discovery of a driver wrote.
struct LoggedLines {
  std::mutex mu;
  std::set<std::string> lines;  // guarded by mu
};

class DiscoveryLog {
 public:
  enum class Level { kInfo, kWarn, kError };
  // Where lines go: spdlog's default logger unless `write` is given (tests).
  using Writer = std::function<void(Level, const std::string&)>;

  explicit DiscoveryLog(LoggedLines* previous, Writer write = nullptr);
  DiscoveryLog(const DiscoveryLog&) = delete;
  DiscoveryLog& operator=(const DiscoveryLog&) = delete;
  // Writes the lines the previous discovery did not write, also when the
  // discovery fails part way (its lines so far are what it found).
  ~DiscoveryLog();

  void Add(Level level, std::string text);

 private:
  LoggedLines* const previous_;
  const Writer write_;
  std::vector<std::pair<Level, std::string>> lines_;
};

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_DISCOVERY_LOG_H_
