#!/usr/bin/env bash
# The accelpool demo on a local control plane: etcd, kube-apiserver, kwok and
# kube-scheduler with the extender (tests/e2e/cluster.sh), six simulated
# nodes of four accelerator kinds (2 NVIDIA HGX H200, 1 H200 node with two GPUs
# split into MIG instances, 1 Ascend 910C, 1 Ascend 910B serving vNPU shares,
# 1 Kunlunxin P800),
# each with a fake-backend device plugin registered with its own kubeletsim,
# and sample workloads: fractional inference (six pods at 4 GiB / 25%), two
# pods on 1g.18gb MIG instances, a whole-card fine-tuning pod (4 H200), a
# paired-module training job (two 910C workers of two modules each), a 910B
# evaluation pod, a 910B inference pod on a vNPU (a 16 GiB template) and a P800
# pod. Every pod must bind through the extender and pass kubelet's
# admission (GetPreferredAllocation + Allocate) against its assignment, and
# no device may be double-booked. Then it prints the placement table and the
# pool's utilisation read back from the pods' accelpool.io/assignment, and
# writes the same as out/demo/placement.txt, utilisation.json and
# utilisation.png (gnuplot).
# Ends with "demo: N passed, M failed"; non-zero exit on any failure.
#
# Usage: tests/e2e/demo.sh          run, print, tear everything down
#        DEMO_KEEP=1 tests/e2e/demo.sh   leave the cluster running; prints how to reach it
#        tests/e2e/demo.sh stop     stop a cluster left running by DEMO_KEEP=1
# Env: DEMO_OUT (default out/demo), DEMO_PROMETHEUS=1 (run tests/e2e/prometheus.sh against
#      the cluster before teardown), E2E_CXX_BUILD / E2E_EXTENDER_BIN / E2E_PLUGIN_BIN / E2E_CTL_BIN (the C++
#      binaries, default build/), DEMO_SKIP_TOOLS=1 (do not call build-tools.sh).
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${E2E_DIR}/../.." && pwd)"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"
export E2E_WORK="${E2E_WORK:-${E2E_DIR}/.work/demo}"
export E2E_BIN="${E2E_BIN:-${E2E_DIR}/.bin}"
# shellcheck source=tests/e2e/scenarios/lib.sh
. "${E2E_DIR}/scenarios/lib.sh"
# shellcheck source=tests/e2e/scenarios/pods.sh
. "${E2E_DIR}/scenarios/pods.sh"
NS=demo
OUT="${DEMO_OUT:-${REPO}/out/demo}"
STEPS=7 STEP=0
step() { STEP=$((STEP + 1)); log "[${STEP}/${STEPS}] $*"; }

teardown() {
  stop_pidfile "${E2E_WORK}/run/extender.pid"
  stop_nodes
  "${E2E_DIR}/cluster.sh" stop >/dev/null 2>&1
}
if [ "${1:-}" = stop ]; then
  teardown || true
  log "demo cluster in ${E2E_WORK} stopped"
  exit 0
fi
[ $# = 0 ] || die "unknown argument '$1'; usage: tests/e2e/demo.sh [stop] (DEMO_KEEP=1 keeps the cluster)"

mkdir -p "$(dirname "${E2E_WORK}")"
exec 9> "${E2E_WORK}.lock"
flock -n 9 || die "another demo is running on ${E2E_WORK}: wait for it, stop it (tests/e2e/demo.sh stop) or set E2E_WORK"

KEEP="${DEMO_KEEP:-0}"
finish() {
  local rc=$?
  set +e
  # An error outside a check (die, or a command set -e stopped on) counts as a failure.
  [ "${rc}" != 0 ] && [ "${FAILED}" = 0 ] && FAILED=1
  [ "${rc}" != 0 ] && log "stopped during step ${STEP}/${STEPS} (exit ${rc})"
  if [ "${KEEP}" = 1 ] && [ "${FAILED}" = 0 ] && [ "${rc}" = 0 ]; then
    cat >&2 <<EOF

The demo cluster keeps running. Reach it with kubectl:
  export KUBECONFIG=${KUBECONFIG:-${E2E_WORK}/config/admin.kubeconfig}
  ${E2E_BIN}/kubectl get nodes -L accelpool.io/vendor
  ${E2E_BIN}/kubectl -n ${NS} get pods -o wide
  ${E2E_BIN}/kubectl -n ${NS} get pod finetune -o jsonpath='{.metadata.annotations.accelpool\.io/assignment}'
  PATH=$(dirname "${CTL_BIN}"):\$PATH ${E2E_BIN}/kubectl accelpool --kubeconfig=${AP_KUBECONFIG:-} explain -n ${NS} finetune
Extender metrics: curl --cacert ${E2E_CA:-} ${EXTENDER_URL:-}/metrics
Logs: ${E2E_WORK}/logs/ and ${E2E_WORK}/nodes/*/
Stop it: tests/e2e/demo.sh stop
EOF
  else
    teardown
  fi
  echo "demo: ${PASSED} passed, ${FAILED} failed"
  if [ "${FAILED}" != 0 ] || [ "${rc}" != 0 ]; then
    echo "demo: FAILED; logs are in ${E2E_WORK}/logs and ${E2E_WORK}/nodes/<node>/" >&2
    [ "${rc}" != 0 ] && exit "${rc}"
    exit 1
  fi
}
trap finish EXIT
trap 'exit 130' INT TERM

step "tools and binaries"
if [ "${DEMO_SKIP_TOOLS:-0}" != 1 ]; then
  "${E2E_DIR}/build-tools.sh" || die "building the e2e tools failed (see above); rerun tests/e2e/build-tools.sh"
fi
if [ ! -x "${EXTENDER_BIN}" ] || [ ! -x "${PLUGIN_BIN}" ] || [ ! -x "${CTL_BIN}" ]; then
  log "building accelpool-extender, accelpool-device-plugin and kubectl-accelpool in ${CXX_BUILD} (ninja shows progress)"
  cmake -S "${REPO}" -B "${CXX_BUILD}" -G Ninja -DACCELPOOL_WITH_CUDA_SHIM=OFF -DACCELPOOL_WITH_SIM=OFF \
    -DACCELPOOL_BUILD_TESTS=OFF -DACCELPOOL_BUILD_BENCH=OFF >/dev/null ||
    die "cmake configure failed; run scripts/build.sh to see why"
  nice -n 10 cmake --build "${CXX_BUILD}" -j2 --target accelpool-extender accelpool-device-plugin \
    kubectl-accelpool ||
    die "building the extender and device plugin failed; see the compiler output above"
fi
for b in kubeletsim kubectl; do
  [ -x "${E2E_BIN}/${b}" ] || die "${E2E_BIN}/${b} is missing: run tests/e2e/build-tools.sh"
done
command -v jq >/dev/null && command -v python3 >/dev/null || die "jq and python3 are needed: run scripts/setup.sh"

step "control plane (etcd, kube-apiserver, kwok, kube-scheduler x2)"
"${E2E_DIR}/cluster.sh" clean >/dev/null 2>&1
"${E2E_DIR}/cluster.sh" start || die "the control plane did not start; logs in ${E2E_WORK}/logs"
# shellcheck disable=SC1091 # written by cluster.sh start
. "${E2E_WORK}/cluster.env"
"${E2E_DIR}/cluster.sh" ns "${NS}" >/dev/null
AP_KUBECONFIG="$(block_kubeconfig)"
check "extender serves and is ready" start_extender
check "webhook registered with the apiserver" register_webhook

step "six nodes: fake device plugin + kubeletsim each"
# name:vendor:profile[:slots] (profile "mig": MIG_INVENTORY below; slots: shares per device,
# 4 on the 910B node as its plugin offers with --ascend-vnpu)
NODES=(hgx-0:nvidia:nvidia-hgx-8 hgx-1:nvidia:nvidia-hgx-8 mig-0:nvidia:mig
  a910c-0:ascend:ascend-910c-x16 a910b-0:ascend:ascend-910b-x8:4 p800-0:kunlunxin:kunlunxin-p800-x8)
# GPUs 0 and 1 whole; GPU 2 as 3g.71gb + 2g.35gb + 2 x 1g.18gb; GPU 3 as 7 x 1g.18gb.
MIG_INVENTORY='{"version":1,"inventories":[{"vendor":"nvidia","count":13,"model":"H200","memory_mib":143771,
  "devices":[{"index":2,"id":"MIG-mig-0-2","partition":"3g.71gb","memory_mib":71424},
             {"index":3,"id":"MIG-mig-0-3","partition":"2g.35gb","memory_mib":33280},
             {"index":4,"id":"MIG-mig-0-4","partition":"1g.18gb","memory_mib":16384},
             {"index":5,"id":"MIG-mig-0-5","partition":"1g.18gb","memory_mib":16384},
             {"index":6,"id":"MIG-mig-0-6","partition":"1g.18gb","memory_mib":16384},
             {"index":7,"id":"MIG-mig-0-7","partition":"1g.18gb","memory_mib":16384},
             {"index":8,"id":"MIG-mig-0-8","partition":"1g.18gb","memory_mib":16384},
             {"index":9,"id":"MIG-mig-0-9","partition":"1g.18gb","memory_mib":16384},
             {"index":10,"id":"MIG-mig-0-10","partition":"1g.18gb","memory_mib":16384},
             {"index":11,"id":"MIG-mig-0-11","partition":"1g.18gb","memory_mib":16384},
             {"index":12,"id":"MIG-mig-0-12","partition":"1g.18gb","memory_mib":16384}]}]}'

TARGETS=()
for n in "${NODES[@]}"; do
  IFS=: read -r name vendor profile slots <<<"${n}"
  mkdir -p "${E2E_WORK}/nodes/${name}"
  port="$(free_port "${EXTENDER_PORT}" "${APISERVER_PORT}")"
  echo "127.0.0.1:${port}" > "${E2E_WORK}/nodes/${name}/metrics-listen"
  TARGETS+=("${name}=127.0.0.1:${port}")
  if [ "${profile}" = mig ]; then
    start_node "${name}" "${MIG_INVENTORY}"
  else
    start_node "${name}" "{\"version\":1,\"inventories\":[{\"vendor\":\"${vendor}\",\"profile\":\"${profile}\"${slots:+,\"max_shares\":${slots}}}]}"
  fi
done
registered() { [ -s "${E2E_WORK}/nodes/$1/addr" ] && [ "$(node_resources "$1" | jq '[.[] | select(.connected)] | length')" -ge 1 ]; }
published() { [ -n "$(kc get node "$1" -o jsonpath='{.metadata.annotations.accelpool\.io/inventory}')" ]; }
ready() { [ "$(kc get node "$1" --no-headers 2>/dev/null | awk '{print $2}')" = Ready ]; }
# progress SECONDS WHAT FUNCTION: waits until FUNCTION passes for every node, printing the count.
progress() {
  local secs="$1" what="$2" fn="$3" i n c last=-1
  for ((i = 0; i <= secs; i++)); do
    c=0
    for n in "${NODES[@]}"; do "${fn}" "${n%%:*}" >/dev/null 2>&1 && c=$((c + 1)); done
    [ "$c" != "${last}" ] && log "  ${what}: ${c}/${#NODES[@]}" && last="$c"
    [ "$c" = "${#NODES[@]}" ] && return 0
    sleep 1
  done
  log "  ${what}: timed out after ${secs}s"; return 1
}
check "every device plugin registered with its kubeletsim" progress 90 "registered" registered
check "every device plugin published its inventory" progress 60 "inventories published" published
# The plugin lists its node's pods metadata only (its state-dir sweep at start;
# the refresh on kubelet's path asks the same way) and logs the form the
# apiserver answers in: kube-apiserver must transform the list.
metadata_lists() {
  grep -q 'answers metadata-only pod lists (PartialObjectMetadataList)' "${E2E_WORK}/nodes/$1/plugin.log"
}
check "kube-apiserver answers every plugin's metadata-only pod list as PartialObjectMetadataList" \
  progress 30 "metadata-only pod lists" metadata_lists
for n in "${NODES[@]}"; do sync_capacity "${n%%:*}" || log "capacity of ${n%%:*} not synced"; done
check "kwok keeps every node Ready" progress 60 "nodes Ready" ready

step "sample workloads through the extender"
G=nvidia.com/gpu
PODS=()
submit() { # NAME LIMITS [ANNOTATIONS]
  local ann="${3:-}"
  [ -n "${ann}" ] || ann='{}'
  printf '%s\n' "$(pod_yaml "$1" "${ann}" '{}' "$(ctr main "$2")")" | kc create -f - >/dev/null ||
    { check "$1: created" false; return; }
  PODS+=("$1")
}
for i in 0 1 2 3 4 5; do submit "infer-$i" "{${G}: 1, nvidia.com/gpumem: 4096, nvidia.com/gpucores: 25, cpu: \"2\", memory: 8Gi}"; done
submit finetune "{${G}: 4, cpu: \"16\", memory: 64Gi}"
for i in 0 1; do submit "infer-mig-$i" '{nvidia.com/mig-1g.18gb: 1, cpu: "2", memory: 8Gi}'; done
submit train-910c-0 '{huawei.com/Ascend910C: 4}' '{accelpool.io/pod-group: train-910c}'
submit train-910c-1 '{huawei.com/Ascend910C: 4}' '{accelpool.io/pod-group: train-910c}'
submit eval-910b '{huawei.com/Ascend910B3: 2}'
submit infer-910b '{huawei.com/Ascend910B3: 1, huawei.com/Ascend910B3-memory: 12000}'
submit xpu-p800 '{kunlunxin.com/xpu: 4}'
bound_count() { local p c=0; for p in "${PODS[@]}"; do pod_bound "$p" && c=$((c + 1)); done; echo "$c"; }
all_bound() {
  local i c last=-1
  for ((i = 0; i < 120; i++)); do
    c="$(bound_count)"
    [ "$c" != "${last}" ] && log "  pods bound: ${c}/${#PODS[@]}" && last="$c"
    [ "$c" = "${#PODS[@]}" ] && return 0
    sleep 1
  done
  return 1
}
check "all ${#PODS[@]} pods bound through the extender" all_bound

step "kubelet admission and placement checks"
for p in "${PODS[@]}"; do
  check "${p}: has accelpool.io/assignment" pod_has_assignment "${p}"
  check "${p}: kubelet admission (GetPreferredAllocation + Allocate) matches the assignment" admit "${p}"
done
shares_4g_25() { mem_is "$1" 4096 && compute_is "$1" 250; }
whole_n() { [ "$(assigned "$1" "[.containers[0].devices[] | select(.exclusive)] | length")" = "$2" ]; }
modules_whole() { # every 910C module (die pair 2k, 2k+1) is taken whole
  [ "$(assigned "$1" '[.containers[0].devices[].index] | sort | [range(0; length; 2) as $i | .[$i:$i+2]] |
    all(.[0] % 2 == 0 and .[1] == .[0] + 1)')" = true ]
}
mem_is() { [ "$(assigned "$1" '[.containers[].devices[].memory_mib] | unique | join(",")')" = "$2" ]; }
compute_is() { [ "$(assigned "$1" '[.containers[].devices[].compute] | unique | join(",")')" = "$2" ]; }
for i in 0 1 2 3 4 5; do check "infer-$i: a 4 GiB / 25% share" shares_4g_25 "infer-$i"; done
check "finetune: 4 whole H200" whole_n finetune 4
mig_1g() { # one whole 1g.18gb MIG instance, asked through its profile's resource
  [ "$(assigned "$1" '.containers[0].resource')" = nvidia.com/mig-1g.18gb ] && whole_n "$1" 1 &&
    mem_is "$1" 16384
}
for i in 0 1; do check "infer-mig-$i: a 1g.18gb MIG instance" mig_1g "infer-mig-$i"; done
check "train-910c-0: two whole 910C modules" modules_whole train-910c-0
check "train-910c-1: two whole 910C modules" modules_whole train-910c-1
check "eval-910b: 2 whole 910B" whole_n eval-910b 2
vnpu_16g() { # the share rounds up to the 910B3's vir05_1c_16g template, which Allocate names
  mem_is "$1" 16384 && compute_is "$1" 250 &&
    grep -q '"ASCEND_VNPU_SPECS": *"vir05_1c_16g"' "${E2E_WORK}/admit/$1/admit.json"
}
check "infer-910b: a vNPU of a 910B3 (vir05_1c_16g: 16 GiB, a quarter of the AI cores)" vnpu_16g infer-910b
indexes_in() { [ "$(assigned "$1" "[.containers[0].devices[].index] | sort | IN($2[])")" = true ]; }
check "xpu-p800: 4 P800 in one wing" indexes_in xpu-p800 '[[0,1,2,3],[4,5,6,7]]'
check "no device double-booked, no vendor rule broken" ledger

step "placement table and pool utilisation"
mkdir -p "${OUT}"
kc get pods -n "${NS}" -o json > "${OUT}/pods.json"
kc get nodes -o json > "${OUT}/nodes.json"
check "placement table and utilisation from the assignments" \
  python3 "${E2E_DIR}/demo/report.py" table "${OUT}/pods.json" "${OUT}/nodes.json" "${OUT}"
plot() {
  command -v gnuplot >/dev/null || { log "gnuplot is missing: run scripts/setup.sh (gnuplot-nox)"; return 1; }
  (cd "${OUT}" && gnuplot "${E2E_DIR}/demo/utilisation.gp") && [ -s "${OUT}/utilisation.png" ]
}
check "utilisation chart written (${OUT}/utilisation.png)" plot
ctl_nodes() { # the pool per node, as an operator sees it with the kubectl plugin
  local want
  want="$(kc get nodes -o json | jq '[.items[] | select(.metadata.annotations["accelpool.io/inventory"])] | length')"
  PATH="$(dirname "${CTL_BIN}"):${PATH}" kc accelpool --kubeconfig="${AP_KUBECONFIG}" -q nodes \
    > "${OUT}/kubectl-accelpool-nodes.txt" || return 1
  cat "${OUT}/kubectl-accelpool-nodes.txt"
  grep -q "^${want} nodes, " "${OUT}/kubectl-accelpool-nodes.txt"
}
check "kubectl accelpool nodes shows every node (${OUT}/kubectl-accelpool-nodes.txt)" ctl_nodes
{
  echo "KUBECONFIG=${KUBECONFIG}"
  echo "EXTENDER_URL=${EXTENDER_URL}"
  echo "E2E_CA=${E2E_CA}"
  echo "DEMO_NS=${NS}"
  echo "PLUGIN_TARGETS=\"${TARGETS[*]}\""
} > "${E2E_WORK}/demo.env"

step "done"
if [ "${DEMO_PROMETHEUS:-0}" = 1 ]; then
  log "Prometheus against the demo cluster (tests/e2e/prometheus.sh)"
  DEMO_ENV="${E2E_WORK}/demo.env" "${E2E_DIR}/prometheus.sh" ||
    log "prometheus.sh failed (its own result line counts it)"
fi
log "outputs in ${OUT}: placement.txt, utilisation.json, utilisation.png, kubectl-accelpool-nodes.txt"
[ "${FAILED}" = 0 ]
