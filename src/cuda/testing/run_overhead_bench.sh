#!/usr/bin/env bash
# CPU benchmark of the shim's per-call cost against the fake driver: host ns
# per zero-length launch and per 256 MiB alloc+free, for no shim, shim with
# limits off, compute limit 100 (accounting only), compute limit 50 and a
# memory cap. Prints measured figures only; asserts nothing.
#
#   src/cuda/testing/run_overhead_bench.sh <build dir> [calls]
set -eu
BUILD=${1:?usage: $0 <build dir> [calls]}
N=${2:-1000000}
DIR="$BUILD/src/cuda"
STATE=$(mktemp -d)
trap 'rm -rf "$STATE"' EXIT
run() {
  local label=$1
  shift
  printf '%-28s ' "$label"
  env LD_LIBRARY_PATH="$DIR/fakedriver" "$@" "$DIR/cuda_driver_probe" direct overhead "$N"
}
run "no shim"
run "shim, limits off" LD_PRELOAD="$DIR/libaccelpool-cuda.so"
run "shim, compute 100" LD_PRELOAD="$DIR/libaccelpool-cuda.so" ACCELPOOL_CUDA_COMPUTE_LIMIT=100 \
  ACCELPOOL_CUDA_STATE_DIR="$STATE"
run "shim, memory cap 64 GiB" LD_PRELOAD="$DIR/libaccelpool-cuda.so" \
  ACCELPOOL_CUDA_MEMORY_LIMIT=65536 ACCELPOOL_CUDA_STATE_DIR="$STATE"
run "shim, compute 50" LD_PRELOAD="$DIR/libaccelpool-cuda.so" ACCELPOOL_CUDA_COMPUTE_LIMIT=50 \
  ACCELPOOL_CUDA_STATE_DIR="$STATE"
