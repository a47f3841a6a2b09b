# shellcheck shell=bash
# Shared functions of the scenario suite (sourced by tests/e2e/scenarios.sh).
#
# Node capacity: kwok nodes have no kubelet, so nothing would copy the device
# plugins' resources into Node status. sync_capacity plays that part of
# kubelet: it reads kubeletsim's GET /v1/resources (the registrations and the
# latest ListAndWatch answer) and merge-patches status.capacity/allocatable
# with the count of healthy device ids per resource, exactly what kubelet's
# device manager reports. It is a script rather than a kubeletsim feature so
# kubeletsim stays a pure copy of kubelet's device-manager side.

SCEN_DIR="${E2E_DIR}/scenarios"
# Where the C++ binaries are: E2E_CXX_BUILD (a CMake build directory), or the
# binaries named one by one.
CXX_BUILD="${E2E_CXX_BUILD:-${E2E_DIR}/../../build}"
EXTENDER_BIN="${E2E_EXTENDER_BIN:-${CXX_BUILD}/src/cmd/accelpool-extender}"
PLUGIN_BIN="${E2E_PLUGIN_BIN:-${CXX_BUILD}/src/cmd/device_plugin/accelpool-device-plugin}"
KEYS_BIN="${E2E_KEYS_BIN:-${CXX_BUILD}/src/cmd/accelpool-keys}"
CTL_BIN="${E2E_CTL_BIN:-${CXX_BUILD}/src/cmd/kubectl-accelpool}"

PASSED=0 FAILED=0
check() { # description command...
  local what="$1"; shift
  if "$@"; then PASSED=$((PASSED + 1)); log "ok: ${what}"; else FAILED=$((FAILED + 1)); log "FAIL: ${what}"; fi
}

wait_for() { # seconds description command...
  local secs="$1" what="$2" i; shift 2
  for ((i = 0; i < secs * 4; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  log "timed out after ${secs}s waiting for ${what}"; return 1
}

kc() { "${E2E_BIN}/kubectl" "$@"; }

# block_kubeconfig: the admin kubeconfig with every mapping in block style, so
# the C++ components read the block form here (the exec-plugin kubeconfig of
# the kubectl accelpool checks is in flow style).
block_kubeconfig() {
  local out="${E2E_WORK}/config/accelpool.kubeconfig"
  sed -E 's/^( *)context: \{cluster: ([^,]+), user: ([^}]+)\}$/\1context:\n\1  cluster: \2\n\1  user: \3/' \
    "${E2E_WORK}/config/admin.kubeconfig" > "${out}"
  echo "${out}"
}

# --- assignment signing: the key set the chart's Secret holds, shared by the
# extender and every device plugin (E2E_SIGNING=0 runs them unsigned) ---
KEY_DIR="${E2E_WORK}/assignment-key"
key_args() {
  [ "${E2E_SIGNING:-1}" = 1 ] || return 0
  if [ ! -s "${KEY_DIR}/k1" ]; then
    mkdir -p "${KEY_DIR}" && chmod 700 "${KEY_DIR}"
    head -c 48 /dev/urandom | base64 -w0 > "${KEY_DIR}/k1"
    printf k1 > "${KEY_DIR}/signing"
  fi
  echo "--assignment-key-dir=${KEY_DIR}"
}

# --- extender ---
start_extender() {
  local scheme_args=()
  if [ "${EXTENDER_HTTPS}" = true ]; then
    scheme_args=(--tls-cert="${E2E_EXTENDER_CERT}" --tls-key="${E2E_EXTENDER_KEY}")
  fi
  # kube-scheduler's own port (cluster.sh: E2E_EXTENDER_LOOPBACK), as the chart runs it.
  if [ -n "${EXTENDER_SCHED_PORT:-}" ]; then
    scheme_args+=(--scheduler-listen="127.0.0.1:${EXTENDER_SCHED_PORT}")
  fi
  setsid "${EXTENDER_BIN}" --listen="127.0.0.1:${EXTENDER_PORT}" "${scheme_args[@]}" \
    --kubeconfig="${AP_KUBECONFIG}" --log-level=info \
    --kube-api-qps=200 --kube-api-burst=400 --workload-refresh=2s \
    --workload-configmap=kube-system/accelpool-workload \
    --high-priority-namespaces="${E2E_HIGH_PRIORITY_NAMESPACES:-scen}" \
    ${E2E_EXTENDER_ARGS:---pick-in-filter} $(key_args) \
    >> "${E2E_WORK}/logs/extender.log" 2>&1 < /dev/null &
  echo $! > "${E2E_WORK}/run/extender.pid"
  wait_for 60 "extender ready" curl -fsS --max-time 2 --cacert "${E2E_CA}" "${EXTENDER_URL}/readyz" ||
    { tail -20 "${E2E_WORK}/logs/extender.log" >&2; return 1; }
  log "extender ready (pid $(cat "${E2E_WORK}/run/extender.pid"))"
}

stop_pidfile() { # file [signal]
  local f="$1" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "${pid}" 2>/dev/null; then
    kill "-${2:-TERM}" "${pid}" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -0 "${pid}" 2>/dev/null && kill -KILL "${pid}" 2>/dev/null
  fi
  rm -f "$f"
}

extender_metric() { # name -> sum of the samples of that metric
  curl -fsS --max-time 5 --cacert "${E2E_CA}" "${EXTENDER_URL}/metrics" |
    awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { print s + 0 }'
}

register_webhook() {
  local ca; ca="$(base64 -w0 < "${E2E_CA}")"
  kc apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: accelpool-e2e}
webhooks:
- name: pods.accelpool.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
  reinvocationPolicy: Never
  clientConfig: {url: "${EXTENDER_URL}/mutate", caBundle: "${ca}"}
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  namespaceSelector:
    matchExpressions:
    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
YAML
}

# --- nodes: one kubeletsim and one fake device plugin each ---
# start_node NAME INVENTORY_JSON
# KWOK_MANAGED=0: kwok leaves the node alone, so its pods keep the status of a
# pod kubelet has not admitted yet (Pending, no container status) instead of
# turning Running at once.
start_node() {
  local name="$1" inv="$2" d="${E2E_WORK}/nodes/$1" kwok="kwok.x-k8s.io/node: fake, "
  [ "${KWOK_MANAGED:-1}" = 1 ] || kwok=""
  mkdir -p "${d}/plugins"
  printf '%s\n' "${inv}" > "${d}/inventory.json"
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: ${name}
  annotations: {${kwok}node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: ${name}, kubernetes.io/os: linux}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110"}
  capacity: {cpu: "64", memory: 512Gi, pods: "110"}
YAML
  rm -f "${d}/addr"
  setsid "${E2E_BIN}/kubeletsim" --plugin-dir "${d}/plugins" --addr-file "${d}/addr" \
    --pod-resources-socket "${d}/pod-resources.sock" > "${d}/kubeletsim.log" 2>&1 < /dev/null &
  echo $! > "${d}/kubeletsim.pid"
  start_plugin "${name}"
}

# The plugin serves /metrics only when NODE_DIR/metrics-listen holds HOST:PORT.
start_plugin() { # NAME
  local d="${E2E_WORK}/nodes/$1"
  setsid "${PLUGIN_BIN}" --backend=fake --fake-inventory="${d}/inventory.json" \
    --device-plugin-dir="${d}/plugins" --node-name="$1" --kubeconfig="${AP_KUBECONFIG}" \
    --metrics-listen="$(cat "${d}/metrics-listen" 2>/dev/null)" --state-root="${d}/state" --log-level=${E2E_PLUGIN_LOG_LEVEL:-info} $(key_args) \
    --pod-resources-socket="${d}/pod-resources.sock" --foreign-memory-every=5s --host-proc="${d}/proc" \
    --high-priority-namespaces="${E2E_HIGH_PRIORITY_NAMESPACES:-scen}" \
    >> "${d}/plugin.log" 2>&1 < /dev/null &
  echo $! > "${d}/plugin.pid"
}

sim_url() { echo "http://$(cat "${E2E_WORK}/nodes/$1/addr")"; }

# node_resources NAME: kubeletsim's view ({"resource": {...}}) on stdout.
node_resources() { curl -fsS --max-time 5 "$(sim_url "$1")/v1/resources"; }

# sync_capacity NAME: kubelet's part of Node status (see the top of this file).
sync_capacity() {
  local res patch
  res="$(node_resources "$1")" || return 1
  patch="$(python3 "${SCEN_DIR}/check.py" capacity-patch <<<"${res}")" || return 1
  kc patch node "$1" --subresource=status --type=merge -p "${patch}" >/dev/null
}

# node_has NAME RESOURCE COUNT: the Node's allocatable shows COUNT of RESOURCE.
node_has() {
  local got
  got="$(kc get node "$1" -o json | jq -r --arg r "$2" '.status.allocatable[$r] // "0"')"
  [ "${got}" = "$3" ]
}

stop_nodes() {
  local d
  for d in "${E2E_WORK}"/nodes/*/; do
    [ -d "$d" ] || continue
    stop_pidfile "${d}plugin.pid"; stop_pidfile "${d}kubeletsim.pid"
  done
}
