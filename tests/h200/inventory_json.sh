#!/usr/bin/env bash
# The H200 inventory run (scripts/h200/nvml_inventory.sh) parses what
# `accelpool-device-plugin --print-inventory` writes to stdout as JSON. Runs
# the plugin against the fake libnvidia-ml with one GPU, the shape of the
# single-H200 machine: one GPU fits no 8-GPU profile and the NVIDIA backend
# says so in a log line, which must go to stderr, not into the JSON.
#   tests/h200/inventory_json.sh <accelpool-device-plugin> <fake libnvidia-ml>
set -uo pipefail
plugin="$1"
fake="$2"
dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
ln -s "${fake}" "${dir}/libnvidia-ml.so.1"
ACCELPOOL_FAKE_COUNT=1 LD_LIBRARY_PATH="${dir}" "${plugin}" --backend=nvidia --print-inventory \
  --node-name=h200 >"${dir}/out" 2>"${dir}/err"
rc=$?
fails=0
check() {  # check <description> <command...>
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
check "the plugin exited 0 (rc=${rc})" test "${rc}" -eq 0
check "the backend's log line went to stderr" grep -q "nvidia: profile" "${dir}/err"
check "stdout starts with the JSON object" test "$(head -c 1 "${dir}/out")" = "{"
check "stdout holds no log line" bash -c "! grep -qE '^\\[|\\[info\\]|\\[warning\\]' '${dir}/out'"
check "python3 is there to read the JSON" command -v python3
check "stdout parses as JSON with one GPU" python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
assert len(doc["inventories"][0]["devices"]) == 1, doc' "${dir}/out"
# The whole inventory script on that plugin, with the stand-in nvidia-smi
# (tests/h200/mock; the real python3): its report must come out, in files
# $OUT can carry back.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "${dir}/report" "${dir}/bin"
ln -s "${here}/mock/nvidia-smi" "${dir}/bin/nvidia-smi"
ACCELPOOL_FAKE_COUNT=1 LD_LIBRARY_PATH="${dir}" ACCELPOOL_PLUGIN_BIN="${plugin}" \
  INVENTORY_OUT="${dir}/report" PATH="${dir}/bin:${PATH}" \
  bash "${here}/../../scripts/h200/nvml_inventory.sh" >"${dir}/script.log" 2>&1
check "nvml_inventory.sh exited 0" test $? -eq 0
check "it wrote the report" grep -q "^| 0 | GPU-9c1e5b7a" "${dir}/report/nvml-inventory-h200.md"
check "it wrote the raw JSON" test -s "${dir}/report/nvml-inventory-h200.json"
check "the report shows the memory in use the foreign memory check reads (GPU 0: 0 MiB)" \
  grep -qE '^    "GPU-9c1e5b7a[^"]*": 0$' "${dir}/report/nvml-inventory-h200.md"
check "its files are named as \$OUT carries them back" \
  bash -c "! ls '${dir}/report' | grep -q '[^A-Za-z0-9._-]'"
if [[ ${fails} -ne 0 ]]; then
  echo "--- script"; cat "${dir}/script.log"
  echo "--- stdout"; cat "${dir}/out"; echo "--- stderr"; cat "${dir}/err"
fi
echo "inventory json: ${fails} failed"
[[ ${fails} -eq 0 ]]
