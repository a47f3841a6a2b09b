#!/usr/bin/env bash
# CPU benchmark of the shim's per-call cost against the fake driver: host ns
# per zero-length launch and per 256 MiB alloc+free, for no shim, shim with
# limits off, compute limit 100 (accounting only), compute limit 50 and a
# memory cap. Prints measured figures only; asserts nothing.
#
#   src/cuda/testing/run_overhead_bench.sh <build dir> [calls]
#
# Env:
#   FAKECUDA_EVENT_RECORD_NS=<ns>  make each fake cuEventRecord cost that much
#       host time, as a real driver's does (the fake's own costs ~nothing).
#   BASELINE_SHIM=<path to another libaccelpool-cuda.so>  also run the
#       compute-50 case with that build, interleaved with this one, and print
#       the launch cost each adds over no shim and their ratio (this/baseline).
#   ROUNDS=<n>  interleaved rounds for the comparison (default 5; medians).
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
  env LD_LIBRARY_PATH="$DIR/fakedriver" "$@" "$DIR/cuda_driver_probe" direct overhead "$N" |
    tr '\n' ' '
  echo
}
run "no shim"
run "shim, limits off" LD_PRELOAD="$DIR/libaccelpool-cuda.so"
run "shim, compute 100" LD_PRELOAD="$DIR/libaccelpool-cuda.so" ACCELPOOL_CUDA_COMPUTE_LIMIT=100 \
  ACCELPOOL_CUDA_STATE_DIR="$STATE"
run "shim, memory cap 64 GiB" LD_PRELOAD="$DIR/libaccelpool-cuda.so" \
  ACCELPOOL_CUDA_MEMORY_LIMIT=65536 ACCELPOOL_CUDA_STATE_DIR="$STATE"
run "shim, compute 50" LD_PRELOAD="$DIR/libaccelpool-cuda.so" ACCELPOOL_CUDA_COMPUTE_LIMIT=50 \
  ACCELPOOL_CUDA_STATE_DIR="$STATE"

if [ -n "${BASELINE_SHIM:-}" ]; then
  # Interleaved rounds; the median of each configuration's figures.
  ROUNDS=${ROUNDS:-5}
  field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
  declare -a none_p50 none_mean this_p50 this_mean base_p50 base_mean
  for round in $(seq 1 "$ROUNDS"); do
    for cfg in none this base; do
      case $cfg in
        none) out=$(run "x") ;;
        this) out=$(run "x" LD_PRELOAD="$DIR/libaccelpool-cuda.so" \
          ACCELPOOL_CUDA_COMPUTE_LIMIT=50 ACCELPOOL_CUDA_STATE_DIR="$STATE") ;;
        base) out=$(run "x" LD_PRELOAD="$BASELINE_SHIM" ACCELPOOL_CUDA_COMPUTE_LIMIT=50 \
          ACCELPOOL_CUDA_STATE_DIR="$STATE") ;;
      esac
      eval "${cfg}_p50[$round]=$(echo "$out" | field launch_p50_ns)"
      eval "${cfg}_mean[$round]=$(echo "$out" | field launch_mean_ns)"
    done
  done
  median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
  np=$(median "${none_p50[@]}"); nm=$(median "${none_mean[@]}")
  tp=$(median "${this_p50[@]}"); tm=$(median "${this_mean[@]}")
  bp=$(median "${base_p50[@]}"); bm=$(median "${base_mean[@]}")
  awk -v np="$np" -v nm="$nm" -v tp="$tp" -v tm="$tm" -v bp="$bp" -v bm="$bm" 'BEGIN {
    printf "compute 50, median of interleaved rounds (ns per launch):\n"
    printf "  no shim        p50 %6.0f  mean %7.1f\n", np, nm
    printf "  baseline shim  p50 %6.0f  mean %7.1f  added p50 %6.0f  added mean %7.1f\n", bp, bm, bp - np, bm - nm
    printf "  this shim      p50 %6.0f  mean %7.1f  added p50 %6.0f  added mean %7.1f\n", tp, tm, tp - np, tm - nm
    if (bm - nm > 0) printf "  added mean, this / baseline: %.2f\n", (tm - nm) / (bm - nm)
  }'
fi
