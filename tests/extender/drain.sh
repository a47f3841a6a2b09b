#!/usr/bin/env bash
# accelpool-extender on SIGTERM with --shutdown-delay: /readyz answers 503
# "shutting down" while /healthz and the other routes are still served, and
# the process ends once the delay has passed (a second SIGTERM ends it at
# once). No apiserver is needed: the caches never sync, which /readyz says
# before the signal.
#   tests/extender/drain.sh <accelpool-extender>
set -uo pipefail
extender="$1"
dir="$(mktemp -d)"
pid=""
trap '[ -n "${pid}" ] && kill -9 "${pid}" 2>/dev/null; rm -rf "${dir}"' EXIT
fail() { echo "FAIL: $*"; cat "${dir}/log" 2>/dev/null | tail -20; exit 1; }
cat > "${dir}/kubeconfig" <<'YAML'
apiVersion: v1
kind: Config
clusters:
- name: none
  cluster: {server: "http://127.0.0.1:1"}
contexts:
- name: none
  context: {cluster: none, user: none}
current-context: none
users:
- name: none
  user: {token: none}
YAML
get() { curl -s -m 2 -o "${dir}/body" -w '%{http_code}' "http://127.0.0.1:${port}$1"; }

# A free port: the extender takes port 0 as "any" but prints no port, so pick one.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${extender}" --kubeconfig="${dir}/kubeconfig" --listen="127.0.0.1:${port}" --shutdown-delay=3s \
  --log-level=info > "${dir}/log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do
  [ "$(get /healthz)" = 200 ] && break
  sleep 0.1
done
[ "$(get /healthz)" = 200 ] || fail "the extender does not serve /healthz"
[ "$(get /readyz)" = 503 ] && grep -q "caches not synced" "${dir}/body" ||
  fail "before SIGTERM, /readyz should say the caches are not synced: $(cat "${dir}/body")"

kill -TERM "${pid}"
start=$(date +%s%N)
sleep 0.5
[ "$(get /readyz)" = 503 ] && grep -q "shutting down" "${dir}/body" ||
  fail "while draining, /readyz should say shutting down: $(cat "${dir}/body")"
[ "$(get /healthz)" = 200 ] || fail "while draining, /healthz should still be served"
wait "${pid}"
rc=$?
pid=""
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "${rc}" -eq 0 ] || fail "exit status ${rc} after SIGTERM"
[ "${ms}" -ge 2000 ] && [ "${ms}" -lt 10000 ] || fail "ended ${ms} ms after SIGTERM, not after the 3 s delay"
grep -q '"draining: not ready, still serving"' "${dir}/log" || fail "no draining log line"

# A second SIGTERM ends the wait at once.
"${extender}" --kubeconfig="${dir}/kubeconfig" --listen="127.0.0.1:${port}" --shutdown-delay=60s \
  --log-level=info > "${dir}/log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do
  [ "$(get /healthz)" = 200 ] && break
  sleep 0.1
done
kill -TERM "${pid}"
sleep 0.3
start=$(date +%s%N)
kill -TERM "${pid}"
wait "${pid}"
pid=""
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "${ms}" -lt 5000 ] || fail "a second SIGTERM should end the drain at once (took ${ms} ms)"
echo "drain: ok (ended ${ms} ms after the second SIGTERM)"
