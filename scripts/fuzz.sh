#!/usr/bin/env bash
# Builds the libFuzzer targets of the protocol codecs with clang and runs each
# for N seconds (default 60), starting from the seed corpus in
# src/api/fuzz/corpus/<codec>. New inputs go to build-fuzz/corpus/<codec>;
# crashes are written to build-fuzz/crashes/<codec>/.
#
#   scripts/fuzz.sh            # 60 s per fuzzer
#   scripts/fuzz.sh 600        # 10 min per fuzzer
#   BUILD_DIR=/tmp/f JOBS=4 scripts/fuzz.sh 30
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
jobs="${JOBS:-2}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found; install clang and libclang-rt-dev" >&2
  exit 2
fi

# -Wno-unknown-warning-option: the project warning set includes GCC-only flags.
sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -Wno-unknown-warning-option"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DACCELPOOL_FUZZ=ON -DACCELPOOL_BUILD_TESTS=OFF -DACCELPOOL_BUILD_BENCH=OFF \
  -DACCELPOOL_WITH_CUDA_SHIM=OFF -DACCELPOOL_WITH_SIM=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target inventory_fuzzer assignment_fuzzer pod_request_fuzzer

status=0
for codec in inventory assignment pod_request; do
  corpus="$build/corpus/$codec"
  crashes="$build/crashes/$codec"
  mkdir -p "$corpus" "$crashes"
  echo "== $codec: ${seconds}s"
  if ! "$build/src/api/${codec}_fuzzer" -max_total_time="$seconds" -max_len=65536 \
      -artifact_prefix="$crashes/" "$corpus" "$root/src/api/fuzz/corpus/$codec"; then
    echo "fuzz.sh: $codec fuzzer found a failure; see $crashes" >&2
    status=1
  fi
done
exit "$status"
