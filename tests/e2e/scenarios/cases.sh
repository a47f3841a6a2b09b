# shellcheck shell=bash
# The scenarios and faults (sourced by tests/e2e/scenarios.sh once the nodes are up).

mem_is() { [ "$(assigned "$1" '[.containers[].devices[].memory_mib] | unique | join(",")')" = "$2" ]; }
compute_is() { [ "$(assigned "$1" '[.containers[].devices[].compute] | unique | join(",")')" = "$2" ]; }
whole_1g() { mem_is "$1" 1024 && compute_is "$1" 10; }
quarter() { mem_is "$1" 4096 && compute_is "$1" 250; }
exclusive_2() { [ "$(assigned "$1" '[.containers[0].devices[] | select(.exclusive)] | length')" = 2 ]; }
# indexes_in NAME SETS: the container's sorted indexes are one of SETS (a jq array of arrays).
indexes_in() { [ "$(assigned "$1" "[.containers[0].devices[].index] | sort | IN($2[])")" = true ]; }
module_pair() { indexes_in "$1" '[[0,1],[2,3],[4,5],[6,7],[8,9],[10,11],[12,13],[14,15]]'; }
ring_of_4() { indexes_in "$1" '[[0,1,2,3],[4,5,6,7]]'; }
wing_of_4() { ring_of_4 "$1"; }
zone_of_4() { ring_of_4 "$1"; }
on_l40s() { node_of_model "$1" L40S; }
on_h200() { node_of_model "$1" H200; }
one_numa() { # every device of the pod on one NUMA node of its node's inventory
  local n ids
  n="$(pod_node "$1")"; ids="$(assigned "$1" '[.containers[].devices[].id] | join(",")')"
  [ "$(kc get node "$n" -o json | jq -r --arg ids "${ids}" '.metadata.annotations["accelpool.io/inventory"] | fromjson |
      [.inventories[].devices[] | select(.id as $i | $ids | split(",") | index($i)) | .numa] | unique | length')" = 1 ]
}
three_entries() { [ "$(assigned "$1" '.containers | length')" = 3 ]; }
init_reused() { # the init container's device is one of the regular containers' devices
  [ "$(assigned "$1" '([.containers[] | select(.kind == "init") | .devices[].id] - [.containers[] | select(.kind != "init") | .devices[].id]) | length')" = 0 ]
}
no_double_booking() { ledger; }

log "== scenarios"
G=nvidia.com/gpu
scenario frac-1g "$(pod_yaml frac-1g '{}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024, nvidia.com/gpucores: 1}")")" whole_1g
scenario frac-4g "$(pod_yaml frac-4g '{}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 4096, nvidia.com/gpucores: 25}")")" quarter
scenario whole-2 "$(pod_yaml whole-2 '{}' '{}' "$(ctr main "{${G}: 2}")")" exclusive_2
scenario a910c-pair "$(pod_yaml a910c-pair '{}' '{}' "$(ctr main '{huawei.com/Ascend910C: 2}')")" module_pair
scenario a910a-ring "$(pod_yaml a910a-ring '{}' '{}' "$(ctr main '{huawei.com/Ascend910A: 4}')")" ring_of_4
scenario p800-wing "$(pod_yaml p800-wing '{}' '{}' "$(ctr main '{kunlunxin.com/xpu: 4}')")" wing_of_4
scenario c500-zone "$(pod_yaml c500-zone '{}' '{}' "$(ctr main '{metax-tech.com/gpu: 4}')")" zone_of_4
scenario multi "$(pod_yaml multi '{}' '{}' "$(ctr a "{${G}: 1, nvidia.com/gpumem: 2048, nvidia.com/gpucores: 10}")
$(ctr b "{${G}: 1, nvidia.com/gpumem: 3072, nvidia.com/gpucores: 20}")" \
  "$(ctr warmup "{${G}: 1, nvidia.com/gpumem: 2048, nvidia.com/gpucores: 10}")")" three_entries init_reused
scenario numa-4 "$(pod_yaml numa-4 '{accelpool.io/numa-bind: "true"}' '{}' "$(ctr main "{${G}: 4}")")" one_numa
scenario model-in "$(pod_yaml model-in '{accelpool.io/model-include: "L40S"}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")")" on_l40s
scenario model-out "$(pod_yaml model-out '{accelpool.io/model-exclude: "L40S"}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")")" on_h200
check "model-none: a pod whose models are all excluded stays pending" stays_pending model-none \
  "$(pod_yaml model-none '{accelpool.io/model-include: "A100"}' '{}' "$(ctr main "{${G}: 1}")")" 10
# HAMi's policy annotations as HAMi 2.10 writes them: admitted (mutex and
# topology-aware were refused before), the devices planned with topology and
# held exclusive, the node scored by the node policy.
hami_policies() {
  [ "$(assigned "$1" '.policy')" = topology ] &&
    [ "$(assigned "$1" '[.containers[0].devices[] | select(.exclusive)] | length')" = 1 ]
}
scenario hami-policy "$(pod_yaml hami-policy '{hami.io/gpu-scheduler-policy: "mutex, topology-aware", hami.io/node-scheduler-policy: spread}' '{}' \
  "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")")" hami_policies
kc -n "${NS}" delete pod hami-policy --grace-period=0 --force >/dev/null 2>&1 || true
release hami-policy || true
# A HAMi mode accelpool does not read: admitted, and the apiserver hands the
# webhook's warning to kubectl.
vgpu_mode_warned() {
  local out
  out="$(pod_yaml vgpu-mig '{nvidia.com/vgpu-mode: mig}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")" |
    kc create -f - 2>&1)" || { echo "refused: ${out}"; return 1; }
  kc -n "${NS}" delete pod vgpu-mig --grace-period=0 --force >/dev/null 2>&1 || true
  grep -q 'Warning: nvidia.com/vgpu-mode=mig is not read' <<<"${out}" || { echo "no warning: ${out}"; return 1; }
}
check "vgpu-mode: a HAMi mode accelpool does not read is admitted with kubectl's warning" vgpu_mode_warned
# The webhook routes a pod that names no scheduler.
printf '%s\n' "$(pod_yaml hooked '{}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")")" |
  sed '/schedulerName:/d' | kc create -f - >/dev/null || true
check "hooked: the webhook set schedulerName accelpool-scheduler" \
  test "$(kc -n "${NS}" get pod hooked -o jsonpath='{.spec.schedulerName}')" = accelpool-scheduler
check "hooked: bound through the extender" wait_for 90 "hooked bound" pod_bound hooked
check "hooked: kubelet admission matches the assignment" admit hooked
# The webhook refuses a pod that sets, itself, a variable the device plugin
# applies its grant through: the pod's value would win and lift its cap.
env_override_refused() { # NAME VALUE
  local out
  if out="$(pod_yaml envset '{}' '{}' "  - {name: main, image: registry.invalid/none, env: [{name: $1, value: \"$2\"}], resources: {limits: {${G}: 1, nvidia.com/gpumem: 1024}}}" |
    kc create -f - 2>&1)"; then
    kc -n "${NS}" delete pod envset --wait=false >/dev/null 2>&1
    echo "admitted: ${out}"; return 1
  fi
  grep -q "container main sets $1" <<<"${out}" || { echo "refused for another reason: ${out}"; return 1; }
}
check "envset: the webhook refuses a pod that sets ACCELPOOL_CUDA_DISABLE itself" \
  env_override_refused ACCELPOOL_CUDA_DISABLE 1
check "envset: the webhook refuses a pod that sets NVIDIA_VISIBLE_DEVICES itself" \
  env_override_refused NVIDIA_VISIBLE_DEVICES all
check "envset: the webhook refuses a pod that sets ASCEND_VNPU_SPECS itself (a larger vNPU than granted)" \
  env_override_refused ASCEND_VNPU_SPECS vir10_3c_32g
# ...and a pod created with an annotation only accelpool writes: a forged or
# copied assignment would bring devices and limits nobody granted.
annotation_refused() { # KEY
  local out
  if out="$(pod_yaml forged "{$1: '{}'}" '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")" |
    kc create -f - 2>&1)"; then
    kc -n "${NS}" delete pod forged --wait=false >/dev/null 2>&1
    echo "admitted: ${out}"; return 1
  fi
  grep -q "annotation $1 is written only by" <<<"${out}" ||
    { echo "refused for another reason: ${out}"; return 1; }
}
check "forged: the webhook refuses a pod created with accelpool.io/assignment" \
  annotation_refused accelpool.io/assignment
check "forged: the webhook refuses a pod created with accelpool.io/allocation" \
  annotation_refused accelpool.io/allocation
check "forged: the webhook refuses a pod created with accelpool.io/assignment-signature" \
  annotation_refused accelpool.io/assignment-signature
# Signed assignments. kwok marks a bound pod Running at once, and the device
# plugin checks signatures only while kubelet may still admit a pod, so these
# run on hold-0, a node kwok leaves alone (its pods stay Pending with no
# container status until kubeletsim admits them, as on a real node), tainted
# so that only these pods land there.
mkdir -p "${E2E_WORK}/nodes/hold-0"
echo "127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
  > "${E2E_WORK}/nodes/hold-0/metrics-listen"
KWOK_MANAGED=0 start_node hold-0 \
  '{"version":1,"inventories":[{"vendor":"nvidia","profile":"nvidia-pcie-8","model":"L40S"}]}'
kc taint node hold-0 accelpool.io/e2e-hold=true:NoSchedule >/dev/null
hold_ready() { registered hold-0 && published hold-0 && sync_capacity hold-0 && node_has hold-0 "${G}" 80; }
check "hold-0 (not managed by kwok) registered and published" wait_for 60 "hold-0" hold_ready
hold_pod() { # NAME: one 1 GiB share on hold-0
  pod_yaml "$1" '{}' '{kubernetes.io/hostname: hold-0}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")"
  echo '  tolerations: [{key: accelpool.io/e2e-hold, operator: Exists}]'
}
pod_event() { # NAMESPACE POD TEXT: a Warning event on the pod whose message contains TEXT
  kc -n "$1" get events --field-selector "involvedObject.name=$2,type=Warning" \
    -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' | grep_output -qF "$3"
}
admit_refused() { # NAME: kubeletsim's admission of the bound pod must fail
  [ -n "$(pod_node "$1")" ] || { echo "$1 is not bound"; return 1; }
  if admit "$1"; then release "$1"; echo "kubelet admitted $1"; return 1; fi
}
# The pod's own assignment, signed by the extender, passes admission.
hold_pod signed | kc create -f - >/dev/null
held() { # NAME: bound to hold-0, Pending, no container status (not admitted)
  [ "$(kc -n "${NS}" get pod "$1" -o jsonpath='{.spec.nodeName}/{.status.phase}/{.status.containerStatuses}')" = hold-0/Pending/ ]
}
has_signature() {
  kc -n "${NS}" get pod "$1" -o jsonpath='{.metadata.annotations.accelpool\.io/assignment-signature}' | grep_output -q '^v1\.k1\.'
}
check "signed: bound to hold-0, still Pending with no container status" wait_for 90 "signed held" held signed
check "signed: carries accelpool.io/assignment-signature" has_signature signed
check "signed: kubelet admission matches the assignment" admit signed
# Two pods with the same request wait on hold-0 at once (created together) and
# kubelet admits first the one that sorts second. Kubelet's calls name no pod;
# the plugin asks kubelet's pod-resources API (kubeletsim serves it as kubelet
# does) which pod it is admitting, so each gets its own slots and limits.
same_pod() { # NAME MiB
  pod_yaml "$1" '{}' '{kubernetes.io/hostname: hold-0}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: $2}")"
  echo '  tolerations: [{key: accelpool.io/e2e-hold, operator: Exists}]'
}
{ same_pod same-a 2048; echo ---; same_pod same-b 3072; } | kc create -f - >/dev/null
both_held() { held same-a && held same-b; }
check "same-a, same-b: both bound to hold-0 and waiting for admission" wait_for 90 "same-a, same-b held" both_held
check "same-b, admitted first: kubelet is steered to its own slots and it gets its own limits" admit same-b
check "same-a, admitted second: its own slots and limits" admit same-a
check "the plugin told them apart through kubelet's pod-resources API" \
  grep -q "caller found by kubelet's pod-resources API" "${E2E_WORK}/nodes/hold-0/plugin.log"
# Changed between the bind and kubelet's admission (here by the admin: this
# plane runs no annotation guard), it no longer matches the signature: the
# device plugin refuses it, admission fails, the pod gets an Event.
edit_assignment() {
  local a
  a="$(kc -n "${NS}" get pod "$1" -o jsonpath='{.metadata.annotations.accelpool\.io/assignment}')"
  a="$(jq -c '.containers[0].devices[0].memory_mib *= 4' <<<"${a}")" || return 1
  kc -n "${NS}" annotate --overwrite pod "$1" accelpool.io/assignment="${a}" >/dev/null
}
hold_pod edited | kc create -f - >/dev/null
check "edited: bound to hold-0" wait_for 90 "edited bound" pod_bound edited
check "edited: the admin changes its assignment (4x the memory)" edit_assignment edited
check "edited: the device plugin refuses it (Event: signature does not match)" \
  wait_for 30 "the refusal event" pod_event "${NS}" edited "signature does not match"
check "edited: kubelet admission fails" admit_refused edited
# Created with spec.nodeName and an assignment copied from another pod, where
# the webhook does not look (kube-system): the signature names another uid.
forged_pod() {
  local a s
  a="$(kc -n "${NS}" get pod signed -o jsonpath='{.metadata.annotations.accelpool\.io/assignment}')"
  s="$(kc -n "${NS}" get pod signed -o jsonpath='{.metadata.annotations.accelpool\.io/assignment-signature}')"
  jq -n --arg a "${a}" --arg s "${s}" '{apiVersion: "v1", kind: "Pod",
    metadata: {name: "copied", namespace: "kube-system",
      annotations: {"accelpool.io/assignment": $a, "accelpool.io/assignment-signature": $s}},
    spec: {nodeName: "hold-0", terminationGracePeriodSeconds: 0,
      tolerations: [{key: "accelpool.io/e2e-hold", operator: "Exists"}],
      containers: [{name: "main", image: "registry.invalid/none",
        resources: {limits: {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}}}]}}' |
    kc create -f - >/dev/null
}
kc -n kube-system create serviceaccount default >/dev/null 2>&1 || true  # no controller-manager here
check "copied: a pod created on hold-0 with another pod's signed assignment" forged_pod
check "copied: the device plugin refuses it (Event)" \
  wait_for 30 "the refusal event" pod_event kube-system copied "signature does not match"
copied_refused() { NS=kube-system admit_refused copied; }
check "copied: kubelet admission fails" copied_refused
refused_metric() { # the plugin's counter saw both
  curl -fsS --max-time 5 "http://$(cat "${E2E_WORK}/nodes/hold-0/metrics-listen")/metrics" |
    awk '$1 == "accelpool_plugin_assignments_refused_total{reason=\"signature\"}" { n = $2 } END { exit !(n >= 2) }'
}
check "accelpool_plugin_assignments_refused_total{reason=signature} counts them" refused_metric
for p in "${NS}/signed" "${NS}/edited" kube-system/copied "${NS}/same-a" "${NS}/same-b"; do
  kc -n "${p%/*}" delete pod "${p#*/}" --grace-period=0 --force >/dev/null 2>&1 || true
done
release signed || true
release same-a || true
release same-b || true
check "no device double-booked, no vendor rule broken (all pods)" no_double_booking

log "== task priority"
# Two shares pinned to one GPU: nvidia.com/priority 0 and the default (low).
# The test plays the high-priority container's libaccelpool-cuda (it counts
# launches in its priority file); the plugin must then hold the low one's
# launches on that GPU (a deadline in its file), and release it once the
# high-priority container is idle (--priority-busy-for, 5 s).
PRIO_GPU=NVIDIA-hgx-5-7
prio_file() { # NAME: the pod's priority file on its node
  local uid
  uid="$(kc -n "${NS}" get pod "$1" -o jsonpath='{.metadata.uid}')"
  echo "${E2E_WORK}/nodes/$(pod_node "$1")/state/${uid}_main/state/accelpool-cuda.priority"
}
alloc_env_is() { # NAME VAR VALUE: the Allocate answer of the pod's container set VAR=VALUE
  [ "$(jq -r --arg v "$2" '.containers[0].resources[0].allocate.envs[$v]' "${E2E_WORK}/admit/$1/admit.json")" = "$3" ]
}
prio_high() { alloc_env_is "$1" ACCELPOOL_CUDA_PRIORITY high && test -f "$(prio_file "$1")"; }
prio_low() { alloc_env_is "$1" ACCELPOOL_CUDA_PRIORITY low && test -f "$(prio_file "$1")"; }
# launches_then_hold HIGH LOW: count launches in HIGH's file until LOW's file
# holds a deadline (at most 20 s).
launches_then_hold() {
  python3 - "$(prio_file "$1")" "$(prio_file "$2")" <<'PY'
import struct, sys, time
high, low = sys.argv[1], sys.argv[2]
end = time.time() + 20
while time.time() < end:
    with open(high, "r+b") as f:
        f.seek(16)
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(16)
        f.write(struct.pack("<Q", n + 1))
    with open(low, "rb") as f:
        f.seek(16 + 8 * 16)
        if struct.unpack("<Q", f.read(8))[0] != 0:
            sys.exit(0)
    time.sleep(0.3)
sys.exit(1)
PY
}
hold_is_zero() { # NAME
  python3 - "$(prio_file "$1")" <<'PY'
import struct, sys
with open(sys.argv[1], "rb") as f:
    f.seek(16 + 8 * 16)
    sys.exit(0 if struct.unpack("<Q", f.read(8))[0] == 0 else 1)
PY
}
held_metric_is() { # N: the node's accelpool_plugin_priority_held_containers
  curl -fsS --max-time 5 "http://$(cat "${E2E_WORK}/nodes/hgx-5/metrics-listen")/metrics" |
    awk -v n="$1" '$1 == "accelpool_plugin_priority_held_containers" { v = $2 } END { exit !(v == n) }'
}
scenario prio-hi "$(pod_yaml prio-hi "{nvidia.com/use-gpuuuid: ${PRIO_GPU}}" '{}' \
  "$(ctr main "{${G}: 1, nvidia.com/gpumem: 2048, nvidia.com/gpucores: 20, nvidia.com/priority: 0}")")" prio_high
scenario prio-lo "$(pod_yaml prio-lo "{nvidia.com/use-gpuuuid: ${PRIO_GPU}}" '{}' \
  "$(ctr main "{${G}: 1, nvidia.com/gpumem: 2048, nvidia.com/gpucores: 20}")")" prio_low
check "priority: launches of prio-hi hold prio-lo on the same GPU" launches_then_hold prio-hi prio-lo
if [ -s "${E2E_WORK}/nodes/hgx-5/metrics-listen" ]; then
  check "priority: accelpool_plugin_priority_held_containers is 1" wait_for 10 "the held gauge" held_metric_is 1
fi
check "priority: prio-hi idle, prio-lo is released" wait_for 20 "the release" hold_is_zero prio-lo
prio_bad_refused() {
  ! pod_yaml prio-bad '{}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 2048, nvidia.com/priority: 2}")" |
    kc create -f - >/dev/null 2>&1
}
check "priority: a value other than 0 or 1 is refused at admission" prio_bad_refused
# High priority holds the other tenants' shares on its GPU: only the namespaces
# given --high-priority-namespaces (here: scen) may ask for it.
prio_elsewhere_refused() {
  kc create namespace prio-other >/dev/null 2>&1 || true
  local out
  ! out="$(NS=prio-other pod_yaml prio-other '{}' '{}' \
    "$(ctr main "{${G}: 1, nvidia.com/gpumem: 2048, nvidia.com/priority: 0}")" |
    kc -n prio-other create -f - 2>&1)" && grep_output -q 'high-priority-namespaces' <<<"${out}"
}
check "priority: high priority outside the granted namespaces is refused at admission, saying how to grant it" \
  prio_elsewhere_refused
for p in prio-hi prio-lo; do kc -n "${NS}" delete pod "$p" --grace-period=0 --force >/dev/null 2>&1 || true; done
release prio-hi || true
release prio-lo || true

if [ "${E2E_SIGNING:-1}" = 1 ]; then
log "== assignment key rotation"
# The key Secret the chart would hold, made from the key dir every component
# reads; secret_volume.py plays kubelet's Secret volume (every 2 s it writes
# the Secret's data into that dir). accelpool-keys rotate runs against the
# real apiserver and the device plugins' own reports of the keys they hold.
ROT_NS=accelpool-system ROT_SECRET=accelpool-assignment-key
kc create namespace "${ROT_NS}" >/dev/null 2>&1 || true
kc -n "${ROT_NS}" create secret generic "${ROT_SECRET}" --from-file=signing="${KEY_DIR}/signing" \
  --from-file=k1="${KEY_DIR}/k1" >/dev/null
python3 "${SCEN_DIR}/secret_volume.py" "${E2E_BIN}/kubectl" "${ROT_NS}" "${ROT_SECRET}" "${KEY_DIR}" 2 \
  >> "${E2E_WORK}/logs/secret-volume.log" 2>&1 &
mirror_pid=$!
nodes_report() { # KEYS: every node with an accelpool inventory reports exactly KEYS
  kc get nodes -o json | jq -e --arg k "$1" '[.items[].metadata.annotations
    | select(.["accelpool.io/inventory"] != null) | .["accelpool.io/assignment-keys"] // ""]
    | length > 0 and all(. == $k)' >/dev/null
}
secret_is() { # SIGNING KEYS: the Secret's "signing" and its key ids (comma-separated, sorted)
  kc -n "${ROT_NS}" get secret "${ROT_SECRET}" -o json | jq -e --arg s "$1" --arg k "$2" \
    '(.data.signing | @base64d) == $s and ([.data | keys[] | select(. != "signing")] | join(",")) == $k' >/dev/null
}
signed_with() { # POD KEY
  kc -n "${NS}" get pod "$1" -o jsonpath='{.metadata.annotations.accelpool\.io/assignment-signature}' | grep_output -q "^v1\.$2\."
}
check "rotation: every node's device plugin reports key k1 on its Node" wait_for 30 "k1 reports" nodes_report k1
hold_pod rot-before | kc create -f - >/dev/null
check "rotation: rot-before is bound to hold-0 and waits for admission, signed with k1" \
  wait_for 90 "rot-before held" eval 'held rot-before && signed_with rot-before k1'
rot_log="${E2E_WORK}/logs/accelpool-keys.log"
"${KEYS_BIN}" rotate --kubeconfig="${AP_KUBECONFIG}" --namespace="${ROT_NS}" --secret="${ROT_SECRET}" \
  --poll=2s --settle=40s --node-timeout=3m --drain-timeout=5m > "${rot_log}" 2>&1 &
rot_pid=$!
check "rotation step 1: k2 is added, k1 still signs" wait_for 20 "k2 added" secret_is k1 k1,k2
check "rotation: every device plugin reports k1,k2 (its 30 s re-read of the Secret volume)" \
  wait_for 90 "k1,k2 reports" nodes_report k1,k2
check "rotation step 2: k2 signs once every node holds it" wait_for 30 "k2 signing" secret_is k2 k1,k2
rot_waits() { grep -q 'waiting for pods signed with an old key' "${rot_log}" && grep -q 'rot-before' "${rot_log}"; }
check "rotation: after settling it waits for rot-before (signed with k1, not yet admitted)" \
  wait_for 90 "the wait for rot-before" rot_waits
check "rotation: k1 is still held while rot-before waits" secret_is k2 k1,k2
check "rotation: rot-before (signed with k1) passes kubelet admission after the switch" admit rot-before
# After admission kubelet reports the containers' status (hold-0 has no kubelet: written here), which
# is what tells the rotation that the pod no longer needs k1.
kubelet_status() { # POD: the status kubelet writes once it has admitted the pod
  kc -n "${NS}" patch pod "$1" --subresource=status --type=merge -p \
    '{"status":{"containerStatuses":[{"name":"main","ready":false,"restartCount":0,"image":"registry.invalid/none","imageID":"","state":{"waiting":{"reason":"ContainerCreating"}}}]}}' >/dev/null
}
check "rotation: kubelet reports rot-before's container status" kubelet_status rot-before
rot_done() { ! kill -0 "${rot_pid}" 2>/dev/null; }
check "rotation step 3: accelpool-keys finishes once rot-before is admitted" wait_for 60 "rotate exit" rot_done
rot_done || kill "${rot_pid}" 2>/dev/null
rot_rc=0; wait "${rot_pid}" || rot_rc=$?
check "rotation: accelpool-keys rotate exits 0" test "${rot_rc}" = 0
check "rotation: the Secret holds k2 alone, and it signs" secret_is k2 k2
check "rotation: every device plugin drops k1" wait_for 60 "k2 reports" nodes_report k2
hold_pod rot-after | kc create -f - >/dev/null
check "rotation: a pod bound after the rotation is signed with k2" \
  wait_for 90 "rot-after held" eval 'held rot-after && signed_with rot-after k2'
check "rotation: rot-after passes kubelet admission" admit rot-after
kubelet_status rot-after || true
rot_status() {
  "${KEYS_BIN}" status --kubeconfig="${AP_KUBECONFIG}" --namespace="${ROT_NS}" | grep_output -q 'rotation: none under way' &&
    "${KEYS_BIN}" status --kubeconfig="${AP_KUBECONFIG}" --namespace="${ROT_NS}" --output=json |
    jq -e '.phase == "steady" and .keys == ["k2"] and .nodes_reporting > 20 and .nodes_without_newest == []' >/dev/null
}
check "rotation: accelpool-keys status reports no rotation under way" rot_status
kill "${mirror_pid}" 2>/dev/null || true
wait "${mirror_pid}" 2>/dev/null || true
release rot-before || true
release rot-after || true
kc -n "${NS}" delete pod rot-before rot-after --grace-period=0 --force >/dev/null 2>&1 || true
fi

log "== host-aware scoring with a learned workload"
# Two nodes alike (8 x A10, no pod), one whose CPU a pod without devices has
# nearly used up. The cluster's workload is taught by pods that never run (a
# scheduler nobody serves): each asks for one GPU and 8 cores. With 4 cores
# left, host-b's GPUs are stranded for that workload, so a GPU pod that fits
# there should go there and leave host-a whole. Blind to the host the two
# nodes score the same and the salted name order (salt 0) puts host-a first,
# so a pod on host-b is the host terms' doing.
for n in host-a host-b; do
  start_node "${n}" '{"version":1,"inventories":[{"vendor":"nvidia","profile":"nvidia-pcie-8","model":"A10"}]}'
done
host_node_ready() { registered "$1" && published "$1" && sync_capacity "$1" && node_has "$1" "${G}" 80; }
hosts_ready() { host_node_ready host-a && host_node_ready host-b; }
check "host-a and host-b registered and published" wait_for 60 "host nodes" hosts_ready
rebuilds_before="$(extender_metric accelpool_extender_workload_rebuilds_total)"
{
  for i in $(seq 0 119); do
    cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: teach-${i}, namespace: ${NS}, labels: {app: teach}}
spec:
  schedulerName: accelpool-learn-only
  containers:
  - {name: main, image: registry.invalid/none, resources: {limits: {${G}: 1, cpu: "8", memory: 16Gi}}}
YAML
  done
} | kc create -f - >/dev/null
kc create -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: host-hog, namespace: ${NS}}
spec:
  nodeName: host-b
  containers:
  - {name: main, image: registry.invalid/none, resources: {limits: {cpu: "60", memory: 8Gi}}}
YAML
host_cpu() { # NODE: the extender's free CPU of NODE
  curl -fsS --max-time 5 --cacert "${E2E_CA}" "${EXTENDER_URL}/metrics" |
    awk -v m="accelpool_extender_node_host_free{node=\"$1\",resource=\"cpu\"}" '$1 == m {print $2}'
}
hog_counted() { [ "$(host_cpu host-b)" = 4 ] && [ "$(host_cpu host-a)" = 64 ]; }
check "the extender counts the hog's 60 cores on host-b (4 of 64 left, host-a all 64)" \
  wait_for 30 "host-b cpu" hog_counted
relearned() { [ "$(extender_metric accelpool_extender_workload_rebuilds_total)" -gt "${rebuilds_before}" ]; }
check "the extender took up the taught workload (a rebuild after the teaching pods)" \
  wait_for 30 "workload rebuilt" relearned
on_host_b() { [ "$(pod_node "$1")" = host-b ]; }
probe() { pod_yaml "$1" '{accelpool.io/model-include: "A10"}' '{}' "$(ctr main "{${G}: 1, cpu: \"1\", memory: 2Gi}")"; }
scenario host-probe-1 "$(probe host-probe-1)" on_host_b
scenario host-probe-2 "$(probe host-probe-2)" on_host_b
# The learned mix outlives the extender: it is kept in a ConfigMap, read back
# at start, and the pods it counted (the 120 teachers among them) are not
# counted again. Without it a restart would count every running pod anew.
stored_observed() {
  kc -n kube-system get configmap accelpool-workload -o jsonpath='{.data.workload\.json}' 2>/dev/null |
    jq -r '.observed // 0' 2>/dev/null || echo 0
}
teach_stored() { [ "$(stored_observed)" -ge 120 ]; }
check "the active extender keeps the learned workload in ConfigMap kube-system/accelpool-workload" \
  wait_for 30 "workload stored" teach_stored
running_pods="$(kc get pods -A --field-selector=status.phase!=Succeeded,status.phase!=Failed -o name | wc -l)"
stop_pidfile "${E2E_WORK}/run/extender.pid"
check "extender restarts (SIGTERM: its last save, then a new process)" start_extender
restored_at_once() {
  local shapes arrivals
  shapes="$(extender_metric accelpool_extender_workload_shapes)"
  arrivals="$(extender_metric accelpool_extender_workload_arrivals_total)"
  log "after the restart: ${shapes} learned shapes scored, ${arrivals} arrivals counted of ${running_pods} running pods"
  [ "${shapes}" -ge 1 ] && [ "${arrivals}" -lt 10 ] && [ "${running_pods}" -ge 120 ] &&
    [ "$(extender_metric accelpool_extender_workload_store_total)" -ge 1 ] &&
    grep -q '"read the learned workload back' "${E2E_WORK}/logs/extender.log"
}
check "the restarted extender scores with the learned workload from its first pod and counts no running pod again" \
  restored_at_once
scenario host-probe-3 "$(probe host-probe-3)" on_host_b
release host-probe-3 || true
release host-probe-1 || true
release host-probe-2 || true
kc -n "${NS}" delete pod host-probe-1 host-probe-2 host-probe-3 host-hog --grace-period=0 --force >/dev/null 2>&1 || true
kc -n "${NS}" delete pod -l app=teach --grace-period=0 --force >/dev/null 2>&1 || true

log "== pods that ask for no device"
# The host-pod route end to end: the webhook entry the chart adds with
# webhook.hostPods.route (on namespaces labelled e2e/host-pods here) sends a
# pod that asks for no device to the profile accelpool-scheduler-hosts, served
# by a kube-scheduler whose extender has no managedResources (kube-scheduler
# then calls it for every pod), as the chart renders it. The extender scores
# the pod by the host it takes: on host-a (8 idle A10s, 64 cores, a learned
# workload of 1 GPU + 8 cores) a 58-core pod leaves 6 cores and strands every
# GPU; on cpu-1 (a node without accelerators, 60 cores) it strands nothing.
# The default scheduler's LeastAllocated prefers host-a (more CPU left).
kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: cpu-1
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: cpu-1, kubernetes.io/os: linux, e2e/host-pool: "yes"}
status:
  allocatable: {cpu: "60", memory: 512Gi, pods: "110"}
  capacity: {cpu: "60", memory: 512Gi, pods: "110"}
YAML
kc label node host-a e2e/host-pool=yes --overwrite >/dev/null
HOSTS_PORT="$(free_port "${APISERVER_PORT}" "${SCHED_PORT}" "${ASCHED_PORT}" "${EXTENDER_PORT}" \
  "${EXTENDER_SCHED_PORT}" "${KCM_PORT}")"
{
  # One kube-scheduler with both profiles, as the chart renders them with the
  # route on (it stands in for the plane's accelpool-scheduler meanwhile):
  # accelpool-scheduler with the main profile's disabled score plugins,
  # accelpool-scheduler-hosts with kube-scheduler's preference scores, and in
  # both NodeResourcesFit ignoring the names the extender accounts (those of
  # managedResources with ignoredByScheduler: true in the plane's config),
  # since no extender entry lists them now.
  ignored="$(printf '  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      ignoredResources:\n'
    sed -n 's/^  - {name: \([^,]*\), ignoredByScheduler: true}$/      - \1/p' \
      "${E2E_WORK}/config/accelpool-scheduler.yaml")"
  cat <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: ${E2E_WORK}/config/scheduler.kubeconfig, qps: 200, burst: 400}
leaderElection: {leaderElect: false}
percentageOfNodesToScore: 100
profiles:
- schedulerName: accelpool-scheduler-hosts
  plugins:
    score:
      disabled: [{name: NodeResourcesFit}, {name: NodeResourcesBalancedAllocation}, {name: ImageLocality}]
${ignored}
- schedulerName: accelpool-scheduler
  plugins:
    score:
      disabled:
YAML
  sed -n '/^      disabled:$/,/^extenders:/ s/^      - name: /        - name: /p' \
    "${E2E_WORK}/config/accelpool-scheduler.yaml"
  printf '%s\n' "${ignored}"
  # The extender as the e2e scheduler calls it, without managedResources.
  awk '/^extenders:/ {on=1} /^  managedResources:/ {exit} on' "${E2E_WORK}/config/accelpool-scheduler.yaml"
} > "${E2E_WORK}/config/hosts-scheduler.yaml"
"${E2E_DIR}/cluster.sh" stop-proc accelpool-scheduler >/dev/null 2>&1
setsid "${E2E_BIN}/kube-scheduler" --config "${E2E_WORK}/config/hosts-scheduler.yaml" \
  --bind-address 127.0.0.1 --secure-port "${HOSTS_PORT}" \
  --authentication-kubeconfig "${E2E_WORK}/config/scheduler.kubeconfig" \
  --authorization-kubeconfig "${E2E_WORK}/config/scheduler.kubeconfig" \
  >> "${E2E_WORK}/logs/hosts-scheduler.log" 2>&1 < /dev/null &
echo $! > "${E2E_WORK}/run/hosts-scheduler.pid"
check "one kube-scheduler serves profiles accelpool-scheduler and accelpool-scheduler-hosts (extender without managedResources)" \
  wait_for 60 "hosts scheduler healthy" curl -fsSk --max-time 2 "https://127.0.0.1:${HOSTS_PORT}/healthz"
ca="$(base64 -w0 < "${E2E_CA}")"
kc apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: accelpool-e2e-host-pods}
webhooks:
- name: host-pods.mutate.accelpool.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  timeoutSeconds: 5
  reinvocationPolicy: Never
  clientConfig: {url: "${EXTENDER_URL}/mutate-host-pods", caBundle: "${ca}"}
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  namespaceSelector: {matchLabels: {e2e/host-pods: "yes"}}
  matchConditions:
  - name: left-to-the-default-scheduler
    expression: >-
      (!has(object.spec.schedulerName) || object.spec.schedulerName == '' ||
      object.spec.schedulerName == 'default-scheduler') &&
      (!has(object.spec.nodeName) || object.spec.nodeName == '')
YAML
HP=host-pods-e2e
kc create namespace "${HP}" >/dev/null 2>&1 || true
kc label namespace "${HP}" e2e/host-pods=yes --overwrite >/dev/null
host_pod() { # NAME CPU [NAMESPACE]: a pod that asks for no device, on host-a or cpu-1
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: ${3:-${HP}}, labels: {app: host-pods}}
spec:
  nodeSelector: {e2e/host-pool: "yes"}
  terminationGracePeriodSeconds: 0
  tolerations: [{operator: Exists}]
  containers:
  - {name: main, image: registry.invalid/none, resources: {limits: {cpu: "$2", memory: 4Gi}}}
YAML
}
hp_node() { kc -n "${3:-${HP}}" get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
hp_scheduler() { kc -n "${HP}" get pod "$1" -o jsonpath='{.spec.schedulerName}' 2>/dev/null; }
hp_on() { [ "$(hp_node "$1" "$2" "${3:-}")" = "$2" ]; } # NAME NODE [NAMESPACE]
route_ready() { # the webhook answers once the apiserver has it: a dry run shows the route
  [ "$(host_pod route-probe 1 | kc create --dry-run=server -f - -o jsonpath='{.spec.schedulerName}')" = \
    accelpool-scheduler-hosts ]
}
check "the apiserver calls the host-pod route" wait_for 30 "host-pod webhook" route_ready
host_pod host-big 58 | kc create -f - >/dev/null
check "host-big (58 cores, no device) is routed to accelpool-scheduler-hosts" \
  [ "$(hp_scheduler host-big)" = accelpool-scheduler-hosts ]
check "host-big binds on cpu-1, where it strands no GPU (on host-a it would strand all 8)" \
  wait_for 60 "host-big on cpu-1" hp_on host-big cpu-1
bound_by_extender() {
  grep -q '"bind".*"pod":"'"${HP}"'/host-big".*"devices":"none asked"' "${E2E_WORK}/logs/extender.log" &&
    [ -z "$(kc -n "${HP}" get pod host-big -o jsonpath='{.metadata.annotations.accelpool\.io/assignment}')" ]
}
check "the extender wrote host-big's Binding (audit: devices none asked), no assignment" bound_by_extender
kc -n "${HP}" delete pod host-big --grace-period=0 --force >/dev/null 2>&1 || true
# The same pod where the route does not apply (the scenario namespace).
host_pod host-big-default 58 "${NS}" | kc create -f - >/dev/null
check "the same pod left to the default scheduler goes to host-a (its GPUs then stranded)" \
  wait_for 60 "host-big-default on host-a" hp_on host-big-default host-a "${NS}"
kc -n "${NS}" delete pod host-big-default --grace-period=0 --force >/dev/null 2>&1 || true
# A device pod through the main profile as the route renders it: kube-scheduler
# calls the extender although no managedResources names the pod's resources,
# and NodeResourcesFit passes nvidia.com/gpumem and gpucores, which no Node
# advertises, because ignoredResources lists them.
routed_yaml() { # NAME [SCHEDULER]
  pod_yaml "$1" '{}' '{kubernetes.io/hostname: host-a}' \
    "$(ctr main "{${G}: 1, nvidia.com/gpumem: 4096, nvidia.com/gpucores: 25}")" |
    sed "s/^  schedulerName: accelpool-scheduler\$/  schedulerName: ${2:-accelpool-scheduler}/"
}
routed_share() { mem_is "$1" 4096 && compute_is "$1" 250; }
scenario routed-frac "$(routed_yaml routed-frac)" routed_share
release routed-frac || true
kc -n "${NS}" delete pod routed-frac --grace-period=0 --force >/dev/null 2>&1 || true
# The extender is called for the host-pod profile's pods too: a device pod
# that names that profile is refused with what to set (the extender tracks
# the grants of accelpool-scheduler's pods only, so it could never free one).
routed_yaml wrong-profile accelpool-scheduler-hosts | kc create -f - >/dev/null
check "a device pod naming accelpool-scheduler-hosts stays pending; its event says to set accelpool-scheduler" \
  wait_for 30 "wrong-profile refused" pod_event "${NS}" wrong-profile \
  'set spec.schedulerName to "accelpool-scheduler"'
check "wrong-profile is not bound" [ -z "$(pod_node wrong-profile)" ]
kc -n "${NS}" delete pod wrong-profile --grace-period=0 --force >/dev/null 2>&1 || true
routed_to() { # NAMESPACE WANT [json merged into the pod]: the dry-run pod's scheduler
  local got extra="${3:-}"
  [ -n "${extra}" ] || extra='{}'
  got="$(jq -c --argjson extra "${extra}" '. * $extra' <<'JSON' | kc -n "$1" create --dry-run=server -f - -o jsonpath='{.spec.schedulerName}'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"route-probe"},
 "spec":{"containers":[{"name":"main","image":"registry.invalid/none","resources":{"requests":{"cpu":"1"}}}]}}
JSON
)" || return 1
  [ "${got}" = "$2" ] || { log "routed to '${got}', want '$2'"; return 1; }
}
check "a namespace the route does not select keeps the default scheduler" routed_to "${NS}" default-scheduler
check "a DaemonSet pod keeps the default scheduler" routed_to "${HP}" default-scheduler \
  '{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"ds","uid":"4a1e0f7c-0000-4000-8000-000000000001"}]}}'
check "a pod that names another scheduler keeps it" routed_to "${HP}" volcano '{"spec":{"schedulerName":"volcano"}}'
check "a pod that asks for a GPU goes the main route (accelpool-scheduler)" routed_to "${HP}" \
  accelpool-scheduler '{"spec":{"containers":[{"name":"main","image":"registry.invalid/none","resources":{"limits":{"'"${G}"'":"1"}}}]}}'
kc delete mutatingwebhookconfiguration accelpool-e2e-host-pods >/dev/null 2>&1 || true
stop_pidfile "${E2E_WORK}/run/hosts-scheduler.pid"
"${E2E_DIR}/cluster.sh" start >/dev/null 2>&1
check "the plane's accelpool-scheduler serves again" \
  wait_for 60 "accelpool-scheduler healthy" curl -fsSk --max-time 2 "https://127.0.0.1:${ASCHED_PORT}/healthz"
kc delete namespace "${HP}" --wait=false >/dev/null 2>&1 || true
kc label node host-a e2e/host-pool- >/dev/null 2>&1 || true
kc delete node cpu-1 >/dev/null 2>&1 || true

log "== faults"
# Fault targets are nodes of a kind that hold no pod yet: where the earlier pods
# landed depends on the policy and the deployment's tie-break salt.
free_node() { # PREFIX: the first node named PREFIX-* that holds no pod of this namespace
  local used n
  used="$(kc -n "${NS}" get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}')"
  for n in $(kc get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep "^$1-" | sort); do
    grep -qx "$n" <<<"$used" || { echo "$n"; return 0; }
  done
  return 1
}
# Capacity returns when pods are deleted: fill an empty C500 node, a second full pod waits,
# delete the first.
C5="$(free_node c500)" || C5=c500-1
S="{kubernetes.io/hostname: ${C5}}"
scenario fill-1 "$(pod_yaml fill-1 '{}' "$S" "$(ctr main '{metax-tech.com/gpu: 8}')")"
check "fill-2 waits while ${C5} is full" stays_pending fill-2 "$(pod_yaml fill-2 '{}' "$S" "$(ctr main '{metax-tech.com/gpu: 8}')")" 8
kc -n "${NS}" delete pod fill-1 --wait=false >/dev/null; release fill-1 || true
check "fill-2 binds once fill-1 is deleted (capacity returned)" wait_for 90 "fill-2 bound" pod_bound fill-2
check "fill-2: kubelet admission matches the assignment" admit fill-2

# A pod that passes kube-scheduler's own counts but finds the devices held (8
# cards on an HGX node where a fractional pod holds one): before turning it
# away the extender reads that node's pods from the apiserver, in case one has
# gone before its watch says so (docs/extender.md). The field selector it uses
# must be one the real apiserver takes: no read may fail.
HG="$(free_node hgx)" || HG=hgx-5
S="{kubernetes.io/hostname: ${HG}}"
scenario busy-frac "$(pod_yaml busy-frac '{}' "$S" "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")")"
recheck_sample() { extender_metric "accelpool_extender_pod_rechecks_total{result=\"$1\"}"; }
unchanged_before="$(recheck_sample unchanged)"
check "busy-8 waits while ${HG} holds busy-frac" stays_pending busy-8 "$(pod_yaml busy-8 '{}' "$S" "$(ctr main "{${G}: 8}")")" 8
rechecked() { [ "$(recheck_sample unchanged)" -gt "${unchanged_before}" ] && [ "$(recheck_sample failed)" = 0 ]; }
check "the extender read ${HG}'s pods before turning busy-8 away (pod_rechecks_total unchanged grew, none failed)" \
  rechecked
# kubectl accelpool, as kubectl's plugin (kubectl-accelpool on the PATH), reads
# the same state from the apiserver and explains it.
ap() { PATH="$(dirname "${CTL_BIN}"):${PATH}" kc accelpool --kubeconfig="${AP_KUBECONFIG}" -q "$@"; }
explain_busy() { # busy-8 is turned away on ${HG} for devices held (could fit later)
  [ "$(ap explain "${NS}/busy-8" -o json | jq -r --arg n "${HG}" '.rejected[$n].could_fit_later')" = true ] &&
    ap explain -n "${NS}" busy-8 | grep_output -q "^  pending; with policy"
}
check "kubectl accelpool explain: busy-8 is pending, ${HG} turns it away for devices held" explain_busy
explain_selector() { # busy-8's nodeSelector (hostname ${HG}) rules out every other node before the extender, by kube-scheduler's rules
  ap explain "${NS}/busy-8" -o json | jq -e --arg n "${HG}" '
    [.rejected | to_entries[] | select(.key != $n)] as $others |
    (.rejected[$n].by == "accelpool") and (.fits == []) and ($others | length > 0) and
    ($others | all(.value.by == "kube-scheduler")) and
    ($others | any(.value.reason | startswith("nodeSelector kubernetes.io/hostname=" + $n + ": the node'"'"'s label is")))' >/dev/null
}
check "kubectl accelpool explain: every node but ${HG} is ruled out by kube-scheduler's filters (busy-8's nodeSelector)" explain_selector
# kube-scheduler's own filters, as explain applies them: one-card pods pinned
# to ${HG} that kube-scheduler itself refuses there, for CPU, for pod
# anti-affinity and for topology spread. Its PodScheduled message and
# explain's reason on ${HG} must name the same filter.
sched_message() { kc -n "${NS}" get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}'; }
sched_says() { local m; m="$(sched_message "$1")"; [[ "${m}" == *"$2"* ]]; }
probe_pod() { # NAME APP SPEC-LINES [LIMITS]
  kc create -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: ${NS}, labels: {app: $2}}
spec:
  schedulerName: accelpool-scheduler
  nodeSelector: {kubernetes.io/hostname: ${HG}}
  terminationGracePeriodSeconds: 0
$3
  containers:
  - {name: main, image: registry.invalid/none, resources: {limits: ${4:-{${G}: 1\}}}}
YAML
}
refused_on_hg() { # NAME SCHEDULER-WORDS EXPLAIN-REASON-REGEX
  if ! wait_for 60 "kube-scheduler's message for $1" sched_says "$1" "$2"; then
    log "kube-scheduler's last message for $1: $(sched_message "$1")"
    return 1
  fi
  ap explain "${NS}/$1" -o json | jq -e --arg n "${HG}" --arg re "$3" \
    '(.rejected[$n].by == "kube-scheduler") and (.rejected[$n].reason | test($re))' >/dev/null ||
    { log "explain's reason on ${HG} for $1: $(ap explain "${NS}/$1" -o json | jq -c --arg n "${HG}" '.rejected[$n]')"; return 1; }
}
explain_cpu() { # more CPU than ${HG} has
  probe_pod huge-cpu scen "" "{${G}: 1, cpu: 100k}" &&
    refused_on_hg huge-cpu "Insufficient cpu" "^Insufficient cpu: asks 100000, "
}
explain_anti() { # must not share a host with an app=scen pod; busy-frac (app=scen) runs on ${HG}
  probe_pod apart apart "  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {labelSelector: {matchLabels: {app: scen}}, topologyKey: kubernetes.io/hostname}" &&
    refused_on_hg apart "anti-affinity" \
      "^pod anti-affinity: [0-9]+ pods? matching app=scen in kubernetes.io/hostname=${HG}\$"
}
explain_spread() { # spread over hosts against app=scen, every node a domain: ${HG} is maxSkew above the empty ones
  probe_pod spread scen "  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
     nodeAffinityPolicy: Ignore, labelSelector: {matchLabels: {app: scen}}}" &&
    refused_on_hg spread "topology spread" "^topology spread: kubernetes.io/hostname=${HG} would hold "
}
loner_bound() { [ "$(kc -n "${NS}" get pod loner -o jsonpath='{.spec.nodeName}')" = "${HG}" ]; }
explain_existing_anti() { # loner (no devices) is bound on ${HG} and keeps app=crowd pods off its host
  probe_pod loner loner "  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {labelSelector: {matchLabels: {app: crowd}}, topologyKey: kubernetes.io/hostname}" "{cpu: 10m}" &&
    wait_for 60 "loner bound to ${HG}" loner_bound &&
    probe_pod crowd crowd "" &&
    refused_on_hg crowd "existing pods anti-affinity" \
      "^anti-affinity of pods already there: 1 pod in kubernetes.io/hostname=${HG} keeps out pods matching app=crowd\$"
}
other_node() { kc get nodes -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | grep -vx "${HG}" | head -1; }
bound_pair() { # CLAIM VOLUME MODE SOURCE [NODE]: a volume and its claim, bound (NODE: the volume's only node)
  cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: $2}
spec:
  capacity: {storage: 1Gi}
  accessModes: [$3]
  storageClassName: ""
  $4
  claimRef: {namespace: ${NS}, name: $1}
YAML
  [ -z "${5:-}" ] || cat <<YAML
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$5]}]
YAML
  cat <<YAML
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $1
  namespace: ${NS}
  annotations: {pv.kubernetes.io/bind-completed: "yes"}
spec:
  accessModes: [$3]
  storageClassName: ""
  volumeName: $2
  resources: {requests: {storage: 1Gi}}
YAML
}
explain_volume() { # a claim bound to a local volume on another node: ${HG} is ruled out by volume binding
  local other
  other="$(other_node)"
  [ -n "${other}" ] &&
    bound_pair scen-local scen-local-pv ReadWriteOnce "local: {path: /mnt/none}" "${other}" | kc create -f - >/dev/null &&
    probe_pod reader reader "  volumes:
  - {name: data, persistentVolumeClaim: {claimName: scen-local}}" &&
    refused_on_hg reader "PersistentVolume's node affinity" \
      "^PersistentVolume's node affinity: scen-local-pv [(]claim scen-local[)] does not admit this node\$"
}
explain_waiting() { # a claim waiting for its first consumer, whose only volume is on another node, and a class that provisions none
  local other
  other="$(other_node)"
  [ -n "${other}" ] && kc create -f - >/dev/null <<YAML &&
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: scen-wait}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: scen-wait-pv}
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: scen-wait
  local: {path: /mnt/none}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [${other}]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scen-wait, namespace: ${NS}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: scen-wait
  resources: {requests: {storage: 1Gi}}
YAML
    # No volume controller runs here to mark the new volume Available.
    kc patch pv scen-wait-pv --subresource=status --type=merge -p '{"status":{"phase":"Available"}}' >/dev/null &&
    probe_pod waiter waiter "  volumes:
  - {name: data, persistentVolumeClaim: {claimName: scen-wait}}" &&
    refused_on_hg waiter "didn't find available persistent volumes to bind" \
      "^node[(]s[)] didn't find available persistent volumes to bind: claim scen-wait [(]class scen-wait[)] has no volume here that fits it, and its class provisions none\$"
}
explain_rwop() { # a ReadWriteOncePod claim that a pod on another node mounts already
  local other
  other="$(other_node)"
  [ -n "${other}" ] &&
    { bound_pair scen-solo scen-solo-pv ReadWriteOncePod "hostPath: {path: /mnt/none}"; cat <<YAML; } | kc create -f - >/dev/null &&
---
apiVersion: v1
kind: Pod
metadata: {name: solo-writer, namespace: ${NS}}
spec:
  nodeName: ${other}
  terminationGracePeriodSeconds: 0
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: scen-solo}}
  containers:
  - {name: main, image: registry.invalid/none}
YAML
    probe_pod solo-reader solo "  volumes:
  - {name: data, persistentVolumeClaim: {claimName: scen-solo}}" &&
    refused_on_hg solo-reader "ReadWriteOncePod access mode already in-use by another pod" \
      "^node[(]s[)] unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod: claim scen-solo is mounted by pod ${NS}/solo-writer on ${other}\$"
}
explain_csi_limit() { # ${HG}'s CSINode allows one csi.scen volume, and a pod there holds one
  { for v in scen-csi-a scen-csi-b; do bound_pair "${v}" "${v}" ReadWriteOnce "csi: {driver: csi.scen, volumeHandle: handle-${v}}"; done
    cat <<YAML; } | kc apply -f - >/dev/null &&
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: ${HG}}
spec:
  drivers:
  - {name: csi.scen, nodeID: ${HG}, allocatable: {count: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: csi-holder, namespace: ${NS}}
spec:
  nodeName: ${HG}
  terminationGracePeriodSeconds: 0
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: scen-csi-a}}
  containers:
  - {name: main, image: registry.invalid/none}
YAML
    probe_pod csi-reader csi "  volumes:
  - {name: data, persistentVolumeClaim: {claimName: scen-csi-b}}" &&
    refused_on_hg csi-reader "exceed max volume count" \
      "^node[(]s[)] exceed max volume count: csi.scen has 1 of 1 volumes attached here, the pod adds 1\$"
}
is_gated() { [ "$(kc -n "${NS}" get pod gated -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}')" = SchedulingGated ]; }
explain_gated() { # a pod held by a scheduling gate: kube-scheduler says SchedulingGated, explain names the gate
  local out
  probe_pod gated gated "  schedulingGates:
  - {name: example.com/hold}" &&
    wait_for 60 "gated's PodScheduled reason SchedulingGated" is_gated &&
    ap explain "${NS}/gated" -o json | jq -e '.scheduling_gates == ["example.com/hold"] and (.fits | type == "array")' >/dev/null &&
    out="$(ap explain "${NS}/gated")" &&
    grep -q "gated: kube-scheduler does not try to place it until its scheduling gates are removed (example.com/hold" <<<"${out}"
}
check "kubectl accelpool explain: a pod asking 100k CPUs is refused on ${HG} for Insufficient cpu, as kube-scheduler says" explain_cpu
check "kubectl accelpool explain: a pod kept off app=scen pods by anti-affinity is refused on ${HG}, as kube-scheduler says" explain_anti
check "kubectl accelpool explain: a pod spread over hosts against app=scen is refused on ${HG}, as kube-scheduler says" explain_spread
check "kubectl accelpool explain: an app=crowd pod is refused on ${HG}, where a bound pod's anti-affinity keeps app=crowd out, as kube-scheduler says" explain_existing_anti
check "kubectl accelpool explain: a pod whose claim is bound to a local volume on another node is refused on ${HG}, as kube-scheduler says" explain_volume
check "kubectl accelpool explain: a pod whose waiting claim's only volume is on another node is refused on ${HG}, as kube-scheduler says" explain_waiting
check "kubectl accelpool explain: a pod whose ReadWriteOncePod claim another pod mounts is refused on ${HG}, as kube-scheduler says" explain_rwop
check "kubectl accelpool explain: a pod whose CSI volume would pass ${HG}'s attach limit is refused there, as kube-scheduler says" explain_csi_limit
check "kubectl accelpool explain: a pod held by a scheduling gate is named gated (kube-scheduler: SchedulingGated)" explain_gated
kc -n "${NS}" delete pod huge-cpu apart spread loner crowd reader waiter solo-reader solo-writer csi-reader csi-holder gated --wait=false >/dev/null 2>&1 || true
kc delete csinode "${HG}" >/dev/null 2>&1 || true
# No pvc- or pv-protection controller runs here to lift their finalizers.
for claim in scen-local scen-wait scen-solo scen-csi-a scen-csi-b; do
  kc -n "${NS}" patch pvc "${claim}" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  kc -n "${NS}" delete pvc "${claim}" --wait=false >/dev/null 2>&1 || true
done
for pv in scen-local-pv scen-wait-pv scen-solo-pv scen-csi-a scen-csi-b; do
  kc patch pv "${pv}" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  kc delete pv "${pv}" --wait=false >/dev/null 2>&1 || true
done
kc delete storageclass scen-wait >/dev/null 2>&1 || true
holder_shown() { ap node "${HG}" | grep_output -q "${NS}/busy-frac\[main\] 1024 MiB"; }
check "kubectl accelpool node ${HG}: busy-frac holds 1024 MiB of one card" holder_shown
pods_listed() { ap pods -n "${NS}" -o json | jq -e --arg p "${NS}/busy-frac" --arg n "${HG}" '[.pods[] | select(.pod == $p and .node == $n) | .vendors[0].memory_mib] == [1024]' >/dev/null; }
check "kubectl accelpool pods -n ${NS}: busy-frac on ${HG} with 1024 MiB" pods_listed
same_as_extender() { # the CLI's memory assigned on ${HG} equals the extender's metric
  local cli ext
  cli="$(ap nodes -o json | jq -r --arg n "${HG}" '.nodes[] | select(.name == $n) | .inventories[0].memory_assigned_mib')"
  ext="$(extender_metric "accelpool_extender_node_memory_allocated_mib{node=\"${HG}\"}")"
  [ -n "${cli}" ] && [ "${cli}" = "${ext}" ] && [ "${cli}" = 1024 ]
}
check "kubectl accelpool nodes: ${HG}'s memory assigned matches the extender's metric (1024 MiB)" same_as_extender
# Fragmentation: with the learned workload read from the extender's ConfigMap,
# the CLI's idle and fragmented devices on ${HG} are the extender's gauges.
fragmentation_as_extender() {
  local cli ext_idle ext_frag
  cli="$(ap nodes -o json --workload-configmap=kube-system/accelpool-workload |
    jq -r --arg n "${HG}" '(.workload.source | test("learned")) as $l | .nodes[] | select(.name == $n) |
      "\($l) \([.inventories[].idle_devices] | add) \([.inventories[].fragmented_devices] | add)"')"
  ext_idle="$(extender_metric "accelpool_extender_node_idle_devices{node=\"${HG}\"}")"
  ext_frag="$(extender_metric "accelpool_extender_node_fragmented_devices{node=\"${HG}\"}")"
  echo "cli (learned idle fragmented): ${cli}; extender: ${ext_idle} ${ext_frag}"
  awk -v c="${cli}" -v i="${ext_idle}" -v f="${ext_frag}" 'BEGIN {
    split(c, v, " "); d1 = v[2] - i; d2 = v[3] - f
    exit !(v[1] == "true" && d1 * d1 < 1e-6 && d2 * d2 < 1e-6 && v[3] <= v[2] + 1e-6) }'
}
fragmentation_converges() { # the values, when they never agree
  wait_for 30 "fragmentation as the extender" fragmentation_as_extender || { fragmentation_as_extender >&2; false; }
}
check "kubectl accelpool nodes --workload-configmap: ${HG}'s idle and fragmented devices match the extender's gauges" \
  fragmentation_converges
# The same through an exec credential plugin (the kubeconfig shape of EKS, AKS
# and OIDC logins): the plugin asks the apiserver for a token of a service
# account that may only read nodes and pods, and prints it as an ExecCredential.
EXEC_DIR="${E2E_WORK}/exec-plugin"
exec_setup() {
  mkdir -p "${EXEC_DIR}" && rm -f "${EXEC_DIR}/runs" &&
    cat > "${EXEC_DIR}/get-token.sh" <<EOF &&
#!/bin/sh
echo run >> "${EXEC_DIR}/runs"
[ "\${1:-}" = --namespace ] || exit 2
t=\$(KUBECONFIG="${E2E_WORK}/config/admin.kubeconfig" "${E2E_BIN}/kubectl" create token ap-viewer -n "\$2" --duration=10m) || exit 1
printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "%s"}}\n' "\$t"
EOF
    chmod +x "${EXEC_DIR}/get-token.sh" &&
    cat > "${EXEC_DIR}/kubeconfig" <<EOF &&
apiVersion: v1
kind: Config
current-context: viewer
contexts:
- name: viewer
  context: {cluster: e2e, user: sso}
clusters:
- name: e2e
  cluster:
    server: $(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')
    certificate-authority: $(kc config view --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
users:
- name: sso
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./get-token.sh
      args: [--namespace, ${NS}]
      interactiveMode: Never
      installHint: the e2e writes get-token.sh next to this file
EOF
    { kc -n "${NS}" get serviceaccount ap-viewer >/dev/null 2>&1 || kc -n "${NS}" create serviceaccount ap-viewer >/dev/null; } &&
    kc create clusterrole ap-viewer --verb=get,list --resource=nodes,pods --dry-run=client -o yaml | kc apply -f - >/dev/null &&
    kc create clusterrolebinding ap-viewer --clusterrole=ap-viewer --serviceaccount="${NS}:ap-viewer" --dry-run=client -o yaml | kc apply -f - >/dev/null
}
ap_exec() { "${CTL_BIN}" --kubeconfig="${EXEC_DIR}/kubeconfig" -q "$@"; }
exec_plugin_view() { # the service account's token, from the plugin, reads the pool: one plugin run
  [ "$(ap_exec nodes -o json | jq -r --arg n "${HG}" '.nodes[] | select(.name == $n) | .inventories[0].memory_assigned_mib')" = 1024 ] &&
    [ "$(wc -l < "${EXEC_DIR}/runs")" -eq 1 ]
}
exec_plugin_rbac() { # without its binding the same token is refused: the CLI names the 403 and what to check
  local out
  kc delete clusterrolebinding ap-viewer >/dev/null || return 1
  out="$(ap_exec nodes 2>&1)" && return 1
  grep -q "HTTP 403" <<< "${out}" && grep -q "RBAC" <<< "${out}"
}
check "exec credential plugin kubeconfig: written, with a read-only service account" exec_setup
check "kubectl accelpool nodes through the exec plugin's token: ${HG} holds 1024 MiB, one plugin run" exec_plugin_view
check "kubectl accelpool through the exec plugin, the account's binding removed: refused with HTTP 403" exec_plugin_rbac
kc delete clusterrole ap-viewer >/dev/null 2>&1 || true
kc -n "${NS}" delete pod busy-frac --wait=false >/dev/null; release busy-frac || true
check "busy-8 binds once busy-frac is deleted" wait_for 90 "busy-8 bound" pod_bound busy-8
check "busy-8: kubelet admission matches the assignment" admit busy-8
kc -n "${NS}" delete pod busy-8 --wait=false >/dev/null; release busy-8 || true

# A device turning unhealthy and back, on an empty P800 node.
set_health() { # NODE INDEX true|false
  local f="${E2E_WORK}/nodes/$1/inventory.json"
  jq -c --argjson i "$2" --argjson h "$3" '.inventories[0].devices = [{index: $i, healthy: $h}]' "$f" > "$f.new" && mv "$f.new" "$f"
}
healthy_count() { [ "$(node_resources "$1" | jq '[.[] | .allocatable] | add')" = "$2" ]; }
P8="$(free_node p800)" || P8=p800-2
set_health "${P8}" 0 false
check "unhealthy device leaves kubelet's allocatable (ListAndWatch)" wait_for 30 "${P8} at 7" healthy_count "${P8}" 7
health_event() { # NODE REASON TEXT: an Event REASON about the Node, with TEXT in its message
  local msgs
  msgs="$(kc get events -n default --field-selector "reason=$2,involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.type} {.message}{"\n"}{end}')" && grep -q -- "$3" <<<"${msgs}"
}
check "${P8}: a Warning Event AccelpoolDeviceUnhealthy on the Node names the device and the reason" \
  wait_for 30 "unhealthy event" health_event "${P8}" AccelpoolDeviceUnhealthy \
  "^Warning device [^ ]* (kunlunxin) is unhealthy: marked unhealthy in the inventory file"
sync_capacity "${P8}"
check "Node status drops to 7 kunlunxin.com/xpu" node_has "${P8}" kunlunxin.com/xpu 7
check "an 8-device pod cannot bind on ${P8} with one device unhealthy" stays_pending p800-full \
  "$(pod_yaml p800-full '{}' "{kubernetes.io/hostname: ${P8}}" "$(ctr main '{kunlunxin.com/xpu: 8}')")" 10
set_health "${P8}" 0 true
check "recovered device is healthy again (ListAndWatch)" wait_for 30 "${P8} at 8" healthy_count "${P8}" 8
sync_capacity "${P8}"
check "the 8-device pod binds once the device recovers" wait_for 90 "p800-full bound" pod_bound p800-full
check "p800-full: kubelet admission matches the assignment" admit p800-full

# The operator takes one card out of service (accelpool.io/cordoned-devices on
# the Node) without draining the node: no new grant lands on it, and the node
# takes full-size pods again once the annotation is removed.
A9="$(free_node a910a)" || A9=a910a-2
cordon_id="$(kc get node "${A9}" -o jsonpath='{.metadata.annotations.accelpool\.io/inventory}' |
  jq -r '.inventories[0].devices[] | select(.index == 0) | .id')"
kc annotate node "${A9}" --overwrite "accelpool.io/cordoned-devices=${cordon_id}" >/dev/null
cordon_logged() { grep -qE "\"cordoned devices changed.*$1" "${E2E_WORK}/logs/extender.log"; }
check "the extender logged ${A9}'s cordoned card" wait_for 30 "cordon logged" cordon_logged "${cordon_id}"
not_index_0() { [ "$(assigned "$1" '[.containers[0].devices[].index] | index(0)')" = null ]; }
scenario cordon-one "$(pod_yaml cordon-one '{}' "{kubernetes.io/hostname: ${A9}}" "$(ctr main '{huawei.com/Ascend910A: 1}')")" not_index_0
kc -n "${NS}" delete pod cordon-one --wait=false >/dev/null; release cordon-one || true
pod_gone() { ! kc -n "${NS}" get pod "$1" >/dev/null 2>&1; }
check "cordon-one is gone (${A9}'s eight cards are free for kube-scheduler)" wait_for 60 "cordon-one gone" pod_gone cordon-one
check "cordon-full (8 cards) waits while one card of ${A9} is cordoned" stays_pending cordon-full \
  "$(pod_yaml cordon-full '{}' "{kubernetes.io/hostname: ${A9}}" "$(ctr main '{huawei.com/Ascend910A: 8}')")" 10
check "cordon-full: its event names the cordoned card" wait_for 30 "cordon event" pod_event "${NS}" cordon-full cordoned
kc annotate node "${A9}" "accelpool.io/cordoned-devices-" >/dev/null
uncordon_logged() { grep -qE "\"cordoned devices changed.*\"node\":\"${A9}\",\"cordoned\":\"\"" "${E2E_WORK}/logs/extender.log"; }
check "the extender logged ${A9}'s card back in service" wait_for 30 "uncordon logged" uncordon_logged
# kube-scheduler retries cordon-full on the Node update, possibly a few ms
# before the extender's watch delivers it: the extender's filter then reads
# the node again. Only a node read less than 2 s before is not, and the pod
# waits for the next event (docs/operations.md, "Taking a card out of
# service"): the scenario then touches the node, as that page tells operators.
if ! wait_for 15 "cordon-full bound" pod_bound cordon-full; then
  log "cordon-full: still waiting 15 s after the uncordon (its node was read again less than 2 s before the retry); touching ${A9}"
  kc label node "${A9}" --overwrite "accelpool.io/uncordoned=$(date +%s)" >/dev/null
fi
check "cordon-full binds once the card is uncordoned" wait_for 90 "cordon-full bound" pod_bound cordon-full
check "cordon-full: kubelet admission matches the assignment" admit cordon-full

# A node whose inventory annotation is malformed is skipped; others are unaffected.
kc apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: broken-0
  annotations: {kwok.x-k8s.io/node: fake, accelpool.io/inventory: '{"version": 1, "inventories": [ {"vendor": '}
  labels: {type: kwok, kubernetes.io/hostname: broken-0}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "80"}
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "80"}
YAML
scenario after-broken "$(pod_yaml after-broken '{}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 1024}")")"
check "after-broken did not land on the malformed node" test "$(pod_node after-broken)" != broken-0
check "the extender logged the malformed inventory" grep -q broken-0 "${E2E_WORK}/logs/extender.log"

# kubelet restarts (new kubelet.sock): the device plugin registers again.
sim_restart() {
  local d="${E2E_WORK}/nodes/$1"
  stop_pidfile "$d/kubeletsim.pid"; rm -f "$d/addr" "$d/plugins/kubelet.sock"
  setsid "${E2E_BIN}/kubeletsim" --plugin-dir "$d/plugins" --addr-file "$d/addr" \
    --pod-resources-socket "$d/pod-resources.sock" >> "$d/kubeletsim.log" 2>&1 < /dev/null &
  echo $! > "$d/kubeletsim.pid"
}
sim_restart hgx-5
check "device plugin re-registers with a restarted kubelet (new kubelet.sock)" wait_for 30 "hgx-5 registered" registered hgx-5
# Kubelet writes its device checkpoint after Allocate and before it starts the
# container. One that dies in between comes back with no record of the pod and
# admits it again (kubeletsim keeps no checkpoint, so its restart is that
# crash): the plugin steers it to the same slots and answers the same grant.
start_node readmit-a '{"version":1,"inventories":[{"vendor":"nvidia","profile":"nvidia-pcie-8","model":"A10"}]}'
check "readmit-a registered and published" wait_for 60 "readmit-a" host_node_ready readmit-a
scenario readmit-1 "$(pod_yaml readmit-1 '{}' '{kubernetes.io/hostname: readmit-a}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 4096, nvidia.com/gpucores: 20}")")"
cp "${E2E_WORK}/admit/readmit-1/admit.json" "${E2E_WORK}/admit/readmit-1/first-admit.json" 2>/dev/null || true
sim_restart readmit-a
check "readmit-a's plugin registers with its restarted kubelet" wait_for 30 "readmit-a registered" registered readmit-a
same_grant_again() {
  admit readmit-1 || return 1
  python3 - "${E2E_WORK}/admit/readmit-1/first-admit.json" "${E2E_WORK}/admit/readmit-1/admit.json" <<'PY'
import json, sys
first, again = (json.load(open(f)) for f in sys.argv[1:3])
def grants(a):
    return [(c["name"], r["resource"], sorted(r["device_ids"]), r.get("preferred_called"),
             sorted((r.get("preferred") or {}).get("deviceIDs") or (r.get("preferred") or {}).get("device_ids") or []),
             (r.get("allocate") or {}).get("envs"))
            for c in a["containers"] for r in c["resources"]]
g1, g2 = grants(first), grants(again)
ok = again.get("admitted") and g1 == g2 and all(g[3] and g[4] == g[2] for g in g2)
if not ok:
    print("first:", g1, "\nagain:", g2)
sys.exit(0 if ok else 1)
PY
  grep -q '"answered a container allocated before again' "${E2E_WORK}/nodes/readmit-a/plugin.log"
}
check "a kubelet that lost its checkpoint admits readmit-1 again: the same slots preferred, the same grant (logged)" same_grant_again
release readmit-1 || true
kc -n "${NS}" delete pod readmit-1 --grace-period=0 --force >/dev/null 2>&1 || true

# NVIDIA MIG: a GPU in MIG mode is offered as its instances, one resource per
# profile (nvidia.com/mig-<profile>, kube-scheduler counts them); a MIG pod
# lands only on an instance of its profile, a whole-GPU pod only on whole GPUs.
# MIG-mig-a-7 is a 1g.18gb+me instance (media extensions), advertised as
# nvidia.com/mig-1g.18gb.me: never handed to a plain 1g.18gb pod.
start_node mig-a '{"version":1,"inventories":[{"vendor":"nvidia","count":7,"model":"H200","memory_mib":143771,
  "devices":[{"index":1,"id":"MIG-mig-a-1","partition":"3g.71gb","memory_mib":71424},
             {"index":2,"id":"MIG-mig-a-2","partition":"2g.35gb","memory_mib":33280},
             {"index":3,"id":"MIG-mig-a-3","partition":"1g.18gb","memory_mib":16384},
             {"index":4,"id":"MIG-mig-a-4","partition":"1g.18gb","memory_mib":16384},
             {"index":6,"id":"MIG-mig-a-7","partition":"1g.18gb.me","memory_mib":16384}]}]}'
mig_node_ready() {
  registered mig-a && published mig-a && sync_capacity mig-a && node_has mig-a "${G}" 20 &&
    node_has mig-a nvidia.com/mig-1g.18gb 2 && node_has mig-a nvidia.com/mig-3g.71gb 1 &&
    node_has mig-a nvidia.com/mig-2g.35gb 1 && node_has mig-a nvidia.com/mig-1g.18gb.me 1
}
check "mig-a serves nvidia.com/gpu (2 whole GPUs, 20 slots) and one resource per MIG profile, 1g.18gb.me apart" \
  wait_for 60 "mig-a" mig_node_ready
on_1g() { # the pod holds one 1g.18gb instance, whole
  [ "$(assigned "$1" '[.containers[0].devices[] | select(.exclusive) | .id] | join(",")')" = "$2" ] ||
    [ "$(assigned "$1" '[.containers[0].devices[] | select(.exclusive) | .id] | join(",")')" = "$3" ]
}
mig_1g() { on_1g "$1" MIG-mig-a-3 MIG-mig-a-4 && [ "$(assigned "$1" '.containers[0].resource')" = nvidia.com/mig-1g.18gb ]; }
mig_3g() { [ "$(assigned "$1" '[.containers[0].devices[].id] | join(",")')" = MIG-mig-a-1 ]; }
whole_not_mig() { [ "$(assigned "$1" '[.containers[0].devices[].id] | sort | join(",")')" = NVIDIA-mig-a-0,NVIDIA-mig-a-5 ]; }
scenario mig-1 "$(pod_yaml mig-1 '{}' '{}' "$(ctr main '{nvidia.com/mig-1g.18gb: 1}')")" mig_1g
scenario mig-2 "$(pod_yaml mig-2 '{}' '{}' "$(ctr main '{nvidia.com/mig-1g.18gb: 1}')")" mig_1g
check "mig-1 and mig-2 hold different 1g.18gb instances" \
  test "$(assigned mig-1 '.containers[0].devices[0].id')" != "$(assigned mig-2 '.containers[0].devices[0].id')"
check "mig-3: a third 1g.18gb pod stays pending (two such instances; the free 1g.18gb.me is not one)" \
  stays_pending mig-3 "$(pod_yaml mig-3 '{}' '{}' "$(ctr main '{nvidia.com/mig-1g.18gb: 1}')")" 10
mig_me() {
  [ "$(assigned "$1" '[.containers[0].devices[].id] | join(",")')" = MIG-mig-a-7 ] &&
    [ "$(assigned "$1" '.containers[0].resource')" = nvidia.com/mig-1g.18gb.me ]
}
scenario mig-me "$(pod_yaml mig-me '{}' '{}' "$(ctr main '{nvidia.com/mig-1g.18gb.me: 1}')")" mig_me
mig_me_visible() { grep -q '"NVIDIA_VISIBLE_DEVICES": *"MIG-mig-a-7"' "${E2E_WORK}/admit/mig-me/admit.json"; }
check "mig-me: Allocate hands the media-extension instance to the container" mig_me_visible
scenario mig-3g "$(pod_yaml mig-3g '{}' '{}' "$(ctr main '{nvidia.com/mig-3g.71gb: 1}')")" mig_3g
scenario mig-whole "$(pod_yaml mig-whole '{}' '{kubernetes.io/hostname: mig-a}' "$(ctr main "{${G}: 2}")")" whole_not_mig
mig_visible() { # Allocate handed the MIG instance's id to the runtime hook
  grep -q '"NVIDIA_VISIBLE_DEVICES": *"MIG-mig-a-1"' "${E2E_WORK}/admit/mig-3g/admit.json"
}
check "mig-3g: Allocate sets NVIDIA_VISIBLE_DEVICES to the MIG instance" mig_visible
for p in mig-1 mig-2 mig-3 mig-me mig-3g mig-whole; do
  release "$p" >/dev/null 2>&1 || true
  kc -n "${NS}" delete pod "$p" --grace-period=0 --force >/dev/null 2>&1 || true
done

# The operator re-partitions mig-a's MIG GPU without restarting its plugin: one
# 1g.18gb instance (MIG-mig-a-3) becomes a 2g.35gb one (MIG-mig-a-6), then
# SIGHUP. Kubelet's device manager drops the instance that went and counts the
# new one, the published inventory follows, and pods of the new count land on it.
cat > "${E2E_WORK}/nodes/mig-a/inventory.json" <<'JSON'
{"version":1,"inventories":[{"vendor":"nvidia","count":7,"model":"H200","memory_mib":143771,
  "devices":[{"index":1,"id":"MIG-mig-a-1","partition":"3g.71gb","memory_mib":71424},
             {"index":2,"id":"MIG-mig-a-2","partition":"2g.35gb","memory_mib":33280},
             {"index":3,"id":"MIG-mig-a-6","partition":"2g.35gb","memory_mib":33280},
             {"index":4,"id":"MIG-mig-a-4","partition":"1g.18gb","memory_mib":16384},
             {"index":6,"id":"MIG-mig-a-7","partition":"1g.18gb.me","memory_mib":16384}]}]}
JSON
kill -HUP "$(cat "${E2E_WORK}/nodes/mig-a/plugin.pid")"
mig_relaid() {
  sync_capacity mig-a && node_has mig-a nvidia.com/mig-2g.35gb 2 &&
    node_has mig-a nvidia.com/mig-1g.18gb 1 && node_has mig-a "${G}" 20
}
check "mig-a: SIGHUP serves the new MIG layout (kubelet counts 2 x 2g.35gb, 1 x 1g.18gb) without a restart" \
  wait_for 30 "mig-a relaid" mig_relaid
relaid_inventory() {
  local inv
  inv="$(kc get node mig-a -o jsonpath='{.metadata.annotations.accelpool\.io/inventory}')"
  grep -q '"MIG-mig-a-6"' <<<"${inv}" && ! grep -q '"MIG-mig-a-3"' <<<"${inv}"
}
check "mig-a: the published inventory names the new instance and not the one that went" \
  wait_for 30 "mig-a inventory" relaid_inventory
check "mig-a: the plugin logged the change with the ids added and removed" \
  grep -q "the node's devices changed.*MIG-mig-a-6.*MIG-mig-a-3" "${E2E_WORK}/nodes/mig-a/plugin.log"
node_event() { # the change is an Event on the Node, which kubectl describe node lists
  local msgs described
  msgs="$(kc get events -n default --field-selector reason=AccelpoolDevicesChanged,involvedObject.name=mig-a \
    -o jsonpath='{.items[*].message}')" && described="$(kc describe node mig-a)" &&
    grep -q 'added MIG-mig-a-6; removed MIG-mig-a-3' <<<"${msgs}" &&
    grep -q AccelpoolDevicesChanged <<<"${described}"
}
check "mig-a: an Event AccelpoolDevicesChanged on the Node names the instances added and removed" \
  wait_for 30 "mig-a node event" node_event
# The P800 device's recovery (above) came within a minute of its unhealthy
# Event: folded, and sent once the minute is over.
check "${P8}: the recovery is a Normal Event AccelpoolDeviceHealthy, sent a minute after the first" \
  wait_for 90 "healthy event" health_event "${P8}" AccelpoolDeviceHealthy \
  "^Normal device [^ ]* (kunlunxin) is healthy again (marked healthy in the inventory file)"
on_2g() { assigned "$1" '.containers[0].devices[0].id' | grep_output -Eq '^MIG-mig-a-(2|6)$'; }
scenario mig-2g-a "$(pod_yaml mig-2g-a '{}' '{}' "$(ctr main '{nvidia.com/mig-2g.35gb: 1}')")" on_2g
scenario mig-2g-b "$(pod_yaml mig-2g-b '{}' '{}' "$(ctr main '{nvidia.com/mig-2g.35gb: 1}')")" on_2g
check "mig-2g-a and mig-2g-b hold the two 2g.35gb instances, the new one among them" \
  test "$(printf '%s\n' "$(assigned mig-2g-a '.containers[0].devices[0].id')" \
    "$(assigned mig-2g-b '.containers[0].devices[0].id')" | sort | paste -sd,)" = MIG-mig-a-2,MIG-mig-a-6
for p in mig-2g-a mig-2g-b; do
  release "$p" >/dev/null 2>&1 || true
  kc -n "${NS}" delete pod "$p" --grace-period=0 --force >/dev/null 2>&1 || true
done

# Ascend dynamic vNPU: a node whose plugin serves 910B3 shares as vNPUs (the
# fake backend with 4 slots per chip stands for --ascend-vnpu). A share rounds
# up to the smallest virtualization template holding its memory and its
# compute, kubelet's Allocate hands the Ascend runtime the chip and the
# template, and a share of two chips is refused. Beside it a910b-1 serves the
# same chips with one slot each (no vNPU): an unpinned share goes to a chip
# with slots to spare, not to a one-slot chip it would hold whole.
A3=huawei.com/Ascend910B3
start_node a910b-v '{"version":1,"inventories":[{"vendor":"ascend","profile":"ascend-910b-x8","max_shares":4}]}'
start_node a910b-1 '{"version":1,"inventories":[{"vendor":"ascend","profile":"ascend-910b-x8"}]}'
vnpu_node_ready() {
  registered a910b-v && published a910b-v && sync_capacity a910b-v && node_has a910b-v "${A3}" 32 &&
    registered a910b-1 && published a910b-1 && sync_capacity a910b-1 && node_has a910b-1 "${A3}" 8
}
check "a910b-v serves ${A3} with 4 vNPU slots per chip (32), a910b-1 one per chip (8)" \
  wait_for 60 "a910b-v, a910b-1" vnpu_node_ready
vnpu_spec() { # NAME TEMPLATE: Allocate named the template (absent: "-") for the Ascend runtime
  local got
  got="$(jq -r '[.containers[].resources[].allocate.envs.ASCEND_VNPU_SPECS // "-"] | join(",")'     "${E2E_WORK}/admit/$1/admit.json")" && [ "${got}" = "$2" ]
}
vnpu_16g() { mem_is "$1" 16384 && compute_is "$1" 250 && vnpu_spec "$1" vir05_1c_16g; }
vnpu_32g() { mem_is "$1" 32768 && compute_is "$1" 500 && vnpu_spec "$1" vir10_3c_32g; }
vnpu_whole() { exclusive_n "$1" 1 && vnpu_spec "$1" -; }
exclusive_n() { [ "$(assigned "$1" '[.containers[0].devices[] | select(.exclusive)] | length')" = "$2" ]; }
shared_label() { # NODE VALUE: the plugin's accelpool.io/shared.ascend label ("" when absent)
  [ "$(kc get node "$1" -o jsonpath='{.metadata.labels.accelpool\.io/shared\.ascend}')" = "$2" ]
}
shared_labels() { shared_label a910b-v true && shared_label a910b-1 '' && shared_label a910a-0 ''; }
check "a910b-v is labelled accelpool.io/shared.ascend=true; a910b-1 and a910a-0 (one slot per chip) are not" \
  wait_for 30 "shared labels" shared_labels
scenario vnpu-16g "$(pod_yaml vnpu-16g '{}' '{accelpool.io/shared.ascend: "true"}' "$(ctr main "{${A3}: 1, ${A3}-memory: 10000}")")" vnpu_16g
scenario vnpu-core "$(pod_yaml vnpu-core '{}' '{}' "$(ctr main "{${A3}: 1, ${A3}-memory: 4096, ${A3}-core: 40}")")" vnpu_32g
on_node() { [ "$(kc -n "${NS}" get pod "$1" -o jsonpath='{.spec.nodeName}')" = "$2" ]; }
check "vnpu-core (not pinned) goes to the vNPU node, not to a one-slot chip of a910b-1" on_node vnpu-core a910b-v
check "vnpu-16g and vnpu-core share one chip (a quarter and a half of it)" \
  test "$(assigned vnpu-16g '.containers[0].devices[0].id')" = "$(assigned vnpu-core '.containers[0].devices[0].id')"
scenario vnpu-whole "$(pod_yaml vnpu-whole '{}' '{kubernetes.io/hostname: a910b-v}' "$(ctr main "{${A3}: 1}")")" vnpu_whole
check "vnpu-whole holds a chip of its own" \
  test "$(assigned vnpu-whole '.containers[0].devices[0].id')" != "$(assigned vnpu-16g '.containers[0].devices[0].id')"
check "vnpu-two: a share of two chips stays pending (a vNPU is made from one chip)" \
  stays_pending vnpu-two "$(pod_yaml vnpu-two '{}' '{}' "$(ctr main "{${A3}: 2, ${A3}-memory: 8192}")")" 10
vnpu_reason() { # the extender says why, in the pod's FailedScheduling event
  kc -n "${NS}" get events --field-selector involvedObject.name=vnpu-two -o jsonpath='{.items[*].message}' |
    grep_output -q 'count 2 is not valid for a share of these devices'
}
check "vnpu-two: the scheduling event gives the reason" wait_for 30 "vnpu-two event" vnpu_reason
for p in vnpu-16g vnpu-core vnpu-whole vnpu-two; do
  release "$p" >/dev/null 2>&1 || true
  kc -n "${NS}" delete pod "$p" --grace-period=0 --force >/dev/null 2>&1 || true
done

log "== foreign memory"
# Something outside accelpool holds 8 GiB of GPU 0 of fm-0: a pod that asks
# for no GPU (fm-rogue) and a host process (the fake backend's used_mib and
# processes stand for what NVML reports; the node's /proc is a directory the
# plugin reads through --host-proc). The plugin publishes it with the node's
# inventory once two readings agree, says so in a Node Event naming the pod
# and the process, and a metric, and the extender keeps whole-GPU pods off
# that GPU until the memory is freed.
FM=fm-0
FM_PROC="${E2E_WORK}/nodes/${FM}/proc"
mkdir -p "${E2E_WORK}/nodes/${FM}"
echo "127.0.0.1:$(free_port)" > "${E2E_WORK}/nodes/${FM}/metrics-listen"
fm_inv() { # USED_MIB of GPU 0 [PROCESSES JSON]
  printf '{"version":1,"inventories":[{"vendor":"nvidia","count":2,"model":"L4","memory_mib":24576,"devices":[{"index":0,"used_mib":%s,"processes":%s}]}]}\n' "$1" "${2:-[]}"
}
start_node "${FM}" "$(fm_inv 0)"
fm_ready() { registered "${FM}" && published "${FM}" && sync_capacity "${FM}" && node_has "${FM}" "${G}" 20; }
check "${FM} registered and published" wait_for 60 "${FM}" fm_ready
printf '%s\n' "$(pod_yaml fm-rogue '{}' "{kubernetes.io/hostname: ${FM}}" "$(ctr main '{cpu: 100m}')")" |
  kc create -f - >/dev/null
check "fm-rogue (no GPU request) runs on ${FM}" wait_for 60 "fm-rogue bound" pod_bound fm-rogue
fm_rogue_uid="$(kc -n "${NS}" get pod fm-rogue -o jsonpath='{.metadata.uid}')"
# Its process as the host's /proc shows it (cgroup v2, systemd driver: the
# uid with underscores), and a host service's.
mkdir -p "${FM_PROC}/4242" "${FM_PROC}/17"
printf 'python3\n' > "${FM_PROC}/4242/comm"
printf '0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope\n' \
  "${fm_rogue_uid//-/_}" "$(printf 'c%.0s' {1..64})" > "${FM_PROC}/4242/cgroup"
printf 'Xorg\n' > "${FM_PROC}/17/comm"
printf '0::/system.slice/display-manager.service\n' > "${FM_PROC}/17/cgroup"
fm_file="${E2E_WORK}/nodes/${FM}/inventory.json"
fm_inv 8492 '[{"pid":4242,"used_mib":8192},{"pid":17,"used_mib":300}]' > "${fm_file}.tmp" &&
  mv "${fm_file}.tmp" "${fm_file}"
foreign_is() { # INDEX MIB: the published inventory's foreign_mib of the device
  [ "$(kc get node "${FM}" -o jsonpath='{.metadata.annotations.accelpool\.io/inventory}' |
    jq -r ".inventories[0].devices[$1].foreign_mib // 0")" = "$2" ]
}
check "${FM}: the published inventory holds GPU 0's 8 GiB that no grant accounts for" \
  wait_for 45 "foreign memory published" foreign_is 0 8192
check "${FM}: GPU 1 holds none" foreign_is 1 0
fm_event() { # REASON TEXT: an Event on the Node
  kc get events -n default --field-selector "reason=$1,involvedObject.name=${FM}" \
    -o jsonpath='{.items[*].message}' | grep_output -qF "$2"
}
check "${FM}: a Warning Event AccelpoolForeignMemory on the Node says how much" \
  wait_for 30 "foreign memory event" fm_event AccelpoolForeignMemory \
  "8 GiB of its memory is in use and no grant on this node accounts for it"
check "${FM}: the Event names fm-rogue's process, the pod and what to do" \
  fm_event AccelpoolForeignMemory \
  "Held by PID 4242 (python3) of pod ${NS}/fm-rogue, which has no grant on it: 8 GiB"
check "${FM}: ... and the host process" fm_event AccelpoolForeignMemory "PID 17 (Xorg), not in a pod: 300 MiB"
check "${FM}: ... and what to do about a pod without a grant" fm_event AccelpoolForeignMemory \
  "give it a device request, or delete it"
fm_metric() { # MIB: the plugin's gauge for GPU 0
  curl -fsS --max-time 5 "http://$(cat "${E2E_WORK}/nodes/${FM}/metrics-listen")/metrics" |
    awk -v want="$1" '$1 == "accelpool_plugin_device_foreign_memory_mib{vendor=\"nvidia\",device=\"NVIDIA-fm-0-0\"}" { n = $2 } END { exit !(n == want) }'
}
check "${FM}: accelpool_plugin_device_foreign_memory_mib shows it" wait_for 20 "foreign memory metric" fm_metric 8192
check "fm-rogue: a Warning Event AccelpoolUngrantedDeviceMemory on the pod says what it holds and what to change" \
  wait_for 20 "fm-rogue event" pod_event "${NS}" fm-rogue \
  "process 4242 (python3) of this pod holds 8 GiB on device NVIDIA-fm-0-0 (nvidia) of node ${FM}, which the scheduler did not grant it"
fm_holders() { # KIND COUNT: the plugin's counter of holders named
  curl -fsS --max-time 5 "http://$(cat "${E2E_WORK}/nodes/${FM}/metrics-listen")/metrics" |
    awk -v want="$2" -v series="accelpool_plugin_foreign_memory_holders_total{kind=\"$1\"}" \
      '$1 == series { n = $2 } END { exit !(n == want) }'
}
fm_holders_counted() { fm_holders pod_without_grant 1 && fm_holders host 1; }
check "${FM}: accelpool_plugin_foreign_memory_holders_total counts the pod without a grant and the host process" \
  fm_holders_counted
fm_ungranted() { # COUNT: the plugin's gauge of pods using devices they were not granted
  curl -fsS --max-time 5 "http://$(cat "${E2E_WORK}/nodes/${FM}/metrics-listen")/metrics" |
    awk -v want="$1" '$1 == "accelpool_plugin_ungranted_device_uses" { n = $2 } END { exit !(n == want) }'
}
check "${FM}: accelpool_plugin_ungranted_device_uses counts fm-rogue on GPU 0" wait_for 20 "ungranted gauge" fm_ungranted 1
# A restart (a rolling upgrade) keeps what the previous run published until
# the new run has read the devices twice: the Node is not rewritten at all.
fm_generation() { kc get node "${FM}" -o jsonpath='{.metadata.annotations.accelpool\.io/inventory}' | jq -r .generation; }
fm_kept() { [ "$(fm_generation)" = "$1" ] && foreign_is 0 8192; }
fm_gen="$(fm_generation)"
stop_pidfile "${E2E_WORK}/nodes/${FM}/plugin.pid"; start_plugin "${FM}"
check "${FM}: the restarted plugin registers again" wait_for 30 "${FM} registered" registered "${FM}"
sleep 3
check "${FM}: the restart rewrote nothing (generation ${fm_gen}); GPU 0's 8 GiB stays published" fm_kept "${fm_gen}"
sleep 2  # the extender's node watch delivers the new inventory
scenario fm-one "$(pod_yaml fm-one '{}' "{kubernetes.io/hostname: ${FM}}" "$(ctr main "{${G}: 1}")")" not_index_0
kc -n "${NS}" delete pod fm-one --wait=false >/dev/null; release fm-one || true
check "fm-one (the whole GPU 1) is gone" wait_for 60 "fm-one gone" pod_gone fm-one
check "fm-two (both GPUs whole) waits while GPU 0 holds foreign memory" stays_pending fm-two \
  "$(pod_yaml fm-two '{}' "{kubernetes.io/hostname: ${FM}}" "$(ctr main "{${G}: 2}")")" 10
check "fm-two: its event gives the reason" wait_for 30 "fm-two event" pod_event "${NS}" fm-two "no grant accounts for"
fm_inv 0 > "${fm_file}.tmp" && mv "${fm_file}.tmp" "${fm_file}"
check "${FM}: the freed memory leaves the published inventory" wait_for 45 "foreign memory freed" foreign_is 0 0
check "${FM}: a Normal Event AccelpoolForeignMemoryFreed says GPU 0 takes whole-device pods again" \
  wait_for 30 "freed event" fm_event AccelpoolForeignMemoryFreed "it takes whole-device pods again"
check "${FM}: the metric is back to 0" wait_for 20 "foreign memory metric" fm_metric 0
check "${FM}: ... and fm-rogue no longer uses GPU 0" wait_for 20 "ungranted gauge" fm_ungranted 0
# As with an uncordon (above): a node read less than 2 s before kube-scheduler's
# retry is not read again; the scenario then touches the node.
if ! wait_for 15 "fm-two bound" pod_bound fm-two; then
  log "fm-two: still waiting 15 s after the memory was freed; touching ${FM}"
  kc label node "${FM}" --overwrite "accelpool.io/touched=$(date +%s)" >/dev/null
fi
check "fm-two binds once GPU 0's memory is freed" wait_for 90 "fm-two bound" pod_bound fm-two
check "fm-two: kubelet admission matches the assignment" admit fm-two
release fm-two || true
kc -n "${NS}" delete pod fm-two fm-rogue --grace-period=0 --force >/dev/null 2>&1 || true

# The same on an Ascend node: the texts speak the device's vendor and model
# from its inventory (npu-smi, ASCEND_VISIBLE_DEVICES, the chip's resource),
# not NVIDIA's words. A pod asking for no NPU holds 8 GiB of chip 0, beside a
# process the node's /proc does not have.
FN=fm-npu-0
FN_PROC="${E2E_WORK}/nodes/${FN}/proc"
mkdir -p "${E2E_WORK}/nodes/${FN}"
echo "127.0.0.1:$(free_port)" > "${E2E_WORK}/nodes/${FN}/metrics-listen"
fn_inv() { # USED_MIB of chip 0 [PROCESSES JSON]
  printf '{"version":1,"inventories":[{"vendor":"ascend","count":2,"model":"Ascend910B3","memory_mib":65536,"devices":[{"index":0,"used_mib":%s,"processes":%s}]}]}\n' "$1" "${2:-[]}"
}
start_node "${FN}" "$(fn_inv 0)"
fn_ready() { registered "${FN}" && published "${FN}"; }
check "${FN} registered and published" wait_for 60 "${FN}" fn_ready
printf '%s\n' "$(pod_yaml fm-npu-rogue '{}' "{kubernetes.io/hostname: ${FN}}" "$(ctr main '{cpu: 100m}')")" |
  kc create -f - >/dev/null
check "fm-npu-rogue (no NPU request) runs on ${FN}" wait_for 60 "fm-npu-rogue bound" pod_bound fm-npu-rogue
fn_rogue_uid="$(kc -n "${NS}" get pod fm-npu-rogue -o jsonpath='{.metadata.uid}')"
mkdir -p "${FN_PROC}/5151"
printf 'VLLMWorker_TP\n' > "${FN_PROC}/5151/comm"
printf '0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%s.scope\n' \
  "${fn_rogue_uid//-/_}" "$(printf 'd%.0s' {1..64})" > "${FN_PROC}/5151/cgroup"
fn_file="${E2E_WORK}/nodes/${FN}/inventory.json"
fn_inv 10240 '[{"pid":5151,"used_mib":8192},{"pid":6262,"used_mib":2048}]' > "${fn_file}.tmp" &&
  mv "${fn_file}.tmp" "${fn_file}"
fn_event() { # TEXT: in an AccelpoolForeignMemory Event on the Node
  kc get events -n default --field-selector "reason=AccelpoolForeignMemory,involvedObject.name=${FN}" \
    -o jsonpath='{.items[*].message}' | grep_output -qF "$1"
}
check "${FN}: the Node's AccelpoolForeignMemory Event names fm-npu-rogue's process on the chip" \
  wait_for 45 "ascend foreign memory event" fn_event \
  "Held by PID 5151 (VLLMWorker_TP) of pod ${NS}/fm-npu-rogue, which has no grant on it: 8 GiB"
check "${FN}: ... says how a pod reaches an NPU it was not granted (ASCEND_VISIBLE_DEVICES)" fn_event \
  "reaches it when it sets ASCEND_VISIBLE_DEVICES itself"
check "${FN}: ... and to look with npu-smi for the PID it cannot place" fn_event "with npu-smi on the node"
fn_no_nvidia() { ! kc get events -n default --field-selector "involvedObject.name=${FN}" \
  -o jsonpath='{.items[*].message}' | grep_output -qi nvidia; }
check "${FN}: no Event on the Ascend node speaks of NVIDIA" fn_no_nvidia
check "fm-npu-rogue: its Event says to ask for huawei.com/Ascend910B3" \
  wait_for 20 "fm-npu-rogue event" pod_event "${NS}" fm-npu-rogue \
  "Ask for the device in the pod's resources (huawei.com/Ascend910B3), or stop the pod from setting ASCEND_VISIBLE_DEVICES itself"
kc -n "${NS}" delete pod fm-npu-rogue --grace-period=0 --force >/dev/null 2>&1 || true
fn_inv 0 > "${fn_file}.tmp" && mv "${fn_file}.tmp" "${fn_file}"

# The device plugin restarts: it registers again and reads the pending assignments back.
stop_pidfile "${E2E_WORK}/nodes/hgx-4/plugin.pid"; start_plugin hgx-4
check "restarted device plugin registers again" wait_for 30 "hgx-4 registered" registered hgx-4

# kube-scheduler's plain-HTTP port is refused anywhere but loopback, with the reason.
plain_http_refused_off_loopback() {
  local out
  out="$("${EXTENDER_BIN}" --listen=127.0.0.1:0 --scheduler-listen=0.0.0.0:1 2>&1)" && return 1
  grep -q "only binds a loopback address" <<< "${out}"
}
check "--scheduler-listen on a non-loopback address is refused" plain_http_refused_off_loopback

# The extender is killed mid-burst and restarted: no lost or duplicate allocation.
for i in 0 1 2 3 4 5 6 7 8 9; do
  pod_yaml "burst-$i" '{}' '{}' "$(ctr main "{${G}: 1, nvidia.com/gpumem: 8192, nvidia.com/gpucores: 10}")" | kc create -f - >/dev/null
done
sleep 1
stop_pidfile "${E2E_WORK}/run/extender.pid" KILL
check "extender restarts after SIGKILL" start_extender
all_burst_bound() { local i; for i in 0 1 2 3 4 5 6 7 8 9; do pod_bound "burst-$i" || return 1; done; }
check "all 10 burst pods bind across the extender restart" wait_for 120 "burst bound" all_burst_bound
burst_admit() { local i; for i in 0 1 2 3 4 5 6 7 8 9; do admit "burst-$i" || return 1; done; }
check "every burst pod passes kubelet admission" burst_admit
check "no device double-booked after the extender rebuilt its cache" no_double_booking

# The apiserver restarts: watches resume (extender and device plugins).
# (cluster.sh start would pick new ports once the apiserver is gone, so it is
# restarted here with its own command line.)
restart_apiserver() {
  local pidf="${E2E_WORK}/run/kube-apiserver.pid" pid args=()
  pid="$(cat "${pidf}")" || return 1
  mapfile -d '' args < "/proc/${pid}/cmdline" || return 1
  stop_pidfile "${pidf}"
  sleep 2
  setsid "${args[@]}" >> "${E2E_WORK}/logs/kube-apiserver.log" 2>&1 < /dev/null &
  echo $! > "${pidf}"
}
check "apiserver stopped and started again" restart_apiserver
check "apiserver back" wait_for 60 "apiserver" kc get --raw /readyz
# The pod below is bound and admitted right after the restart: the device plugins' pod watches
# relist at once (the new watch cache expires a watch resumed from before the restart). Had a
# plugin's watch not delivered the pod yet, its Allocate is answered from the plugin's re-read of the
# node's pods: kwok marks the pod Running as it is bound, so the second re-read, of every pod that
# has not ended, finds it (the Pending pods alone missed it, and the watch used to pause 4-5 s).
# kubelet learns its pods through the apiserver's watch, so after a restart it admits a pod only
# once the apiserver's watch cache holds it bound; kubectl's reads below may be served ahead of that
# cache. The pod is admitted as kubelet would admit it: once a list served from the watch cache
# (resourceVersion=0, what an informer lists) shows it on its node.
in_watch_cache() {
  local node
  node="$(pod_node "$1")" && [ -n "${node}" ] || return 1
  kc get --raw "/api/v1/namespaces/${NS}/pods?resourceVersion=0&fieldSelector=spec.nodeName%3D${node}" |
    jq -e --arg p "$1" 'any(.items[]; .metadata.name == $p)' >/dev/null
}
printf '%s\n' "$(pod_yaml after-apiserver '{}' '{}' "$(ctr main '{huawei.com/Ascend910C: 4}')")" |
  kc create -f - >/dev/null
check "after-apiserver: bound through the extender" wait_for 90 "after-apiserver bound" pod_bound after-apiserver
check "after-apiserver: has accelpool.io/assignment" pod_has_assignment after-apiserver
check "after-apiserver: the apiserver's watch cache shows it bound, as kubelet would see it" \
  wait_for 60 "after-apiserver in the watch cache" in_watch_cache after-apiserver
check "after-apiserver: kubelet admission (GetPreferredAllocation + Allocate) matches the assignment" \
  admit after-apiserver
check "after-apiserver: no_double_booking" no_double_booking after-apiserver
