#include "vendors/discovery_log.h"

#include <spdlog/spdlog.h>

namespace accelpool::vendors {

DiscoveryLog::DiscoveryLog(LoggedLines* previous, Writer write)
    : previous_(previous), write_(std::move(write)) {}

DiscoveryLog::~DiscoveryLog() {
  std::set<std::string> now;
  std::lock_guard<std::mutex> lock(previous_->mu);
  for (const auto& [level, text] : lines_) {
    if (!previous_->lines.contains(text)) {
      if (write_) {
        write_(level, text);
      } else {
        spdlog::log(level == Level::kError  ? spdlog::level::err
                    : level == Level::kWarn ? spdlog::level::warn
                                            : spdlog::level::info,
                    "{}", text);
      }
    }
    now.insert(text);
  }
  previous_->lines = std::move(now);
}

void DiscoveryLog::Add(Level level, std::string text) {
  lines_.emplace_back(level, std::move(text));
}

}  // namespace accelpool::vendors
