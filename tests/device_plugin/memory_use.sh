#!/usr/bin/env bash
# `accelpool-device-plugin --print-memory-use` through the binary and the fake
# vendor libraries (dlopen, as on a node): what the foreign memory check reads.
#   NVIDIA (fake libnvidia-ml): MiB in use per GPU, and the processes list
#     (empty on the idle fake) under "processes";
#   Hygon (fake ROCm SMI): MiB in use per DCU from rsmi_dev_memory_usage_get;
#     ROCm SMI lists no processes per device, which "processes_not_listed" says;
#   --foreign-memory-vendors with a name that is not a measuring backend: refused.
#   tests/device_plugin/memory_use.sh <accelpool-device-plugin> <fake libnvidia-ml> <fake ROCm SMI>
set -uo pipefail
plugin="$1"
nvml="$2"
rsmi="$3"
dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
ln -s "${nvml}" "${dir}/libnvidia-ml.so.1"
ln -s "${rsmi}" "${dir}/librocm_smi64.so"
fails=0
check() {  # check <description> <command...>
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
field() {  # field <json> <python expression over doc>
  python3 -c 'import json, sys; doc = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
ACCELPOOL_FAKE_COUNT=2 LD_LIBRARY_PATH="${dir}" "${plugin}" --backend=nvidia --print-memory-use \
  --node-name=n >"${dir}/nvidia.json" 2>"${dir}/nvidia.err"
check "nvidia: the plugin exited 0" test $? -eq 0
check "nvidia: both GPUs' memory in use (0 MiB: the fake's processes hold none)" \
  test "$(field "${dir}/nvidia.json" 'sorted(doc["devices"].values())')" = "[0, 0]"
check "nvidia: a process list per GPU (empty)" \
  test "$(field "${dir}/nvidia.json" '[len(v) for v in doc["processes"].values()]')" = "[0, 0]"
ACCELPOOL_FAKE_COUNT=4 LD_LIBRARY_PATH="${dir}" "${plugin}" --backend=hygon --print-memory-use \
  --node-name=n >"${dir}/hygon.json" 2>"${dir}/hygon.err"
check "hygon: the plugin exited 0" test $? -eq 0
check "hygon: four DCUs at the fake's idle 150 MiB each" \
  test "$(field "${dir}/hygon.json" 'sorted(doc["devices"].values())')" = "[150, 150, 150, 150]"
check "hygon: no per-process list, and why" \
  grep -q 'no per-process memory query' "${dir}/hygon.json"
LD_LIBRARY_PATH="${dir}" "${plugin}" --backend=hygon --print-memory-use --node-name=n \
  --foreign-memory-vendors=nvidia,ascend >"${dir}/bad.out" 2>&1
check "--foreign-memory-vendors=nvidia,ascend is refused (Ascend does not measure)" test $? -ne 0
check "... with the backends that do" \
  grep -q '"ascend" is not a backend that measures memory in use; name some of nvidia, hygon' "${dir}/bad.out"
if [[ ${fails} -ne 0 ]]; then
  for f in "${dir}"/*.json "${dir}"/*.err "${dir}"/*.out; do echo "--- ${f}"; cat "${f}"; done
fi
echo "memory use: ${fails} failed"
[[ ${fails} -eq 0 ]]
