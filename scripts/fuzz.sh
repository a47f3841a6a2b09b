#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan) and runs each for a
# short time from its seed corpus:
#
#   codecs      inventory assignment pod_request    seeds: src/api/fuzz/corpus/<name>
#   extender    filter prioritize bind preempt      seeds: src/extender/fuzz/seeds/<name>
#               mutate (the admission review),
#               watch (node and pod objects from the
#               informers; nothing may stay booked),
#               workload_store (the learned workload's
#               ConfigMap document)
#   plugin      node_pods (pod objects from the     seeds: src/plugin/fuzz/seeds/node_pods
#               watch, then kubelet's Allocate and
#               GetPreferredAllocation calls)
#   fake        inventory_file (the fake backend's  seeds: src/vendors/fuzz/corpus/inventory_file
#               inventory file)
#   kubeconfig  yaml (the YAML reader),             seeds: src/kube/fuzz/corpus/<name>
#               exec_credential (an exec credential
#               plugin's answer)
#   http        http_response (the client's reader  seeds: src/http/fuzz/corpus/response
#               of apiserver answers)
#   cuda shim   shim_env (the env contract),        seeds: src/cuda/fuzz/corpus/<name>
#               proc_stat (/proc/<pid>/stat lines)
#   keys        key_state (the key Secret, the      seeds: src/keys/fuzz/corpus/key_state
#               nodes' reported keys and the
#               pending pods accelpool-keys reads)
#   ctl         explain (the nodes and pods         seeds: src/ctl/fuzz/corpus/explain
#               kubectl accelpool reads, its
#               reports and explain)
#
# New inputs go to $BUILD_DIR/corpus/<name>, crashes to $BUILD_DIR/crashes/<name>/,
# each run's output to $BUILD_DIR/logs/<name>.log. Ends with one line
# "fuzz: N passed, M failed" (one count per target) and exits non-zero when
# any target failed or did not build.
#
#   scripts/fuzz.sh                     # FUZZ_SECONDS per target (default 60)
#   scripts/fuzz.sh 600                 # 10 min per target
#   FUZZ_SECONDS=5 scripts/fuzz.sh
#   FUZZ_SECONDS_filter=120 scripts/fuzz.sh   # one target longer (or shorter)
#   FUZZ_TARGETS="yaml bind" scripts/fuzz.sh  # a subset
#   FUZZ_SEED=1 scripts/fuzz.sh         # the same inputs in the same order on every run
#   FUZZ_TIMEOUT=30 scripts/fuzz.sh     # seconds one input may run before it counts as a hang
#   BUILD_DIR=/tmp/f JOBS=4 scripts/fuzz.sh 30
set -euo pipefail

seconds="${1:-${FUZZ_SECONDS:-60}}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
jobs="${JOBS:-2}"

# name -> "<binary relative to the build dir> <seed folder relative to the root>"
declare -A target=(
  [inventory]="src/api/inventory_fuzzer src/api/fuzz/corpus/inventory"
  [assignment]="src/api/assignment_fuzzer src/api/fuzz/corpus/assignment"
  [pod_request]="src/api/pod_request_fuzzer src/api/fuzz/corpus/pod_request"
  [filter]="src/extender/extender_fuzz_filter src/extender/fuzz/seeds/filter"
  [prioritize]="src/extender/extender_fuzz_prioritize src/extender/fuzz/seeds/prioritize"
  [bind]="src/extender/extender_fuzz_bind src/extender/fuzz/seeds/bind"
  [preempt]="src/extender/extender_fuzz_preempt src/extender/fuzz/seeds/preempt"
  [mutate]="src/extender/extender_fuzz_mutate src/extender/fuzz/seeds/mutate"
  [watch]="src/extender/extender_fuzz_watch src/extender/fuzz/seeds/watch"
  [workload_store]="src/extender/extender_fuzz_workload_store src/extender/fuzz/seeds/workload_store"
  [node_pods]="src/plugin/plugin_node_pods_fuzzer src/plugin/fuzz/seeds/node_pods"
  [inventory_file]="src/vendors/inventory_file_fuzzer src/vendors/fuzz/corpus/inventory_file"
  [yaml]="src/kube/yaml_fuzzer src/kube/fuzz/corpus/yaml"
  [exec_credential]="src/kube/exec_credential_fuzzer src/kube/fuzz/corpus/exec_credential"
  [http_response]="src/http/http_response_fuzzer src/http/fuzz/corpus/response"
  [shim_env]="src/cuda/shim_env_fuzzer src/cuda/fuzz/corpus/shim_env"
  [proc_stat]="src/cuda/proc_stat_fuzzer src/cuda/fuzz/corpus/proc_stat"
  [key_state]="src/keys/key_state_fuzzer src/keys/fuzz/corpus/key_state"
  [explain]="src/ctl/ctl_fuzzer src/ctl/fuzz/corpus/explain"
)
order="inventory assignment pod_request filter prioritize bind preempt mutate watch workload_store node_pods inventory_file yaml exec_credential http_response shim_env proc_stat key_state explain"
names="${FUZZ_TARGETS:-$order}"
for name in $names; do
  if [[ -z ${target[$name]+x} ]]; then
    echo "fuzz.sh: unknown target '$name'; pick from: $order" >&2
    exit 2
  fi
done

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found; install clang and libclang-rt-dev" >&2
  echo "fuzz: 0 passed, 1 failed"
  exit 2
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
fi
# -Wno-unknown-warning-option: the project warning set includes GCC-only flags.
# Only what the fuzzers link is built: no tests, benchmarks or simulator.
sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -Wno-unknown-warning-option"
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -G Ninja "${launcher[@]}" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DACCELPOOL_FUZZ=ON -DACCELPOOL_BUILD_TESTS=OFF -DACCELPOOL_BUILD_BENCH=OFF \
    -DACCELPOOL_WITH_CUDA_SHIM=ON -DACCELPOOL_WITH_SIM=OFF >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "fuzz.sh: cmake configure failed (log above)" >&2
  echo "fuzz: 0 passed, 1 failed"
  exit 1
fi
binaries=()
for name in $names; do
  read -r bin _ <<<"${target[$name]}"
  binaries+=("$(basename "$bin")")
done
if ! cmake --build "$build" -j"$jobs" --target "${binaries[@]}"; then
  echo "fuzz.sh: the fuzz targets did not build (errors above)" >&2
  echo "fuzz: 0 passed, 1 failed"
  exit 1
fi

passed=0
failed=0
mkdir -p "$build/logs"
for name in $names; do
  read -r bin seeds <<<"${target[$name]}"
  per_target="FUZZ_SECONDS_$name"
  secs="${!per_target:-$seconds}"
  corpus="$build/corpus/$name"
  crashes="$build/crashes/$name"
  log="$build/logs/$name.log"
  mkdir -p "$corpus" "$crashes"
  echo "== $name: ${secs}s"
  # -timeout: an input running longer counts as a hang (a failure).
  seed_arg=()
  [[ -n ${FUZZ_SEED:-} ]] && seed_arg=(-seed="$FUZZ_SEED")
  if "$build/$bin" -max_total_time="$secs" -max_len=65536 -timeout="${FUZZ_TIMEOUT:-10}" \
      "${seed_arg[@]}" -artifact_prefix="$crashes/" "$corpus" "$root/$seeds" >"$log" 2>&1; then
    passed=$((passed + 1))
    grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs)' "$log" | tail -1 || true
  else
    failed=$((failed + 1))
    tail -40 "$log" >&2
    echo "fuzz.sh: $name fuzzer found a failure; reproducer in $crashes, log $log" >&2
    # One digest per failure, repeated at the end of the test run: the
    # sanitizer's or the target's own reason, and the reproducer itself
    # (base64; decode it into a file and pass that file to the fuzzer binary).
    reason=$(grep -m3 -E '^(SUMMARY: |==[0-9]+== ?ERROR: )|^[a-z_]+: |: runtime error: |what\(\): ' "$log" |
      sed -E 's/^[[:space:]]+//' | paste -sd'|' - | sed 's/|/ | /g' || true)
    echo "fuzz failure: $name: ${reason:-see $log}"
    for f in "$crashes"/*; do
      [[ -f $f ]] || continue
      if (($(stat -c %s "$f") <= 3072)); then
        echo "fuzz failure: $name: reproducer $(basename "$f") (base64): $(base64 -w0 "$f")"
      else
        echo "fuzz failure: $name: reproducer $(basename "$f") is $(stat -c %s "$f") bytes; see $crashes"
      fi
    done
  fi
done
echo "fuzz: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
