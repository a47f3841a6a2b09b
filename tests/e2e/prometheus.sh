#!/usr/bin/env bash
# Prometheus, for real, against the demo cluster: runs Debian's prometheus on
# loopback (own config and storage in a temp dir) scraping the extender's and
# every device plugin's /metrics, waits for every target to be up, then asks
# the HTTP API (/api/v1/query) for the pool's memory utilisation (allocated /
# capacity, overall and per vendor) and checks it equals the value computed
# independently from the pods' assignments and the nodes' inventories
# (demo/report.py expect). Also: up == 1 for every target, the extender's
# allocated memory matches, every metric the Grafana dashboard names was
# scraped, the chart's alerting rules all load and evaluate, and one fires end
# to end (a device reported unhealthy on a demo node, then healthy again). Ends with "prometheus: N passed, M failed"; non-zero exit on failure.
#
# Usage: DEMO_ENV=tests/e2e/.work/demo/demo.env tests/e2e/prometheus.sh   (a running demo cluster)
#        tests/e2e/prometheus.sh      (no DEMO_ENV: runs tests/e2e/demo.sh with DEMO_PROMETHEUS=1)
# Env: PROMETHEUS_BIN (default: prometheus on PATH, from scripts/setup.sh), PROM_WAIT_S (default 100:
#      how long the utilisation may take to converge; the plugins refresh their gauges every 5 s).
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${E2E_DIR}/../.." && pwd)"
# shellcheck source=tests/e2e/lib.sh
. "${E2E_DIR}/lib.sh"
if [ -z "${DEMO_ENV:-}" ]; then
  DEMO_PROMETHEUS=1 exec "${E2E_DIR}/demo.sh"
fi
[ -f "${DEMO_ENV}" ] || die "DEMO_ENV=${DEMO_ENV} does not exist: start the demo first (DEMO_KEEP=1 tests/e2e/demo.sh)"
# shellcheck disable=SC1090
. "${DEMO_ENV}"
PROM="${PROMETHEUS_BIN:-$(command -v prometheus || true)}"
K="${E2E_BIN:-${E2E_DIR}/.bin}/kubectl"
TMP="$(mktemp -d)"
PASSED=0 FAILED=0
check() { # description command...
  local what="$1"; shift
  if "$@" > "${TMP}/out" 2>&1; then PASSED=$((PASSED + 1)); log "ok: ${what}"
  else FAILED=$((FAILED + 1)); log "FAIL: ${what}"; tail -20 "${TMP}/out" >&2; fi
}
finish() {
  local rc=$?
  set +e
  # An error outside a check (a command that set -e stopped on) counts as a failure.
  [ "${rc}" != 0 ] && [ "${FAILED}" = 0 ] && FAILED=1 && log "stopped by an error (exit ${rc})"
  if [ -f "${TMP}/prometheus.pid" ]; then
    kill "$(cat "${TMP}/prometheus.pid")" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$(cat "${TMP}/prometheus.pid")" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$(cat "${TMP}/prometheus.pid")" 2>/dev/null
  fi
  [ "${FAILED}" = 0 ] || { mkdir -p "${E2E_DIR}/.work/run"; cp "${TMP}/prometheus.log" "${E2E_DIR}/.work/run/prometheus.log" 2>/dev/null; }
  rm -rf "${TMP}"
  echo "prometheus: ${PASSED} passed, ${FAILED} failed"
}
trap finish EXIT

[ -n "${PROM}" ] && [ -x "${PROM}" ] ||
  die "prometheus is not installed: run scripts/setup.sh (Debian package prometheus)"

# The chart's alerting rules, loaded as a plain Prometheus would (rule_files).
RULES="${REPO}/charts/accelpool/alerts/accelpool.rules.yaml"

# --- config: the extender over HTTPS (the e2e CA), one job for the plugins with a node label ---
read -ra targets <<<"${PLUGIN_TARGETS}"
{
  cat <<YAML
global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 2s}
rule_files: ["${RULES}"]
scrape_configs:
- job_name: accelpool-extender
  scheme: https
  tls_config: {ca_file: "${E2E_CA}"}
  static_configs: [{targets: ["${EXTENDER_URL#https://}"]}]
- job_name: accelpool-device-plugin
  static_configs:
YAML
  for t in "${targets[@]}"; do
    echo "  - {targets: [\"${t#*=}\"], labels: {kubernetes_node: \"${t%%=*}\"}}"
  done
} > "${TMP}/prometheus.yml"
PORT="$(free_port)"
URL="http://127.0.0.1:${PORT}"
setsid "${PROM}" --config.file="${TMP}/prometheus.yml" --storage.tsdb.path="${TMP}/data" \
  --web.listen-address="127.0.0.1:${PORT}" --storage.tsdb.retention.time=1h \
  > "${TMP}/prometheus.log" 2>&1 < /dev/null &
echo $! > "${TMP}/prometheus.pid"
wait_ready() {
  local i
  for i in $(seq 1 120); do curl -fsS --max-time 2 "${URL}/-/ready" >/dev/null 2>&1 && return 0; sleep 0.5; done
  tail -20 "${TMP}/prometheus.log"; return 1
}
check "prometheus $("${PROM}" --version 2>&1 | awk 'NR == 1 {print $3}') serves on ${URL}" wait_ready

# query EXPR: the API's JSON answer on stdout.
query() { curl -fsS --max-time 5 --data-urlencode "query=$1" "${URL}/api/v1/query"; }
want_targets=$((1 + ${#targets[@]}))
targets_up() {
  local i n
  for i in $(seq 1 60); do
    n="$(curl -fsS --max-time 5 "${URL}/api/v1/targets" | jq '[.data.activeTargets[] | select(.health == "up")] | length')"
    [ "${n}" = "${want_targets}" ] && return 0
    sleep 1
  done
  curl -fsS "${URL}/api/v1/targets" | jq -c '.data.activeTargets[] | {scrapeUrl, health, lastError}'
  return 1
}
check "all ${want_targets} targets (extender + ${#targets[@]} device plugins) are up" targets_up
up_all_one() {
  query up | jq -e --argjson n "${want_targets}" \
    '.data.result | length == $n and all(.value[1] == "1")'
}
check "up == 1 for every target (PromQL)" up_all_one

# The expected figures, computed from the cluster state alone.
"${K}" --kubeconfig "${KUBECONFIG}" get pods -n "${DEMO_NS}" -o json > "${TMP}/pods.json"
"${K}" --kubeconfig "${KUBECONFIG}" get nodes -o json > "${TMP}/nodes.json"
python3 "${E2E_DIR}/demo/report.py" expect "${TMP}/pods.json" "${TMP}/nodes.json" > "${TMP}/expect.json"
log "expected from the assignments: $(cat "${TMP}/expect.json")"

OVERALL='sum(accelpool_plugin_allocated_memory_mib) / sum(accelpool_plugin_device_memory_mib)'
BY_VENDOR='sum by (vendor) (accelpool_plugin_allocated_memory_mib) / sum by (vendor) (accelpool_plugin_device_memory_mib)'
EXT_ALLOC='sum(max by (node) (accelpool_extender_node_memory_allocated_mib))'
# converges KIND EXPR: polls EXPR until it equals the expected figure (the plugins
# refresh their gauges every 5 s), then prints the answer.
converges() {
  local i
  for ((i = 0; i < ${PROM_WAIT_S:-100}; i += 2)); do
    query "$2" > "${TMP}/answer.json" 2>/dev/null &&
      python3 - "$1" "${TMP}/answer.json" "${TMP}/expect.json" <<'PY' && { cat "${TMP}/answer.json"; return 0; }
import json, sys
kind, answer, expect = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
res = answer["data"]["result"]
def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))
if kind == "overall":
    ok = len(res) == 1 and close(float(res[0]["value"][1]), expect["overall"])
elif kind == "vendor":
    got = {r["metric"].get("vendor"): float(r["value"][1]) for r in res}
    ok = set(got) == set(expect["vendor"]) and all(close(got[v], expect["vendor"][v]) for v in got)
elif kind == "model":
    got = {"%s/%s" % (r["metric"].get("vendor"), r["metric"].get("model")): float(r["value"][1]) for r in res}
    ok = set(got) == set(expect["model"]) and all(close(got[m], expect["model"][m]) for m in got)
else:
    ok = len(res) == 1 and close(float(res[0]["value"][1]), expect["allocated_mib"])
sys.exit(0 if ok else 1)
PY
    sleep 2
  done
  echo "PromQL: $2"; echo "answer: $(cat "${TMP}/answer.json" 2>/dev/null)"; echo "expected: $(cat "${TMP}/expect.json")"
  return 1
}
check "PromQL pool memory utilisation (overall) equals the assignments' sum / the inventories' capacity" \
  converges overall "${OVERALL}"
check "PromQL pool memory utilisation per vendor equals the cluster state" converges vendor "${BY_VENDOR}"
check "the extender's allocated memory (sum over nodes) equals the assignments' sum" \
  converges extender "${EXT_ALLOC}"
# The dashboard's first panel (memory by vendor and model, a join on the
# plugin's capacity series) with its variables at All.
BY_MODEL="$(python3 "${E2E_DIR}/dashboard_metrics.py" --exprs "${REPO}/charts/accelpool/dashboards/accelpool.json" | sed -n 1p)"
check "the dashboard's vendor/model memory panel equals the cluster state per model" converges model "${BY_MODEL}"
log "PromQL answers: overall $(query "${OVERALL}" | jq -c '[.data.result[].value[1]]'), by vendor $(query "${BY_VENDOR}" | jq -c '[.data.result[] | {(.metric.vendor): .value[1]}] | add')"

# The host the extender scores: per node, allocatable less the requests of
# every pod bound there and not finished, whichever scheduler placed it.
"${K}" --kubeconfig "${KUBECONFIG}" get pods -A -o json > "${TMP}/all-pods.json"
host_free_matches() {
  local i
  for ((i = 0; i < ${PROM_WAIT_S:-100}; i += 2)); do
    query 'accelpool_extender_node_host_free' > "${TMP}/host.json" 2>/dev/null &&
      "${K}" --kubeconfig "${KUBECONFIG}" get pods -A -o json > "${TMP}/all-pods.json" &&
      python3 - "${TMP}/host.json" "${TMP}/nodes.json" "${TMP}/all-pods.json" <<'PY' && return 0
import json, re, sys
answer, nodes, pods = (json.load(open(p)) for p in sys.argv[1:4])
UNITS = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
def qty(s):
    m = re.fullmatch(r"([0-9.]+)(e[0-9]+)?([a-zA-Z]*)", s)
    return float(m.group(1) + (m.group(2) or "")) * UNITS[m.group(3)]
def req(c, r):
    res = c.get("resources", {})
    v = res.get("requests", {}).get(r, res.get("limits", {}).get(r))
    return qty(v) if v else 0.0
want, alloc = {}, {}
for n in nodes["items"]:
    a = n.get("status", {}).get("allocatable", {})
    if "cpu" in a and "memory" in a:
        want[n["metadata"]["name"]] = [qty(a["cpu"]), qty(a["memory"]) / 2**20]
        alloc[n["metadata"]["name"]] = qty(a["cpu"])
for p in pods["items"]:
    node = p["spec"].get("nodeName")
    if node not in want or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        continue
    for i, r in enumerate(("cpu", "memory")):
        run = sum(req(c, r) for c in p["spec"].get("containers", []))
        init = max([req(c, r) for c in p["spec"].get("initContainers", [])] or [0])
        want[node][i] -= max(run, init) / (1 if r == "cpu" else 2**20)
got = {}
for r in answer["data"]["result"]:
    got.setdefault(r["metric"]["node"], [None, None])[0 if r["metric"]["resource"] == "cpu" else 1] = float(r["value"][1])
inv = {n for n in got}
ok = bool(got) and all(abs(got[n][0] - max(0, want[n][0])) < 1e-3 and abs(got[n][1] - max(0, want[n][1])) <= 1 for n in got)
# The demo's pods request CPU: some node must show it taken.
ok = ok and any(got[n][0] < alloc[n] for n in got)
if not ok:
    print("got", got, "want", {n: want.get(n) for n in got})
sys.exit(0 if ok else 1)
PY
    sleep 2
  done
  return 1
}
check "the extender's host CPU and memory free per node equal allocatable less every bound pod's requests" \
  host_free_matches
# Fragmentation per node: the idle device capacity plus what is allocated is
# the node's devices (none is cordoned or unhealthy in the demo), and the
# fragmented part is within the idle; the dashboard's pool ratio is a share.
FRAG_RATIO="$(python3 "${E2E_DIR}/dashboard_metrics.py" --exprs "${REPO}/charts/accelpool/dashboards/accelpool.json" |
  grep -F 'sum(max by (node) (accelpool_extender_node_fragmented_devices{node=~".*"})) / sum(max by (node) (accelpool_extender_node_idle_devices')"
fragmentation_consistent() {
  local i
  for ((i = 0; i < ${PROM_WAIT_S:-100}; i += 2)); do
    query 'accelpool_extender_node_idle_devices' > "${TMP}/idle.json" 2>/dev/null &&
      query 'accelpool_extender_node_fragmented_devices' > "${TMP}/frag.json" &&
      query 'accelpool_extender_node_compute_allocated' > "${TMP}/alloc.json" &&
      query 'count by (node) (accelpool_extender_device_compute_allocated)' > "${TMP}/devs.json" &&
      query "${FRAG_RATIO}" > "${TMP}/ratio.json" &&
      python3 - "${TMP}"/{idle,frag,alloc,devs,ratio}.json <<'PY' && return 0
import json, sys
idle, frag, alloc, devs, ratio = ({r["metric"].get("node"): float(r["value"][1]) for r in json.load(open(p))["data"]["result"]}
                                  for p in sys.argv[1:6])
ok = bool(idle) and set(idle) == set(frag) == set(alloc) == set(devs) and len(ratio) == 1
ok = ok and all(abs(idle[n] + alloc[n] / 1000 - devs[n]) < 1e-6 and -1e-9 <= frag[n] <= idle[n] + 1e-9 for n in idle)
ok = ok and any(idle[n] > 0 for n in idle) and 0 <= list(ratio.values())[0] <= 1
if not ok:
    print("idle", idle, "fragmented", frag, "allocated", alloc, "devices", devs, "ratio", ratio)
sys.exit(0 if ok else 1)
PY
    sleep 2
  done
  return 1
}
check "per node, idle devices + allocated compute = devices, fragmented within idle; the dashboard's pool ratio is a share" \
  fragmentation_consistent
log "pool fragmentation: $(query "${FRAG_RATIO}" | jq -r '.data.result[0].value[1] // "-"') of $(query 'sum(max by (node) (accelpool_extender_node_idle_devices))' | jq -r '.data.result[0].value[1] // "-"') idle devices"
arrivals_counted() { # every demo pod arrived at the workload learner once
  local n want
  want="$(jq '[.items[] | select(.status.phase != "Succeeded" and .status.phase != "Failed")
    | select(.metadata.ownerReferences // [] | map(.kind) | index("DaemonSet") | not)] | length' "${TMP}/all-pods.json")"
  n="$(query 'max(accelpool_extender_workload_arrivals_total)' | jq -r '.data.result[0].value[1] // "0"')"
  [ "${n}" -ge "${want}" ] || { echo "arrivals ${n}, want at least ${want}"; return 1; }
}
check "the workload learner saw every pod of the cluster arrive" arrivals_counted
workload_kept() { # the active extender wrote the learned mix to its ConfigMap, and never failed to
  local ok failed
  ok="$(query 'sum(accelpool_extender_workload_store_total{op="save",result="ok"})' | jq -r '.data.result[0].value[1] // "0"')"
  failed="$(query 'sum(accelpool_extender_workload_store_total{result="failed"})' | jq -r '.data.result[0].value[1] // "0"')"
  [ "${ok}" -ge 1 ] && [ "${failed}" = 0 ] || { echo "saves ${ok}, failures ${failed}"; return 1; }
}
check "the extender keeps the learned workload in its ConfigMap (saves, no failure)" workload_kept

# Per-container series of fractional NVIDIA containers: their caps are the
# assignments' grants, and with no CUDA process in the demo they hold nothing.
CAPS_WANT="$(jq '[.items[] | .metadata.annotations["accelpool.io/assignment"] // empty | fromjson |
  .containers[] | select(.vendor == "nvidia") | .devices[] | select(.exclusive | not) | .memory_mib] | add // 0' \
  "${TMP}/pods.json")"
container_caps() { # sum of the per-container caps equals the fractional grants; used is 0
  local i caps used
  for ((i = 0; i < ${PROM_WAIT_S:-100}; i += 2)); do
    caps="$(query 'sum(accelpool_plugin_container_memory_limit_mib)' | jq -r '.data.result[0].value[1] // "none"')"
    used="$(query 'sum(accelpool_plugin_container_memory_used_mib)' | jq -r '.data.result[0].value[1] // "none"')"
    [ "${caps}" = "${CAPS_WANT}" ] && [ "${used}" = 0 ] && return 0
    sleep 2
  done
  echo "caps ${caps} (want ${CAPS_WANT}), used ${used} (want 0)"; return 1
}
check "per-container memory caps sum to the fractional NVIDIA grants (${CAPS_WANT} MiB), nothing used" container_caps

# Every metric the Grafana dashboard names was scraped: the series Prometheus
# stored, plus the families it read from the targets' # TYPE lines (a counter
# that never fired, such as bind failures, has a family but no series yet).
{
  curl -fsS "${URL}/api/v1/label/__name__/values" | jq -r '.data[]'
  curl -fsS "${URL}/api/v1/metadata" | jq -r '.data | to_entries[] | .key as $k |
    if .value[0].type == "histogram" then ($k, $k + "_bucket", $k + "_sum", $k + "_count") else $k end'
} | sort -u > "${TMP}/scraped.txt"
mkdir -p "${REPO}/out/demo" && cp "${TMP}/scraped.txt" "${REPO}/out/demo/scraped-metrics.txt"
check "every metric in the Grafana dashboard was scraped ($(grep -c '^accelpool_' "${TMP}/scraped.txt") accelpool series names)" \
  python3 "${E2E_DIR}/dashboard_metrics.py" --scraped "${TMP}/scraped.txt" "${REPO}/charts/accelpool/dashboards/accelpool.json"
dashboard_queries_run() { # every panel's PromQL evaluates without error against the real series
  python3 "${E2E_DIR}/dashboard_metrics.py" --exprs "${REPO}/charts/accelpool/dashboards/accelpool.json" |
    while IFS= read -r e; do
      query "${e}" | jq -e '.status == "success"' >/dev/null || { echo "query failed: ${e}"; return 1; }
    done
}
check "every dashboard query evaluates (variables at All)" dashboard_queries_run

# The alerting rules: all loaded, and each evaluated without error against the
# real series (a rule whose PromQL fails at run time, say a many-to-many
# match, has health "err").
RULES_WANT="$(python3 -c 'import sys, yaml; print(sum(len(g["rules"]) for g in yaml.safe_load(open(sys.argv[1]))["groups"]))' "${RULES}")"
rules_evaluate() {
  local i
  for i in $(seq 1 30); do
    curl -fsS --max-time 5 "${URL}/api/v1/rules?type=alert" > "${TMP}/rules.json" &&
      jq -e --argjson n "${RULES_WANT}" '[.data.groups[].rules[]] |
        length == $n and all(.health == "ok" and .lastEvaluation != "0001-01-01T00:00:00Z")' \
        "${TMP}/rules.json" >/dev/null && return 0
    sleep 1
  done
  jq -c '.data.groups[].rules[] | select(.health != "ok") | {name, health, lastError}' "${TMP}/rules.json"
  return 1
}
check "all ${RULES_WANT} alerting rules of the chart load and evaluate without error" rules_evaluate
firing="$(jq -r '[.data.groups[].rules[] | select(.state != "inactive") | "\(.name) (\(.state))"] | join(", ")' "${TMP}/rules.json" 2>/dev/null)"
log "alerts pending or firing on the demo cluster: ${firing:-none}"

# One alert end to end: a device of the P800 node reported unhealthy (its
# fake backend's inventory file, as a vendor library's health query would)
# fires AccelpoolDeviceUnhealthy after its 1 minute, naming that device; the
# device healthy again resolves it.
P800_INV="$(dirname "${DEMO_ENV}")/nodes/p800-0/inventory.json"
alert_state() { # ALERT VENDOR: "firing", "pending" or "" for the alert on a device of VENDOR
  curl -fsS --max-time 5 "${URL}/api/v1/alerts" |
    jq -r --arg a "$1" --arg v "$2" '[.data.alerts[] | select(.labels.alertname == $a and .labels.vendor == $v) | .state] | first // ""'
}
alert_becomes() { # ALERT VENDOR STATE SECONDS
  local i
  for ((i = 0; i < $4; i += 2)); do
    [ "$(alert_state "$1" "$2")" = "$3" ] && return 0
    sleep 2
  done
  echo "AccelpoolDeviceUnhealthy on $2: '$(alert_state "$1" "$2")', want '$3'"; return 1
}
device_alert_round_trip() {
  [ -f "${P800_INV}" ] || { echo "no ${P800_INV}"; return 1; }
  cp "${P800_INV}" "${TMP}/p800.json"
  jq -c '.inventories[0].devices = [{"index": 3, "healthy": false}]' "${TMP}/p800.json" > "${P800_INV}.tmp" &&
    mv "${P800_INV}.tmp" "${P800_INV}"
  local fired=0
  alert_becomes AccelpoolDeviceUnhealthy kunlunxin firing 150 && fired=1
  curl -fsS --max-time 5 "${URL}/api/v1/alerts" |
    jq -c '.data.alerts[] | select(.labels.alertname == "AccelpoolDeviceUnhealthy") | {labels, state}'
  cp "${TMP}/p800.json" "${P800_INV}.tmp" && mv "${P800_INV}.tmp" "${P800_INV}"
  [ "${fired}" = 1 ] && alert_becomes AccelpoolDeviceUnhealthy kunlunxin "" 60
}
check "a P800 device reported unhealthy fires AccelpoolDeviceUnhealthy after its 1 minute; healthy again, it resolves" \
  device_alert_round_trip
[ "${FAILED}" = 0 ]
