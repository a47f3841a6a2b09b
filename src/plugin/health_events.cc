#include "plugin/health_events.h"

#include <utility>

namespace accelpool::plugin {

std::string HealthNotice::Message() const {
  std::string m = "device " + device + " (" + vendor + ") ";
  if (healthy) {
    m += "is healthy again (" + reason + "): kubelet offers its slots to new pods";
  } else {
    m += "is unhealthy: " + reason +
         ". kubelet gives its slots to no new pod and the extender places nothing on it; pods "
         "already using it keep running: check the device with the vendor's tool, and delete "
         "those pods if they fail so that they are placed elsewhere";
  }
  if (folded > 0) {
    m += " (" + std::to_string(folded) + " earlier health change" + (folded == 1 ? "" : "s") +
         " of this device since the last event are folded into this one)";
  }
  return m;
}

std::optional<HealthNotice> HealthEvents::Changed(HealthNotice n, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, first] = devices_.try_emplace(n.device);
  Device& d = it->second;
  if (first || now - d.last_sent >= gap_) {
    // A change folded before and not yet due (no Due() since the gap ended)
    // counts in this one.
    n.folded = d.folded ? d.folded->folded + 1 : 0;
    d.last_sent = now;
    d.sent_healthy = n.healthy;
    d.folded.reset();
    return n;
  }
  n.folded = d.folded ? d.folded->folded + 1 : 0;
  d.folded = std::move(n);
  return std::nullopt;
}

std::vector<HealthNotice> HealthEvents::Due(Clock::time_point now) {
  std::vector<HealthNotice> due;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, d] : devices_) {
    if (!d.folded || now - d.last_sent < gap_) {
      continue;
    }
    if (d.folded->healthy != d.sent_healthy) {
      d.last_sent = now;
      d.sent_healthy = d.folded->healthy;
      due.push_back(std::move(*d.folded));
    }
    d.folded.reset();
  }
  return due;
}

}  // namespace accelpool::plugin
