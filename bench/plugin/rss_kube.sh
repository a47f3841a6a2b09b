#!/usr/bin/env bash
# Resident memory of accelpool-device-plugin with 16 fake NVIDIA devices and
# its Kubernetes side on: pod informer, allocation reporting and node
# inventory publishing against plugin_fake_apiserver (an in-process apiserver
# stand-in holding the Node and PODS pending pods bound to it).
#
#   bench/plugin/rss_kube.sh <build-dir> [pods] [settle-seconds]
#
# Prints VmRSS/VmHWM/Threads of the plugin after it settled and re-read its
# inventory once (SIGHUP), then what it published on the Node.
set -euo pipefail
build=${1:?usage: rss_kube.sh <build-dir> [pods] [settle-seconds]}
pods=${2:-160}
settle=${3:-5}
work=$(mktemp -d)
api_pid=""
plugin_pid=""
cleanup() {
  [[ -n $plugin_pid ]] && kill "$plugin_pid" 2>/dev/null || true
  [[ -n $api_pid ]] && kill "$api_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

printf '{"version":1,"inventories":[{"vendor":"nvidia","count":16}]}' >"$work/inv.json"
"$build/bench/plugin/plugin_fake_apiserver" --node=n --pods="$pods" \
  --kubeconfig="$work/kubeconfig" >"$work/api.log" 2>&1 &
api_pid=$!
for _ in $(seq 50); do grep -q '^ready' "$work/api.log" && break; sleep 0.1; done
grep -q '^ready' "$work/api.log" || { cat "$work/api.log"; exit 1; }

mkdir -p "$work/dp"
"$build/src/cmd/device_plugin/accelpool-device-plugin" --backend=fake \
  --fake-inventory="$work/inv.json" --node-name=n --kubeconfig="$work/kubeconfig" \
  --device-plugin-dir="$work/dp" --metrics-listen=127.0.0.1:0 \
  --state-root="$work/state" --log-level=warn >"$work/plugin.log" 2>&1 &
plugin_pid=$!
sleep "$settle"
kill -HUP "$plugin_pid"
sleep 1
kill -0 "$plugin_pid" || { echo "the plugin exited:"; cat "$work/plugin.log"; exit 1; }
echo "pods on the node: $pods"
grep -E '^(VmRSS|VmHWM|Threads):' "/proc/$plugin_pid/status"
kill "$plugin_pid"
wait "$plugin_pid" || true
plugin_pid=""
kill "$api_pid"
wait "$api_pid" || true
api_pid=""
grep -v '^ready' "$work/api.log"
