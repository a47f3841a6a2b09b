# shellcheck shell=bash
# Pod helpers of the scenario suite (sourced after scenarios/lib.sh).

NS=scen
# pod_yaml NAME ANNOTATIONS(flow map) NODE_SELECTOR(flow map) CONTAINERS(yaml list, 2-space indent) [INIT]
pod_yaml() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: ${NS}
  labels: {app: scen}
  annotations: $2
spec:
  schedulerName: accelpool-scheduler
  nodeSelector: $3
  terminationGracePeriodSeconds: 0
YAML
  if [ -n "${5:-}" ]; then echo "  initContainers:"; printf '%s\n' "$5"; fi
  echo "  containers:"
  printf '%s\n' "$4"
}

# ctr NAME LIMITS(flow map): one container entry.
ctr() { printf '  - {name: %s, image: registry.invalid/none, resources: {limits: %s}}' "$1" "$2"; }

pod_node() { kc -n "${NS}" get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
pod_bound() { [ -n "$(pod_node "$1")" ]; }
pod_has_assignment() {
  [ -n "$(kc -n "${NS}" get pod "$1" -o jsonpath='{.metadata.annotations.accelpool\.io/assignment}')" ]
}

# admit NAME: act as kubelet admission on the pod's node (GetPreferredAllocation
# and Allocate through kubeletsim) and check the answers against the assignment.
admit() {
  local p="$1" node f="${E2E_WORK}/admit/$1"
  mkdir -p "$f"
  node="$(pod_node "$p")"
  [ -n "${node}" ] || { log "pod ${p} is not bound"; return 1; }
  kc -n "${NS}" get pod "$p" -o json > "$f/pod.json" &&
    kc get node "${node}" -o json > "$f/node.json" &&
    node_resources "${node}" > "$f/resources.json" &&
    python3 "${SCEN_DIR}/check.py" admit-request "$f/pod.json" "$f/resources.json" > "$f/request.json" ||
    return 1
  local code
  code="$(curl -sS --max-time 30 -o "$f/admit.json" -w '%{http_code}' -X POST \
    --data-binary @"$f/request.json" "$(sim_url "${node}")/v1/admit")"
  [ "${code}" = 200 ] || { log "kubeletsim admission of ${p} answered ${code}: $(head -c 600 "$f/admit.json")"; return 1; }
  python3 "${SCEN_DIR}/check.py" verify-admit "$f/pod.json" "$f/admit.json" "$f/node.json"
}

# release NAME: kubelet frees the pod's devices (the pod was deleted).
release() {
  local uid node
  uid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["uid"])' \
    "${E2E_WORK}/admit/$1/pod.json")" || return 1
  node="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"]["nodeName"])' \
    "${E2E_WORK}/admit/$1/pod.json")" || return 1
  curl -fsS --max-time 10 -X POST "$(sim_url "${node}")/v1/release?pod_uid=${uid}" >/dev/null
}

# ledger: no device double-booked and no vendor rule broken over all live pods.
ledger() {
  local f="${E2E_WORK}/ledger"
  mkdir -p "$f"
  kc get pods -A -o json > "$f/pods.json" && kc get nodes -o json > "$f/nodes.json" &&
    python3 "${SCEN_DIR}/check.py" ledger "$f/pods.json" "$f/nodes.json"
}

# scenario NAME YAML [check...]: create the pod, wait for the bind, check the
# assignment, admit it as kubelet and run extra checks (functions taking NAME).
scenario() {
  local p="$1" yaml="$2"; shift 2
  printf '%s\n' "${yaml}" | kc create -f - >/dev/null || { check "${p}: created" false; return; }
  check "${p}: bound through the extender" wait_for 90 "${p} bound" pod_bound "${p}"
  check "${p}: has accelpool.io/assignment" pod_has_assignment "${p}"
  check "${p}: kubelet admission (GetPreferredAllocation + Allocate) matches the assignment" admit "${p}"
  local c
  for c in "$@"; do check "${p}: ${c}" "${c}" "${p}"; done
}

# stays_pending NAME YAML SECONDS: the pod must not bind.
stays_pending() {
  printf '%s\n' "$2" | kc create -f - >/dev/null || return 1
  ! wait_for "$3" "$1 bound" pod_bound "$1"
}

# assigned_field NAME JQ: the jq expression over the pod's assignment.
assigned() {
  kc -n "${NS}" get pod "$1" -o json |
    jq -r '.metadata.annotations["accelpool.io/assignment"] | fromjson | '"$2"
}
node_of_model() { # NAME MODEL: the pod's node carries the model label
  kc get node "$(pod_node "$1")" -o jsonpath='{.metadata.labels}' | grep_output -q "\"$2\""
}
