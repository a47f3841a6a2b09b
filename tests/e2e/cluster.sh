#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for the end-to-end tests:
# etcd, kube-apiserver (secure port, RBAC, MutatingAdmissionWebhook), kwok
# (keeps fake nodes Ready, moves bound pods to Running), the stock
# kube-scheduler as "default-scheduler", and a second kube-scheduler named
# "accelpool-scheduler" whose KubeSchedulerConfiguration calls the extender,
# and, with E2E_CONTROLLERS=1, kube-controller-manager running a few controllers.
# All state lives under tests/e2e/.work/ (override with E2E_WORK).
#
# Usage: tests/e2e/cluster.sh start|stop|restart|status|env|clean
#   start    generate certificates and configs (once), start every process,
#            wait until each is healthy; prints the env file to source
#   stop     stop every process this script started (by recorded pid)
#   stop-proc NAME  stop one of them (start brings it back)
#   ns NAME  create namespace NAME with its "default" service account
#   status   show each process and its health
#   env      print the shell exports (KUBECONFIG, ports, extender URL)
#   clean    stop, then delete the work directory
# Environment (read by start):
#   E2E_EXTENDER_PORT   extender port (default: a free port, recorded in env)
#   E2E_EXTENDER_HTTPS  true|false (default true): scheme of the extender URL;
#                       the extender serves pki/extender.{crt,key} (signed by pki/ca.crt)
#   E2E_EXTENDER_URL    full urlPrefix, overrides the two above (and the loopback port)
#   E2E_EXTENDER_LOOPBACK  true|false (default true, as the chart): kube-scheduler
#                       calls the extender over plain HTTP on a second loopback
#                       port (the extender's --scheduler-listen, recorded as
#                       EXTENDER_SCHED_PORT); the webhook and /metrics stay on
#                       the extender URL above
#   E2E_ACCELPOOL_SCHEDULER  1|0 (default 1): start the second scheduler
#   E2E_CONTROLLERS     1|0 (default 0): start kube-controller-manager with the
#                       controllers in E2E_CONTROLLER_LIST (default: the deployment,
#                       replicaset, disruption, garbage-collector, namespace,
#                       serviceaccount and serviceaccount-token controllers; never
#                       the node lifecycle one, which would taint kwok's nodes)
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${E2E_DIR}/../.." && pwd)"
BIN="${E2E_BIN:-${E2E_DIR}/.bin}"
WORK="${E2E_WORK:-${E2E_DIR}/.work}"
PKI="${WORK}/pki" LOGS="${WORK}/logs" RUN="${WORK}/run" CONF="${WORK}/config"
ENV_FILE="${WORK}/cluster.env"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"

ensure_deps() {
  local missing=()
  for c in openssl curl; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} with apt-get"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >/dev/null; then
      die "could not install ${missing[*]}: install them with your package manager and rerun"
    fi
  fi
  for b in etcd kube-apiserver kube-scheduler kwok kubectl; do
    [ -x "${BIN}/${b}" ] || die "${BIN}/${b} is missing: run tests/e2e/build-tools.sh first"
  done
  if [ "${E2E_CONTROLLERS:-0}" = 1 ] && [ ! -x "${BIN}/kube-controller-manager" ]; then
    die "${BIN}/kube-controller-manager is missing: run tests/e2e/build-tools.sh kube"
  fi
  [ -f "${BIN}/kwok-stages.yaml" ] || die "${BIN}/kwok-stages.yaml is missing: run tests/e2e/build-tools.sh kwok"
}

# --- certificates and kubeconfigs (generated once, kept across restarts) ---
sign_cert() { # name subject extensions
  local name="$1" subj="$2" ext="$3"
  [ -f "${PKI}/${name}.crt" ] && return 0
  openssl ecparam -name prime256v1 -genkey -noout -out "${PKI}/${name}.key" 2>/dev/null
  openssl req -new -key "${PKI}/${name}.key" -subj "${subj}" -out "${PKI}/${name}.csr" 2>/dev/null
  printf '%s\n' "${ext}" > "${PKI}/${name}.ext"
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "${PKI}/${name}.ext" -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${PKI}/${name}.ext"
}

gen_pki() {
  mkdir -p "${PKI}"
  if [ ! -f "${PKI}/ca.crt" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "${PKI}/ca.key" 2>/dev/null
    openssl req -x509 -new -key "${PKI}/ca.key" -subj "/CN=accelpool-e2e-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "${PKI}/ca.crt" 2>/dev/null
  fi
  local serve="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth"
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign_cert apiserver "/CN=kube-apiserver" "${serve}
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  sign_cert extender "/CN=accelpool-extender" "${serve}
subjectAltName=IP:127.0.0.1,DNS:localhost"
  sign_cert admin "/O=system:masters/CN=e2e-admin" "${client}"
  sign_cert scheduler "/CN=system:kube-scheduler" "${client}"
  sign_cert controller-manager "/CN=system:kube-controller-manager" "${client}"
  if [ ! -f "${PKI}/sa.key" ]; then
    openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
    openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
  fi
  chmod 600 "${PKI}"/*.key
}

write_kubeconfig() { # file user
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority: ${PKI}/ca.crt
users:
- name: $2
  user:
    client-certificate: ${PKI}/$2.crt
    client-key: ${PKI}/$2.key
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
EOF
}

# chart_list KEY: the items of scheduler.KEY in the chart's values.yaml
# (countResources, migProfiles, managedResources), so the e2e plane and the chart agree.
chart_list() {
  awk -v key="  $1:" '$0 == key {on=1; next} on && /^    - / {print $2; next} on && !/^ *#/ {on=0}' \
    "${REPO}/charts/accelpool/values.yaml"
}

write_scheduler_configs() {
  cat > "${CONF}/default-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: ${CONF}/scheduler.kubeconfig, qps: 200, burst: 400}
leaderElection: {leaderElect: false}
profiles:
- schedulerName: default-scheduler
EOF
  local tls=""
  if [ "${SCHED_EXTENDER_HTTPS}" = true ]; then
    tls="  tlsConfig:
    caFile: ${PKI}/ca.crt"
  fi
  {
    cat <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: ${CONF}/scheduler.kubeconfig, qps: 200, burst: 400}
leaderElection: {leaderElect: false}
percentageOfNodesToScore: 100
profiles:
- schedulerName: accelpool-scheduler
  plugins:
    score:
      disabled:
$(for p in $(chart_list disabledScorePlugins); do printf '      - name: %s\n' "$p"; done)
extenders:
- urlPrefix: ${SCHED_EXTENDER_URL}
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  preemptVerb: preempt
  weight: 10
  enableHTTPS: ${SCHED_EXTENDER_HTTPS}
${tls}
  httpTimeout: 5s
  nodeCacheCapable: true
  ignorable: false
  managedResources:
EOF
    # kube-scheduler calls the extender only for pods requesting one of these.
    local r
    for r in $(chart_list countResources); do printf '  - {name: %s, ignoredByScheduler: false}\n' "$r"; done
    for p in $(chart_list migProfiles); do printf '  - {name: nvidia.com/mig-%s, ignoredByScheduler: false}\n' "$p"; done
    for r in $(chart_list managedResources); do printf '  - {name: %s, ignoredByScheduler: true}\n' "$r"; done
  } > "${CONF}/accelpool-scheduler.yaml"
}

# --- processes ---
start_proc() { # name health-url [curl args...] -- command...
  local name="$1" url="$2"; shift 2
  local cargs=()
  while [ "$1" != "--" ]; do cargs+=("$1"); shift; done
  shift
  if proc_alive "${name}"; then log "${name} already running (pid $(cat "${RUN}/${name}.pid"))"; return 0; fi
  setsid "$@" >> "${LOGS}/${name}.log" 2>&1 < /dev/null &
  echo $! > "${RUN}/${name}.pid"
  local i
  for i in $(seq 1 120); do
    if curl -fsS --max-time 2 "${cargs[@]}" "${url}" >/dev/null 2>&1; then
      log "${name} healthy (pid $(cat "${RUN}/${name}.pid"), ${i}x0.5s)"; return 0
    fi
    proc_alive "${name}" || { tail -20 "${LOGS}/${name}.log" >&2; die "${name} exited during start: see ${LOGS}/${name}.log"; }
    sleep 0.5
  done
  tail -20 "${LOGS}/${name}.log" >&2
  die "${name} not healthy after 60s at ${url}: see ${LOGS}/${name}.log"
}

proc_alive() { [ -f "${RUN}/$1.pid" ] && kill -0 "$(cat "${RUN}/$1.pid")" 2>/dev/null; }

stop_proc() {
  local name="$1" pid
  [ -f "${RUN}/${name}.pid" ] || return 0
  pid="$(cat "${RUN}/${name}.pid")"
  if kill -0 "${pid}" 2>/dev/null; then
    kill -TERM "${pid}" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "${pid}" 2>/dev/null; then log "${name} ignored SIGTERM, killing"; kill -KILL "${pid}" 2>/dev/null || true; fi
    log "${name} stopped (pid ${pid})"
  fi
  rm -f "${RUN}/${name}.pid"
}

PROCS=(etcd kube-apiserver kwok default-scheduler accelpool-scheduler kube-controller-manager)

# The controllers kube-controller-manager runs (E2E_CONTROLLERS=1). Not the
# node lifecycle controllers (node-lifecycle, node-ipam, taint-eviction...):
# they would taint and evict on kwok's nodes and on the unmanaged hold-0.
CONTROLLER_LIST="${E2E_CONTROLLER_LIST:-deployment-controller,replicaset-controller,disruption-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller}"

cmd_start() {
  ensure_deps
  mkdir -p "${PKI}" "${LOGS}" "${RUN}" "${CONF}" "${WORK}/etcd"
  if [ -f "${ENV_FILE}" ] && proc_alive kube-apiserver; then
    # shellcheck disable=SC1090
    . "${ENV_FILE}"
  else
    ETCD_PORT="$(free_port)" ETCD_PEER_PORT="$(free_port "${ETCD_PORT}")"
    APISERVER_PORT="$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}")"
    KWOK_PORT="$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}")"
    SCHED_PORT="$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KWOK_PORT}")"
    ASCHED_PORT="$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KWOK_PORT}" "${SCHED_PORT}")"
    EXTENDER_PORT="${E2E_EXTENDER_PORT:-$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KWOK_PORT}" "${SCHED_PORT}" "${ASCHED_PORT}")}"
    EXTENDER_SCHED_PORT="$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KWOK_PORT}" "${SCHED_PORT}" "${ASCHED_PORT}" "${EXTENDER_PORT}")"
    KCM_PORT="$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KWOK_PORT}" "${SCHED_PORT}" "${ASCHED_PORT}" "${EXTENDER_PORT}" "${EXTENDER_SCHED_PORT}")"
  fi
  [ -n "${KCM_PORT:-}" ] || KCM_PORT="$(free_port "${APISERVER_PORT}" "${SCHED_PORT}" "${ASCHED_PORT}" "${EXTENDER_PORT}")"
  EXTENDER_HTTPS="${E2E_EXTENDER_HTTPS:-true}"
  case "${EXTENDER_HTTPS}" in true|false) ;; *) die "E2E_EXTENDER_HTTPS must be true or false, not '${EXTENDER_HTTPS}'";; esac
  local scheme=http; [ "${EXTENDER_HTTPS}" = true ] && scheme=https
  EXTENDER_URL="${E2E_EXTENDER_URL:-${scheme}://127.0.0.1:${EXTENDER_PORT}}"
  local loopback="${E2E_EXTENDER_LOOPBACK:-true}"
  case "${loopback}" in true|false) ;; *) die "E2E_EXTENDER_LOOPBACK must be true or false, not '${loopback}'";; esac
  if [ "${loopback}" = true ] && [ -z "${E2E_EXTENDER_URL:-}" ]; then
    [ -n "${EXTENDER_SCHED_PORT:-}" ] || EXTENDER_SCHED_PORT="$(free_port "${APISERVER_PORT}" "${EXTENDER_PORT}")"
    SCHED_EXTENDER_URL="http://127.0.0.1:${EXTENDER_SCHED_PORT}" SCHED_EXTENDER_HTTPS=false
  else
    EXTENDER_SCHED_PORT="" SCHED_EXTENDER_URL="${EXTENDER_URL}" SCHED_EXTENDER_HTTPS="${EXTENDER_HTTPS}"
  fi
  gen_pki
  write_kubeconfig "${CONF}/admin.kubeconfig" admin
  write_kubeconfig "${CONF}/scheduler.kubeconfig" scheduler
  write_kubeconfig "${CONF}/controller-manager.kubeconfig" controller-manager
  write_scheduler_configs
  cat > "${ENV_FILE}" <<EOF
export KUBECONFIG=${CONF}/admin.kubeconfig
export E2E_WORK=${WORK}
export E2E_BIN=${BIN}
export ETCD_PORT=${ETCD_PORT} ETCD_PEER_PORT=${ETCD_PEER_PORT}
export APISERVER_PORT=${APISERVER_PORT} APISERVER_URL=https://127.0.0.1:${APISERVER_PORT}
export KWOK_PORT=${KWOK_PORT} SCHED_PORT=${SCHED_PORT} ASCHED_PORT=${ASCHED_PORT} KCM_PORT=${KCM_PORT}
export EXTENDER_PORT=${EXTENDER_PORT} EXTENDER_HTTPS=${EXTENDER_HTTPS} EXTENDER_URL=${EXTENDER_URL}
export EXTENDER_SCHED_PORT=${EXTENDER_SCHED_PORT} SCHED_EXTENDER_URL=${SCHED_EXTENDER_URL}
export E2E_CA=${PKI}/ca.crt E2E_EXTENDER_CERT=${PKI}/extender.crt E2E_EXTENDER_KEY=${PKI}/extender.key
EOF
  local admin_curl=(--cacert "${PKI}/ca.crt" --cert "${PKI}/admin.crt" --key "${PKI}/admin.key")

  start_proc etcd "http://127.0.0.1:${ETCD_PORT}/health" -- "${BIN}/etcd" --name e2e \
    --data-dir "${WORK}/etcd" --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" \
    --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster "e2e=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn

  start_proc kube-apiserver "https://127.0.0.1:${APISERVER_PORT}/readyz" "${admin_curl[@]}" -- \
    "${BIN}/kube-apiserver" --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "${APISERVER_PORT}" \
    --tls-cert-file "${PKI}/apiserver.crt" --tls-private-key-file "${PKI}/apiserver.key" \
    --client-ca-file "${PKI}/ca.crt" \
    --service-account-key-file "${PKI}/sa.pub" --service-account-signing-key-file "${PKI}/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
    --authorization-mode Node,RBAC --allow-privileged=true \
    --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds,Priority,ResourceQuota,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
    --disable-admission-plugins TaintNodesByCondition \
    --max-requests-inflight 800 --max-mutating-requests-inflight 400 --profiling="${E2E_APISERVER_PROFILING:-false}"

  # (TaintNodesByCondition is off: its not-ready taint is removed by the node
  # lifecycle controller of kube-controller-manager, which this plane lacks.)
  # Without kube-controller-manager nothing creates the "default" service
  # account, which the ServiceAccount admission plugin requires for pods.
  ensure_namespace default

  # kwok applies no defaults to options once a config file is given.
  cat > "${CONF}/kwok.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 8
  nodeLeaseParallelism: 8
  podsOnNodeSyncParallelism: 4
  enablePodsOnNodeSyncListPager: true
  enableDebuggingHandlers: false
  enableProfilingHandler: false
  enableContentionProfiling: false
EOF
  start_proc kwok "http://127.0.0.1:${KWOK_PORT}/healthz" -- "${BIN}/kwok" \
    --kubeconfig "${CONF}/admin.kubeconfig" --config "${CONF}/kwok.yaml" --config "${BIN}/kwok-stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --disregard-status-with-annotation-selector kwok.x-k8s.io/status=custom \
    --node-ip 127.0.0.1 --cidr 10.0.0.1/16 --node-lease-duration-seconds 40 \
    --server-address "127.0.0.1:${KWOK_PORT}"

  start_proc default-scheduler "https://127.0.0.1:${SCHED_PORT}/healthz" -k -- "${BIN}/kube-scheduler" \
    --config "${CONF}/default-scheduler.yaml" --bind-address 127.0.0.1 --secure-port "${SCHED_PORT}" \
    --authentication-kubeconfig "${CONF}/scheduler.kubeconfig" \
    --authorization-kubeconfig "${CONF}/scheduler.kubeconfig"
  if [ "${E2E_ACCELPOOL_SCHEDULER:-1}" = 1 ]; then
    start_proc accelpool-scheduler "https://127.0.0.1:${ASCHED_PORT}/healthz" -k -- "${BIN}/kube-scheduler" \
      --config "${CONF}/accelpool-scheduler.yaml" --bind-address 127.0.0.1 --secure-port "${ASCHED_PORT}" \
      --authentication-kubeconfig "${CONF}/scheduler.kubeconfig" \
      --authorization-kubeconfig "${CONF}/scheduler.kubeconfig"
  fi
  if [ "${E2E_CONTROLLERS:-0}" = 1 ]; then
    # Each controller runs as its own service account in kube-system (the
    # bootstrap RBAC roles system:controller:*), its tokens requested by
    # kube-controller-manager with its own identity, as kubeadm runs it; the
    # service-account key pair is the apiserver's.
    start_proc kube-controller-manager "https://127.0.0.1:${KCM_PORT}/healthz" -k -- \
      "${BIN}/kube-controller-manager" --kubeconfig "${CONF}/controller-manager.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port "${KCM_PORT}" \
      --authentication-kubeconfig "${CONF}/controller-manager.kubeconfig" \
      --authorization-kubeconfig "${CONF}/controller-manager.kubeconfig" \
      --leader-elect=false --controllers "${CONTROLLER_LIST}" \
      --use-service-account-credentials=true \
      --service-account-private-key-file "${PKI}/sa.key" --root-ca-file "${PKI}/ca.crt" \
      --kube-api-qps 100 --kube-api-burst 200
  fi
  log "control plane up; extender expected at ${EXTENDER_URL}"
  log "use it with: . ${ENV_FILE}"
}

# ensure_namespace NAME: the namespace and its "default" service account.
# kube-controller-manager's serviceaccount controller (E2E_CONTROLLERS=1) may
# create the account between our get and create: a create that fails is fine
# when the object is there afterwards.
ensure_namespace() {
  local k=("${BIN}/kubectl" --kubeconfig "${CONF}/admin.kubeconfig")
  "${k[@]}" get namespace "$1" >/dev/null 2>&1 || "${k[@]}" create namespace "$1" >/dev/null 2>&1 ||
    "${k[@]}" get namespace "$1" >/dev/null
  "${k[@]}" -n "$1" get serviceaccount default >/dev/null 2>&1 ||
    "${k[@]}" -n "$1" create serviceaccount default >/dev/null 2>&1 ||
    "${k[@]}" -n "$1" get serviceaccount default >/dev/null
}

cmd_stop() {
  local i
  for ((i = ${#PROCS[@]} - 1; i >= 0; i--)); do stop_proc "${PROCS[$i]}"; done
}

cmd_status() {
  local p rc=0
  for p in "${PROCS[@]}"; do
    if proc_alive "$p"; then
      echo "$p: running (pid $(cat "${RUN}/$p.pid"))"
    elif [ "$p" = kube-controller-manager ] && [ "${E2E_CONTROLLERS:-0}" != 1 ]; then
      echo "$p: not started (E2E_CONTROLLERS=1 starts it)"  # optional: not a failure
    else
      echo "$p: stopped"; rc=1
    fi
  done
  return ${rc}
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  stop-proc) [ -n "${2:-}" ] || die "usage: $0 stop-proc NAME (one of: ${PROCS[*]})"; stop_proc "$2" ;;
  restart) cmd_stop; cmd_start ;;
  status) cmd_status ;;
  env) [ -f "${ENV_FILE}" ] || die "no cluster env at ${ENV_FILE}: run '$0 start' first"; cat "${ENV_FILE}" ;;
  ns) [ -n "${2:-}" ] || die "usage: $0 ns NAME"; ensure_namespace "$2" ;;
  clean) cmd_stop; rm -rf "${WORK}"; log "removed ${WORK}" ;;
  *) sed -n '2,34p' "$0"; exit 2 ;;
esac
