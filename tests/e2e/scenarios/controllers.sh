# shellcheck shell=bash
# Accelerator pods driven by real controllers (sourced by tests/e2e/scenarios.sh
# after cases.sh; needs kube-controller-manager, E2E_CONTROLLERS=1, the default
# there): a Deployment of fractional NVIDIA pods bound through the extender, a
# rolling update, a scale to zero, and a PodDisruptionBudget steering
# kube-scheduler's preemption through the extender's preempt verb.
#
# Three nodes of their own, tainted so no earlier pod lands there and only
# these pods (which tolerate the taint) do: ctl-0 and ctl-1 (HGX H200), and
# ctl-p, one H200 of 16 GiB in 4 shares with 4 CPUs, for the preemption.
# Kubelet's admission is played by kubelet_sync (below) for pods whose names
# the controllers choose; ledgerwatch.py checks the device ledger at every pod
# state the apiserver goes through meanwhile, not only when the checks look.

log "== controllers (kube-controller-manager)"
if [ "${E2E_CONTROLLERS:-1}" != 1 ]; then
  log "E2E_CONTROLLERS=0: no kube-controller-manager, controller scenarios skipped"
  return 0
fi

kcm_healthy() { curl -fsSk --max-time 2 "https://127.0.0.1:${KCM_PORT}/healthz" >/dev/null; }
check "kube-controller-manager is healthy" kcm_healthy

CTL_TAINT=accelpool.io/e2e-ctl
for n in ctl-0:nvidia-hgx-8 ctl-1:nvidia-hgx-8; do
  start_node "${n%%:*}" "{\"version\":1,\"inventories\":[{\"vendor\":\"nvidia\",\"profile\":\"${n#*:}\",\"model\":\"H200\"}]}"
done
start_node ctl-p '{"version":1,"inventories":[{"vendor":"nvidia","count":1,"model":"H200","memory_mib":16384,"max_shares":4}]}'
for n in ctl-0 ctl-1 ctl-p; do kc taint node "$n" "${CTL_TAINT}=true:NoSchedule" >/dev/null; done
kc label node ctl-0 ctl-1 accelpool.io/e2e-pool=ctl >/dev/null
kc label node ctl-p accelpool.io/e2e-pool=ctl-p >/dev/null
ctl_node_ready() { # NAME SLOTS: registered, published, Node status shows SLOTS nvidia.com/gpu
  registered "$1" && published "$1" && sync_capacity "$1" && node_has "$1" nvidia.com/gpu "$2"
}
ctl_nodes_ready() { ctl_node_ready ctl-0 80 && ctl_node_ready ctl-1 80 && ctl_node_ready ctl-p 4; }
check "ctl-0, ctl-1 (80 slots) and ctl-p (4 slots) registered and published" \
  wait_for 60 "ctl nodes" ctl_nodes_ready
# ctl-p: 4 CPUs, so kube-scheduler's own NodeResourcesFit needs the victims too.
kc patch node ctl-p --subresource=status --type=merge \
  -p '{"status":{"capacity":{"cpu":"4"},"allocatable":{"cpu":"4"}}}' >/dev/null

# node_mem NODE...: the extender's accelpool_extender_node_memory_allocated_mib summed over NODEs.
node_mem() {
  local m
  m="$(curl -fsS --max-time 5 --cacert "${E2E_CA}" "${EXTENDER_URL}/metrics")" || return 1
  awk -v nodes=" $* " '/^accelpool_extender_node_memory_allocated_mib\{/ {
      if (match($1, /node="[^"]*"/)) { n = substr($1, RSTART + 6, RLENGTH - 7); if (index(nodes, " " n " ")) s += $NF } }
    END { print s + 0 }' <<<"${m}"
}
mem_is_now() { [ "$(node_mem "${@:2}")" = "$1" ]; } # MiB NODE...

# --- kubelet for controller-made pods ---
# kubelet_sync KEY=VALUE: what kubelet does for the pods labelled KEY=VALUE in
# NS: frees the devices of admitted pods (of any label) that are gone or
# terminating, admits every bound pod of the label not admitted yet
# (GetPreferredAllocation + Allocate through kubeletsim, checked against its
# assignment), then checks the ledger (no device double-booked over all pods).
# Problems are collected in CTL_ERRORS.
mkdir -p "${E2E_WORK}/ledger"
declare -A CTL_ADMITTED=()
CTL_ERRORS=() CTL_LEDGERS=0
kubelet_sync() {
  local json live p
  json="$(kc -n "${NS}" get pods -o json)" || return 1
  live="$(jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name' <<<"${json}")"
  for p in "${!CTL_ADMITTED[@]}"; do
    grep -qx "$p" <<<"${live}" && continue
    [ "${CTL_ADMITTED[$p]}" = ok ] && { release "$p" || CTL_ERRORS+=("release of $p failed"); }
    unset "CTL_ADMITTED[$p]"
  done
  for p in $(jq -r --arg k "${1%%=*}" --arg v "${1#*=}" '.items[] | select(.metadata.labels[$k] == $v
      and .metadata.deletionTimestamp == null and .spec.nodeName != null) | .metadata.name' <<<"${json}"); do
    [ -n "${CTL_ADMITTED[$p]:-}" ] && continue
    if admit "$p" >> "${E2E_WORK}/logs/controllers-admit.log" 2>&1; then
      CTL_ADMITTED[$p]=ok
    elif [ "$(kc -n "${NS}" get pod "$p" -o jsonpath='{.metadata.name}/{.metadata.deletionTimestamp}' 2>/dev/null)" != "$p/" ]; then
      :  # gone or terminating before kubelet got to it: kubelet would not admit it either
    else
      CTL_ADMITTED[$p]=failed; CTL_ERRORS+=("kubelet admission of $p failed (see ${E2E_WORK}/admit/$p)")
    fi
  done
  if ledger > "${E2E_WORK}/ledger/controllers.txt" 2>&1; then CTL_LEDGERS=$((CTL_LEDGERS + 1)); else
    CTL_ERRORS+=("ledger at $(date -u +%T): $(head -c 400 "${E2E_WORK}/ledger/controllers.txt")")
  fi
}
no_ctl_errors() {
  [ ${#CTL_ERRORS[@]} = 0 ] && return 0
  printf '  %s\n' "${CTL_ERRORS[@]}" >&2; CTL_ERRORS=(); return 1
}
admitted_count() { # KEY=VALUE: live pods of the label admitted by kubelet_sync
  local n=0 p
  for p in $(kc -n "${NS}" get pods -l "$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'); do
    [ "${CTL_ADMITTED[$p]:-}" = ok ] && n=$((n + 1))
  done
  echo "$n"
}

# deployment NAME REPLICAS POOL PRIORITY_CLASS CPU LIMITS [STRATEGY]
deployment() {
  cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: ${NS}}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  ${7:-strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}}
  template:
    metadata:
      labels: {app: $1, tier: $4}
      annotations: {e2e.accelpool.io/revision: "1"}
    spec:
      schedulerName: accelpool-scheduler
      priorityClassName: $4
      nodeSelector: {accelpool.io/e2e-pool: $3}
      tolerations: [{key: ${CTL_TAINT}, operator: Exists}]
      terminationGracePeriodSeconds: 0
      containers:
      - name: main
        image: registry.invalid/none
        resources: {requests: {cpu: "$5"}, limits: $6}
YAML
}
kc apply -f - >/dev/null <<'YAML'
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: ctl-low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: ctl-high}
value: 1000
YAML

# deploy_settled NAME REPLICAS: kubelet_sync, then the Deployment has rolled
# out REPLICAS available pods of its current template, no other pod is left,
# and kubelet admitted every one.
deploy_settled() {
  kubelet_sync "app=$1"
  kc -n "${NS}" get deployment "$1" -o json | jq -e --argjson n "$2" '.status.observedGeneration == .metadata.generation
    and (.status.replicas // 0) == $n and (.status.updatedReplicas // 0) == $n and (.status.availableReplicas // 0) == $n' \
    >/dev/null || return 1
  [ "$(kc -n "${NS}" get pods -l "app=$1" --no-headers 2>/dev/null | wc -l)" = "$2" ] &&
    [ "$(admitted_count "app=$1")" = "$2" ]
}
# pods_ok NAME REPLICAS: every pod of the Deployment bound to a ctl node by the
# extender (an accelpool.io/assignment naming that node, 4096 MiB, 250/1000).
pods_ok() {
  kc -n "${NS}" get pods -l "app=$1" -o json | jq -e --argjson n "$2" '[.items[]
    | select(.spec.nodeName == "ctl-0" or .spec.nodeName == "ctl-1")
    | .spec.nodeName as $node | .metadata.annotations["accelpool.io/assignment"] // empty | fromjson
    | select(.node == $node and ([.containers[].devices[] | [.memory_mib, .compute]] == [[4096, 250]]))]
    | length == $n' >/dev/null
}
pod_names() { kc -n "${NS}" get pods -l "$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort; }

# ledgerwatch.py checks the ledger at every pod state from here to the end.
LW="${E2E_WORK}/ledgerwatch"
rm -rf "${LW}" && mkdir -p "${LW}"
python3 "${SCEN_DIR}/ledgerwatch.py" "${APISERVER_URL}" "${E2E_CA}" "${E2E_WORK}/pki/admin.crt" \
  "${E2E_WORK}/pki/admin.key" "${LW}/stop" "${LW}/ready" > "${LW}/out.json" 2> "${LW}/err.log" &
lw_pid=$!
wait_for 20 "ledgerwatch" test -e "${LW}/ready" || true

# a. A Deployment of four quarter-H200 pods through the extender.
FRAC="{nvidia.com/gpu: 1, nvidia.com/gpumem: 4096, nvidia.com/gpucores: 25}"
mem_before="$(node_mem ctl-0 ctl-1)"
deployment ctl-dep 4 ctl ctl-low 100m "${FRAC}" | kc apply -f - >/dev/null
check "ctl-dep: the Deployment's 4 pods bind, kubelet admits each" wait_for 90 "ctl-dep rolled out" deploy_settled ctl-dep 4
check "ctl-dep: each pod bound by the extender with its accelpool.io/assignment (4096 MiB, 250/1000)" pods_ok ctl-dep 4
check "ctl-dep: kubelet admission matched every assignment, no device double-booked" no_ctl_errors
check "ctl-dep: the extender counts 4 x 4096 MiB on ctl-0/ctl-1 (was ${mem_before})" \
  wait_for 20 "ctl memory" mem_is_now $((mem_before + 16384)) ctl-0 ctl-1

# b. A rolling update (maxSurge 1, maxUnavailable 1): new pods bind while the old
# ones go; kubelet_sync admits and frees as they come and checks the ledger each time.
old_pods="$(pod_names app=ctl-dep)"
ledgers_before="${CTL_LEDGERS}"
kc -n "${NS}" patch deployment ctl-dep --type=merge \
  -p '{"spec":{"template":{"metadata":{"annotations":{"e2e.accelpool.io/revision":"2"}}}}}' >/dev/null
rolled() { deploy_settled ctl-dep 4 && [ -z "$(comm -12 <(pod_names app=ctl-dep) <(echo "${old_pods}"))" ]; }
check "ctl-dep rolling update: 4 new pods bound and admitted, the 4 old ones gone" wait_for 120 "ctl-dep rolled" rolled
new_rs_only() { # every live pod carries the new ReplicaSet's pod-template-hash
  local h
  h="$(kc -n "${NS}" get rs -l app=ctl-dep -o json | jq -r '[.items[] | select(.spec.replicas > 0)] |
    if length == 1 then .[0].metadata.labels["pod-template-hash"] else "" end')"
  [ -n "$h" ] && [ "$(kc -n "${NS}" get pods -l "app=ctl-dep,pod-template-hash=$h" --no-headers | wc -l)" = 4 ]
}
check "ctl-dep rolling update: the new ReplicaSet holds all 4 pods, the old one scaled to 0" new_rs_only
check "ctl-dep rolling update: each new pod bound by the extender with its assignment" pods_ok ctl-dep 4
check "ctl-dep rolling update: every admission matched, no device double-booked at any of $((CTL_LEDGERS - ledgers_before)) steps" \
  no_ctl_errors
check "ctl-dep rolling update: the old pods' devices came back (extender: 4 x 4096 MiB on ctl-0/ctl-1)" \
  wait_for 20 "ctl memory" mem_is_now $((mem_before + 16384)) ctl-0 ctl-1

# c. Scale to 0: every device comes back.
kc -n "${NS}" scale deployment ctl-dep --replicas=0 >/dev/null
check "ctl-dep scaled to 0: every pod gone" wait_for 60 "ctl-dep at 0" deploy_settled ctl-dep 0
check "ctl-dep scaled to 0: kubelet freed their devices, no device double-booked" no_ctl_errors
check "ctl-dep scaled to 0: the extender's figure on ctl-0/ctl-1 is back to ${mem_before} MiB" \
  wait_for 20 "ctl memory" mem_is_now "${mem_before}" ctl-0 ctl-1

# d. A PodDisruptionBudget and preemption through the extender, on ctl-p (one
# H200, 16 GiB in 4 shares, 4 CPUs). Two low-priority Deployments fill it with
# quarter shares and a CPU each: lp-free first (its pods are the older ones),
# then lp-keep, whose pods a PDB with maxUnavailable 0 covers (lp-free's allows
# 2). A high-priority pod needs half the card and 2 CPUs: two victims.
# kube-scheduler's SelectVictimsOnNode (defaultpreemption) removes every
# lower-priority pod, then puts back first the ones whose eviction would violate
# a PDB (by the disruption controller's status.disruptionsAllowed), then the
# others, most important (oldest) first: lp-keep's two fit back, lp-free's do
# not, so the victims are lp-free's pods, with no PDB violation. By age alone
# they would be lp-keep's (the younger). The extender's preempt verb keeps that
# choice (freeing 2 x 4096 MiB is what the pod needs).
LOWQ="{nvidia.com/gpu: 1, nvidia.com/gpumem: 4096, nvidia.com/gpucores: 25}"
deployment lp-free 2 ctl-p ctl-low 1 "${LOWQ}" | kc apply -f - >/dev/null
check "lp-free: 2 low-priority quarter shares bound on ctl-p and admitted" \
  wait_for 90 "lp-free" deploy_settled lp-free 2
deployment lp-keep 2 ctl-p ctl-low 1 "${LOWQ}" | kc apply -f - >/dev/null
check "lp-keep: 2 more (ctl-p full: 4 shares, 4 CPUs) bound and admitted" \
  wait_for 90 "lp-keep" deploy_settled lp-keep 2
check "lp-free, lp-keep: admissions matched, no device double-booked" no_ctl_errors
kc apply -f - >/dev/null <<YAML
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: lp-keep, namespace: ${NS}}
spec: {maxUnavailable: 0, selector: {matchLabels: {app: lp-keep}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: lp-free, namespace: ${NS}}
spec: {maxUnavailable: 2, selector: {matchLabels: {app: lp-free}}}
YAML
pdb_allows() { # NAME N: the disruption controller computed status.disruptionsAllowed N of 2 healthy
  kc -n "${NS}" get pdb "$1" -o json | jq -e --argjson n "$2" '.status.observedGeneration == .metadata.generation
    and .status.currentHealthy == 2 and .status.expectedPods == 2 and .status.disruptionsAllowed == $n' >/dev/null
}
check "the disruption controller: PDB lp-keep allows 0 disruptions, lp-free 2" \
  wait_for 60 "PDB status" eval 'pdb_allows lp-keep 0 && pdb_allows lp-free 2'
lp_free_old="$(pod_names app=lp-free)" lp_keep_old="$(pod_names app=lp-keep)"
preempt_ok() { # the extender's preempt answers with HTTP 200
  curl -fsS --max-time 5 --cacert "${E2E_CA}" "${EXTENDER_URL}/metrics" |
    awk '/^accelpool_extender_requests_total\{/ && /verb="preempt"/ && /code="200"/ { s += $NF } END { print s + 0 }'
}
preempts_before="$(preempt_ok)"
cat <<YAML | kc apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: hp, namespace: ${NS}, labels: {app: hp}}
spec:
  schedulerName: accelpool-scheduler
  priorityClassName: ctl-high
  nodeSelector: {accelpool.io/e2e-pool: ctl-p}
  tolerations: [{key: ${CTL_TAINT}, operator: Exists}]
  terminationGracePeriodSeconds: 0
  containers:
  - {name: main, image: registry.invalid/none, resources: {requests: {cpu: "2"}, limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 8192, nvidia.com/gpucores: 50}}}
YAML
# Kubelet frees the victims' devices as they go (kubelet_sync), then admits hp.
hp_bound() { kubelet_sync tier=ctl-low; [ "$(pod_node hp)" = ctl-p ]; }
check "hp (high priority, half of ctl-p's card) binds to ctl-p after preemption" wait_for 90 "hp bound" hp_bound
kubelet_sync tier=ctl-low
check "hp: kube-scheduler called the extender's preempt verb (HTTP 200)" \
  test "$(preempt_ok)" -gt "${preempts_before}"
check "hp: kubelet admission matches its assignment (8192 MiB)" eval 'admit hp && mem_is hp 8192'
preempted() { # the pods with a Preempted event naming hp and ctl-p, sorted
  local uid; uid="$(kc -n "${NS}" get pod hp -o jsonpath='{.metadata.uid}')"
  kc -n "${NS}" get events --field-selector reason=Preempted -o json |
    jq -r --arg m "Preempted by pod ${uid} on node ctl-p" '[.items[] | select(.message == $m) | .involvedObject.name] | unique[]'
}
victims_are_lp_free() { [ "$(preempted)" = "${lp_free_old}" ]; }
check "hp: the victims are lp-free's two pods (Preempted events), not the PDB-covered lp-keep's" \
  wait_for 20 "Preempted events" victims_are_lp_free
check "lp-keep: both pods untouched, still bound to ctl-p" \
  test "$(kc -n "${NS}" get pods -l app=lp-keep -o jsonpath='{range .items[*]}{.metadata.name}:{.spec.nodeName}{"\n"}{end}' | sort)" \
  = "$(sed 's/$/:ctl-p/' <<<"${lp_keep_old}")"
lp_free_gone() { [ -z "$(comm -12 <(pod_names app=lp-free) <(echo "${lp_free_old}"))" ]; }
check "lp-free: its two preempted pods are gone (the ReplicaSet's replacements wait)" wait_for 30 "victims gone" lp_free_gone
check "preemption: victims' devices freed, hp admitted, no device double-booked" eval 'kubelet_sync tier=ctl-low && no_ctl_errors'
check "ctl-p: the extender counts 2 x 4096 + 8192 MiB" wait_for 20 "ctl-p memory" mem_is_now 16384 ctl-p
touch "${LW}/stop"
lw_done() { ! kill -0 "${lw_pid}" 2>/dev/null; }
wait_for 20 "ledgerwatch" lw_done || kill "${lw_pid}" 2>/dev/null
lw_rc=0; wait "${lw_pid}" || lw_rc=$?
log "ledgerwatch: $(head -c 1500 "${LW}/out.json")"
lw_clean() { [ "${lw_rc}" = 0 ] && jq -e '.states > 20 and .errors == []' "${LW}/out.json" >/dev/null; }
check "no device double-booked in any of the $(jq -r .states "${LW}/out.json" 2>/dev/null) pod states the apiserver went through (ledgerwatch.py)" lw_clean
hp_nominated() { jq -e --arg p "${NS}/hp" '.nominated[$p] == "ctl-p"' "${LW}/out.json" >/dev/null; }
check "hp: kube-scheduler nominated ctl-p (status.nominatedNodeName seen before the bind)" hp_nominated
kc -n "${NS}" delete deployment ctl-dep lp-free lp-keep --wait=false >/dev/null 2>&1 || true
kc -n "${NS}" delete pod hp --wait=false >/dev/null 2>&1 || true
release hp || true
