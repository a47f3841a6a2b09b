// The backend registry: builds the vendor drivers named on the command line.
// Built once in main and handed to the plugin; no global state.
//
//   "auto"    every hardware backend whose management library loads; a
//             missing library is one log line ("no devices of that vendor").
//   "nvidia", "ascend", "hygon", "thead", "kunlunxin", "metax", "mthreads",
//   "cambricon": that backend only; a missing library is kUnavailable, which
//             the binary waits out with RetryWhileUnavailable.
//   "fake"    the inventory-file backend (BackendOptions::fake_inventory).
// Several names may be given comma-separated ("nvidia,fake").
//
// Thread-safety: pure construction; RetryWhileUnavailable blocks its caller.
#ifndef ACCELPOOL_VENDORS_BACKENDS_H_
#define ACCELPOOL_VENDORS_BACKENDS_H_

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "vendors/driver.h"

namespace accelpool::vendors {

struct BackendOptions {
  std::string backends = "auto";
  std::string node;
  std::string fake_inventory;  // required by "fake"
  int32_t max_shares = 0;      // 0: the vendor's default split count
  bool mig_single = false;     // NVIDIA MIG devices as nvidia.com/gpu (NvidiaOptions)
  bool ascend_vnpu = false;    // Ascend shares as dynamic vNPUs (AscendOptions::vnpu)
  int32_t imex_channel = -1;   // NVIDIA IMEX channel for every container (NvidiaOptions)
};

// The names accepted besides "auto" and "fake".
const std::vector<std::string>& HardwareBackends();

// The vendors a --backend list serves, for the node inventory each plugin
// owns (plugin::NodePublisher): empty, meaning every vendor, when the list
// has "auto" or "fake" (either may find devices of any vendor).
std::set<core::Vendor> BackendVendors(const std::string& backends);

// kInvalidArgument for an unknown name or "fake" without an inventory;
// kUnavailable when an explicitly named backend's library does not load.
// Each skipped "auto" backend adds a line to `skipped`.
StatusOr<std::vector<VendorDriverPtr>> MakeBackends(const BackendOptions& options,
                                                    std::vector<std::string>* skipped);

// How long to wait between tries: `first`, doubled each time, at most `max`.
struct Backoff {
  std::chrono::milliseconds first = std::chrono::seconds(5);
  std::chrono::milliseconds max = std::chrono::minutes(5);
};

using BackendFactory = std::function<StatusOr<std::vector<VendorDriverPtr>>()>;
// Waits `delay` before the next try; `why` is the last try's kUnavailable.
// Returns false to stop waiting (a stop signal).
using BackendWait = std::function<bool(const Status& why, std::chrono::milliseconds delay)>;

// Calls `make` until it returns drivers or an error other than kUnavailable
// (a named backend whose library is not there yet: a driver being installed,
// a container runtime that has not injected it), which are returned. Between
// tries it calls `wait` with the delay from `backoff`. kCancelled when `wait`
// returns false.
StatusOr<std::vector<VendorDriverPtr>> RetryWhileUnavailable(const BackendFactory& make,
                                                             const Backoff& backoff,
                                                             const BackendWait& wait);

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_BACKENDS_H_
