#!/usr/bin/env bash
# Checks the Helm chart and the generated manifests:
#   helm lint (defaults, HA, cert-manager + ServiceMonitor), helm template
#   properties (scheduler profile, webhook failurePolicy, no CRD objects by
#   default), deploy/ in sync with the chart, the dashboard's metric names
#   against the registrations in src/ (and against what Prometheus scraped, when
#   tests/e2e/prometheus.sh ran), every value documented in the README, then
#   against the e2e apiserver: kubectl apply --dry-run=server -f deploy/, the
#   admission policies (device plugin on its own node, the annotation guard, the webhook
#   caBundle guard: the extender's service account may patch only the caBundle, the
#   device-env guard: no pod or ephemeral container sets the device plugin's variables),
#   examples/kueue/ against Kueue's CRDs (fetched as a Go module, not built),
#   the certgen hook script creating a Secret and patching a webhook's caBundle,
#   accelpool-keys rotating a key Secret as the rotation CronJob's service account,
#   and two scheduler pods (kube-scheduler + extender, as the scheduler's service
#   account): the active extender is the one beside the leading kube-scheduler.
#   Names: the longest fullnames render names within Kubernetes' limits that the apiserver
#   accepts; numbers from a values file render as digits; the dashboard and alerts count each
#   node once with several extender replicas.
#   Hardening: each pod's security settings (tests/e2e/chart_security.py), the values
#   schema's refusals, image digests, NetworkPolicies, and every pod template created
#   under Pod Security restricted (scheduler, Jobs) or privileged (device plugins).
# Prints "N passed, M failed"; exits non-zero on any failure.
#
# Usage: tests/e2e/chart-check.sh   (starts its own control plane under .work/chart)
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${E2E_DIR}/../.." && pwd)"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"
export E2E_WORK="${E2E_WORK:-${E2E_DIR}/.work/chart}"
export E2E_ACCELPOOL_SCHEDULER=0
BIN="${E2E_DIR}/.bin" CHART="${REPO}/charts/accelpool"
HELM="${BIN}/helm" K="${BIN}/kubectl"
{ [ -x "${HELM}" ] && [ -x "${K}" ]; } || die "helm/kubectl missing in ${BIN}: run tests/e2e/build-tools.sh"
TMP="$(mktemp -d)"
PASSED=0 FAILED=0
check() {
  local what="$1"; shift
  if "$@" > "${TMP}/out" 2>&1; then PASSED=$((PASSED + 1)); log "ok: ${what}"
  else FAILED=$((FAILED + 1)); log "FAIL: ${what}"; tail -30 "${TMP}/out" >&2; fi
}
HA_PIDS=()  # the scheduler pods of the leadership checks at the end
ha_stop() { local p; for p in "${HA_PIDS[@]}"; do kill "${p}" 2>/dev/null || true; done; }
finish() {
  ha_stop
  "${E2E_DIR}/cluster.sh" stop >/dev/null 2>&1 || true
  rm -rf "${TMP}"
  echo "chart-check: ${PASSED} passed, ${FAILED} failed"
}
trap finish EXIT

# --- offline checks ---
check "helm lint (defaults)" "${HELM}" lint --strict "${CHART}"
check "helm lint (HA)" "${HELM}" lint --strict "${CHART}" --set scheduler.replicas=3
check "helm lint (cert-manager, ServiceMonitor)" "${HELM}" lint --strict "${CHART}" \
  --set certManager.enabled=true --set serviceMonitor.enabled=true
render() { "${HELM}" template t "${CHART}" --namespace ns --kube-version v1.37.2 "$@"; }
render > "${TMP}/default.yaml"
render --set scheduler.replicas=2 > "${TMP}/ha.yaml"
render --set certManager.enabled=true --set serviceMonitor.enabled=true > "${TMP}/crds.yaml"

has() { grep -Eq -- "$2" "$1"; }
count_is() { [ "$(grep -Ec -- "$2" "$1")" = "$3" ]; }
check "webhook failurePolicy Ignore with one replica" has "${TMP}/default.yaml" '^    failurePolicy: Ignore$'
check "webhook failurePolicy Fail with two replicas" has "${TMP}/ha.yaml" '^    failurePolicy: Fail$'
check "extender is nodeCacheCapable with weight 10" \
  bash -c "grep -q 'nodeCacheCapable: true' '${TMP}/default.yaml' && grep -q 'weight: 10$' '${TMP}/default.yaml'"
check "every managed resource is ignoredByScheduler" \
  bash -c "[ \$(grep -c 'ignoredByScheduler: true' '${TMP}/default.yaml') -ge 20 ] && grep -q 'name: nvidia.com/gpumem$' '${TMP}/default.yaml'"
check "the measured profile: four score plugins off, every node scored, accelpool policy" \
  bash -c "grep -q 'name: NodeResourcesFit$' '${TMP}/default.yaml' && grep -q 'name: NodeResourcesBalancedAllocation' '${TMP}/default.yaml' && grep -q 'name: ImageLocality' '${TMP}/default.yaml' && grep -q 'name: PodTopologySpread' '${TMP}/default.yaml' && grep -q 'percentageOfNodesToScore: 100' '${TMP}/default.yaml' && grep -q -- '--policy=accelpool' '${TMP}/default.yaml' && grep -q -- '--tie-break-salt=0' '${TMP}/default.yaml'"
node_policy_flag() { # none by default; extender.nodePolicy passes one; a value naming no policy is refused
  ! grep -q -- '--node-policy' "${TMP}/default.yaml" &&
    render --set extender.nodePolicy=binpack | grep_output -q -- '- --node-policy=binpack$' &&
    ! render --set extender.nodePolicy=fastest >/dev/null 2>&1
}
check "no --node-policy by default; extender.nodePolicy passes one, a name that is no policy is refused" node_policy_flag
imex_channel_flag() { # none by default; devicePlugin.imexChannel passes one to the NVIDIA plugin only
  ! grep -q -- '--imex-channel' "${TMP}/default.yaml" &&
    [ "$(render --set devicePlugin.imexChannel=0 | grep -c -- '- --imex-channel=0$')" = 1 ] &&
    ! render --set devicePlugin.imexChannel=2048 >/dev/null 2>&1
}
check "no --imex-channel by default; devicePlugin.imexChannel passes one to the NVIDIA plugin, 2048 is refused" imex_channel_flag
flag_values() { # what the binaries would refuse at start is refused at install
  render --set extender.workloadRefresh=1m30s | grep_output -q -- '- --workload-refresh=1m30s$' &&
    ! render --set extender.workloadRefresh=500ms >/dev/null 2>&1 &&
    ! render --set extender.workloadRefresh=0s >/dev/null 2>&1 &&
    ! render --set extender.kubeApiQps=2.5 >/dev/null 2>&1 &&
    ! render --set extender.eventQps=0 >/dev/null 2>&1 &&
    ! render --set assignmentSigning.rotation.settle=1.5m >/dev/null 2>&1
}
check "durations and rates the extender and key rotation cannot read are refused at install" flag_values
plugin_priority() { # system-node-critical by default on every plugin DaemonSet; "" sets none
  [ "$(grep -c '^      priorityClassName: system-node-critical$' "${TMP}/default.yaml")" -ge 2 ] &&
    ! render --set devicePlugin.priorityClassName= | grep_output -q 'system-node-critical' &&
    [ "$(render --set devicePlugin.priorityClassName=gpu-critical | grep -c '^      priorityClassName: gpu-critical$')" -ge 2 ]
}
check "device plugins run at system-node-critical unless devicePlugin.priorityClassName says otherwise" plugin_priority
check "kube-scheduler calls the extender over loopback HTTP; the extender serves it there and picks in filter" \
  bash -c "grep -q 'urlPrefix: http://127.0.0.1:8889$' '${TMP}/default.yaml' && grep -q 'enableHTTPS: false' '${TMP}/default.yaml' && grep -q -- '--scheduler-listen=127.0.0.1:8889$' '${TMP}/default.yaml' && grep -q -- '--pick-in-filter$' '${TMP}/default.yaml'"
follows_scheduler() { # the extender follows kube-scheduler's Lease whatever the replica count
  local f
  for f in "${TMP}/default.yaml" "${TMP}/ha.yaml"; do
    grep -q -- '- --scheduler-lease=ns/accelpool-scheduler$' "$f" &&
      grep -q -- '- --lease-namespace=ns$' "$f" && ! grep -q -- '--leader-elect' "$f" || return 1
  done
  grep -q 'resourceName: accelpool-scheduler$' "${TMP}/ha.yaml"
}
check "the extender follows kube-scheduler's Lease (1 and 2 replicas), no election of its own" follows_scheduler
keeps_ca_bundle() { # with the built-in certificate the extender keeps its webhook's caBundle; with
  # cert-manager its cainjector does, and the extender is not given the flags
  grep -q -- '- --webhook-ca-bundle=t-accelpool-webhook$' "${TMP}/default.yaml" &&
    grep -q -- '- --webhook-ca-file=/etc/accelpool/tls/ca.crt$' "${TMP}/default.yaml" &&
    ! grep -q -- '--webhook-ca-' "${TMP}/crds.yaml"
}
check "the extender keeps its webhook's caBundle from the TLS Secret's ca.crt (not with cert-manager)" keeps_ca_bundle
pod_resources_mounted() { # every device plugin reads kubelet's pod-resources socket, read-only
  local n_dp
  n_dp="$(grep -c '^kind: DaemonSet$' "${TMP}/default.yaml")"
  [ "$(grep -c -- '- --pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock$' "${TMP}/default.yaml")" = "${n_dp}" ] &&
    [ "$(grep -c '{name: pod-resources, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}' "${TMP}/default.yaml")" = "${n_dp}" ] &&
    render --set devicePlugin.podResourcesDir= > "${TMP}/no-pod-resources.yaml" &&
    grep -q -- '- --pod-resources-socket=$' "${TMP}/no-pod-resources.yaml" &&
    ! grep -q 'name: pod-resources' "${TMP}/no-pod-resources.yaml"
}
check "device plugins mount kubelet's pod-resources socket read-only (devicePlugin.podResourcesDir; empty turns it off)" pod_resources_mounted
render --set webhook.allowDeviceEnv=true --set envGuard.enabled=false > "${TMP}/allow-env.yaml"
check "the webhook refuses pods that set the device plugin's variables unless webhook.allowDeviceEnv" \
  bash -c "! grep -q -- '--webhook-allow-device-env' '${TMP}/default.yaml' && grep -q -- '--webhook-allow-device-env$' '${TMP}/allow-env.yaml'"
allow_env_needs_guard_off() { # allowDeviceEnv admits what envGuard refuses: the render says to choose
  local out
  ! out="$(render --set webhook.allowDeviceEnv=true 2>&1)" &&
    grep -q 'webhook.allowDeviceEnv=true admits pods .* also set envGuard.enabled=false' <<<"${out}"
}
check "webhook.allowDeviceEnv=true with envGuard on fails the render, naming envGuard.enabled=false" allow_env_needs_guard_off
render --set extender.hostAware=false --set extender.learnWorkload=false \
  --set extender.workloadWindow=512 --set extender.workloadRefresh=2m > "${TMP}/blind.yaml"
check "the extender scores the host and a learned workload by default; both can be turned off" \
  bash -c "grep -q -- '- --host-aware=true$' '${TMP}/default.yaml' && grep -q -- '- --learn-workload=true$' '${TMP}/default.yaml' && grep -q -- '- --workload-window=2048$' '${TMP}/default.yaml' && grep -q -- '- --host-aware=false$' '${TMP}/blind.yaml' && grep -q -- '- --learn-workload=false$' '${TMP}/blind.yaml' && grep -q -- '- --workload-window=512$' '${TMP}/blind.yaml' && grep -q -- '- --workload-refresh=2m$' '${TMP}/blind.yaml'"
render --set extender.keepWorkload=false > "${TMP}/forgetful.yaml"
workload_kept() { # the chart's ConfigMap, the flag naming it, and the Role rule on it go together
  local f
  grep -q -- "- --workload-configmap=ns/t-accelpool-workload$" "${TMP}/default.yaml" || return 1
  grep -Eq '^  name: t-accelpool-workload$' "${TMP}/default.yaml" || return 1
  grep -q 'resourceNames: \[t-accelpool-workload\]' "${TMP}/default.yaml" || return 1
  for f in blind forgetful; do
    ! grep -q -- '--workload-configmap' "${TMP}/${f}.yaml" || return 1
    ! grep -q 'accelpool-workload' "${TMP}/${f}.yaml" || return 1
  done
}
check "the learned workload is kept in <release>-workload (extender.keepWorkload; off with learnWorkload)" workload_kept
render --set extender.schedulerLoopbackPort=0 --set extender.pickInFilter=false > "${TMP}/https-only.yaml"
check "schedulerLoopbackPort=0: kube-scheduler calls the HTTPS port with the CA, no loopback listener" \
  bash -c "grep -q 'urlPrefix: https://127.0.0.1:8443$' '${TMP}/https-only.yaml' && grep -q 'enableHTTPS: true' '${TMP}/https-only.yaml' && grep -q 'caFile: /etc/accelpool/tls/ca.crt' '${TMP}/https-only.yaml' && ! grep -q -- '--scheduler-listen' '${TMP}/https-only.yaml' && ! grep -q -- '--pick-in-filter' '${TMP}/https-only.yaml'"
check "device-plugin DaemonSets for the shipped backends (nvidia, ascend)" count_is "${TMP}/default.yaml" '^kind: DaemonSet$' 2
all_vendors=()
for v in kunlunxin metax mthreads thead cambricon hygon; do all_vendors+=(--set "devicePlugin.vendors.${v}.enabled=true"); done
render "${all_vendors[@]}" > "${TMP}/all-vendors.yaml"
check "one device-plugin DaemonSet per vendor when all are on (8)" count_is "${TMP}/all-vendors.yaml" '^kind: DaemonSet$' 8
# Numbers from a values file reach the templates as float64, which prints 1000000 as 1e+06: every
# whole number rendered into a flag or kube-scheduler's config is printed as digits, and the schema
# refuses what the binaries would (--workload-window at most 1000000, --kube-api-burst 100000).
printf 'extender:\n  workloadWindow: 1000000\n  kubeApiBurst: 100000\n  kubeApiQps: 100000\n  eventQps: 100000\nscheduler:\n  burst: 2000000\n  extenderWeight: 1000000\ncertgen:\n  validityDays: 1000000\ndevicePlugin:\n  foreignMemory:\n    minMiB: 1048576\n    shareMiB: 2000000\n' > "${TMP}/big-numbers.yaml"
printf 'extender:\n  workloadWindow: 1000001\n' > "${TMP}/window-too-big.yaml"
large_integers() {
  local out
  render -f "${TMP}/big-numbers.yaml" > "${TMP}/big-numbers.out" &&
    ! grep -q 'e+0' "${TMP}/big-numbers.out" &&
    grep -q -- '- --workload-window=1000000$' "${TMP}/big-numbers.out" &&
    grep -q -- '- --kube-api-burst=100000$' "${TMP}/big-numbers.out" &&
    grep -q -- '- --kube-api-qps=100000$' "${TMP}/big-numbers.out" &&
    grep -q -- '- --event-qps=100000$' "${TMP}/big-numbers.out" &&
    grep -q '^      burst: 2000000$' "${TMP}/big-numbers.out" &&
    grep -q '^        weight: 1000000$' "${TMP}/big-numbers.out" &&
    grep -q -- '- --days=1000000$' "${TMP}/big-numbers.out" &&
    [ "$(grep -c -- '- --foreign-memory-min-mib=1048576$' "${TMP}/big-numbers.out")" = 2 ] &&
    [ "$(grep -c -- '- --foreign-memory-share-mib=2000000$' "${TMP}/big-numbers.out")" = 2 ] &&
    ! out="$(render -f "${TMP}/window-too-big.yaml" 2>&1)" &&
    grep -q "/extender/workloadWindow': maximum" <<<"${out}" &&
    ! out="$(render --set extender.kubeApiBurst=100001 2>&1)" &&
    grep -q "/extender/kubeApiBurst': maximum: got 100,001, want 100,000" <<<"${out}" &&
    ! out="$(render --set devicePlugin.foreignMemory.minMiB=1073741825 2>&1)" &&
    grep -q "/devicePlugin/foreignMemory/minMiB': maximum" <<<"${out}"
}
check "whole numbers from a values file render as digits (1000000, not 1e+06); workloadWindow over 1000000 and kubeApiBurst over 100000 are refused" large_integers
# Object names within Kubernetes' limits for the longest fullnames Helm allows (a 53-character
# release name plus -accelpool, or a 63-character fullnameOverride): the fullname part is cut, the
# suffix kept, so the names stay apart and every reference still finds its object.
LONG_RELEASE=ml-platform-staging-gpu-pool-europe-west4-production
LONG_OVERRIDE=ml-platform-staging-gpu-pool-europe-west4-production-accelpool1
long_render() { # RELEASE [helm args]: every vendor, NetworkPolicies, rotation on
  local rel="$1"; shift
  "${HELM}" template "${rel}" "${CHART}" --namespace accelpool-system --kube-version v1.37.2 "${all_vendors[@]}" \
    --set networkPolicy.enabled=true --set assignmentSigning.rotation.enabled=true "$@"
}
names_fit() { # FILE: the names' lengths and the references between the objects
  python3 - "$1" <<'PY'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
label = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
limits = {'CronJob': 52, 'Service': 63, 'DaemonSet': 63, 'Deployment': 63, 'Job': 63}
names, bad = {}, []
for d in docs:
    kind, name = d['kind'], d['metadata']['name']
    if name in names.setdefault(kind, set()):
        bad.append(f'two {kind}s named {name}')
    names[kind].add(name)
    if kind in limits and (len(name) > limits[kind] or not label.match(name)):
        bad.append(f'{kind} {name}: {len(name)} characters, at most {limits[kind]}')
    elif len(name) > 253:
        bad.append(f'{kind} {name}: {len(name)} characters')
vendors = ['ascend', 'cambricon', 'hygon', 'kunlunxin', 'metax', 'mthreads', 'nvidia', 'thead']
ds = {d['metadata']['labels']['accelpool.io/vendor']: d['metadata']['name'] for d in docs if d['kind'] == 'DaemonSet'}
if sorted(ds) != vendors:
    bad.append(f'DaemonSets for {sorted(ds)}')
bad += [f'DaemonSet {n} does not end in -device-plugin-{v}' for v, n in ds.items() if not n.endswith('-device-plugin-' + v)]
sas = names.get('ServiceAccount', set())
external = {'system:kube-scheduler', 'system:volume-scheduler', 'extension-apiserver-authentication-reader'}
for d in docs:
    spec = d.get('spec') or {}
    tmpl = spec.get('template') or spec.get('jobTemplate', {}).get('spec', {}).get('template')
    sa = tmpl and tmpl['spec'].get('serviceAccountName')
    if sa and sa not in sas:
        bad.append(f'{d["kind"]} {d["metadata"]["name"]} runs as {sa}, which is not rendered')
    for subj in d.get('subjects') or []:
        if subj['kind'] == 'ServiceAccount' and subj['name'] not in sas:
            bad.append(f'{d["kind"]} {d["metadata"]["name"]} binds {subj["name"]}, which is not rendered')
    ref = d.get('roleRef')
    if ref and ref['name'] not in names.get(ref['kind'], set()) | external:
        bad.append(f'{d["kind"]} {d["metadata"]["name"]} refers to {ref["kind"]} {ref["name"]}, which is not rendered')
    for hook in d.get('webhooks') or []:
        svc = hook['clientConfig'].get('service', {}).get('name')
        if svc and svc not in names.get('Service', set()):
            bad.append(f'webhook {hook["name"]} calls Service {svc}, which is not rendered')
plugin_sa = [(d['metadata']['namespace'], d['metadata']['name']) for d in docs
             if d['kind'] == 'ServiceAccount' and d['metadata']['name'].endswith('-device-plugin')]
text = open(sys.argv[1]).read()
if len(plugin_sa) != 1 or text.count('system:serviceaccount:%s:%s"' % plugin_sa[0]) != 2:
    bad.append(f'the admission policies do not name the device plugins\' service account {plugin_sa}')
print('\n'.join(bad))
sys.exit(1 if bad else 0)
PY
}
long_names() {
  long_render "${LONG_RELEASE}" > "${TMP}/long-release.yaml" &&
    long_render t --set fullnameOverride="${LONG_OVERRIDE}" > "${TMP}/long-override.yaml" &&
    names_fit "${TMP}/long-release.yaml" && names_fit "${TMP}/long-override.yaml" && names_fit "${TMP}/all-vendors.yaml" &&
    grep -q '^  name: ml-platform-staging-accelpoo-assignment-key-rotation$' <<<"$(long_render ml-platform-staging)" &&
    grep -q '^  name: t-accelpool-device-plugin-nvidia$' "${TMP}/default.yaml" &&
    grep -q '^  name: t-accelpool-assignment-key-rotation$' "${TMP}/default.yaml"
}
check "names within Kubernetes' limits for the longest fullnames (CronJob 52, Services, DaemonSets, Jobs 63), suffixes kept, references intact" long_names
replicas_counted_once() { # every extender replica exports every node's gauges and counts every arrival
  python3 "${E2E_DIR}/dashboard_metrics.py" --exprs "${CHART}/dashboards/accelpool.json" > "${TMP}/dashboard-exprs.txt" &&
    python3 - "${CHART}/alerts/accelpool.rules.yaml" "${TMP}/dashboard-exprs.txt" <<'PY'
import re, sys, yaml
exprs = [l for l in open(sys.argv[2]).read().splitlines() if l.strip()]
exprs += [r['expr'] for g in yaml.safe_load(open(sys.argv[1]))['groups'] for r in g['rules']]
summed = re.compile(r'\bsum(?: by \([^)]*\))? ?\((?:rate|increase)?\(?accelpool_extender_(?:node_|device_|workload_arrivals|workload_rebuilds)')
bad = [e for e in exprs if summed.search(e)]
print('\n'.join(bad))
sys.exit(1 if bad else 0)
PY
}
check "the dashboard and the alerts count each node and arrival once with several extender replicas (no sum over the replicas' per-node gauges)" replicas_counted_once
nvidia_env() { # the NVIDIA plugin asks the NVIDIA container runtime for NVML; no other plugin does
  local ds; ds="$(awk '/^kind: DaemonSet$/ {n++} {print > ("'"${TMP}"'/ds-" n ".yaml")}' "${TMP}/all-vendors.yaml"; grep -l 'accelpool.io/vendor: nvidia$' "${TMP}"/ds-*.yaml)"
  grep -q '{name: NVIDIA_VISIBLE_DEVICES, value: "all"}' "${ds}" &&
    grep -q '{name: NVIDIA_DRIVER_CAPABILITIES, value: "utility"}' "${ds}" &&
    grep -q '{name: NVIDIA_MIG_MONITOR_DEVICES, value: "all"}' "${ds}" &&
    [ "$(grep -c 'name: NVIDIA_' "${TMP}/all-vendors.yaml")" = 3 ]
}
check "the NVIDIA plugin has NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility, NVIDIA_MIG_MONITOR_DEVICES=all; no other plugin" nvidia_env
mig_names() { # MIG profiles are count names kube-scheduler checks and the extender manages
  grep -A1 -- '- name: nvidia.com/mig-1g.18gb$' "${TMP}/default.yaml" | grep_output -q 'ignoredByScheduler: false' &&
    grep -A1 -- '- name: nvidia.com/mig-7g.141gb$' "${TMP}/default.yaml" | grep_output -q 'ignoredByScheduler: false' &&
    grep -A1 -- '- name: nvidia.com/mig-1g.18gb.me$' "${TMP}/default.yaml" | grep_output -q 'ignoredByScheduler: false' &&
    [ "$(grep -c -- '- name: nvidia.com/mig-' "${TMP}/default.yaml")" = 41 ] &&
    grep -q '\["huawei.com/Ascend","nvidia.com/mig-"\].exists' "${TMP}/default.yaml" &&
    ! grep -q '"nvidia.com/mig-1g' "${TMP}/default.yaml"
}
check "MIG profile names are managed count names, and nvidia.com/mig- routes a pod through the webhook" mig_names
# A rendered chart is grepped from a here-string, not a pipe: grep -q ends at
# its first match, and helm, still writing, would die of SIGPIPE (pipefail).
mig_strategy() { # only the NVIDIA plugin takes --mig-strategy; mixed by default, single settable, others fail
  local out
  [ "$(grep -c -- '- --mig-strategy=mixed$' "${TMP}/all-vendors.yaml")" = 1 ] &&
    [ "$(grep -c -- '--mig-strategy' "${TMP}/all-vendors.yaml")" = 1 ] &&
    grep -q -- '- --mig-strategy=single$' <<<"$(render --set devicePlugin.migStrategy=single)" &&
    ! out="$(render --set devicePlugin.migStrategy=none 2>&1)" &&
    grep -q 'devicePlugin.migStrategy must be mixed or single, not "none"' <<<"${out}"
}
check "devicePlugin.migStrategy reaches the NVIDIA plugin only (mixed, single; anything else fails)" mig_strategy
ascend_vnpu() { # off by default; on, only the Ascend plugin takes --ascend-vnpu; on another vendor it fails
  local out on
  ! grep -q -- '--ascend-vnpu' "${TMP}/all-vendors.yaml" &&
    on="$(render "${all_vendors[@]}" --set devicePlugin.vendors.ascend.vnpu=true)" &&
    [ "$(grep -c -- '- --ascend-vnpu$' <<<"${on}")" = 1 ] &&
    awk '/^kind: DaemonSet$/ {ds = ""} /accelpool.io\/vendor: ascend$/ {ds = "ascend"} /- --ascend-vnpu$/ {print ds}' <<<"${on}" | grep_output -qx ascend &&
    ! out="$(render --set devicePlugin.vendors.nvidia.vnpu=true 2>&1)" &&
    grep -q 'devicePlugin.vendors.nvidia.vnpu is an Ascend setting' <<<"${out}"
}
check "devicePlugin.vendors.ascend.vnpu turns on --ascend-vnpu for the Ascend plugin only (off by default)" ascend_vnpu
rediscover_every() { # every plugin checks its devices every 60s by default; a bad duration fails the render
  local out
  [ "$(grep -c -- '- --rediscover-every=60s$' "${TMP}/all-vendors.yaml")" = "$(grep -c -- '- name: device-plugin$' "${TMP}/all-vendors.yaml")" ] &&
    grep -q -- '- --rediscover-every=5m$' <<<"$(render --set devicePlugin.rediscoverEvery=5m)" &&
    ! out="$(render --set devicePlugin.rediscoverEvery=1minute 2>&1)" &&
    grep -q 'devicePlugin.rediscoverEvery must be a duration such as 60s, 5m or 0s, not "1minute"' <<<"${out}" &&
    ! render --set devicePlugin.rediscoverEvery= >/dev/null 2>&1
}
check "devicePlugin.rediscoverEvery reaches every plugin (60s by default; a bad duration fails)" rediscover_every
task_priority() { # the NVIDIA plugin alone gets the priority flags; bad durations fail the render
  local out
  [ "$(grep -c -- '- --priority-every=1s$' "${TMP}/all-vendors.yaml")" = 1 ] &&
    [ "$(grep -c -- '- --priority-busy-for=5s$' "${TMP}/all-vendors.yaml")" = 1 ] &&
    awk '/^kind: DaemonSet$/ {ds = ""} /accelpool.io\/vendor: nvidia$/ {ds = "nvidia"} /- --priority-every=/ {print ds}' \
      "${TMP}/all-vendors.yaml" | grep_output -qx nvidia &&
    grep -q -- '- --priority-every=0s$' <<<"$(render --set devicePlugin.priority.every=0s)" &&
    ! out="$(render --set devicePlugin.priority.every=often 2>&1)" &&
    grep -q 'devicePlugin.priority.every must be a duration' <<<"${out}" &&
    ! out="$(render --set devicePlugin.priority.busyFor=0m 2>&1)" &&
    grep -q 'devicePlugin.priority.busyFor must be a duration of at least 1s' <<<"${out}"
}
check "devicePlugin.priority reaches the NVIDIA plugin only (1s, 5s by default; bad durations fail)" task_priority
high_priority_namespaces() { # nobody by default; the list reaches the NVIDIA plugin and the extender alike
  local out listed
  ! grep -q -- '--high-priority-namespaces' "${TMP}/default.yaml" &&
    listed="$(render --set-json 'devicePlugin.priority.highPriorityNamespaces=["online","batch"]')" &&
    [ "$(grep -c -- '- --high-priority-namespaces=online,batch$' <<<"${listed}")" = 2 ] &&
    awk '/^kind: / {kind = $2} /- --high-priority-namespaces=/ {print kind}' <<<"${listed}" |
      sort | tr '\n' ' ' | grep_output -qx 'DaemonSet Deployment ' &&
    [ "$(render --set-json 'devicePlugin.priority.highPriorityNamespaces=["*"]' | grep -c -- '- --high-priority-namespaces=\*$')" = 2 ] &&
    ! out="$(render --set-json 'devicePlugin.priority.highPriorityNamespaces=["*","online"]' 2>&1)" &&
    grep -q '"\*" (every namespace) beside namespace names' <<<"${out}" &&
    ! render --set-json 'devicePlugin.priority.highPriorityNamespaces=["Team-A"]' >/dev/null 2>&1
}
check "devicePlugin.priority.highPriorityNamespaces: none by default; passed to the NVIDIA plugin and the extender; bad names fail" high_priority_namespaces
foreign_memory() { # every plugin measures foreign memory with the chart's values; bad values fail the render
  local out plugins
  plugins="$(grep -c -- '- name: device-plugin$' "${TMP}/all-vendors.yaml")"
  [ "$(grep -c -- '- --foreign-memory-min-mib=2048$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    [ "$(grep -c -- '- --foreign-memory-share-mib=512$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    [ "$(grep -c -- '- --foreign-memory-every=30s$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    out="$(render --set devicePlugin.foreignMemory.minMiB=0 --set devicePlugin.foreignMemory.every=2m)" &&
    grep -q -- '- --foreign-memory-min-mib=0$' <<<"${out}" && grep -q -- '- --foreign-memory-every=2m$' <<<"${out}" &&
    ! out="$(render --set devicePlugin.foreignMemory.minMiB=2GiB 2>&1)" &&
    grep -q 'devicePlugin.foreignMemory.minMiB must be a whole number of MiB (0 or more), not "2GiB"' <<<"${out}" &&
    ! out="$(render --set devicePlugin.foreignMemory.every=2s 2>&1)" &&
    grep -q 'devicePlugin.foreignMemory.every must be a duration of at least 5s' <<<"${out}" &&
    ! render --set devicePlugin.foreignMemory.every= >/dev/null 2>&1
}
check "devicePlugin.foreignMemory reaches every plugin (2048 MiB, 512 MiB, 30s by default; bad values fail)" foreign_memory
state_dir_size() { # devicePlugin.stateDirSizeMiB reaches the privileged NVIDIA plugin; bad values fail the render
  local out
  out="$(render --set devicePlugin.stateDirSizeMiB=16)" &&
    grep -q -- '- --state-dir-size-mib=16$' <<<"${out}" &&
    out="$(render --set devicePlugin.stateDirSizeMiB=0)" &&
    grep -q -- '- --state-dir-size-mib=0$' <<<"${out}" &&
    ! out="$(render --set devicePlugin.stateDirSizeMiB=4Mi 2>&1)" &&
    grep -q 'devicePlugin.stateDirSizeMiB must be a whole number of MiB (0 or more), not "4Mi"' <<<"${out}" &&
    ! render --set devicePlugin.stateDirSizeMiB=-1 >/dev/null 2>&1
}
check "devicePlugin.stateDirSizeMiB reaches the NVIDIA plugin's --state-dir-size-mib (4 by default; bad values fail)" state_dir_size
host_proc() { # nameHolders (default): every plugin reads the host's /proc, read-only; off: none does
  local out plugins
  plugins="$(grep -c -- '- name: device-plugin$' "${TMP}/all-vendors.yaml")"
  [ "$(grep -c -- '- --host-proc=/host/proc$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    [ "$(grep -c -- '- {name: host-proc, mountPath: /host/proc, readOnly: true}$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    [ "$(grep -c -- 'hostPath: {path: /proc, type: Directory}$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    out="$(render --set devicePlugin.foreignMemory.nameHolders=false)" &&
    ! grep -q -- 'host-proc' <<<"${out}" && ! grep -q -- 'path: /proc' <<<"${out}"
}
check "devicePlugin.foreignMemory.nameHolders mounts the host's /proc read-only in every plugin (off: none)" host_proc
foreign_vendors() { # NVIDIA measured by default; a list reaches every plugin; a vendor without the query fails
  local out plugins
  plugins="$(grep -c -- '- name: device-plugin$' "${TMP}/all-vendors.yaml")"
  [ "$(grep -c -- '- --foreign-memory-vendors=nvidia$' "${TMP}/all-vendors.yaml")" = "${plugins}" ] &&
    out="$(render --set 'devicePlugin.foreignMemory.vendors={nvidia,hygon,metax}')" &&
    grep -q -- '- --foreign-memory-vendors=nvidia,hygon,metax$' <<<"${out}" &&
    out="$(render --set 'devicePlugin.foreignMemory.vendors={nvidia,ascend}')" &&
    grep -q -- '- --foreign-memory-vendors=nvidia,ascend$' <<<"${out}" &&
    ! out="$(render --set 'devicePlugin.foreignMemory.vendors={enflame}' 2>&1)" &&
    grep -q 'devicePlugin.foreignMemory.vendors: "enflame" is not a backend that measures memory in use' <<<"${out}"
}
check "devicePlugin.foreignMemory.vendors reaches every plugin (nvidia by default; ascend may be added; enflame fails)" foreign_vendors
install_cuda_library() { # the NVIDIA plugin's init container installs the library the Dockerfile ships
  local out ds
  ds="$(awk '/^kind: DaemonSet$/ {n++} {print > ("'"${TMP}"'/ids-" n ".yaml")}' "${TMP}/all-vendors.yaml"; grep -l 'accelpool.io/vendor: nvidia$' "${TMP}"/ids-*.yaml)"
  [ "$(grep -c -- '- name: install-cuda-library$' "${TMP}/all-vendors.yaml")" = 1 ] &&
    grep -q -- '- name: install-cuda-library$' "${ds}" &&
    grep -q -- '- --install-cuda-library=/usr/local/lib/accelpool/libaccelpool-cuda.so$' "${ds}" &&
    grep -q 'COPY --from=build /out/lib/ /usr/local/lib/accelpool/' "${REPO}/Dockerfile" &&
    [ "$(grep -c -- '- --preload-file=/usr/local/accelpool/ld.so.preload$' "${TMP}/all-vendors.yaml")" = 2 ] &&
    [ "$(grep -c -- '- --preload-file=/usr/local/accelpool/ld.so.preload$' "${ds}")" = 2 ] &&
    grep -q -- '- {name: preload-dir, mountPath: /usr/local/accelpool, readOnly: true}' "${ds}" &&
    ! grep -q -- '- --install-cuda-library=' <<<"$(render --set devicePlugin.vendors.nvidia.enabled=true --set devicePlugin.installCudaLibrary=false)" &&
    out="$(render --set devicePlugin.preloadFile=/usr/local/accelpool/lib/ld.so.preload)" &&
    ! grep -q 'preload-dir' <<<"${out}" &&
    grep -q -- '- --preload-file=/usr/local/accelpool/lib/ld.so.preload$' <<<"${out}" &&
    ! out="$(render --set devicePlugin.preloadFile=ld.so.preload 2>&1)" &&
    grep -q 'devicePlugin.preloadFile must be an absolute file path, not "ld.so.preload"' <<<"${out}"
}
check "devicePlugin.installCudaLibrary: the NVIDIA plugin's init container installs the image's library and preload file (off: none); preloadFile reaches the NVIDIA plugin, a relative one fails" install_cuda_library
# Hardening of the rendered pods, checked as objects (tests/e2e/chart_security.py).
SEC="${E2E_DIR}/chart_security.py"
check "only the NVIDIA plugin (backend nvidia) gets the CUDA library, the preload file and the state root; every other plugin runs --no-enforcement without those host paths" \
  python3 "${SEC}" shim-only-nvidia "${TMP}/all-vendors.yaml"
render "${all_vendors[@]}" --set devicePlugin.vendors.nvidia.privileged=false \
  --set devicePlugin.vendors.ascend.privileged=false > "${TMP}/unprivileged.yaml"
check "device plugins: read-only root filesystem, /tmp an emptyDir, seccomp RuntimeDefault, root; privileged by default (every vendor); the NVIDIA plugin caps its state dirs (4 MiB) through a Bidirectional state root" \
  python3 "${SEC}" plugins "${TMP}/all-vendors.yaml"
check "devicePlugin.vendors.<v>.privileged=false: no privilege, no escalation, capabilities ALL dropped (NVIDIA keeps DAC_OVERRIDE), no NVIDIA_MIG_MONITOR_DEVICES, no mount propagation and uncapped state dirs (--state-dir-size-mib=0)" \
  python3 "${SEC}" plugins-unprivileged "${TMP}/unprivileged.yaml"
privileged_must_be_bool() {
  local out
  ! out="$(render --set devicePlugin.vendors.nvidia.privileged=maybe 2>&1)" &&
    grep -q "/devicePlugin/vendors/nvidia/privileged': got string, want boolean" <<<"${out}"
}
check "devicePlugin.vendors.<v>.privileged other than true or false fails the render" privileged_must_be_bool
check "scheduler pod: non-root, seccomp RuntimeDefault, read-only root, no escalation, no capability, resources, a token by opt-in only; no PDB or spread with one replica; certgen and rotation pods the same, with memory limits" \
  python3 "${SEC}" scheduler "${TMP}/default.yaml" 1
check "two scheduler replicas: a PodDisruptionBudget, a preferred anti-affinity on hostname and a zone spread" \
  python3 "${SEC}" scheduler "${TMP}/ha.yaml" 2
render --set priorityClassName= --set-json 'topologySpreadConstraints=[{"maxSkew":2,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"app.kubernetes.io/component":"scheduler"}}}]' \
  --set scheduler.replicas=2 > "${TMP}/sched-custom.yaml"
sched_custom() {
  ! grep -q 'priorityClassName: *$' "${TMP}/sched-custom.yaml" &&
    [ "$(grep -c '^      priorityClassName: ' "${TMP}/sched-custom.yaml")" = 2 ] &&  # the plugins' only
    grep -q 'whenUnsatisfiable: DoNotSchedule' "${TMP}/sched-custom.yaml" &&
    ! grep -q 'topology.kubernetes.io/zone' "${TMP}/sched-custom.yaml" &&
    grep -q '^      priorityClassName: system-cluster-critical$' "${TMP}/default.yaml"
}
check "priorityClassName system-cluster-critical by default, \"\" leaves it out; topologySpreadConstraints replace the default spread" sched_custom
image_digests() {
  local d=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef out
  render --set image.digest="${d}" --set scheduler.image.digest="${d}" > "${TMP}/digest.yaml" &&
    [ "$(grep -c "image: accelpool/accelpool@${d}$" "${TMP}/digest.yaml")" -ge 6 ] &&
    ! grep -q 'image: accelpool/accelpool:' "${TMP}/digest.yaml" &&
    grep -q "image: \"registry.k8s.io/kube-scheduler@${d}\"$" "${TMP}/digest.yaml" &&
    ! out="$(render --set image.digest=latest 2>&1)" && grep -q "/image/digest': .*does not match pattern" <<<"${out}"
}
check "image.digest and scheduler.image.digest pin every image by digest; a digest not of the form sha256:<64 hex> fails" image_digests
schema_refuses() { # SET WANT: helm template with --set SET fails, its message containing WANT
  local out
  if out="$(render --set "$1" 2>&1)"; then echo "rendered with $1"; return 1; fi
  grep -qF -- "$2" <<<"${out}" || { echo "with $1: ${out}"; return 1; }
}
schema_table() {
  local rc=0
  schema_refuses scheduler.replicas=0 "/scheduler/replicas': minimum: got 0, want 1" || rc=1
  schema_refuses devicePlugins.vendors.nvidia.enabled=false "additional properties 'devicePlugins' not allowed" || rc=1
  schema_refuses devicePlugin.vendors.nvidia.enable=false "additional properties 'enable' not allowed" || rc=1
  schema_refuses extender.policy=packing "/extender/policy': value must be one of" || rc=1
  schema_refuses extender.logLevel=verbose "/extender/logLevel': value must be one of" || rc=1
  schema_refuses image.pullPolicy=Sometimes "/image/pullPolicy': value must be one of" || rc=1
  schema_refuses webhook.failurePolicy=fail "/webhook/failurePolicy': value must be one of" || rc=1
  schema_refuses extender.port=70000 "/extender/port': maximum: got 70,000, want 65,535" || rc=1
  schema_refuses webhook.enabled=yes "/webhook/enabled': got string, want boolean" || rc=1
  schema_refuses devicePlugin.kubeletDir=var/lib/kubelet "/devicePlugin/kubeletDir': " || rc=1
  schema_refuses devicePlugin.vendors.nvidia.backend=cuda "/devicePlugin/vendors/nvidia/backend': value must be one of" || rc=1
  return "${rc}"
}
check "RBAC: no wildcard in any rule, no Secret read without its name" \
  python3 "${SEC}" rbac "${TMP}/default.yaml"
check "values.schema.json refuses bad values at render/install time, naming the value (11 cases)" schema_table
ca_guard_rendered() { # the webhook-ca policy with the built-in certificate (one or two webhooks); none
  # with cert-manager (no patch grant), without the webhook, or with caBundleGuard.enabled=false
  local a
  python3 "${SEC}" ca-bundle-guard "${TMP}/default.yaml" t ns &&
    python3 "${SEC}" ca-bundle-guard "${TMP}/host-pods-guard.yaml" t ns &&
    python3 "${SEC}" ca-bundle-guard "${TMP}/crds.yaml" t ns absent || return 1
  for a in webhook.enabled=false caBundleGuard.enabled=false; do
    render --set "${a}" > "${TMP}/no-ca-guard.yaml" &&
      python3 "${SEC}" ca-bundle-guard "${TMP}/no-ca-guard.yaml" t ns absent || { echo "with ${a}"; return 1; }
  done
}
env_guard_rendered() { # the device-env policy: every pod, no selector, the webhook's variables
  # (src/api/resources.cc), exempting kube-system, the release namespace and the GPU Operator's (or
  # what is set instead of those); off: none
  python3 "${SEC}" env-guard "${TMP}/default.yaml" t ns "${REPO}/src/api/resources.cc" &&
    python3 "${SEC}" env-guard "${TMP}/all-vendors.yaml" t ns "${REPO}/src/api/resources.cc" &&
    render --set-json 'envGuard.exemptNamespaces=["kube-system","gpu-operator"]' > "${TMP}/env-exempt.yaml" &&
    python3 "${SEC}" env-guard "${TMP}/env-exempt.yaml" t ns "${REPO}/src/api/resources.cc" kube-system,gpu-operator &&
    render --set envGuard.exemptNamespaces=null > "${TMP}/env-exempt-null.yaml" &&
    python3 "${SEC}" env-guard "${TMP}/env-exempt-null.yaml" t ns "${REPO}/src/api/resources.cc" ns &&
    python3 "${SEC}" env-guard "${TMP}/allow-env.yaml" t ns absent
}
check "envGuard: a policy on every pod and ephemeral container (no label skips it) refuses the webhook's device variables (the list equals api::DeviceControlledEnv), outside the exempt namespaces" \
  env_guard_rendered
render --set webhook.hostPods.route=true > "${TMP}/host-pods-guard.yaml"
check "caBundleGuard: a policy holds the extender's and certgen's patches of the webhook configuration to its caBundles (none with cert-manager, without the webhook, or off)" \
  ca_guard_rendered
viewer_role() { # read-only nodes, pods and namespaces, an explained pod's claims, volumes and classes, and what could serve a waiting claim, for kubectl accelpool's users; off: none
  local role rules
  role="$(awk '/^---/ {p=0} /^  name: t-accelpool-viewer$/ {p=1} p' "${TMP}/default.yaml")"
  rules="$(sed -n '/^rules:/,$p' <<<"${role}" | grep -E 'apiGroups|resources|verbs' | tr '\n' ' ' | tr -s ' ')"
  [ "${rules}" = ' - apiGroups: [""] resources: [nodes, pods, namespaces] verbs: [get, list] - apiGroups: [""] resources: [persistentvolumeclaims, persistentvolumes] verbs: [get, list] - apiGroups: [storage.k8s.io] resources: [storageclasses, csidrivers] verbs: [get] - apiGroups: [storage.k8s.io] resources: [csistoragecapacities, csinodes, volumeattachments] verbs: [list] - apiGroups: [""] resources: [configmaps] verbs: [get] ' ] &&
    grep -q 'resourceNames: \[t-accelpool-workload\]' <<<"${role}" &&
    ! grep -q 'accelpool-viewer' <<<"$(render --set viewerRole.enabled=false)"
}
check "viewerRole: ClusterRole t-accelpool-viewer gets and lists nodes, pods, namespaces, claims and volumes, gets storage classes and CSI drivers, lists CSI storage capacities, CSINodes and volume attachments, gets the learned workload's ConfigMap, nothing else (off: none)" viewer_role
check "count names are managed but not ignored" \
  bash -c "grep -A1 'name: nvidia.com/gpu$' '${TMP}/default.yaml' | grep -q 'ignoredByScheduler: false'"
check "default render has no CRD-based objects" \
  bash -c "! grep -Eq '^kind: (ServiceMonitor|Certificate|Issuer|PrometheusRule)$' '${TMP}/default.yaml'"
prometheus_rule() { # the rule file's groups, unchanged, in one PrometheusRule with the extra labels
  render --set prometheusRule.enabled=true --set prometheusRule.labels.release=kps > "${TMP}/rules.yaml" &&
    python3 - "${TMP}/rules.yaml" "${CHART}/alerts/accelpool.rules.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get('kind') == 'PrometheusRule']
want = yaml.safe_load(open(sys.argv[2]))['groups']
assert len(docs) == 1, f'{len(docs)} PrometheusRules'
rule = docs[0]
assert rule['apiVersion'] == 'monitoring.coreos.com/v1', rule['apiVersion']
assert rule['metadata']['namespace'] == 'ns' and rule['metadata']['labels']['release'] == 'kps', rule['metadata']
assert rule['spec']['groups'] == want, 'the groups differ from alerts/accelpool.rules.yaml'
assert sum(len(g['rules']) for g in want) >= 20
PY
}
check "prometheusRule.enabled: one PrometheusRule with the rule file's groups unchanged and the extra labels (off by default)" prometheus_rule
runbook_urls() { # runbookBaseUrl adds runbook_url = base + runbook to every alert; a base that is not a URL ending in / fails
  local out
  render --set prometheusRule.enabled=true --set prometheusRule.runbookBaseUrl=https://git.example.com/p/accelpool/-/blob/v1/ > "${TMP}/runbooks.yaml" &&
    python3 - "${TMP}/runbooks.yaml" <<'PY' &&
import sys, yaml
rule = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get('kind') == 'PrometheusRule'][0]
alerts = [r for g in rule['spec']['groups'] for r in g['rules']]
for r in alerts:
    a = r['annotations']
    assert a['runbook_url'] == 'https://git.example.com/p/accelpool/-/blob/v1/' + a['runbook'], r['alert']
PY
    ! grep -q runbook_url "${TMP}/rules.yaml" &&
    ! out="$(render --set prometheusRule.enabled=true --set prometheusRule.runbookBaseUrl=git.example.com/docs 2>&1)" &&
    grep -q 'prometheusRule.runbookBaseUrl must be an http(s) URL ending in /' <<<"${out}"
}
check "prometheusRule.runbookBaseUrl: every alert gets runbook_url = base + its runbook (none without it); a bad base fails" runbook_urls
certgen_steps() { grep -A1 -- '- accelpool-certgen$' "$1" | grep -v -- 'accelpool-certgen$' | grep -o '[a-z]*$' | sort | tr '\n' ' '; }
check "cert-manager render has Certificate and ServiceMonitors, of the certgen Jobs only the key one" \
  bash -c "grep -q '^kind: Certificate$' '${TMP}/crds.yaml' && [ \$(grep -c '^kind: ServiceMonitor$' '${TMP}/crds.yaml') = 2 ] && [ \"\$(grep -A1 -- '- accelpool-certgen$' '${TMP}/crds.yaml' | grep -c -- '- key$')\" = 1 ] && ! grep -q -- '- --hosts=' '${TMP}/crds.yaml'"
check "default render runs the certgen Jobs create, key and patch" test "$(certgen_steps "${TMP}/default.yaml")" = "create key patch "
signing_on() { # the extender and every device plugin read the key Secret
  local f="$1" n_dp
  n_dp="$(grep -c '^kind: DaemonSet$' "$f")"
  [ "$(grep -c -- '- --assignment-key-dir=/etc/accelpool/assignment-key$' "$f")" = "$((n_dp + 1))" ] &&
    [ "$(grep -c 'secret: {secretName: t-accelpool-assignment-key, defaultMode: 04[04]0}' "$f")" = "$((n_dp + 1))" ] &&
    [ "$(grep -c '{name: assignment-key, mountPath: /etc/accelpool/assignment-key, readOnly: true}' "$f")" = "$((n_dp + 1))" ]
}
check "assignmentSigning (default): the extender and both device plugins mount the key Secret" signing_on "${TMP}/default.yaml"
render --set assignmentSigning.enabled=false > "${TMP}/unsigned.yaml"
check "assignmentSigning.enabled=false: no key Secret, flag or Job" \
  bash -c "! grep -q 'assignment-key' '${TMP}/unsigned.yaml' && [ \"\$(grep -A1 -- '- accelpool-certgen$' '${TMP}/unsigned.yaml' | grep -c -- '- key$')\" = 0 ]"
rotation_cronjob() { # FILE SUSPEND: the rotation CronJob, its command, and RBAC only for the key Secret
  local f="$1"
  grep -q '^  name: t-accelpool-assignment-key-rotation$' "$f" &&
    grep -q "^  suspend: $2\$" "$f" && grep -q '^  concurrencyPolicy: Forbid$' "$f" &&
    grep -A3 -- '- accelpool-keys$' "$f" | grep_output -q -- '- --secret=t-accelpool-assignment-key$' &&
    grep -B1 -A1 'resourceNames: \[t-accelpool-assignment-key\]' "$f" | grep_output -q 'verbs: \[get, patch\]'
}
check "assignmentSigning.rotation (default): a suspended CronJob runs accelpool-keys rotate" \
  rotation_cronjob "${TMP}/default.yaml" true
render --set assignmentSigning.rotation.enabled=true --set assignmentSigning.rotation.timeZone=Etc/UTC \
  > "${TMP}/rotation-on.yaml"
rotation_on() {
  grep -q '^  timeZone: "Etc/UTC"$' "${TMP}/rotation-on.yaml" &&
    grep -q '^  schedule: "0 3 1 \* \*"$' "${TMP}/rotation-on.yaml" &&
    rotation_cronjob "${TMP}/rotation-on.yaml" false
}
check "assignmentSigning.rotation.enabled=true: the CronJob runs on its schedule and time zone" rotation_on
sched_tag_is() { # KUBE-VERSION TAG [helm args]: the kube-scheduler image rendered for that cluster
  local kv="$1" want="$2"; shift 2
  local got
  got="$("${HELM}" template t "${CHART}" --namespace ns --kube-version "${kv}" "$@" \
    --show-only templates/scheduler-deployment.yaml | grep -o 'registry.k8s.io/kube-scheduler:[^"]*')"
  [ "${got}" = "registry.k8s.io/kube-scheduler:${want}" ] || { echo "kube ${kv}: got '${got}', want ${want}"; return 1; }
}
sched_tag_follows_cluster() {
  sched_tag_is v1.30.4 v1.30.4 && sched_tag_is v1.31.2-eks-1a2b3c v1.31.2 &&
    sched_tag_is v1.32.1+k3s1 v1.32.1 && sched_tag_is v1.33.5-gke.1080000 v1.33.5 &&
    sched_tag_is v1.30.4 v1.30.1 --set scheduler.image.tag=v1.30.1
}
check "kube-scheduler's tag is the cluster's version (suffixes -eks-/+k3s1/-gke. dropped); an explicit tag wins" \
  sched_tag_follows_cluster
printf 'extender:\n  tieBreakSalt: 2837461923\n' > "${TMP}/salt.yaml"
printf 'extender:\n  tieBreakSalt: "18446744073709551615"\n' > "${TMP}/salt-str.yaml"
salt_integer() { # (renders to files: grep -q closing a pipe early fails it under pipefail)
  render -f "${TMP}/salt.yaml" > "${TMP}/salt-num.out" && render -f "${TMP}/salt-str.yaml" > "${TMP}/salt-str.out" &&
    render --set extender.tieBreakSalt=2837461923 > "${TMP}/salt-set.out" &&
    grep -q -- '- --tie-break-salt=2837461923$' "${TMP}/salt-num.out" &&
    grep -q -- '- --tie-break-salt=18446744073709551615$' "${TMP}/salt-str.out" &&
    grep -q -- '- --tie-break-salt=2837461923$' "${TMP}/salt-set.out" &&
    ! render --set extender.tieBreakSalt=-1 >/dev/null 2>&1
}
check "tieBreakSalt 2837461923 from a values file renders as an integer (and a quoted uint64 as is; -1 fails)" salt_integer
fit_strategy_checked() {
  local out
  if out="$(render --set scheduler.nodeResourcesFitStrategy=RequestedToCapacityRatio 2>&1)"; then
    echo "rendered"; return 1
  fi
  grep -q 'must be LeastAllocated, MostAllocated or ""' <<<"${out}" &&
    render --set scheduler.nodeResourcesFitStrategy=MostAllocated > "${TMP}/most.yaml" &&
    grep -q 'type: MostAllocated$' "${TMP}/most.yaml"
}
check "nodeResourcesFitStrategy RequestedToCapacityRatio fails naming LeastAllocated, MostAllocated, \"\"" fit_strategy_checked
printf 'scheduler:\n  countResources: []\n  managedResources: []\n' > "${TMP}/no-resources.yaml"
empty_resource_lists() { # helm lint renders NOTES.txt too (helm template does not)
  "${HELM}" lint --strict "${CHART}" -f "${TMP}/no-resources.yaml" &&
    "${HELM}" lint --strict "${CHART}" --set scheduler.managedResources=null &&
    "${HELM}" lint --strict "${CHART}" --set scheduler.countResources=null --set scheduler.managedResources=null &&
    render --set scheduler.countResources=null --set scheduler.managedResources=null > "${TMP}/no-resources.out" &&
    grep -q 'exists(k, (k in \[\] || \["huawei.com/Ascend","nvidia.com/mig-"\]' "${TMP}/no-resources.out"
}
check "empty or null countResources/managedResources render (NOTES and webhook included)" empty_resource_lists
ca_bundle_hooks() { # the caBundle patch (and its service account) also runs after a rollback; no
  # caBundle is rendered without a cluster (lookup answers nothing), none with cert-manager
  grep -A2 -- '- accelpool-certgen$' "${TMP}/default.yaml" | grep_output -q -- '- patch$' &&
    [ "$(grep -c '^    helm.sh/hook: post-install,post-upgrade,post-rollback$' "${TMP}/default.yaml")" = 1 ] &&
    [ "$(grep -c '^    helm.sh/hook: pre-install,pre-upgrade,post-install,post-upgrade,post-rollback$' "${TMP}/default.yaml")" = 5 ] &&
    ! grep -q 'caBundle:' "${TMP}/default.yaml" && ! grep -q 'caBundle:' "${TMP}/crds.yaml" &&
    grep -q 'cert-manager.io/inject-ca-from: ns/t-accelpool-extender-tls' "${TMP}/crds.yaml"
}
check "the caBundle patch hook runs post-install, post-upgrade and post-rollback" ca_bundle_hooks
max_unavailable() {
  [ "$(grep -c '^    rollingUpdate: {maxUnavailable: "10%"}$' "${TMP}/default.yaml")" = 2 ] &&
    render --set devicePlugin.updateStrategy.maxUnavailable=3 > "${TMP}/max3.yaml" &&
    grep -q '^    rollingUpdate: {maxUnavailable: 3}$' "${TMP}/max3.yaml"
}
check "device-plugin rolling update: maxUnavailable 10% by default, settable" max_unavailable
psa_labels() {
  local f
  for f in "${REPO}"/deploy/accelpool.yaml "${REPO}"/deploy/accelpool-ha.yaml; do
    awk '/^kind: Namespace$/ {on=1} on && /^---$/ {exit} on' "$f" > "${TMP}/ns.yaml"
    for m in enforce audit warn; do grep -q "^    pod-security.kubernetes.io/${m}: privileged$" "${TMP}/ns.yaml" || { echo "$f: no ${m} label"; return 1; }; done
  done
}
check "deploy/'s Namespace is labelled Pod Security privileged (enforce, audit, warn)" psa_labels
check "deploy/ matches the chart" "${REPO}/scripts/gen-deploy.sh" --check
dashboard_ok() { # parses; every metric name it queries is registered in src/ (and was scraped, when
  # tests/e2e/prometheus.sh left its list of scraped names in out/demo/)
  local f="${CHART}/dashboards/accelpool.json" scraped="${REPO}/out/demo/scraped-metrics.txt"
  python3 "${E2E_DIR}/dashboard_metrics.py" --source "${REPO}/src" "$f" || return 1
  if [ -s "${scraped}" ] && [ "${scraped}" -nt "$f" ]; then
    python3 "${E2E_DIR}/dashboard_metrics.py" --scraped "${scraped}" "$f"
  fi
}
check "dashboard JSON parses and every metric it queries is exported" dashboard_ok
check "every value in values.yaml is documented in the chart README" \
  python3 "${E2E_DIR}/chart_values.py" "${CHART}/values.yaml" "${CHART}/README.md"

# --- against the e2e apiserver ---
"${E2E_DIR}/cluster.sh" clean >/dev/null 2>&1  # fresh etcd data for every run
"${E2E_DIR}/cluster.sh" start
# shellcheck disable=SC1091 # written by cluster.sh start
. "${E2E_WORK}/cluster.env"
"${K}" create namespace accelpool-system >/dev/null 2>&1 || true
for f in "${REPO}"/deploy/*.yaml; do
  check "kubectl apply --dry-run=server -f deploy/$(basename "$f")" \
    "${K}" apply --dry-run=server -f "$f"
done
long_names_apply() { # the renders of long_names above, every vendor, against the apiserver's own checks
  "${K}" apply --dry-run=server -f "${TMP}/long-release.yaml" >/dev/null &&
    "${K}" apply --dry-run=server -f "${TMP}/long-override.yaml" >/dev/null
}
check "the longest fullnames apply (kubectl apply --dry-run=server: CronJob, Jobs, Services, DaemonSets)" long_names_apply

# Pod Security Admission (the apiserver's built-in PodSecurity plugin): the scheduler pod, the
# certgen Jobs and the rotation CronJob are admitted where "restricted" is enforced; the device
# plugins (host paths: kubelet's sockets, /dev, driver libraries) are admitted only where
# "privileged" is, and refused under "baseline", whether privileged or not. Each workload's pod
# template is created as a Pod with --dry-run=server in a namespace of that level.
psa_ns() { # NAME LEVEL: a namespace enforcing LEVEL, with the chart's service accounts
  "${K}" create namespace "$1" >/dev/null 2>&1 || true
  "${K}" label --overwrite namespace "$1" "pod-security.kubernetes.io/enforce=$2" \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null &&
    for sa in accelpool-scheduler accelpool-certgen accelpool-assignment-key-rotation accelpool-device-plugin; do
      "${K}" -n "$1" create serviceaccount "${sa}" >/dev/null 2>&1 || true
    done
}
psa_pods() { # RENDERED NAMESPACE KINDS...: the pod templates of those kinds, as Pods in NAMESPACE
  python3 - "$@" <<'PY'
import json, sys, yaml
src, ns, kinds = sys.argv[1], sys.argv[2], sys.argv[3:]
for o in yaml.safe_load_all(open(src)):
    if not o or o.get("kind") not in kinds:
        continue
    t = o["spec"]["jobTemplate"]["spec"]["template"] if o["kind"] == "CronJob" else o["spec"]["template"]
    name = (o["kind"] + "-" + o["metadata"]["name"]).lower()[:63]
    print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
                      "labels": t["metadata"].get("labels", {})}, "spec": t["spec"]}))
PY
}
psa_admits() { # RENDERED NAMESPACE KINDS...: every such pod is admitted (and there is one)
  local f="${TMP}/psa-$2.json" n
  psa_pods "$@" > "${f}" || return 1
  n="$(grep -c . "${f}")"
  [ "${n}" -gt 0 ] || { echo "no pods of $*"; return 1; }
  [ "$("${K}" create --dry-run=server -o name -f "${f}" | grep -c '^pod/')" = "${n}" ]
}
psa_refuses() { # RENDERED NAMESPACE KINDS...: every such pod is refused by PodSecurity
  local f="${TMP}/psa-$2.json" n out
  psa_pods "$@" > "${f}" || return 1
  n="$(grep -c . "${f}")"
  out="$("${K}" create --dry-run=server -o name -f "${f}" 2>&1)"
  [ "${n}" -gt 0 ] && [ "$(grep -c 'violates PodSecurity' <<<"${out}")" = "${n}" ] || { echo "${out}"; return 1; }
}
psa_ns psa-restricted restricted && psa_ns psa-baseline baseline && psa_ns psa-privileged privileged
for ns in psa-restricted psa-baseline psa-privileged; do
  "${HELM}" template accelpool "${CHART}" --namespace "${ns}" --kube-version v1.37.2 \
    --set assignmentSigning.rotation.enabled=true "${all_vendors[@]}" > "${TMP}/${ns}.yaml"
done
"${HELM}" template accelpool "${CHART}" --namespace psa-baseline --kube-version v1.37.2 \
  --set devicePlugin.vendors.nvidia.privileged=false --set devicePlugin.vendors.ascend.privileged=false \
  > "${TMP}/psa-baseline-unpriv.yaml"
check "Pod Security restricted admits the scheduler pod, the certgen Jobs and the key rotation" \
  psa_admits "${TMP}/psa-restricted.yaml" psa-restricted Deployment Job CronJob
check "Pod Security privileged admits the device plugins of every vendor" \
  psa_admits "${TMP}/psa-privileged.yaml" psa-privileged DaemonSet
psa_baseline_refuses() {
  psa_refuses "${TMP}/psa-baseline.yaml" psa-baseline DaemonSet &&
    psa_refuses "${TMP}/psa-baseline-unpriv.yaml" psa-baseline DaemonSet
}
check "Pod Security baseline refuses the device plugins (host paths), privileged or not" psa_baseline_refuses
netpol() { # off by default; on: the extender's port from the apiserver and Prometheus, the plugins' from Prometheus
  "${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 --set networkPolicy.enabled=true \
    --set-json 'networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]' \
    --set-json 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]' \
    --show-only templates/networkpolicy.yaml > "${TMP}/netpol.yaml" &&
    ! grep -q '^kind: NetworkPolicy$' "${TMP}/default.yaml" &&
    "${K}" apply --dry-run=server -f "${TMP}/netpol.yaml" >/dev/null &&
    python3 - "${TMP}/netpol.yaml" <<'PY'
import sys, yaml
pols = {p["metadata"]["name"]: p["spec"] for p in yaml.safe_load_all(open(sys.argv[1])) if p}
s, d = pols["accelpool-scheduler"], pols["accelpool-device-plugin"]
assert s["policyTypes"] == ["Ingress"] and d["policyTypes"] == ["Ingress"], pols
assert s["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
assert d["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "device-plugin"
assert [r["ports"] for r in s["ingress"]] == [[{"protocol": "TCP", "port": 8443}]], s
assert [list(p) for p in s["ingress"][0]["from"]] == [["ipBlock"], ["namespaceSelector"]], s
assert [r["ports"] for r in d["ingress"]] == [[{"protocol": "TCP", "port": 9402}]], d
assert [list(p) for p in d["ingress"][0]["from"]] == [["namespaceSelector"]], d
PY
  local closed; closed="$(render --set networkPolicy.enabled=true --show-only templates/networkpolicy.yaml)" &&
    grep -q '^  ingress: \[\]$' <<<"${closed}" && [ "$(grep -c 'port: 8443' <<<"${closed}")" = 1 ]
}
notes_security() { # helm install --dry-run=server: the schema and the templates against this apiserver; NOTES name the privilege
  local out
  out="$("${HELM}" install accelpool "${CHART}" --namespace accelpool-system --dry-run=server \
    --set devicePlugin.vendors.nvidia.privileged=false --set networkPolicy.enabled=true 2>&1)" || { echo "${out}"; return 1; }
  grep -q 'kubectl label namespace accelpool-system pod-security.kubernetes.io/enforce=privileged' <<<"${out}" &&
    grep -q '^Device plugins running privileged: ascend ' <<<"${out}" &&
    grep -q '^Device plugins running unprivileged: nvidia (NVIDIA: no MIG devices are listed)' <<<"${out}" &&
    grep -q '^networkPolicy.metricsFrom is empty: Prometheus cannot scrape the device plugins. The extender' <<<"${out}" &&
    grep -q '^HTTPS port (webhook and /metrics) admits every source while networkPolicy.webhookFrom is empty.$' <<<"${out}" ||
    { echo "${out}" | sed -n '/^NOTES/,$p'; return 1; }
  out="$("${HELM}" install accelpool "${CHART}" --namespace accelpool-system --dry-run=server --set networkPolicy.enabled=true \
    --set-json 'networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]' 2>&1)" || { echo "${out}"; return 1; }
  grep -q '^networkPolicy.metricsFrom is empty: Prometheus cannot scrape the device plugins or the extender.$' <<<"${out}" ||
    { echo "${out}" | sed -n '/^NOTES/,$p'; return 1; }
}
check "helm install --dry-run=server passes; NOTES say the namespace's Pod Security label, which plugins run privileged, and who may scrape what" notes_security
check "networkPolicy (off by default): ingress to the extender's HTTPS port from webhookFrom and metricsFrom, to the plugins' metrics port from metricsFrom (none when empty); applies" netpol

# examples/kueue/ against Kueue's own CRDs: the pinned Kueue module is fetched
# through the Go module proxy for its CRD files only (Kueue itself is not built
# or run), the CRDs are created, and the example is applied with
# --dry-run=server, so the apiserver checks every field against Kueue's schema.
KUEUE_VERSION=v0.17.0
kueue_example_valid() {
  local dir crd
  dir="$(cd "${TMP}" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" | jq -r .Dir)" ||
    { echo "could not fetch sigs.k8s.io/kueue@${KUEUE_VERSION} through the Go module proxy"; return 1; }
  local i
  for crd in resourceflavors clusterqueues localqueues; do
    "${K}" create -f "${dir}/config/components/crd/bases/kueue.x-k8s.io_${crd}.yaml" >/dev/null ||
      return 1
    # kubectl wait fails at once ("status.conditions accessor error") when it
    # reads the CRD before the apiserver has set any condition: ask again.
    for i in $(seq 1 60); do
      "${K}" wait --for condition=established --timeout=60s "crd/${crd}.kueue.x-k8s.io" \
        >/dev/null 2>&1 && break
      sleep 1
    done
    "${K}" wait --for condition=established --timeout=5s "crd/${crd}.kueue.x-k8s.io" || return 1
  done
  "${K}" create namespace ml-team --save-config >/dev/null 2>&1 || true
  "${K}" apply --dry-run=server -f "${REPO}/examples/kueue/" &&
    [ "$("${K}" apply --dry-run=server -f "${REPO}/examples/kueue/" -o name | grep -c kueue.x-k8s.io)" = 8 ]
}
check "examples/kueue applies against Kueue ${KUEUE_VERSION}'s CRDs (dry-run=server, strict fields)" kueue_example_valid

# The chart's KubeSchedulerConfiguration must be accepted by the pinned
# kube-scheduler: decode, default and validate it (--write-config-to exits
# after loading the configuration; --secure-port 0, or it would first bind
# 0.0.0.0:10259 and fail when anything on the machine holds that port).
sched_config_accepted() { # [rendered chart]
  awk '/^  config.yaml: \|/ {on=1; next} on && /^---/ {exit} on {sub(/^    /, ""); print}' \
    "${1:-${TMP}/default.yaml}" |
    sed -e "s|caFile: /etc/accelpool/tls/ca.crt|caFile: ${E2E_CA}|" \
        -e "s|^clientConnection:|clientConnection:\n  kubeconfig: ${E2E_WORK}/config/scheduler.kubeconfig|" \
        -e "s|leaderElect: true|leaderElect: false|" > "${TMP}/chart-scheduler.yaml"
  grep -q 'nodeCacheCapable: true' "${TMP}/chart-scheduler.yaml" &&
    "${BIN}/kube-scheduler" --config "${TMP}/chart-scheduler.yaml" --secure-port 0 \
      --write-config-to "${TMP}/effective.yaml" &&
    grep -q 'schedulerName: accelpool-scheduler' "${TMP}/effective.yaml"
}
check "kube-scheduler accepts the chart's scheduler configuration" sched_config_accepted

# The host-pod route (webhook.hostPods): off by default; on, a second webhook
# entry (always Ignore) sends pods that ask for no accelerator to the extender's
# /mutate-host-pods, which routes them to the profile accelpool-scheduler-hosts
# (kube-scheduler's preference scores on, NodeResourcesFit, BalancedAllocation
# and ImageLocality scoring off), and the extender has no managedResources
# (kube-scheduler then calls it for every pod) while NodeResourcesFit ignores
# the pooled names in both profiles.
render --set webhook.hostPods.route=true --set webhook.hostPods.namespaceSelector.matchLabels.team=ml \
  > "${TMP}/host-pods.yaml"
host_pods_route() {
  ! grep -q 'host-pods.mutate.accelpool.io' "${TMP}/default.yaml" &&
    ! grep -q 'ignoredResources:' "${TMP}/default.yaml" &&
    grep -q '^    path: /mutate-host-pods$\|^        path: /mutate-host-pods$' "${TMP}/host-pods.yaml" &&
    [ "$(grep -c '^    failurePolicy: ' "${TMP}/host-pods.yaml")" = 2 ] &&
    awk '/- name: host-pods.mutate.accelpool.io/ {on=1} on' "${TMP}/host-pods.yaml" |
      grep_output -q '^    failurePolicy: Ignore$' &&
    awk '/- name: host-pods.mutate.accelpool.io/ {on=1} on' "${TMP}/host-pods.yaml" |
      grep_output -q '^        team: ml$' &&
    ! grep -q 'managedResources:' "${TMP}/host-pods.yaml" &&
    [ "$(grep -c '^              ignoredResources:$' "${TMP}/host-pods.yaml")" = 2 ] &&
    grep -q '^                - nvidia.com/gpumem$' "${TMP}/host-pods.yaml" &&
    grep -q '^      - schedulerName: accelpool-scheduler-hosts$' "${TMP}/host-pods.yaml" &&
    ! grep -q 'schedulerName: accelpool-scheduler-hosts' "${TMP}/default.yaml" &&
    grep -q -- '- --host-pods-scheduler-name=accelpool-scheduler-hosts$' "${TMP}/default.yaml" &&
    sched_config_accepted "${TMP}/host-pods.yaml" &&
    grep -q 'schedulerName: accelpool-scheduler-hosts' "${TMP}/effective.yaml" &&
    [ "$(render --set webhook.hostPods.route=true \
      --set-string 'webhook.hostPods.namespaceSelector.matchLabels.accelpool\.io/host-pods=true' |
      grep -c '^        accelpool.io/host-pods: "true"$')" = 1 ] &&
    ! render --set webhook.hostPods.route=true \
      --set 'webhook.hostPods.namespaceSelector.matchLabels.accelpool\.io/host-pods=true' >/dev/null 2>&1 &&
    ! render --set webhook.hostPods.rout=true >/dev/null 2>&1 &&
    ! render --set webhook.enabled=false --set webhook.hostPods.route=true >/dev/null 2>&1
}
check "webhook.hostPods.route adds the host-pod webhook (Ignore), the profile accelpool-scheduler-hosts and ignoredResources for managedResources; kube-scheduler accepts it" host_pods_route

# The webhook's matchCondition decides which pods reach the extender. Its CEL
# is checked hermetically: the same expression as the matchCondition of a
# ValidatingAdmissionPolicy that denies every pod it matches, then pods are
# created with --dry-run=server (no webhook is called, nothing is stored).
webhook_expr="$(awk '/^      - name: requests-pooled-resources$/ {getline; on=1; next}
  on && /^          / {sub(/^ +/, ""); printf "%s ", $0; next} on {exit}' "${TMP}/default.yaml")"
cat > "${TMP}/match-policy.yaml" <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: webhook-match-check}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  matchConditions:
  - name: requests-pooled-resources
    expression: '${webhook_expr//\'/\'\'}'
  validations:
  - {expression: "false", message: routed-to-accelpool}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: webhook-match-check}
spec: {policyName: webhook-match-check, validationActions: [Deny]}
YAML
check "the webhook's CEL matchCondition compiles in a policy" "${K}" apply -f "${TMP}/match-policy.yaml"
# try_pod NAME CONTAINERS-JSON: "routed" when the policy denied it, "passed" when admitted.
try_pod() {
  local out
  out="$("${K}" create --dry-run=server -o name -f - 2>&1 <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"default"},"spec":$2}
JSON
)"
  if grep -q routed-to-accelpool <<<"${out}"; then echo routed
  elif grep -q "^pod/" <<<"${out}"; then echo passed
  else echo "error: ${out}"; fi
}
gpu_pod() { echo "{\"containers\":[{\"name\":\"c\",\"image\":\"x\",\"resources\":{\"limits\":{\"$1\":\"$2\"}}}]}"; }
# The policy takes effect once the apiserver has loaded it.
for _ in $(seq 1 40); do [ "$(try_pod probe "$(gpu_pod nvidia.com/gpu 1)")" = routed ] && break; sleep 0.5; done
webhook_routes() { # expected name spec
  local got; got="$(try_pod "$2" "$3")"
  [ "${got}" = "$1" ] || { echo "pod $2: got '${got}', want '$1'"; return 1; }
}
check "webhook routes a pod asking nvidia.com/gpu" webhook_routes routed gpu "$(gpu_pod nvidia.com/gpu 1)"
check "webhook routes a pod asking only nvidia.com/gpumem" webhook_routes routed gpumem "$(gpu_pod nvidia.com/gpumem 4096)"
check "webhook routes a pod asking huawei.com/Ascend910B3 (prefix)" webhook_routes routed npu "$(gpu_pod huawei.com/Ascend910B3 1)"
check "webhook routes a pod whose init container asks cambricon.com/vmlu" webhook_routes routed init \
  '{"initContainers":[{"name":"i","image":"x","resources":{"limits":{"cambricon.com/vmlu":"1"}}}],"containers":[{"name":"c","image":"x"}]}'
check "webhook leaves a CPU-only pod alone" webhook_routes passed cpu \
  '{"containers":[{"name":"c","image":"x","resources":{"requests":{"cpu":"100m"}}}]}'
check "webhook leaves a pod with another extended resource alone" webhook_routes passed other "$(gpu_pod example.com/foo 1)"
"${K}" delete -f "${TMP}/match-policy.yaml" >/dev/null

# The device plugin's RBAC plus its admission policy: with a token bound to a
# plugin pod on node np-a, the plugin may patch np-a and pods there, and is
# refused for node np-b and pods on np-b.
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --show-only templates/device-plugin-rbac.yaml > "${TMP}/dp-rbac.yaml"
check "the device-plugin RBAC and policy apply" "${K}" apply -f "${TMP}/dp-rbac.yaml"
for n in np-a np-b; do
  "${K}" create -f - >/dev/null <<YAML
{"apiVersion":"v1","kind":"Node","metadata":{"name":"${n}"}}
YAML
  "${K}" create -f - >/dev/null <<YAML
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"work-${n}","namespace":"default"},
 "spec":{"nodeName":"${n}","containers":[{"name":"c","image":"x"}]}}
YAML
done
"${K}" create -f - >/dev/null <<YAML
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"plugin-np-a","namespace":"accelpool-system"},
 "spec":{"nodeName":"np-a","serviceAccountName":"accelpool-device-plugin","containers":[{"name":"c","image":"x"}]}}
YAML
token_kubeconfig() { # FILE TOKEN: a kubeconfig for the e2e apiserver with a service account's token
  cat > "$1" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "${APISERVER_URL}", certificate-authority: "${E2E_CA}"}}]
users: [{name: sa, user: {token: "$2"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: sa}}]
current-context: e2e
YAML
}
token_kubeconfig "${TMP}/plugin.kubeconfig" "$("${K}" -n accelpool-system create token \
  accelpool-device-plugin --bound-object-kind Pod --bound-object-name plugin-np-a --duration 10m)"
as_plugin() { "${K}" --kubeconfig "${TMP}/plugin.kubeconfig" "$@"; }
refused() { # command... : must fail, naming the policy's reason
  local out
  if out="$("$@" 2>&1)"; then echo "allowed: ${out}"; return 1; fi
  grep -q "may change only" <<<"${out}" || { echo "refused for another reason: ${out}"; return 1; }
}
# The policy takes effect once the apiserver has loaded it.
for _ in $(seq 1 40); do
  refused as_plugin label --dry-run=server node np-b accelpool.io/probe=x >/dev/null && break; sleep 0.5
done
check "the plugin may label its own node" as_plugin label node np-a accelpool.io/vendor.nvidia=true
check "the plugin may annotate a pod on its node" as_plugin -n default annotate pod work-np-a accelpool.io/allocation=x
check "the plugin is refused another node" refused as_plugin label node np-b accelpool.io/vendor.nvidia=true
check "the plugin is refused a pod on another node" refused as_plugin -n default annotate pod work-np-b accelpool.io/allocation=x
refused_because() { # reason command... : must fail, naming that reason of the policy
  local why="$1" out; shift
  if out="$("$@" 2>&1)"; then echo "allowed: ${out}"; return 1; fi
  grep -q "${why}" <<<"${out}" || { echo "refused for another reason: ${out}"; return 1; }
}
"${K}" label node np-a team=a >/dev/null
check "the plugin may annotate its own node (accelpool.io/)" as_plugin annotate node np-a accelpool.io/inventory=x
check "the plugin is refused tainting its own node" refused_because "not the spec" \
  as_plugin taint node np-a accelpool.io/probe=x:NoSchedule
check "the plugin is refused marking its own node unschedulable" refused_because "not the spec" \
  as_plugin patch node np-a --type=merge -p '{"spec":{"unschedulable":true}}'
check "the plugin is refused changing a non-accelpool label of its node" \
  refused_because "may change only accelpool.io/ labels" as_plugin label --overwrite node np-a team=b
check "the plugin is refused removing a non-accelpool label of its node" \
  refused_because "may change only accelpool.io/ labels" as_plugin label node np-a team-
check "the plugin is refused a non-accelpool annotation on its node" \
  refused_because "may change only accelpool.io/ annotations" as_plugin annotate node np-a note=x
check "the plugin is refused a non-accelpool annotation on a pod on its node" \
  refused_because "may change only accelpool.io/ annotations" as_plugin -n default annotate pod work-np-a note=x
check "the plugin is refused cordoning cards of its own node" \
  refused_because "set by the operator" as_plugin annotate node np-a accelpool.io/cordoned-devices=GPU-x
"${K}" annotate node np-a accelpool.io/cordoned-devices=GPU-y >/dev/null
check "the plugin is refused uncordoning cards the operator cordoned" \
  refused_because "set by the operator" as_plugin annotate node np-a accelpool.io/cordoned-devices-
check "the plugin still writes its other annotations beside the operator's cordon" \
  as_plugin annotate --overwrite node np-a accelpool.io/inventory=y
check "the plugin is refused changing the spec of a pod on its node" refused_because "not the spec" \
  as_plugin -n default patch pod work-np-a --type=merge -p '{"spec":{"activeDeadlineSeconds":5}}'
check "the plugin cannot delete nodes (RBAC)" bash -c "! '${K}' --kubeconfig '${TMP}/plugin.kubeconfig' delete node np-b 2>/dev/null"

# Least privilege of the scheduler pod (kube-scheduler + extender) and the plugin.
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --show-only templates/rbac.yaml > "${TMP}/rbac.yaml"
check "the scheduler/extender RBAC applies" "${K}" apply -f "${TMP}/rbac.yaml"
can_i() { # want sa verb resource [name] [-n ns]
  local want="$1" sa="system:serviceaccount:accelpool-system:$2"; shift 2
  local got; got="$("${K}" auth can-i --as "${sa}" "$@" 2>/dev/null)"
  [ "${got}" = "${want}" ] || { echo "can-i $* as ${sa}: ${got}, want ${want}"; return 1; }
}
can_i_rows() { # rows "want sa verb resource [flags]" on stdin; every row must hold
  local rc=0 row
  while read -r row; do
    [ -z "${row}" ] && continue
    # shellcheck disable=SC2086 # rows are word lists
    can_i ${row} || rc=1
  done
  return "${rc}"
}
rbac_table() {
  can_i_rows <<'ROWS'
yes accelpool-scheduler list pods
yes accelpool-scheduler watch nodes
no accelpool-scheduler patch pods
yes accelpool-scheduler create pods --subresource binding
yes accelpool-scheduler create events
yes accelpool-scheduler update leases/accelpool-scheduler -n accelpool-system
yes accelpool-scheduler update leases/accelpool-extender -n accelpool-system
no accelpool-scheduler update leases/other -n accelpool-system
no accelpool-scheduler delete nodes
no accelpool-scheduler create deployments.apps
no accelpool-scheduler patch nodes
no accelpool-scheduler get secrets -n accelpool-system
yes accelpool-scheduler get configmaps/accelpool-workload -n accelpool-system
yes accelpool-scheduler patch configmaps/accelpool-workload -n accelpool-system
no accelpool-scheduler patch configmaps/other -n accelpool-system
no accelpool-scheduler delete configmaps/accelpool-workload -n accelpool-system
yes accelpool-scheduler create configmaps -n accelpool-system
no accelpool-scheduler create configmaps -n default
yes accelpool-scheduler patch mutatingwebhookconfigurations/accelpool-webhook
no accelpool-scheduler patch mutatingwebhookconfigurations/other
no accelpool-scheduler create mutatingwebhookconfigurations
yes accelpool-device-plugin patch nodes
yes accelpool-device-plugin watch pods
yes accelpool-device-plugin create events
no accelpool-device-plugin delete nodes
no accelpool-device-plugin create pods --subresource binding
no accelpool-device-plugin get secrets -n accelpool-system
ROWS
}
check "RBAC grants each part what it uses and no more (25 cases)" rbac_table

# The annotation guard: no pod create or update may add, change or remove
# accelpool.io/assignment (it arrives only through the Binding, which the
# policy does not match), and only the device plugin changes
# accelpool.io/allocation. "tenant" may edit pods in default (a Role as
# ClusterRole edit would grant, which needs the controller manager to aggregate).
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --show-only templates/annotation-guard.yaml > "${TMP}/guard.yaml"
check "the annotation guard policy applies" "${K}" apply -f "${TMP}/guard.yaml"
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --set annotationGuard.exemptUsers=null --set annotationGuard.exemptGroups=null \
  --show-only templates/annotation-guard.yaml > "${TMP}/guard-null.yaml"
check "the annotation guard with null exempt lists compiles in the apiserver" \
  "${K}" apply --dry-run=server -f "${TMP}/guard-null.yaml"
"${K}" -n default create role tenant-pods --resource=pods \
  --verb=get,list,watch,create,update,patch,delete >/dev/null
"${K}" -n default create rolebinding tenant-pods --role=tenant-pods --user=tenant >/dev/null
as_tenant() { "${K}" --as tenant -n default "$@"; }
as_scheduler() { "${K}" --as system:serviceaccount:accelpool-system:accelpool-scheduler "$@"; }
ANN_A='{"version":1,"node":"np-a","containers":[]}'
guard_pod() { # name [annotations-json] [node]
  jq -nc --arg n "$1" --argjson a "${2:-"{}"}" --arg node "${3:-}" '{apiVersion: "v1", kind: "Pod",
    metadata: {name: $n, namespace: "default", annotations: $a},
    spec: ({containers: [{name: "c", image: "x"}]} + (if $node == "" then {} else {nodeName: $node} end))}'
}
guarded() { # what command... : must fail, naming the guarded annotation
  local what="$1" out; shift
  if out="$("$@" 2>&1)"; then echo "allowed: ${out}"; return 1; fi
  grep -q "annotation ${what} is written only by" <<<"${out}" ||
    { echo "refused for another reason: ${out}"; return 1; }
}
forged="$(guard_pod forged "{\"accelpool.io/assignment\":$(jq -Rc . <<<"${ANN_A}")}" np-a)"
for _ in $(seq 1 40); do
  guarded accelpool.io/assignment as_tenant create --dry-run=server -f - <<<"${forged}" >/dev/null && break
  sleep 0.5
done
check "a pod created with an assignment (and spec.nodeName) is refused" \
  guarded accelpool.io/assignment as_tenant create -f - <<<"${forged}"
check "a pod created with an empty assignment is refused" guarded accelpool.io/assignment \
  as_tenant create -f - <<<"$(guard_pod forged-empty '{"accelpool.io/assignment":""}')"
check "a pod created with an assignment signature is refused" guarded accelpool.io/assignment-signature \
  as_tenant create -f - <<<"$(guard_pod forged-sig '{"accelpool.io/assignment-signature":"v1.k1.x"}')"
check "a pod created with an allocation is refused" guarded accelpool.io/allocation \
  as_tenant create -f - <<<"$(guard_pod forged-alloc '{"accelpool.io/allocation":"{}"}')"
check "a pod created without them is admitted" as_tenant create -f - <<<"$(guard_pod guard-a)"
binding_lands() { # the Binding, as the scheduler's service account, carries the assignment
  as_scheduler create --raw /api/v1/namespaces/default/pods/guard-a/binding -f - >/dev/null <<JSON &&
{"apiVersion":"v1","kind":"Binding","metadata":{"name":"guard-a","annotations":{"accelpool.io/assignment":$(jq -Rc . <<<"${ANN_A}"),"accelpool.io/assignment-signature":"v1.k1.sig"}},
 "target":{"apiVersion":"v1","kind":"Node","name":"np-a"}}
JSON
  [ "$("${K}" -n default get pod guard-a -o jsonpath='{.metadata.annotations.accelpool\.io/assignment}')" = "${ANN_A}" ] &&
    [ "$("${K}" -n default get pod guard-a -o jsonpath='{.metadata.annotations.accelpool\.io/assignment-signature}')" = "v1.k1.sig" ]
}
check "the Binding still writes the assignment and its signature" binding_lands
check "the tenant cannot change the assignment signature" guarded accelpool.io/assignment-signature \
  as_tenant annotate --overwrite pod guard-a accelpool.io/assignment-signature=v1.k1.other
check "the tenant cannot change the assignment" guarded accelpool.io/assignment \
  as_tenant annotate --overwrite pod guard-a accelpool.io/assignment='{"version":1}'
check "the tenant cannot remove the assignment" guarded accelpool.io/assignment \
  as_tenant annotate pod guard-a accelpool.io/assignment-
check "the tenant may still label and annotate the pod" bash -c \
  "'${K}' --as tenant -n default label pod guard-a team=a && '${K}' --as tenant -n default annotate pod guard-a note=x"
check "the plugin may change the allocation of a pod on its node" \
  as_plugin -n default annotate --overwrite pod work-np-a accelpool.io/allocation=y
check "the tenant cannot change the allocation" guarded accelpool.io/allocation \
  as_tenant annotate --overwrite pod work-np-a accelpool.io/allocation=z
check "an admin (system:masters) may repair the assignment by hand" \
  "${K}" -n default annotate pod guard-a accelpool.io/assignment-

# The device-env guard (templates/env-guard.yaml): no pod outside the exempt namespaces may set,
# in a container's env, a variable the device plugin grants devices and limits through, whatever it
# asks for and whatever its labels; nor may an ephemeral container added later. A pod made before
# the policy keeps being updatable. The chart's own plugin pods (release namespace) and kube-system
# are exempt, and so is a namespace named in envGuard.exemptNamespaces.
env_pod() { # name namespace env-json [extra-spec-json] [labels-json]
  jq -nc --arg n "$1" --arg ns "$2" --argjson env "$3" --argjson x "${4:-"{}"}" --argjson l "${5:-"{}"}" \
    '{apiVersion: "v1", kind: "Pod", metadata: {name: $n, namespace: $ns, labels: $l},
      spec: ({containers: [{name: "c", image: "x", env: $env}]} + $x)}'
}
ALL_GPUS='[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]'
"${K}" create -f - >/dev/null <<<"$(env_pod env-before default "${ALL_GPUS}")"
"${K}" create namespace gpu-ops >/dev/null
for ns in kube-system gpu-ops; do "${K}" -n "${ns}" create serviceaccount default >/dev/null 2>&1 || true; done
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --set-json 'envGuard.exemptNamespaces=["kube-system","gpu-ops"]' \
  --show-only templates/env-guard.yaml > "${TMP}/env-guard.yaml"
check "the device-env guard applies" "${K}" apply -f "${TMP}/env-guard.yaml"
env_refused() { # what command... : must fail, naming WHAT (e.g. "container c sets NVIDIA_VISIBLE_DEVICES")
  local what="$1" out; shift
  if out="$("$@" 2>&1)"; then echo "allowed: ${out}"; return 1; fi
  grep -qF "${what} in its env: accelpool's device plugin sets that variable" <<<"${out}" ||
    { echo "refused for another reason: ${out}"; return 1; }
}
tenant_creates() { as_tenant create --dry-run=server -f - <<<"$1"; }
for _ in $(seq 1 40); do
  env_refused "container c sets NVIDIA_VISIBLE_DEVICES" tenant_creates "$(env_pod probe default "${ALL_GPUS}")" >/dev/null && break
  sleep 0.5
done
check "a pod asking for no device with NVIDIA_VISIBLE_DEVICES=all is refused" \
  env_refused "container c sets NVIDIA_VISIBLE_DEVICES" tenant_creates "$(env_pod all-gpus default "${ALL_GPUS}")"
check "the accelpool.io/skip=true label does not skip it" \
  env_refused "container c sets NVIDIA_VISIBLE_DEVICES" tenant_creates \
  "$(env_pod skipped default "${ALL_GPUS}" '{}' '{"accelpool.io/skip":"true"}')"
check "a value from a Secret or a field is refused too (names, not values, are checked)" \
  env_refused "container c sets NVIDIA_VISIBLE_DEVICES" tenant_creates "$(env_pod from-field default \
  '[{"name":"NVIDIA_VISIBLE_DEVICES","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]')"
check "an init container setting ACCELPOOL_CUDA_MEMORY_LIMIT_0 (a prefix) is refused" \
  env_refused "init container i sets ACCELPOOL_CUDA_MEMORY_LIMIT_0" tenant_creates "$(env_pod init-cap default '[]' \
  '{"initContainers":[{"name":"i","image":"x","env":[{"name":"ACCELPOOL_CUDA_MEMORY_LIMIT_0","value":"999999"}]}]}')"
check "every other runtime-hook list and limit is refused, each named" \
  env_refused "container c sets ASCEND_VISIBLE_DEVICES, CUDA_MPS_PIPE_DIRECTORY, NVIDIA_IMEX_CHANNELS, CUDA_DEVICE_MEMORY_LIMIT_0" \
  tenant_creates "$(env_pod many default '[{"name":"ASCEND_VISIBLE_DEVICES","value":"0-7"},{"name":"CUDA_MPS_PIPE_DIRECTORY","value":"/tmp/nvidia-mps"},{"name":"PATH","value":"/bin"},{"name":"NVIDIA_IMEX_CHANNELS","value":"all"},{"name":"CUDA_DEVICE_MEMORY_LIMIT_0","value":"80g"}]')"
env_admitted() { # what pod-json: created with --dry-run=server as the tenant
  tenant_creates "$2" >/dev/null || { echo "$1 refused"; tenant_creates "$2"; return 1; }
}
env_allowed_table() {
  env_admitted void "$(env_pod void default '[{"name":"NVIDIA_VISIBLE_DEVICES","value":"void"}]')" &&
    env_admitted none "$(env_pod none default '[{"name":"NVIDIA_VISIBLE_DEVICES","value":"none"}]')" &&
    env_admitted empty "$(env_pod empty default '[{"name":"NVIDIA_VISIBLE_DEVICES","value":""}]')" &&
    env_admitted CUDA_VISIBLE_DEVICES "$(env_pod cvd default '[{"name":"CUDA_VISIBLE_DEVICES","value":"0"}]')" &&
    env_admitted no-env "$(env_pod plain default '[]')" &&
    env_admitted envFrom "$(env_pod env-from default '[]' '{"containers":[{"name":"c","image":"x","envFrom":[{"configMapRef":{"name":"gpus"}}]}]}')"
}
check "admitted: NVIDIA_VISIBLE_DEVICES void, none or \"\" (no GPU), CUDA_VISIBLE_DEVICES, no env, envFrom (not visible to admission: the toolkit setting closes it)" \
  env_allowed_table
env_exempt() {
  "${K}" create --dry-run=server -f - >/dev/null <<<"$(env_pod sys kube-system "${ALL_GPUS}")" &&
    "${K}" create --dry-run=server -f - >/dev/null <<<"$(env_pod ops gpu-ops "${ALL_GPUS}")" &&
    psa_pods "${TMP}/psa-privileged.yaml" accelpool-system DaemonSet > "${TMP}/env-plugins.json" &&
    grep -q NVIDIA_VISIBLE_DEVICES "${TMP}/env-plugins.json" &&
    [ "$("${K}" create --dry-run=server -o name -f "${TMP}/env-plugins.json" | grep -c '^pod/')" = "$(grep -c . "${TMP}/env-plugins.json")" ]
}
check "exempt: kube-system, a namespace in envGuard.exemptNamespaces, and the chart's own plugin pods in the release namespace" env_exempt
check "a pod created before the policy, with NVIDIA_VISIBLE_DEVICES, may still be labelled (its env is unchanged)" \
  as_tenant label pod env-before team=a
"${K}" create -f - >/dev/null <<<"$(env_pod debug-me default '[]')"
add_ephemeral() { # pod name env-json: PUT the pod's ephemeralcontainers subresource with one more
  "${K}" -n default get pod "$1" -o json |
    jq --arg n "$2" --argjson env "$3" '.spec.ephemeralContainers += [{name: $n, image: "x", env: $env}]' |
    "${K}" replace --raw "/api/v1/namespaces/default/pods/$1/ephemeralcontainers" -f - >/dev/null
}
check "an ephemeral container (kubectl debug) with NVIDIA_VISIBLE_DEVICES=all is refused" \
  env_refused "ephemeral container dbg1 sets NVIDIA_VISIBLE_DEVICES" add_ephemeral debug-me dbg1 "${ALL_GPUS}"
check "an ephemeral container without it is added" add_ephemeral debug-me dbg2 '[{"name":"DEBUG","value":"1"}]'
check "a second one beside the first (now old) is checked alone" \
  env_refused "ephemeral container dbg3 sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" \
  add_ephemeral debug-me dbg3 '[{"name":"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE","value":"100"}]'
"${K}" delete -f "${TMP}/env-guard.yaml" >/dev/null
"${K}" -n default delete pod env-before debug-me --grace-period=0 --force >/dev/null 2>&1

# certgen: create the Secret (idempotent), patch a webhook's caBundle. The test
# webhook matches no pod (objectSelector), so the apiserver never calls it.
certgen() {
  ACCELPOOL_APISERVER="${APISERVER_URL}" ACCELPOOL_CACERT="${E2E_CA}" \
  ACCELPOOL_CURL_AUTH="--cert ${E2E_WORK}/pki/admin.crt --key ${E2E_WORK}/pki/admin.key" \
    "${REPO}/scripts/accelpool-certgen.sh" "$@"
}
idle_webhook() { # NAME: a MutatingWebhookConfiguration without a caBundle that matches no pod
  "${K}" apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: $1}
webhooks:
- name: pods.mutate.accelpool.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig: {service: {name: accelpool-scheduler, namespace: accelpool-system, path: /mutate}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  objectSelector: {matchLabels: {accelpool.io/never: "true"}}
YAML
}
idle_webhook certgen-check
check "certgen creates the TLS secret" certgen create --namespace=accelpool-system --secret=tls-check \
  --hosts=svc,svc.accelpool-system.svc,localhost,127.0.0.1 --days=30
certgen_keeps() { certgen create --namespace=accelpool-system --secret=tls-check --hosts=x | grep_output -q 'keeping it'; }
check "certgen keeps an existing secret" certgen_keeps
cert_valid() {
  "${K}" -n accelpool-system get secret tls-check -o jsonpath='{.data.tls\.crt}' | base64 -d > "${TMP}/tls.crt"
  "${K}" -n accelpool-system get secret tls-check -o jsonpath='{.data.ca\.crt}' | base64 -d > "${TMP}/ca.crt"
  openssl verify -CAfile "${TMP}/ca.crt" "${TMP}/tls.crt" &&
    openssl x509 -in "${TMP}/tls.crt" -noout -ext subjectAltName | grep_output -q 'IP Address:127.0.0.1'
}
check "the certificate chains to its CA and names 127.0.0.1" cert_valid
check "certgen patches the webhook caBundle" certgen patch --namespace=accelpool-system --secret=tls-check --webhook=certgen-check
ca_bundle_set() {
  [ "$("${K}" get mutatingwebhookconfiguration certgen-check -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = \
    "$("${K}" -n accelpool-system get secret tls-check -o jsonpath='{.data.ca\.crt}')" ]
}
check "the caBundle equals the secret's ca.crt" ca_bundle_set
ca_bundle_rendered() { # on upgrades and rollbacks the chart renders the caBundle itself: `lookup` of
  # the existing TLS Secret (helm template --dry-run=server looks it up like install/upgrade do)
  certgen create --namespace=accelpool-system --secret=accelpool-extender-tls --hosts=x --days=30 >/dev/null &&
    "${HELM}" template accelpool "${CHART}" --namespace accelpool-system --dry-run=server \
      --kube-version v1.37.2 --show-only templates/webhook.yaml > "${TMP}/webhook-lookup.yaml" &&
    [ "$(awk '$1 == "caBundle:" {print $2}' "${TMP}/webhook-lookup.yaml")" = \
      "$("${K}" -n accelpool-system get secret accelpool-extender-tls -o jsonpath='{.data.ca\.crt}')" ] &&
    "${K}" apply --dry-run=server -f "${TMP}/webhook-lookup.yaml" >/dev/null
}
check "with the TLS Secret present, the webhook renders with its caBundle (lookup)" ca_bundle_rendered
# The caBundle guard (templates/webhook-ca-guard.yaml): the scheduler pod's service account, which
# RBAC lets patch the chart's webhook configuration (the rules applied above), may write the
# webhooks' caBundle and change nothing else of it. The webhook is the chart's own, rendered; its
# service is not called (failurePolicy Ignore, and it is deleted before the HA checks below, which
# make their own and have the extender write its caBundle through this policy).
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --set webhook.hostPods.route=true --set-string 'webhook.hostPods.objectSelector.matchLabels.accelpool\.io/never=true' \
  --show-only templates/webhook.yaml --show-only templates/webhook-ca-guard.yaml > "${TMP}/ca-guard.yaml"
check "the webhook (two entries) and its caBundle guard apply" "${K}" apply -f "${TMP}/ca-guard.yaml"
ca_guarded() { # command... : must fail, naming the guard's rule
  local out
  if out="$("$@" 2>&1)"; then echo "allowed: ${out}"; return 1; fi
  grep -q "may change only webhooks\[\*\].clientConfig.caBundle" <<<"${out}" ||
    { echo "refused for another reason: ${out}"; return 1; }
}
as_extender_patch() { as_scheduler patch mutatingwebhookconfiguration accelpool-webhook --type=json -p "$1"; }
for _ in $(seq 1 40); do
  ca_guarded as_scheduler patch mutatingwebhookconfiguration accelpool-webhook --dry-run=server --type=json \
    -p '[{"op":"replace","path":"/webhooks/0/timeoutSeconds","value":7}]' >/dev/null && break
  sleep 0.5
done
CA_B64="$(printf 'not a CA, only bytes' | base64 -w0)"
ca_guard_writes() { # the extender's own patch: test the resourceVersion, add each webhook's caBundle
  local rv
  rv="$("${K}" get mutatingwebhookconfiguration accelpool-webhook -o jsonpath='{.metadata.resourceVersion}')"
  as_extender_patch "[{\"op\":\"test\",\"path\":\"/metadata/resourceVersion\",\"value\":\"${rv}\"},
    {\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"${CA_B64}\"},
    {\"op\":\"add\",\"path\":\"/webhooks/1/clientConfig/caBundle\",\"value\":\"${CA_B64}\"}]" >/dev/null &&
    [ "$("${K}" get mutatingwebhookconfiguration accelpool-webhook -o jsonpath='{.webhooks[*].clientConfig.caBundle}')" = "${CA_B64} ${CA_B64}" ]
}
check "the extender's service account may write the webhooks' caBundle (its JSON patch)" ca_guard_writes
ca_guard_table() { # each patch the extender's service account might try, refused
  local rc=0 p
  while read -r p; do
    [ -z "${p}" ] && continue
    ca_guarded as_extender_patch "${p}" >/dev/null || { echo "patch ${p}:"; ca_guarded as_extender_patch "${p}"; rc=1; }
  done <<'PATCHES'
[{"op":"replace","path":"/webhooks/0/rules/0/resources","value":["secrets"]}]
[{"op":"add","path":"/webhooks/0/rules/-","value":{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["secrets"]}}]
[{"op":"replace","path":"/webhooks/0/rules/0/operations","value":["CREATE","UPDATE"]}]
[{"op":"remove","path":"/webhooks/0/objectSelector"}]
[{"op":"replace","path":"/webhooks/0/objectSelector","value":{}}]
[{"op":"replace","path":"/webhooks/0/namespaceSelector","value":{}}]
[{"op":"remove","path":"/webhooks/0/matchConditions"}]
[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]
[{"op":"replace","path":"/webhooks/0/sideEffects","value":"NoneOnDryRun"}]
[{"op":"replace","path":"/webhooks/0/timeoutSeconds","value":30}]
[{"op":"replace","path":"/webhooks/0/admissionReviewVersions","value":["v1","v1beta1"]}]
[{"op":"replace","path":"/webhooks/0/reinvocationPolicy","value":"IfNeeded"}]
[{"op":"replace","path":"/webhooks/0/matchPolicy","value":"Exact"}]
[{"op":"replace","path":"/webhooks/0/clientConfig/service/namespace","value":"default"}]
[{"op":"replace","path":"/webhooks/0/clientConfig/service/path","value":"/other"}]
[{"op":"remove","path":"/webhooks/0/clientConfig/service"},{"op":"add","path":"/webhooks/0/clientConfig/url","value":"https://attacker.example/mutate"}]
[{"op":"replace","path":"/webhooks/1/objectSelector","value":{}}]
[{"op":"replace","path":"/webhooks/1/name","value":"other.mutate.accelpool.io"}]
[{"op":"remove","path":"/webhooks/1"}]
[{"op":"move","from":"/webhooks/1","path":"/webhooks/0"}]
[{"op":"add","path":"/webhooks/-","value":{"name":"extra.mutate.accelpool.io","admissionReviewVersions":["v1"],"sideEffects":"None","clientConfig":{"url":"https://attacker.example/"},"rules":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*"]}]}}]
[{"op":"add","path":"/metadata/labels/extra","value":"x"}]
[{"op":"replace","path":"/metadata/labels/app.kubernetes.io~1managed-by","value":"x"}]
[{"op":"add","path":"/metadata/annotations","value":{"x":"y"}}]
[{"op":"add","path":"/metadata/finalizers","value":["example.com/keep"]}]
PATCHES
  return "${rc}"
}
check "the extender's service account may change nothing else of it: rules, selectors, matchConditions, policies, clientConfig.service/url, webhooks added, removed, renamed or reordered, metadata (25 cases)" \
  ca_guard_table
ca_guard_admin() { # Helm, as an admin, still changes the webhook (upgrades); the caBundle stays
  "${K}" patch mutatingwebhookconfiguration accelpool-webhook --type=json \
    -p '[{"op":"replace","path":"/webhooks/0/timeoutSeconds","value":7}]' >/dev/null &&
    [ "$("${K}" get mutatingwebhookconfiguration accelpool-webhook -o jsonpath='{.webhooks[0].timeoutSeconds}')" = 7 ]
}
check "an admin (Helm) may still change the webhook configuration" ca_guard_admin
check "another service account is not held by the guard, and RBAC refuses it" bash -c \
  "out=\$('${K}' --as system:serviceaccount:default:default patch mutatingwebhookconfiguration accelpool-webhook --type=json -p '[{\"op\":\"replace\",\"path\":\"/webhooks/0/timeoutSeconds\",\"value\":9}]' 2>&1); [ \$? != 0 ] && grep -q 'forbidden: User' <<<\"\${out}\" && ! grep -q caBundle <<<\"\${out}\""
"${K}" delete mutatingwebhookconfiguration accelpool-webhook >/dev/null
check "certgen creates the assignment key secret" certgen key --namespace=accelpool-system --secret=key-check
key_form() { # "signing" names k1; k1 is 64 characters of base64 (48 random bytes)
  [ "$("${K}" -n accelpool-system get secret key-check -o jsonpath='{.data.signing}' | base64 -d)" = k1 ] &&
    [ "$("${K}" -n accelpool-system get secret key-check -o jsonpath='{.data.k1}' | base64 -d | wc -c)" = 64 ]
}
check "the key secret holds signing=k1 and a 64-character k1" key_form
key_kept() {
  local before; before="$("${K}" -n accelpool-system get secret key-check -o jsonpath='{.data.k1}')"
  certgen key --namespace=accelpool-system --secret=key-check | grep_output -q 'keeping it' &&
    [ "$("${K}" -n accelpool-system get secret key-check -o jsonpath='{.data.k1}')" = "${before}" ]
}
check "certgen keeps an existing key secret (upgrades never rotate the key)" key_kept
# accelpool-keys rotate as the rotation CronJob's service account, with the chart's RBAC rendered
# for the key Secret above, proves the Role and ClusterRole are enough. np-b reports holding only k1
# but is not Ready: accelpool-keys lists nodes as metadata and then GETs each node still without the
# new key (50 or fewer) for its Ready condition, so this exercises that read (a ClusterRole with only
# list fails it with 403); a node that is not Ready is not waited for, so the switch happens.
# rot-held (bound below with an assignment signed by k1, never admitted: no kubelet runs here) holds
# the old key: the first run stops at step 2 naming it, and once it is deleted the next run resumes
# and drops k1. guard-a (bound above with a made-up k1 signature) holds nothing.
# Reading another Secret is refused.
KEYS_BIN="${E2E_KEYS_BIN:-${REPO}/build/src/cmd/accelpool-keys}"
"${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
  --set assignmentSigning.secretName=key-check --show-only templates/assignment-key-rotation.yaml \
  > "${TMP}/rotation.yaml"
check "the key rotation's RBAC and CronJob apply" "${K}" apply -f "${TMP}/rotation.yaml"
rotation_kubeconfig() {
  [ -x "${KEYS_BIN}" ] || { echo "no ${KEYS_BIN}: build the project first (scripts/build.sh)"; return 1; }
  local token
  token="$("${K}" -n accelpool-system create token accelpool-assignment-key-rotation --duration 10m)" || return 1
  token_kubeconfig "${TMP}/rotation.kubeconfig" "${token}"
}
rotation_rbac_table() { # accelpool-keys rotate lists nodes, GETs those still without the new key
  # (their Ready condition) and lists pending pods; it changes nothing but the key Secret
  can_i_rows <<'ROWS'
yes accelpool-assignment-key-rotation get nodes
yes accelpool-assignment-key-rotation list nodes
yes accelpool-assignment-key-rotation list pods
yes accelpool-assignment-key-rotation get secrets/key-check -n accelpool-system
yes accelpool-assignment-key-rotation patch secrets/key-check -n accelpool-system
no accelpool-assignment-key-rotation patch nodes
no accelpool-assignment-key-rotation update nodes
no accelpool-assignment-key-rotation watch nodes
no accelpool-assignment-key-rotation get pods
no accelpool-assignment-key-rotation patch pods
no accelpool-assignment-key-rotation delete pods
no accelpool-assignment-key-rotation list secrets -n accelpool-system
ROWS
}
check "the rotation's RBAC: get and list nodes, list pods, the key Secret only (12 cases)" rotation_rbac_table
check "a token and kubeconfig for the rotation's service account" rotation_kubeconfig
keys_as_cronjob() { # accelpool-keys COMMAND [flags] as the CronJob's service account, on key-check
  local cmd="$1"; shift
  "${KEYS_BIN}" "${cmd}" --kubeconfig="${TMP}/rotation.kubeconfig" --namespace=accelpool-system \
    --secret=key-check "$@"
}
key_secret_is() { # SIGNING KEYS-JSON
  [ "$("${K}" -n accelpool-system get secret key-check -o jsonpath='{.data.signing}' | base64 -d)" = "$1" ] &&
    [ "$("${K}" -n accelpool-system get secret key-check -o json | jq -c '[.data | keys[] | select(. != "signing")]')" = "$2" ]
}
np_b_reports_k1_not_ready() { # as an admin: np-b's plugin reported k1, then its kubelet went NotReady
  local t; t="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  "${K}" annotate node np-b accelpool.io/assignment-keys=k1 >/dev/null &&
    "${K}" patch node np-b --subresource=status --type=merge -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"KubeletNotReady\",\"message\":\"chart-check\",\"lastHeartbeatTime\":\"${t}\",\"lastTransitionTime\":\"${t}\"}]}}" >/dev/null &&
    [ "$("${K}" get node np-b -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = False ]
}
check "node np-b reports assignment key k1 and is not Ready" np_b_reports_k1_not_ready
signed_binding() { # POD: bound to np-a by the scheduler, ANN_A signed with key-check's k1
  as_tenant create -f - <<<"$(guard_pod "$1")" >/dev/null || return 1
  local uid hexkey sig
  uid="$("${K}" -n default get pod "$1" -o jsonpath='{.metadata.uid}')" || return 1
  hexkey="$("${K}" -n accelpool-system get secret key-check -o jsonpath='{.data.k1}' | base64 -d |
    od -An -v -tx1 | tr -d ' \n')" || return 1
  sig="v1.k1.$(printf 'accelpool.io/assignment v1\n%s\n%s\n%s' "${uid}" np-a "${ANN_A}" |
    openssl dgst -sha256 -mac HMAC -macopt "hexkey:${hexkey}" -binary | base64 -w0 | tr '+/' '-_' |
    tr -d '=')" || return 1
  as_scheduler create --raw "/api/v1/namespaces/default/pods/$1/binding" -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Binding","metadata":{"name":"$1","annotations":{"accelpool.io/assignment":$(jq -Rc . <<<"${ANN_A}"),"accelpool.io/assignment-signature":"${sig}"}},
 "target":{"apiVersion":"v1","kind":"Node","name":"np-a"}}
JSON
}
check "rot-held is bound to np-a with an assignment signed by key-check's k1" signed_binding rot-held
rotation_waits_for_not_ready() {  # by default a node that is not Ready is waited for
  local out
  if out="$(keys_as_cronjob rotate --settle=0s --poll=1s --node-timeout=3s --drain-timeout=3s 2>&1)"; then
    echo "rotate switched without np-b: ${out}"; return 1
  fi
  grep -q 'Not Ready among them: np-b' <<<"${out}" && grep -q -- '--skip-not-ready' <<<"${out}" &&
    key_secret_is k1 '["k1","k2"]'
}
check "rotate waits for np-b (not Ready, without k2) and stops at step 1 naming it and --skip-not-ready" \
  rotation_waits_for_not_ready
rotation_held() {
  local out
  if out="$(keys_as_cronjob rotate --skip-not-ready --settle=0s --poll=1s --node-timeout=30s --drain-timeout=3s 2>&1)"; then
    echo "rotate finished while rot-held holds k1: ${out}"; return 1
  fi
  if grep -q 'reading node np-b' <<<"${out}"; then echo "the rotation could not GET node np-b: ${out}"; return 1; fi
  grep -q '"msg":"step 2 of 3: [^}]*"not_ready":1' <<<"${out}" &&
    grep -q 'default/rot-held (key k1, node np-a)' <<<"${out}" && grep -q 'stays at step 2' <<<"${out}" &&
    key_secret_is k2 '["k1","k2"]' && keys_as_cronjob status | grep_output -q 'step 2 of 3 done' &&
    keys_as_cronjob status --output=json | jq -e '.phase == "switched" and .signing == "k2" and
      .keys == ["k1","k2"] and .pods_with_old_keys == ["default/rot-held (key k1, node np-a)"]' >/dev/null
}
check "with --skip-not-ready, rotate resumes, and stops at step 2 while rot-held (signed with k1) awaits admission, naming it and not guard-a" \
  rotation_held
rotation_resumed() {
  "${K}" -n default delete pod rot-held guard-a --grace-period=0 --force >/dev/null 2>&1
  keys_as_cronjob rotate --skip-not-ready --settle=0s --poll=1s --node-timeout=30s --drain-timeout=30s &&
    key_secret_is k2 '["k2"]' && keys_as_cronjob status | grep_output -q 'rotation: none under way'
}
check "with rot-held gone, a second run resumes and drops k1 (no third key)" rotation_resumed
check "the rotation's service account may read the extender's leader Lease, and no other" \
  bash -c "[ \"\$('${K}' auth can-i --as system:serviceaccount:accelpool-system:accelpool-assignment-key-rotation -n accelpool-system get leases.coordination.k8s.io/accelpool-extender 2>/dev/null)\" = yes ] && [ \"\$('${K}' auth can-i --as system:serviceaccount:accelpool-system:accelpool-assignment-key-rotation -n accelpool-system get leases.coordination.k8s.io/other 2>/dev/null)\" = no ]"
check "the rotation's service account may not read another Secret" \
  can_i no accelpool-assignment-key-rotation get secrets/tls-check -n accelpool-system
check "the rotation's service account may not patch nodes or pods" \
  bash -c "! '${K}' auth can-i --as system:serviceaccount:accelpool-system:accelpool-assignment-key-rotation patch nodes 2>/dev/null | grep -q yes && ! '${K}' auth can-i --as system:serviceaccount:accelpool-system:accelpool-assignment-key-rotation patch pods 2>/dev/null | grep -q yes"
certgen_rejects() {
  local out
  if out="$(certgen create --bogus 2>&1)"; then return 1; fi
  grep -q 'unknown argument' <<<"${out}"
}
check "certgen rejects a bad argument with a hint" certgen_rejects
"${K}" delete mutatingwebhookconfiguration certgen-check >/dev/null

# The device plugin under a read-only root filesystem, as the chart runs it: in a mount namespace
# where every mount but a tmpfs standing for its writable volumes (kubelet's device-plugin dir, the
# state root, /tmp) is remounted read-only, the plugin (fake backend, no apiserver) registers its
# socket and reports itself healthy.
DP_BIN="${E2E_DEVICE_PLUGIN_BIN:-${REPO}/build/src/cmd/device_plugin/accelpool-device-plugin}"
plugin_read_only_root() {
  [ -x "${DP_BIN}" ] || { echo "no ${DP_BIN}: build the project first (scripts/build.sh)"; return 1; }
  local port; port="$(free_port)"
  unshare -m bash -s "${DP_BIN}" "${port}" <<'RO'
set -eu
bin="$1" port="$2" w=/run/accelpool-ro-check
mount --make-rprivate /
mkdir -p "${w}" && mount -t tmpfs tmpfs "${w}"
mkdir -p "${w}/kubelet" "${w}/state" "${w}/tmp"
cp "${bin}" "${w}/accelpool-device-plugin"
echo '{"version":1,"inventories":[{"vendor":"nvidia","profile":"nvidia-pcie-8","model":"A10"}]}' > "${w}/inventory.json"
findmnt -rn -o TARGET | grep -Ev "^(${w}|/proc|/sys|/dev)(/|$)" | while read -r m; do
  mount -o remount,bind,ro "${m}" 2>/dev/null || true
done
if touch /etc/accelpool-ro-check 2>/dev/null; then rm -f /etc/accelpool-ro-check; echo "/etc is still writable"; exit 1; fi
HOME="${w}/tmp" TMPDIR="${w}/tmp" "${w}/accelpool-device-plugin" --backend=fake --fake-inventory="${w}/inventory.json" \
  --node-name=ro-check --no-kube --device-plugin-dir="${w}/kubelet" --metrics-listen="127.0.0.1:${port}" \
  --state-root="${w}/state" --cuda-library="${w}/lib/libaccelpool-cuda.so" --preload-file="${w}/ld.so.preload" \
  > "${w}/log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 1 50); do
  if curl -fsS --max-time 1 "http://127.0.0.1:${port}/healthz" 2>/dev/null | grep -q '"serving":true' &&
     [ -S "${w}/kubelet/accelpool-nvidia.com_gpu.sock" ]; then ok=1; break; fi
  sleep 0.2
done
kill "${pid}" 2>/dev/null || true
wait "${pid}" 2>/dev/null || true
[ "${ok}" = 1 ] || { tail -20 "${w}/log"; exit 1; }
RO
}
check "the device plugin serves with a read-only root filesystem (writable: kubelet's dir, the state root, /tmp)" plugin_read_only_root

# Two scheduler pods of the chart, each a kube-scheduler with the chart's
# configuration (leader election on, lease timings shortened) and an extender
# with the chart's leadership flags, as the scheduler's service account. The
# two containers of a pod share a host name; here each "pod" is a UTS
# namespace with its own. The active extender must be the one beside the
# leading kube-scheduler (which calls only its own pod's extender), and it
# must move with it. After the rotation checks above: the Lease written here
# would otherwise be waited for.
EXT_BIN="${E2E_EXTENDER_BIN:-${REPO}/build/src/cmd/accelpool-extender}"
ha_setup() {
  [ -x "${EXT_BIN}" ] || { echo "no ${EXT_BIN}: build the project first (scripts/build.sh)"; return 1; }
  unshare --uts true 2>/dev/null && command -v nsenter >/dev/null ||
    { echo "unshare --uts failed or no nsenter: run chart-check as root (it gives each scheduler pod a host name)"; return 1; }
  local token
  token="$("${K}" -n accelpool-system create token accelpool-scheduler --duration 10m)" || return 1
  token_kubeconfig "${TMP}/sched-sa.kubeconfig" "${token}"
  mkdir -p "${TMP}/ha-keys" && head -c 48 /dev/urandom | base64 -w0 > "${TMP}/ha-keys/k1" &&
    printf k1 > "${TMP}/ha-keys/signing"
  "${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
    --set scheduler.replicas=2 --show-only templates/scheduler-deployment.yaml > "${TMP}/ha-deploy.yaml"
  "${HELM}" template accelpool "${CHART}" --namespace accelpool-system --kube-version v1.37.2 \
    --set scheduler.replicas=2 --show-only templates/scheduler-config.yaml |
    awk '/^  config.yaml: \|/ {on=1; next} on {sub(/^    /, ""); print}' > "${TMP}/ha-sched.base.yaml"
  # The extender's leadership flags exactly as the chart renders them.
  HA_FLAGS=()
  local f
  for f in scheduler-lease lease-namespace webhook-ca-bundle; do
    HA_FLAGS+=("$(grep -o -- "- --${f}=.*" "${TMP}/ha-deploy.yaml" | cut -c3-)")
  done
  [ "${HA_FLAGS[0]}" = --scheduler-lease=accelpool-system/accelpool-scheduler ] || { echo "flags: ${HA_FLAGS[*]}"; return 1; }
  # The webhook the chart's extender keeps (this one matches no pod), without a
  # caBundle, as a first install creates it; and a CA for --webhook-ca-file.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=ha-ca \
    -keyout "${TMP}/ha-ca.key" -out "${TMP}/ha-ca.crt" 2>/dev/null || return 1
  HA_FLAGS+=("--webhook-ca-file=${TMP}/ha-ca.crt")
  idle_webhook accelpool-webhook
}
ha_pod() { # NAME: a "pod" (a UTS namespace with host name NAME, held by a pause process),
  # its kube-scheduler and its extender, each entering that namespace as a container would
  local name="$1" xport lport pause
  unshare --uts bash -c "hostname ${name} && exec sleep 3600" &
  pause=$!
  HA_PIDS+=("${pause}")
  echo "${pause}" > "${TMP}/${name}-pause.pid"
  for _ in $(seq 1 50); do [ "$(nsenter --uts --target "${pause}" hostname 2>/dev/null)" = "${name}" ] && break; sleep 0.1; done
  xport="$(free_port)" lport="$(free_port "${xport}")"
  sed -e "s|^clientConnection:|clientConnection:\n  kubeconfig: ${TMP}/sched-sa.kubeconfig|" \
      -e "s|  leaderElect: true|  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 1s|" \
      -e "s|urlPrefix: http://127.0.0.1:[0-9]*|urlPrefix: http://127.0.0.1:${lport}|" \
      "${TMP}/ha-sched.base.yaml" > "${TMP}/${name}-sched.yaml"
  ha_sched "${name}"
  # shellcheck disable=SC2068 # the chart's flags, one word each
  nsenter --uts --target "${pause}" "${EXT_BIN}" --listen="127.0.0.1:${xport}" \
    --scheduler-listen="127.0.0.1:${lport}" --kubeconfig="${TMP}/sched-sa.kubeconfig" \
    --assignment-key-dir="${TMP}/ha-keys" ${HA_FLAGS[@]} >> "${TMP}/${name}-ext.log" 2>&1 &
  HA_PIDS+=("$!")
  printf '%s' "${xport}" > "${TMP}/${name}-ext.port"
}
ha_sched() { # NAME: (re)start the kube-scheduler container of pod NAME
  nsenter --uts --target "$(cat "${TMP}/$1-pause.pid")" "${BIN}/kube-scheduler" \
    --config "${TMP}/$1-sched.yaml" --bind-address 127.0.0.1 --secure-port "$(free_port)" \
    --authentication-kubeconfig "${E2E_WORK}/config/scheduler.kubeconfig" \
    --authorization-kubeconfig "${E2E_WORK}/config/scheduler.kubeconfig" >> "${TMP}/$1-sched.log" 2>&1 &
  echo "$!" > "${TMP}/$1-sched.pid"
  HA_PIDS+=("$!")
}
ext_get() { curl -fsS --max-time 3 "http://127.0.0.1:$(cat "${TMP}/$1-ext.port")$2"; }
leading() { ext_get "$1" /metrics | awk '$1 == "accelpool_extender_leader" {print $2}'; }
sched_holder() { "${K}" -n accelpool-system get lease accelpool-scheduler -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
report_lease() { "${K}" -n accelpool-system get lease accelpool-extender \
  -o jsonpath='{.spec.holderIdentity} {.metadata.annotations.accelpool\.io/assignment-signing-key}' 2>/dev/null; }
ha_started() {
  ha_setup || return 1
  ha_pod sched-a && ha_pod sched-b
  local i
  for i in $(seq 1 60); do
    ext_get sched-a /readyz >/dev/null 2>&1 && ext_get sched-b /readyz >/dev/null 2>&1 &&
      [ -n "$(sched_holder)" ] && return 0
    sleep 0.5
  done
  echo "not ready after 30 s; scheduler holder '$(sched_holder)'"
  tail -n 5 "${TMP}"/sched-*-ext.log "${TMP}"/sched-*-sched.log
  return 1
}
check "two scheduler pods (kube-scheduler + extender, host names sched-a and sched-b) start; both extenders ready" ha_started
HA_LEADER="" HA_OTHER=""
one_active() { # exactly the extender beside the kube-scheduler holding the Lease leads, and reports itself
  local holder i
  for i in $(seq 1 20); do
    holder="$(sched_holder)"
    HA_LEADER="${holder%%_*}"
    case "${HA_LEADER}" in sched-a) HA_OTHER=sched-b;; sched-b) HA_OTHER=sched-a;; *) sleep 0.5; continue;; esac
    if [ "$(leading "${HA_LEADER}")" = 1 ] && [ "$(leading "${HA_OTHER}")" = 0 ] &&
       [[ "$(report_lease)" == "${HA_LEADER}-"*" k1" ]]; then
      return 0
    fi
    sleep 0.5
  done
  echo "scheduler holder '${holder}'; leader gauge sched-a=$(leading sched-a) sched-b=$(leading sched-b); report '$(report_lease)'"
  return 1
}
check "the extender beside the leading kube-scheduler is the only one that binds; it reports itself and key k1 on Lease accelpool-extender" one_active
follower_refuses() { # the other extender refuses bind, naming why; it stays ready
  local body
  body="$(curl -fsS --max-time 3 -X POST -H 'Content-Type: application/json' \
    -d '{"PodName":"p","PodNamespace":"default","PodUID":"u-1","Node":"np-a"}' \
    "http://127.0.0.1:$(cat "${TMP}/${HA_OTHER}-ext.port")/bind")" || return 1
  grep -q "not the leader (the kube-scheduler in this pod (host ${HA_OTHER}) does not hold Lease accelpool-system/accelpool-scheduler)" <<<"${body}" ||
    { echo "bind answer: ${body}"; return 1; }
  ext_get "${HA_OTHER}" /readyz >/dev/null
}
check "the follower's extender refuses bind with the reason and stays ready" follower_refuses
ca_injected() { # the active extender wrote its CA into the webhook the chart created without one
  local want i
  want="$(base64 -w0 < "${TMP}/ha-ca.crt")"
  for i in $(seq 1 20); do
    [ "$("${K}" get mutatingwebhookconfiguration accelpool-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = "${want}" ] &&
      [ "$(ext_get "${HA_LEADER}" /metrics | awk '$1 == "accelpool_extender_webhook_ca_writes_total{result=\"written\"}" {print $2}')" = 1 ] &&
      [ "$(ext_get "${HA_OTHER}" /metrics | awk '$1 == "accelpool_extender_webhook_ca_current" {print $2}')" = 1 ] &&
      return 0
    sleep 0.5
  done
  echo "caBundle '$("${K}" get mutatingwebhookconfiguration accelpool-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | head -c 40)...'"
  ext_get "${HA_LEADER}" /metrics | grep webhook_ca
  ext_get "${HA_OTHER}" /metrics | grep webhook_ca
  return 1
}
check "the active extender writes the webhook's caBundle from the CA file at start (no hook needed); the follower sees it current" ca_injected
await_takeover() { # NEW OLD TRIES OUT-FILE T0: NEW's kube-scheduler holds the Lease, NEW's
  # extender leads and reports itself, OLD's does not lead; the time since T0 goes to OUT-FILE
  local new="$1" old="$2" i
  for i in $(seq 1 "$3"); do
    [ "$(sched_holder | cut -d_ -f1)" = "${new}" ] && [ "$(leading "${new}")" = 1 ] &&
      [ "$(leading "${old}")" = 0 ] && [[ "$(report_lease)" == "${new}-"*" k1" ]] && {
        echo "from ${old} to ${new} in $(( $(now_ms) - $5 )) ms" > "$4"; return 0; }
    sleep 0.5
  done
  echo "scheduler holder '$(sched_holder)'; leader gauge ${old}=$(leading "${old}") ${new}=$(leading "${new}"); report '$(report_lease)'"
  return 1
}
failover() { # the leading kube-scheduler dies: the other pod's pair takes over together
  local t0
  t0="$(now_ms)"
  kill "$(cat "${TMP}/${HA_LEADER}-sched.pid")"
  await_takeover "${HA_OTHER}" "${HA_LEADER}" 40 "${TMP}/failover.txt" "${t0}"
}
check "when the leading kube-scheduler stops, the other pod's extender leads with its kube-scheduler and reports itself" failover
[ -s "${TMP}/failover.txt" ] && log "failover (SIGTERM to the leading kube-scheduler until the other extender leads and reports): $(cat "${TMP}/failover.txt")"
crash_failover() { # the stopped kube-scheduler's container restarts; then the leading one is
  # SIGKILLed (no release): its Lease expires (4 s here) and the first pod's pair leads again
  local back="${HA_LEADER}" gone="${HA_OTHER}" t0
  ha_sched "${back}"
  sleep 2
  [ "$(leading "${back}")" = 0 ] || { echo "${back} leads before ${gone} is gone"; return 1; }
  t0="$(now_ms)"
  kill -KILL "$(cat "${TMP}/${gone}-sched.pid")"
  await_takeover "${back}" "${gone}" 60 "${TMP}/crash.txt" "${t0}"
}
check "a restarted kube-scheduler waits as a follower; when the leading one is killed (lease expires), its pod's pair leads again" crash_failover
[ -s "${TMP}/crash.txt" ] && log "failover after SIGKILL (lease 4 s, not released): $(cat "${TMP}/crash.txt")"
ha_stop
[ "${FAILED}" = 0 ]
