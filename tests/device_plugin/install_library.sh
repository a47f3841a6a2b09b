#!/usr/bin/env bash
# `accelpool-device-plugin --install-cuda-library`, as the chart's init
# container runs it on NVIDIA nodes, with a shared object standing in for
# libaccelpool-cuda.so; then the running NVIDIA plugin (fake libnvidia-ml),
# which warns when the files its containers mount are not on the node.
#   tests/device_plugin/install_library.sh <accelpool-device-plugin> <fake libnvidia-ml>
set -uo pipefail
plugin="$1"
fake="$2"
dir="$(mktemp -d)"
pid=""
trap '[[ -n ${pid} ]] && kill "${pid}" 2>/dev/null; rm -rf "${dir}"' EXIT
fails=0
check() {  # check <description> <command...>
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
host="${dir}/host"
lib="${host}/usr/local/accelpool/lib/libaccelpool-cuda.so"
preload="${host}/usr/local/accelpool/ld.so.preload"
install() {  # install <source> <log>
  "${plugin}" --install-cuda-library="$1" --cuda-library="${lib}" --preload-file="${preload}" \
    >"$2" 2>&1
}
install "${fake}" "${dir}/first.log"
check "the install exited 0" test $? -eq 0
check "the library is installed byte for byte" cmp -s "${fake}" "${lib}"
check "the preload file names the library's path inside containers" \
  test "$(cat "${preload}")" = "/usr/local/accelpool/lib/libaccelpool-cuda.so"
check "the log says both were installed" \
  grep -q '"library_file":"installed".*"preload":"installed"' "${dir}/first.log"
inode="$(stat -c %i "${lib}")"
install "${fake}" "${dir}/second.log"
check "a second install of the same library exits 0" test $? -eq 0
check "... and writes nothing (same inode, log says unchanged)" bash -c \
  "test '$(stat -c %i "${lib}")' = '${inode}' && grep -q '\"library_file\":\"unchanged\"' '${dir}/second.log'"
printf '#!/bin/sh\necho not a library\n%064d\n' 0 > "${dir}/script"
install "${dir}/script" "${dir}/bad.log"
check "a source that is not a shared object is refused (exit 1)" test $? -eq 1
check "... with the reason" grep -q 'is not an ELF file' "${dir}/bad.log"
check "... and the installed library is left as it was" cmp -s "${fake}" "${lib}"
install "${dir}/nothing.so" "${dir}/missing.log"
check "a missing source is refused (exit 1)" test $? -eq 1
check "... saying the image does not ship it" \
  grep -q 'the image does not ship it' "${dir}/missing.log"

# The running plugin checks the files it hands to containers.
ln -s "${fake}" "${dir}/libnvidia-ml.so.1"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
serve() {  # serve <log> <cuda-library>: run the plugin until it serves; <log>.metrics: its /metrics
  mkdir -p "${dir}/plugins"
  local port
  port="$(free_port)"
  ACCELPOOL_FAKE_COUNT=1 LD_LIBRARY_PATH="${dir}" "${plugin}" --backend=nvidia --no-kube \
    --node-name=n --device-plugin-dir="${dir}/plugins" --metrics-listen="127.0.0.1:${port}" \
    --state-root="${dir}/state" --cuda-library="$2" --preload-file="${preload}" \
    --pod-resources-socket= >"$1" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    grep -q '"msg":"serving"' "$1" && break
    sleep 0.1
  done
  curl -fsS --max-time 5 "http://127.0.0.1:${port}/metrics" >"$1.metrics" 2>&1
  kill "${pid}" 2>/dev/null
  wait "${pid}" 2>/dev/null
  pid=""
}
serve "${dir}/serve-missing.log" "${dir}/nowhere/libaccelpool-cuda.so"
check "a plugin whose library is missing warns, naming it and what to do" \
  grep -q 'enforcement library is not installed.*nowhere/libaccelpool-cuda.so.*--install-cuda-library' \
  "${dir}/serve-missing.log"
check "... and /metrics says so" \
  grep -q '^accelpool_plugin_enforcement_files_missing 1$' "${dir}/serve-missing.log.metrics"
serve "${dir}/serve-ok.log" "${lib}"
check "a plugin whose library is installed has accelpool_plugin_enforcement_files_missing 0" \
  grep -q '^accelpool_plugin_enforcement_files_missing 0$' "${dir}/serve-ok.log.metrics"
check "... and does not warn" \
  bash -c "! grep -q 'enforcement library is not installed' '${dir}/serve-ok.log'"
check "... and it did start serving" grep -q '"msg":"serving"' "${dir}/serve-ok.log"
echo "install library: ${fails} failed"
[[ ${fails} -eq 0 ]]
