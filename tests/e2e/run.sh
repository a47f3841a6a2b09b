#!/usr/bin/env bash
# The end-to-end suite: builds the pinned tools (cached), runs kubeletsim's Go
# tests, the control-plane smoke test and the chart checks, each with a time
# limit. Ends with "e2e: N passed, M failed" and a non-zero exit on failure.
# The load baseline (load-baseline.sh) is a measurement and is not run here.
#
# Usage: tests/e2e/run.sh
# Stages: kubeletsim smoke demo prometheus chart scenarios (in that order; the
# tools are always built). Select with E2E_STAGES="smoke demo" (only those),
# skip with E2E_SKIP="scenarios" or SKIP_<STAGE>=1 (e.g. SKIP_PROMETHEUS=1).
# prometheus runs inside the demo stage, against the demo's cluster.
set -uo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PASSED=0 FAILED=0
LOGS="${E2E_DIR}/.work/run"
mkdir -p "${LOGS}"

# want STAGE: the stage is selected and not skipped.
want() {
  local up; up="$(tr '[:lower:]' '[:upper:]' <<<"$1")"
  local skip_var="SKIP_${up}"
  [ "${!skip_var:-0}" = 1 ] && return 1
  [[ " ${E2E_SKIP:-} " == *" $1 "* ]] && return 1
  [ -z "${E2E_STAGES:-}" ] || [[ " ${E2E_STAGES} " == *" $1 "* ]]
}

# add_counts LOG LABEL [RC]: adds the "LABEL: N passed, M failed" line of LOG.
# A stage that exited non-zero (RC) but reported no failed check (it stopped
# before its checks, e.g. a component did not start) counts one failure.
add_counts() {
  local line p f rc="${3:-0}"
  line="$(grep -E "^$2: [0-9]+ passed, [0-9]+ failed" "$1" | tail -1)"
  if [ -z "${line}" ]; then FAILED=$((FAILED + 1)); echo "run: $2 printed no result line"; return; fi
  p="$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"${line}")"
  f="$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"${line}")"
  if [ "${rc}" != 0 ] && [ "${f}" = 0 ]; then
    f=1
    echo "run: $2 exited with status ${rc} before reporting a failed check; counted as one failure"
  fi
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
}

echo "== build tools"
if ! timeout 5400 "${E2E_DIR}/build-tools.sh"; then
  echo "run: building the tools failed; nothing else can run"
  echo "e2e: 0 passed, 1 failed"
  exit 1
fi

if want kubeletsim; then
  echo "== kubeletsim (go test)"
  (cd "${E2E_DIR}/kubeletsim" && timeout 900 nice -n 15 go test -p 2 -count=1 -v ./... 2>&1) \
    > "${LOGS}/kubeletsim.log"
  grep -E '^(--- |ok|FAIL)' "${LOGS}/kubeletsim.log"
  p=$(grep -c '^--- PASS' "${LOGS}/kubeletsim.log") f=$(grep -c '^--- FAIL' "${LOGS}/kubeletsim.log")
  if [ "$p" = 0 ] && [ "$f" = 0 ]; then f=1; tail -20 "${LOGS}/kubeletsim.log"; fi
  PASSED=$((PASSED + p)) FAILED=$((FAILED + f))
  echo "kubeletsim: ${p} passed, ${f} failed"
fi

if want smoke; then
  echo "== smoke"
  timeout 600 "${E2E_DIR}/smoke.sh" 2>&1 | tee "${LOGS}/smoke.log"
  add_counts "${LOGS}/smoke.log" smoke "${PIPESTATUS[0]}"
fi

# The demo: six nodes of four kinds, sample workloads, the placement checks;
# then Prometheus scraping that cluster (tests/e2e/prometheus.sh).
if want demo; then
  echo "== demo"
  prom=0
  want prometheus && prom=1
  DEMO_PROMETHEUS="${prom}" DEMO_SKIP_TOOLS=1 timeout 900 "${E2E_DIR}/demo.sh" 2>&1 | tee "${LOGS}/demo.log"
  add_counts "${LOGS}/demo.log" demo "${PIPESTATUS[0]}"
  [ "${prom}" = 1 ] && add_counts "${LOGS}/demo.log" prometheus
fi

if want chart; then
  echo "== chart"
  timeout 900 "${E2E_DIR}/chart-check.sh" 2>&1 | tee "${LOGS}/chart.log"
  add_counts "${LOGS}/chart.log" chart-check "${PIPESTATUS[0]}"
fi

if want scenarios; then
  echo "== scenarios"
  timeout 1200 "${E2E_DIR}/scenarios.sh" 2>&1 | tee "${LOGS}/scenarios.log"
  add_counts "${LOGS}/scenarios.log" scenarios "${PIPESTATUS[0]}"
fi

echo "e2e: ${PASSED} passed, ${FAILED} failed"
[ "${FAILED}" = 0 ]
