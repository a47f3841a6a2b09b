#!/usr/bin/env bash
# Smoke test of the e2e control plane: start it, create a kwok node and a pod
# for the default scheduler, wait until the pod is Running on that node, check
# the accelpool-scheduler config was accepted, and tear everything down.
# Prints "N passed, M failed" and exits non-zero on any failure.
#
# Usage: tests/e2e/smoke.sh   (needs tests/e2e/build-tools.sh to have run)
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"
export E2E_WORK="${E2E_WORK:-${E2E_DIR}/.work/smoke}"
PASSED=0 FAILED=0
check() { # description command...
  local what="$1"; shift
  if "$@"; then PASSED=$((PASSED + 1)); log "ok: ${what}"; else FAILED=$((FAILED + 1)); log "FAIL: ${what}"; fi
}
finish() {
  "${E2E_DIR}/cluster.sh" stop >/dev/null 2>&1 || true
  echo "smoke: ${PASSED} passed, ${FAILED} failed"
}
trap finish EXIT

"${E2E_DIR}/cluster.sh" clean >/dev/null 2>&1  # fresh etcd data for every run
"${E2E_DIR}/cluster.sh" start
# shellcheck disable=SC1091 # written by cluster.sh start
. "${E2E_WORK}/cluster.env"
K=("${E2E_BIN}/kubectl")

"${K[@]}" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: kwok-smoke-0
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: kwok-smoke-0, kubernetes.io/os: linux}
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
YAML

wait_for() { # seconds description command...
  local secs="$1" what="$2" i; shift 2
  for ((i = 0; i < secs * 4; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  log "timed out after ${secs}s waiting for ${what}"; return 1
}
node_ready() {
  [ "$("${K[@]}" get node kwok-smoke-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
check "kwok marks the fake node Ready" wait_for 30 "node Ready" node_ready

"${K[@]}" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: smoke, namespace: default}
spec:
  containers:
  - {name: app, image: registry.invalid/none, resources: {requests: {cpu: 100m, memory: 64Mi}}}
YAML
pod_running() { [ "$("${K[@]}" get pod smoke -o jsonpath='{.status.phase}')" = Running ]; }
check "the default scheduler binds the pod and kwok runs it" wait_for 60 "pod Running" pod_running
check "the pod is on the kwok node" \
  test "$("${K[@]}" get pod smoke -o jsonpath='{.spec.nodeName}')" = kwok-smoke-0
check "the pod was scheduled by default-scheduler" \
  bash -c "'${K[0]}' get events --field-selector involvedObject.name=smoke,reason=Scheduled -o jsonpath='{.items[*].reportingComponent}{.items[*].source.component}' | grep -q default-scheduler"
check "accelpool-scheduler is running with the extender config" "${E2E_DIR}/cluster.sh" status
check "the accelpool-scheduler config names the extender" \
  grep -q "urlPrefix: ${SCHED_EXTENDER_URL:-${EXTENDER_URL}}" "${E2E_WORK}/config/accelpool-scheduler.yaml"
apiserver_has_webhook_admission() {
  tr '\0' ' ' < "/proc/$(cat "${E2E_WORK}/run/kube-apiserver.pid")/cmdline" | grep_output -q MutatingAdmissionWebhook
}
check "the apiserver enables MutatingAdmissionWebhook" apiserver_has_webhook_admission

"${E2E_DIR}/cluster.sh" stop
check "teardown leaves no process behind" bash -c "! '${E2E_DIR}/cluster.sh' status >/dev/null"
[ "${FAILED}" = 0 ]
