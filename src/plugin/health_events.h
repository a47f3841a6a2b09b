// HealthEvents: which device health changes become Events on the Node
// (AccelpoolDeviceUnhealthy, AccelpoolDeviceHealthy), at most one per device
// per `gap`, so that a device whose health flaps does not flood the
// apiserver. Changes inside the gap are folded: once the gap has passed, Due()
// gives one event with the device's health then, if it differs from what the
// last event said, and how many changes it stands for.
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_HEALTH_EVENTS_H_
#define ACCELPOOL_PLUGIN_HEALTH_EVENTS_H_

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace accelpool::plugin {

inline constexpr const char* kDeviceUnhealthyReason = "AccelpoolDeviceUnhealthy";
inline constexpr const char* kDeviceHealthyReason = "AccelpoolDeviceHealthy";

struct HealthNotice {
  std::string device;
  std::string vendor;
  bool healthy = true;
  std::string reason;  // the backend's: "XID 48 (...)", "recovered"
  int folded = 0;      // earlier changes within the gap this notice stands for

  const char* EventReason() const {
    return healthy ? kDeviceHealthyReason : kDeviceUnhealthyReason;
  }
  // The Event's message: what happened and what it means for pods.
  std::string Message() const;
};

class HealthEvents {
 public:
  using Clock = std::chrono::steady_clock;
  explicit HealthEvents(Clock::duration gap) : gap_(gap) {}

  // A health change of `n.device`: the notice to post now, or nullopt when
  // an event about the device went out less than `gap` ago (folded).
  std::optional<HealthNotice> Changed(HealthNotice n, Clock::time_point now);

  // Folded changes whose gap has passed, for devices whose health now
  // differs from what their last event said.
  std::vector<HealthNotice> Due(Clock::time_point now);

 private:
  struct Device {
    Clock::time_point last_sent;
    bool sent_healthy = true;
    std::optional<HealthNotice> folded;  // the latest change not posted
  };

  const Clock::duration gap_;
  std::mutex mu_;
  std::map<std::string, Device> devices_;  // guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_HEALTH_EVENTS_H_
