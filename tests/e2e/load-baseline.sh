#!/usr/bin/env bash
# "No extender" load baseline: 500 pods on 100 kwok nodes through the stock
# default scheduler, printing pods/s. The extender's throughput is compared to
# this figure later.
#
# Method: nodes are created and Ready first; the default scheduler is stopped
# while the pods are created (so creation speed is not measured); then it is
# started and the time until every pod is bound is measured, both from the
# scheduler's start and from the first bind seen, and then until every pod
# is Running (kwok).
#
# Usage: tests/e2e/load-baseline.sh        (E2E_LOAD_NODES, E2E_LOAD_PODS override 100/500)
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"
export E2E_WORK="${E2E_WORK:-${E2E_DIR}/.work/load}"
export E2E_ACCELPOOL_SCHEDULER=0
NODES="${E2E_LOAD_NODES:-100}" PODS="${E2E_LOAD_PODS:-500}"
[[ "${NODES}" =~ ^[1-9][0-9]*$ && "${PODS}" =~ ^[1-9][0-9]*$ ]] || die "E2E_LOAD_NODES and E2E_LOAD_PODS must be positive integers"
trap '"${E2E_DIR}/cluster.sh" stop >/dev/null 2>&1 || true' EXIT

"${E2E_DIR}/cluster.sh" clean >/dev/null 2>&1  # fresh etcd data for every run
"${E2E_DIR}/cluster.sh" start
# shellcheck disable=SC1091 # written by cluster.sh start
. "${E2E_WORK}/cluster.env"
K=("${E2E_BIN}/kubectl")
GEN="${E2E_WORK}/gen"; mkdir -p "${GEN}"

{
  echo "apiVersion: v1"; echo "kind: List"; echo "items:"
  for ((i = 0; i < NODES; i++)); do cat <<YAML
- apiVersion: v1
  kind: Node
  metadata:
    name: kwok-load-${i}
    annotations: {kwok.x-k8s.io/node: fake}
    labels: {type: kwok, kubernetes.io/hostname: kwok-load-${i}}
  status:
    allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
    capacity: {cpu: "32", memory: 256Gi, pods: "110"}
YAML
  done
} > "${GEN}/nodes.yaml"
{
  echo "apiVersion: v1"; echo "kind: List"; echo "items:"
  for ((i = 0; i < PODS; i++)); do cat <<YAML
- apiVersion: v1
  kind: Pod
  metadata: {name: load-${i}, namespace: default, labels: {app: load}}
  spec:
    containers:
    - {name: app, image: registry.invalid/none, resources: {requests: {cpu: 100m, memory: 128Mi}}}
YAML
  done
} > "${GEN}/pods.yaml"

"${K[@]}" create -f "${GEN}/nodes.yaml" >/dev/null
ready_nodes() { "${K[@]}" get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l; }
for ((i = 0; i < 240; i++)); do [ "$(ready_nodes)" -ge "${NODES}" ] && break; sleep 0.25; done
[ "$(ready_nodes)" -ge "${NODES}" ] || die "only $(ready_nodes)/${NODES} nodes Ready after 60s: see ${E2E_WORK}/logs/kwok.log"
log "${NODES} nodes Ready"

"${E2E_DIR}/cluster.sh" stop-proc default-scheduler
t=$(now_ms)
"${K[@]}" create -f "${GEN}/pods.yaml" >/dev/null
create_ms=$(( $(now_ms) - t ))
log "${PODS} pods created in ${create_ms} ms (scheduler stopped)"

unbound() { "${K[@]}" get pods -l app=load --field-selector spec.nodeName= --no-headers 2>/dev/null | wc -l; }
not_running() { "${K[@]}" get pods -l app=load --field-selector status.phase!=Running --no-headers 2>/dev/null | wc -l; }
t0=$(now_ms)
"${E2E_DIR}/cluster.sh" start 2>&1 | grep -E 'default-scheduler' >&2 || true
t_first="" t_bound=""
for ((i = 0; i < 2400; i++)); do
  u=$(unbound)
  [ -z "${t_first}" ] && [ "${u}" -lt "${PODS}" ] && t_first=$(now_ms)
  if [ "${u}" -eq 0 ]; then t_bound=$(now_ms); break; fi
  sleep 0.1
done
[ -n "${t_bound}" ] || die "$(unbound) of ${PODS} pods still unbound after the time limit: see ${E2E_WORK}/logs/default-scheduler.log"
for ((i = 0; i < 1200; i++)); do [ "$(not_running)" -eq 0 ] && break; sleep 0.1; done
t_running=$(now_ms)
[ "$(not_running)" -eq 0 ] || die "$(not_running) pods not Running: see ${E2E_WORK}/logs/kwok.log"

rate() { awk -v n="$1" -v ms="$2" 'BEGIN { if (ms <= 0) ms = 1; printf "%.1f", n * 1000 / ms }'; }
bind_ms=$((t_bound - t0)) first_ms=$((t_bound - t_first)) run_ms=$((t_running - t0))
spread=$("${K[@]}" get pods -l app=load -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | wc -l)
{
  echo "load baseline (no extender): ${PODS} pods, ${NODES} kwok nodes, default-scheduler, $(date -u +%FT%TZ)"
  echo "  pods created (scheduler stopped):  ${create_ms} ms = $(rate "${PODS}" "${create_ms}") pods/s"
  echo "  all bound, from scheduler restart: ${bind_ms} ms = $(rate "${PODS}" "${bind_ms}") pods/s"
  echo "  all bound, from first bind seen:   ${first_ms} ms = $(rate "${PODS}" "${first_ms}") pods/s"
  echo "  all Running (kwok), from restart:  ${run_ms} ms = $(rate "${PODS}" "${run_ms}") pods/s"
  echo "  nodes used: ${spread}/${NODES}"
} | tee "${E2E_WORK}/result.txt"
