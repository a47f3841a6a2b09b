#!/usr/bin/env bash
# `accelpool-device-plugin --backend=nvidia --print-inventory` on two GPUs, the
# second in MIG mode with four MIG devices (3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb+me), read
# through the fake libnvidia-ml with dlopen as on a node:
#   --mig-strategy=mixed (default): the MIG devices carry their profile;
#   --mig-strategy=single: they carry none (advertised as nvidia.com/gpu).
# Then the NVLink domain of a multi-node NVLink tray (ACCELPOOL_FAKE_NVML_FABRIC):
# registered GPUs in one clique make the inventory's super node; a registration
# still in progress makes none, with a warning that says what to check. And
# --imex-channel on a node without the channel: logged with how to create it.
#   tests/device_plugin/mig_inventory.sh <accelpool-device-plugin> <fake libnvidia-ml>
set -uo pipefail
plugin="$1"
fake="$2"
dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
ln -s "${fake}" "${dir}/libnvidia-ml.so.1"
fails=0
check() {  # check <description> <command...>
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
inventory() {  # inventory <out> [flags...]
  local out="$1"; shift
  ACCELPOOL_FAKE_COUNT=2 ACCELPOOL_FAKE_NVML_MIG=1 LD_LIBRARY_PATH="${dir}" "${plugin}" \
    --backend=nvidia --print-inventory --node-name=mig "$@" >"${out}" 2>"${out}.err"
}
profiles() {  # profiles <json> -> "id:partition" per device
  python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
print(" ".join("%s:%s:%s" % (d["id"][:4], d.get("partition", "-"), d["max_shares"])
               for inv in doc["inventories"] for d in inv["devices"]))' "$1"
}
inventory "${dir}/mixed.json"
check "mixed: the plugin exited 0" test $? -eq 0
check "mixed: GPU 0 whole, GPU 1 as its four MIG devices with their profiles" \
  test "$(profiles "${dir}/mixed.json")" = \
  "GPU-:-:10 MIG-:3g.71gb:1 MIG-:2g.35gb:1 MIG-:1g.18gb:1 MIG-:1g.18gb.me:1"
check "mixed: each MIG device is logged with its profile" \
  test "$(grep -c 'MIG device MIG-.*profile' "${dir}/mixed.json.err")" = 4
inventory "${dir}/single.json" --mig-strategy=single
check "single: the plugin exited 0" test $? -eq 0
check "single: the MIG devices carry no profile (nvidia.com/gpu), still one slot each" \
  test "$(profiles "${dir}/single.json")" = "GPU-:-:10 MIG-:-:1 MIG-:-:1 MIG-:-:1 MIG-:-:1"
check "single: mixed profiles and a whole GPU on one node are warned about" \
  grep -q 'mig-strategy=single, but this node offers 4 MIG profile' "${dir}/single.json.err"
super_node() {  # super_node <json>: the value as Python writes it ('' when empty)
  python3 -c '
import json, sys
print(repr(json.load(open(sys.argv[1]))["inventories"][0]["topology"]["super_node"]))' "$1" ||
    echo "unreadable"
}
ACCELPOOL_FAKE_NVML_FABRIC=3,0,7,-1 inventory "${dir}/fabric.json"
check "fabric: the plugin exited 0" test $? -eq 0
check "fabric: the NVLink domain is the super node" \
  test "$(super_node "${dir}/fabric.json")" = "'00112233-4455-6677-8899-aabbccddeeff.7'"
check "fabric: the domain is logged" grep -q 'NVLink domain 00112233-.*\.7' "${dir}/fabric.json.err"
ACCELPOOL_FAKE_NVML_FABRIC=2,0,7,-1 inventory "${dir}/pending.json"
check "fabric in progress: the plugin exited 0" test $? -eq 0
check "fabric in progress: no super node" test "$(super_node "${dir}/pending.json")" = "''"
check "fabric in progress: a warning says what to check" \
  grep -q 'has not finished registering with the NVLink fabric.*nvidia-fabricmanager' \
  "${dir}/pending.json.err"
inventory "${dir}/imex.json" --imex-channel=0
check "imex: the plugin exited 0" test $? -eq 0
check "imex: a channel missing on the node is logged with how to create it" \
  grep -q 'imex-channel=0 but /dev/nvidia-caps-imex-channels/channel0 is not on this node.*mknod' \
  "${dir}/imex.json.err"
if [[ ${fails} -ne 0 ]]; then
  for f in "${dir}"/*.json "${dir}"/*.err; do echo "--- ${f}"; cat "${f}"; done
fi
echo "mig inventory: ${fails} failed"
[[ ${fails} -eq 0 ]]
