#!/usr/bin/env bash
# The end-to-end suite: builds the pinned tools (cached), runs kubeletsim's Go
# tests, the control-plane smoke test and the chart checks, each with a time
# limit. Ends with "e2e: N passed, M failed" and a non-zero exit on failure.
# The load baseline (load-baseline.sh) is a measurement and is not run here.
#
# Usage: tests/e2e/run.sh
set -uo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PASSED=0 FAILED=0
LOGS="${E2E_DIR}/.work/run"
mkdir -p "${LOGS}"

# add_counts LOG LABEL: adds the "LABEL: N passed, M failed" line of LOG.
add_counts() {
  local line
  line="$(grep -E "^$2: [0-9]+ passed, [0-9]+ failed" "$1" | tail -1)"
  if [ -z "${line}" ]; then FAILED=$((FAILED + 1)); echo "run: $2 printed no result line"; return; fi
  PASSED=$((PASSED + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"${line}")))
  FAILED=$((FAILED + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"${line}")))
}

echo "== build tools"
if ! timeout 5400 "${E2E_DIR}/build-tools.sh"; then
  echo "run: building the tools failed; nothing else can run"
  echo "e2e: 0 passed, 1 failed"
  exit 1
fi

echo "== kubeletsim (go test)"
(cd "${E2E_DIR}/kubeletsim" && timeout 900 nice -n 15 go test -p 2 -count=1 -v ./... 2>&1) \
  > "${LOGS}/kubeletsim.log"
grep -E '^(--- |ok|FAIL)' "${LOGS}/kubeletsim.log"
p=$(grep -c '^--- PASS' "${LOGS}/kubeletsim.log") f=$(grep -c '^--- FAIL' "${LOGS}/kubeletsim.log")
if [ "$p" = 0 ] && [ "$f" = 0 ]; then f=1; tail -20 "${LOGS}/kubeletsim.log"; fi
PASSED=$((PASSED + p)) FAILED=$((FAILED + f))
echo "kubeletsim: ${p} passed, ${f} failed"

echo "== smoke"
timeout 600 "${E2E_DIR}/smoke.sh" 2>&1 | tee "${LOGS}/smoke.log"
add_counts "${LOGS}/smoke.log" smoke

echo "== chart"
timeout 900 "${E2E_DIR}/chart-check.sh" 2>&1 | tee "${LOGS}/chart.log"
add_counts "${LOGS}/chart.log" chart-check

echo "== scenarios"
timeout 1200 "${E2E_DIR}/scenarios.sh" 2>&1 | tee "${LOGS}/scenarios.log"
add_counts "${LOGS}/scenarios.log" scenarios

echo "e2e: ${PASSED} passed, ${FAILED} failed"
[ "${FAILED}" = 0 ]
