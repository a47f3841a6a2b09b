#!/usr/bin/env bash
# Runs the whole accelpool test suite on a fresh Debian machine:
#   1. installs dependencies (scripts/setup.sh),
#   2. builds everything with warnings as errors and runs every unit test (ctest),
#   3. rebuilds the core and libaccelpool-cuda with AddressSanitizer + UBSan
#      and runs their tests (the shim tests that preload it into another
#      process skip themselves there: docs/enforcement.md),
#   4. rebuilds the services (extender, device plugin, HTTP and Kubernetes
#      layers, vendor backends) with ThreadSanitizer and runs their tests,
#      except those that go through gRPC (see tsan_stage below),
#   5. runs each libFuzzer target briefly (scripts/fuzz.sh; FUZZ_SECONDS per
#      target, default 15; each target is one count in the total),
#   6. runs the end-to-end suite on a real control plane (tests/e2e/run.sh).
# Ends with one line "accelpool: N passed, M failed" (skipped tests, counted
# apart, are listed above it) and a non-zero exit when anything failed.
# Set SKIP_E2E=1 to skip stage 6, SKIP_ASAN=1 to skip stage 3, SKIP_TSAN=1
# to skip stage 4.
set -uo pipefail
cd "$(dirname "$0")/.."
export JOBS=${JOBS:-2}

passed=0
failed=0
skipped=0
stage_failed=()

# Adds the counts of one ctest run (its log in $1) to the totals. ctest counts
# a skipped test as not failed; here it is counted as skipped, not passed.
count_ctest() {
  local line total fails skips
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -1)
  if [[ -z $line ]]; then
    failed=$((failed + 1))
    return
  fi
  fails=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  skips=$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$1" || true)
  passed=$((passed + total - fails - skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
}

stage() { echo; echo "==== $* ===="; }

stage "1/6 dependencies"
bash scripts/setup.sh || { echo "setup failed"; exit 1; }

stage "2/6 build and unit tests"
if bash scripts/build.sh; then
  ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 900 2>&1 | tee build/ctest.log
  count_ctest build/ctest.log
  grep -q ' 0 tests failed' build/ctest.log || stage_failed+=("unit")
else
  failed=$((failed + 1)); stage_failed+=("build")
fi

if [[ ${SKIP_ASAN:-0} != 1 ]]; then
  stage "3/6 core and CUDA shim under AddressSanitizer + UBSan"
  if BUILD_DIR=build-asan bash scripts/build.sh -DACCELPOOL_SANITIZE=ON -DACCELPOOL_WITH_SERVICES=OFF \
      -DACCELPOOL_WITH_SIM=OFF -DACCELPOOL_BUILD_BENCH=OFF; then
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir build-asan --output-on-failure -j"$JOBS" --timeout 900 2>&1 | tee build-asan/ctest.log
    count_ctest build-asan/ctest.log
    grep -q ' 0 tests failed' build-asan/ctest.log || stage_failed+=("asan")
  else
    failed=$((failed + 1)); stage_failed+=("asan-build")
  fi
fi

if [[ ${SKIP_TSAN:-0} != 1 ]]; then
  stage "4/6 services under ThreadSanitizer"
  # Debian's gRPC and protobuf are not built with ThreadSanitizer, which then
  # cannot see their synchronisation and reports races inside them on every
  # call: the tests that run a gRPC server or client (the kubelet stand-in's,
  # a resource server's, the pod-resources client's, and the serving plugin binary's in
  # DevicePluginInstallsTheCudaLibrary) are left to the plain stage. Everything
  # else with threads runs here: the extender, the HTTP and Kubernetes
  # layers, the plugin's pod sync, reporters and health watches, and the
  # vendor backends' health threads against their fake libraries. The
  # cpprestsdk transport runs too; reports with a frame inside Debian's
  # libcpprest (equally uninstrumented) are suppressed (src/http/client.cc).
  tsan_skip='^(NodePlugin(Start|DeviceCheck|Publish|Registration)?Test|PodResourcesTest|ResourceServerTest)\.|^DevicePluginInstallsTheCudaLibrary$|H200'
  if BUILD_DIR=build-tsan bash scripts/build.sh -DACCELPOOL_TSAN=ON -DACCELPOOL_WITH_CUDA_SHIM=OFF \
      -DACCELPOOL_WITH_SIM=OFF -DACCELPOOL_BUILD_BENCH=OFF; then
    # A kernel whose address-space randomisation ThreadSanitizer cannot work
    # with stops every binary at start ("unexpected memory mapping"): the
    # stage is then skipped with that reason, not counted as failed.
    probe=$(build-tsan/src/common/common_test --gtest_list_tests 2>&1 >/dev/null | head -3)
    if grep -q 'ThreadSanitizer' <<<"$probe"; then
      echo "tsan: skipped: ThreadSanitizer cannot run on this machine: $probe"
      skipped=$((skipped + 1))
    else
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        ctest --test-dir build-tsan --output-on-failure -j"$JOBS" --timeout 900 -E "$tsan_skip" 2>&1 |
        tee build-tsan/ctest.log
      count_ctest build-tsan/ctest.log
      grep -q ' 0 tests failed' build-tsan/ctest.log || stage_failed+=("tsan")
    fi
  else
    failed=$((failed + 1)); stage_failed+=("tsan-build")
  fi
fi

stage "5/6 fuzzing (short runs)"
if [[ -x scripts/fuzz.sh ]]; then
  # One count per fuzz target, from fuzz.sh's "fuzz: N passed, M failed" line.
  mkdir -p build
  # A fixed seed and a generous hang limit: a test run replays the same short
  # campaign (a finding fails every run, not one submission at random); long
  # campaigns run without them (scripts/fuzz.sh).
  FUZZ_SEED="${FUZZ_SEED:-1}" FUZZ_TIMEOUT="${FUZZ_TIMEOUT:-30}" \
    bash scripts/fuzz.sh "${FUZZ_SECONDS:-15}" 2>&1 | tee build/fuzz.log
  fuzz_rc=${PIPESTATUS[0]}
  line=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' build/fuzz.log | tail -1)
  if [[ -n $line ]]; then
    passed=$((passed + $(sed -E 's/^fuzz: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
  fi
  if [[ $fuzz_rc -ne 0 ]]; then
    stage_failed+=("fuzz")
    [[ -z $line ]] && failed=$((failed + 1))
  fi
else
  echo "no fuzz targets yet"
fi

if [[ ${SKIP_E2E:-0} != 1 && -x tests/e2e/run.sh ]]; then
  stage "6/6 end-to-end on a real control plane"
  bash tests/e2e/run.sh 2>&1 | tee build/e2e.log
  e2e_rc=${PIPESTATUS[0]}
  line=$(grep -E '^e2e: [0-9]+ passed, [0-9]+ failed' build/e2e.log | tail -1)
  if [[ -n $line ]]; then
    passed=$((passed + $(sed -E 's/^e2e: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
  fi
  if [[ $e2e_rc -ne 0 ]]; then
    stage_failed+=("e2e")
    [[ -z $line ]] && failed=$((failed + 1))
  fi
fi

echo
if ((${#stage_failed[@]} > 0)); then
  echo "failed stages: ${stage_failed[*]}"
  # What failed, repeated here so the end of the output names it: failed unit
  # tests, fuzz failures with their reproducers, failed end-to-end checks.
  for log in build/ctest.log build-asan/ctest.log build-tsan/ctest.log; do
    [[ -f $log ]] && grep -E '^[[:space:]]+[0-9]+ - .* \((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Child aborted)\)' "$log" |
      sed "s|^[[:space:]]*|$log: |"
  done
  # The failed assertions themselves (GoogleTest's "Failure", a sanitizer's
  # report, and the lines after each), so that a failure seen only in a CI
  # summary can be diagnosed.
  for log in build/ctest.log build-asan/ctest.log build-tsan/ctest.log; do
    [[ -f $log ]] && grep -a -A7 -E ': Failure$|^WARNING: ThreadSanitizer|ERROR: AddressSanitizer|: runtime error: ' "$log" | head -60 | cut -c1-240 |
      sed "s|^|$log> |"
  done
  [[ -f build/fuzz.log ]] && grep -E '^fuzz(\.sh: .* did not build|: 0 passed, 1 failed| failure: )' build/fuzz.log
  [[ -f build/e2e.log ]] && grep -E 'FAIL|printed no result line' build/e2e.log | head -40
fi
if ((skipped > 0)); then
  echo "skipped: $skipped (each says why in its stage's log; the ASan stage skips the shim's"
  echo "         timing tests, which the plain stage runs)"
fi
echo "accelpool: $passed passed, $failed failed"
[[ $failed -eq 0 && ${#stage_failed[@]} -eq 0 ]]
