#!/usr/bin/env bash
# `accelpool-device-plugin --print-memory-use` through the binary and the fake
# vendor libraries (dlopen, as on a node): what the foreign memory check reads.
#   NVIDIA (fake libnvidia-ml): MiB in use per GPU, and the processes list
#     (empty on the idle fake) under "processes";
#   Hygon (fake ROCm SMI): MiB in use per DCU is its processes' VRAM, not
#     rsmi_dev_memory_usage_get (which counts the driver's reserve: 94% of an
#     idle DCU); with no KFD process on this machine, 0 and empty lists;
#   Ascend (fake DCMI): the processes dcmi_get_device_resource_info lists per
#     chip, named from the host's /proc (--host-proc), and their sum as MiB in use;
#   --foreign-memory-vendors with a name that is not a measuring backend: refused.
#   tests/device_plugin/memory_use.sh <accelpool-device-plugin> <fake libnvidia-ml> <fake ROCm SMI> \
#     <fake libdcmi>
set -uo pipefail
plugin="$1"
nvml="$2"
rsmi="$3"
dcmi="$4"
dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
ln -s "${nvml}" "${dir}/libnvidia-ml.so.1"
ln -s "${rsmi}" "${dir}/librocm_smi64.so"
ln -s "${dcmi}" "${dir}/libdcmi.so"
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
check "hygon: four idle DCUs at 0 MiB (not the driver's 61604 MiB reserve)" \
  test "$(field "${dir}/hygon.json" 'sorted(doc["devices"].values())')" = "[0, 0, 0, 0]"
check "hygon: a process list per DCU (empty)" \
  test "$(field "${dir}/hygon.json" '[len(v) for v in doc["processes"].values()]')" = "[0, 0, 0, 0]"
# An 800T A2 (8 x 910B3): a vLLM worker of a pod on chip 2, with a helper; a
# process the host's /proc no longer has on chip 6.
mkdir -p "${dir}/proc/899293" "${dir}/proc/899301"
echo VLLMWorker_TP >"${dir}/proc/899293/comm"
echo python3 >"${dir}/proc/899301/comm"
for pid in 899293 899301; do
  echo "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-0a1b.scope" \
    >"${dir}/proc/${pid}/cgroup"
done
ACCELPOOL_FAKE_DCMI_PROCESSES="2:899293:57280,2:899301:3072,6:4242:1024" LD_LIBRARY_PATH="${dir}" \
  "${plugin}" --backend=ascend --print-memory-use --node-name=n --host-proc="${dir}/proc" \
  >"${dir}/ascend.json" 2>"${dir}/ascend.err"
check "ascend: the plugin exited 0" test $? -eq 0
check "ascend: eight chips, the processes' memory summed per chip" \
  test "$(field "${dir}/ascend.json" 'sorted(doc["devices"].values())')" = "[0, 0, 0, 0, 0, 0, 1024, 60352]"
check "ascend: chip 2's processes named with their command and pod" \
  test "$(field "${dir}/ascend.json" '[(p["pid"], p["used_mib"], p["command"], p["pod_uid"]) for v in doc["processes"].values() for p in v if p["used_mib"] > 2000]')" = \
  "[(899293, 57280, 'VLLMWorker_TP', '1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901'), (899301, 3072, 'python3', '1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901')]"
check "ascend: a PID the host's /proc does not have is listed without a name" \
  test "$(field "${dir}/ascend.json" '[(p["pid"], p["command"]) for v in doc["processes"].values() for p in v if p["used_mib"] == 1024]')" = "[(4242, '')]"
LD_LIBRARY_PATH="${dir}" "${plugin}" --backend=hygon --print-memory-use --node-name=n \
  --foreign-memory-vendors=nvidia,enflame >"${dir}/bad.out" 2>&1
check "--foreign-memory-vendors=nvidia,enflame is refused (Enflame does not measure)" test $? -ne 0
check "... with the backends that do" \
  grep -q '"enflame" is not a backend that measures memory in use; name some of nvidia, ascend, hygon' "${dir}/bad.out"
if [[ ${fails} -ne 0 ]]; then
  for f in "${dir}"/*.json "${dir}"/*.err "${dir}"/*.out; do echo "--- ${f}"; cat "${f}"; done
fi
echo "memory use: ${fails} failed"
[[ ${fails} -eq 0 ]]
