// host_request: what a pod asks of the host (CPU and memory) as kube-scheduler
// counts it, and a node's allocatable CPU and memory.
//
// A pod's effective request (kube-scheduler's NodeResourcesFit): the larger
// of (every regular container plus every sidecar) and (each init container
// plus the sidecars declared before it), plus spec.overhead. Pod-level
// resources (spec.resources.requests) replace the container sum when given.
// A container's request is resources.requests, else resources.limits (the
// apiserver defaults a missing request to the limit).
//
// Quantities follow the Kubernetes grammar: a decimal number with an optional
// fraction, then a binary (Ki .. Ei) or decimal (n, u, m, "", k .. E) suffix or
// an exponent ("1e3"). CPU rounds up to thousandths of a core, memory up to
// whole MiB, as kube-scheduler rounds them up.
//
// Example: containers {cpu 500m, memory 1Gi} and {cpu 1, memory 512Mi}, an
// init container {cpu 2} and overhead {cpu 100m} -> cpu max(1500, 2000) + 100
// = 2100 milli, memory 1536 MiB.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_API_HOST_REQUEST_H_
#define ACCELPOOL_API_HOST_REQUEST_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/status.h"
#include "core/types.h"

namespace accelpool::api {

// CPU in thousandths of a core ("500m" -> 500, "2" -> 2000, "0.1" -> 100),
// rounded up. kInvalidArgument for negative or malformed values, or above
// 2^62.
StatusOr<int64_t> ParseCpuMilli(std::string_view quantity);
// Memory in MiB ("1Gi" -> 1024, "1G" -> 954 rounded up to 954, "100" -> 1),
// rounded up.
StatusOr<int64_t> ParseMemoryMiB(std::string_view quantity);

// The pod's effective host request. kInvalidArgument naming the container and
// the resource for a malformed quantity or a malformed container list.
StatusOr<core::HostResources> ParseHostRequest(const nlohmann::json& pod);

// A Node's status.allocatable CPU and memory; kNotFound when either is absent,
// kInvalidArgument when malformed.
StatusOr<core::HostResources> ParseNodeAllocatable(const nlohmann::json& node);

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_HOST_REQUEST_H_
