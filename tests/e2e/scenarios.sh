#!/usr/bin/env bash
# End-to-end scenarios on a real control plane: the extender behind
# kube-scheduler, its admission webhook, 20 kwok nodes of five accelerator
# kinds, each with a fake-backend device plugin registered with its own
# kubeletsim (kubelet's device manager). Every pod must bind through the
# extender, pass kubelet's admission (GetPreferredAllocation + Allocate answer
# the assigned devices, env and memory caps), and no device may be
# double-booked. Then faults: pods deleted, a device unhealthy and back, a
# malformed inventory, a device plugin and kubelet restarted, the extender
# killed, the apiserver restarted. Then (scenarios/controllers.sh) pods made by
# kube-controller-manager's controllers: a Deployment through the extender, a
# rolling update, a scale to zero, and preemption steered by a PDB.
# Ends with "scenarios: N passed, M failed"; non-zero exit on any failure.
#
# Usage: tests/e2e/scenarios.sh
#   E2E_CXX_BUILD   CMake build dir with accelpool-extender and
#                   accelpool-device-plugin (default: build/ at the repo root;
#                   they are built there when missing)
#   E2E_EXTENDER_BIN, E2E_PLUGIN_BIN   the binaries named directly
#   E2E_CONTROLLERS 1|0 (default 1): run kube-controller-manager and
#                   scenarios/controllers.sh
#   E2E_PLUGIN_LOG_LEVEL  the device plugins' --log-level (default info)
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"
export E2E_WORK="${E2E_WORK:-${E2E_DIR}/.work/scenarios}"
export E2E_BIN="${E2E_BIN:-${E2E_DIR}/.bin}"
export E2E_CONTROLLERS="${E2E_CONTROLLERS:-1}"
# shellcheck source=tests/e2e/scenarios/lib.sh
. "${E2E_DIR}/scenarios/lib.sh"
# shellcheck source=tests/e2e/scenarios/pods.sh
. "${E2E_DIR}/scenarios/pods.sh"

mkdir -p "$(dirname "${E2E_WORK}")"
exec 9> "${E2E_WORK}.lock"
flock -n 9 || die "another scenarios.sh is running on ${E2E_WORK}: wait for it or set E2E_WORK"

finish() {
  set +e
  stop_pidfile "${E2E_WORK}/run/extender.pid"
  stop_pidfile "${E2E_WORK}/run/hosts-scheduler.pid"
  stop_nodes
  "${E2E_DIR}/cluster.sh" stop >/dev/null 2>&1
  echo "scenarios: ${PASSED} passed, ${FAILED} failed"
}
trap finish EXIT
trap 'exit 130' INT TERM

if [ ! -x "${EXTENDER_BIN}" ] || [ ! -x "${PLUGIN_BIN}" ] || [ ! -x "${KEYS_BIN}" ] || [ ! -x "${CTL_BIN}" ]; then
  log "building accelpool-extender, accelpool-device-plugin, accelpool-keys and kubectl-accelpool in ${CXX_BUILD}"
  cmake -S "${E2E_DIR}/../.." -B "${CXX_BUILD}" -G Ninja -DACCELPOOL_WITH_CUDA_SHIM=OFF \
    -DACCELPOOL_WITH_SIM=OFF -DACCELPOOL_BUILD_TESTS=OFF -DACCELPOOL_BUILD_BENCH=OFF >/dev/null
  nice -n 10 cmake --build "${CXX_BUILD}" -j2 --target accelpool-extender accelpool-device-plugin \
    accelpool-keys kubectl-accelpool >/dev/null
fi
[ -x "${E2E_BIN}/kubeletsim" ] || die "kubeletsim is missing: run tests/e2e/build-tools.sh kubeletsim"

"${E2E_DIR}/cluster.sh" clean >/dev/null 2>&1
"${E2E_DIR}/cluster.sh" start
# shellcheck disable=SC1091 # written by cluster.sh start
. "${E2E_WORK}/cluster.env"
"${E2E_DIR}/cluster.sh" ns "${NS}"
AP_KUBECONFIG="$(block_kubeconfig)"

log "== setup"
check "extender serves (HTTPS=${EXTENDER_HTTPS}) and is ready" start_extender
check "webhook registered with the apiserver" register_webhook

# name:profile (+ model) for 20 nodes of five kinds.
NODES=()
for i in 0 1 2 3 4 5; do NODES+=("hgx-$i:nvidia:nvidia-hgx-8:H200"); done
for i in 0 1; do NODES+=("pcie-$i:nvidia:nvidia-pcie-8:L40S"); done
for i in 0 1 2 3; do NODES+=("a910c-$i:ascend:ascend-910c-x16:"); done
for i in 0 1 2; do NODES+=("a910a-$i:ascend:ascend-910a-x8:"); done
for i in 0 1 2; do NODES+=("p800-$i:kunlunxin:kunlunxin-p800-x8:"); done
for i in 0 1; do NODES+=("c500-$i:metax:metax-c500-x8:"); done
for n in "${NODES[@]}"; do
  IFS=: read -r name vendor profile model <<<"${n}"
  inv="{\"version\":1,\"inventories\":[{\"vendor\":\"${vendor}\",\"profile\":\"${profile}\"${model:+,\"model\":\"${model}\"}}]}"
  start_node "${name}" "${inv}"
done
log "started ${#NODES[@]} nodes (kubeletsim + device plugin each)"
registered() { [ -s "${E2E_WORK}/nodes/$1/addr" ] && [ "$(node_resources "$1" | jq '[.[] | select(.connected)] | length')" -ge 1 ]; }
published() { [ -n "$(kc get node "$1" -o jsonpath='{.metadata.annotations.accelpool\.io/inventory}')" ]; }
count_ok() { # function: how many nodes pass it
  local n c=0
  for n in "${NODES[@]}"; do "$1" "${n%%:*}" >/dev/null 2>&1 && c=$((c + 1)); done
  echo "$c"
}
all_ok() { [ "$(count_ok "$1")" = "${#NODES[@]}" ]; }
wait_for 90 "registrations" all_ok registered || true
ok_reg="$(count_ok registered)"
wait_for 60 "inventories" all_ok published || true
ok_pub="$(count_ok published)"
for n in "${NODES[@]}"; do sync_capacity "${n%%:*}" || log "capacity of ${n%%:*} not synced"; done
check "every device plugin registered with its kubeletsim (${ok_reg}/${#NODES[@]})" test "${ok_reg}" = "${#NODES[@]}"
check "every device plugin published its inventory (${ok_pub}/${#NODES[@]})" test "${ok_pub}" = "${#NODES[@]}"
check "Node status shows the device counts (hgx-0 nvidia.com/gpu 80 slots)" node_has hgx-0 nvidia.com/gpu 80
check "Node status shows the device counts (a910c-0 huawei.com/Ascend910C 16)" node_has a910c-0 huawei.com/Ascend910C 16
ready() { [ "$(kc get nodes --no-headers | awk '$2 == "Ready"' | wc -l)" -ge "${#NODES[@]}" ]; }
check "kwok keeps every node Ready" wait_for 60 "nodes Ready" ready

. "${E2E_DIR}/scenarios/cases.sh"
# shellcheck source=tests/e2e/scenarios/controllers.sh
. "${E2E_DIR}/scenarios/controllers.sh"
[ "${FAILED}" = 0 ]
