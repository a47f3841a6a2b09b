#!/usr/bin/env bash
# Runs the device plugin's NVML discovery on a machine with NVIDIA GPUs and
# records what NVML reports: per GPU the UUID, memory, NUMA node, PCI bus,
# MIG mode, the measured link matrix (P2P level + NVLink) and the memory in
# use the foreign memory check reads, next to nvidia-smi's own view for
# comparison.
#
#   scripts/h200/nvml_inventory.sh [build-dir]
#
# The plugin comes from, in order: $ACCELPOOL_PLUGIN_BIN; the bundle in
# .h200/ (scripts/h200/bundle.sh, for GPU machines without the gRPC stack);
# a build of this checkout into build-dir (default build-h200).
# Output: nvml-inventory-<gpu model>.md and the raw JSON beside it, in
# $INVENTORY_OUT (default docs/benchmarks). Needs the NVIDIA driver
# (libnvidia-ml.so.1) and python3; no Kubernetes.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${repo}/build-h200}"
cd "${repo}"

command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: run this on a GPU machine" >&2; exit 1; }

if [[ -n ${ACCELPOOL_PLUGIN_BIN:-} ]]; then
  bin="${ACCELPOOL_PLUGIN_BIN}"
elif [[ -x ${repo}/.h200/bin/accelpool-device-plugin ]]; then
  bin="${repo}/.h200/bin/accelpool-device-plugin"
  # shellcheck source=scripts/h200/plugin_env.sh
  source "${repo}/scripts/h200/plugin_env.sh"
  plugin_library_path "${repo}/.h200"
else
  cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DACCELPOOL_BUILD_TESTS=OFF -DACCELPOOL_BUILD_BENCH=OFF \
    -DACCELPOOL_WITH_CUDA_SHIM=OFF -DACCELPOOL_WITH_SIM=OFF >/dev/null
  cmake --build "${build}" -j"$(nproc)" --target accelpool-device-plugin
  bin="${build}/src/cmd/device_plugin/accelpool-device-plugin"
fi
echo "plugin: ${bin}"
# `sed -n 1p` reads all of nvidia-smi's output: `head -1` could end it with
# SIGPIPE, which pipefail turns into a failed run.
first_gpu() { nvidia-smi --query-gpu="$1" --format=csv,noheader | sed -n 1p; }
model="$(first_gpu name | sed 's/^NVIDIA //; s/[^A-Za-z0-9]/-/g')"
out_dir="${INVENTORY_OUT:-${repo}/docs/benchmarks}"
mkdir -p "${out_dir}"
json="${out_dir}/nvml-inventory-${model,,}.json"
md="${out_dir}/nvml-inventory-${model,,}.md"

start=$(date +%s%N)
# bash's HOSTNAME: a bare image may have no hostname command. A discovery
# that fails is recorded with its error: nvidia-smi's view below is written
# either way.
again="$(mktemp)"
errors="$(mktemp)"
trap 'rm -f "${again}" "${errors}"' EXIT
plugin_rc=0
"${bin}" --backend=nvidia --print-inventory --node-name="${HOSTNAME:-h200}" > "${json}" \
  2> "${errors}" || plugin_rc=$?
end=$(date +%s%N)
# The plugin discovers again every minute and serves a device set that
# differs (docs/device-plugin.md, "When the devices change"): on a node that
# did not change, a second discovery must read the same document.
again_rc=0
if [[ ${plugin_rc} -eq 0 ]]; then
  "${bin}" --backend=nvidia --print-inventory --node-name="${HOSTNAME:-h200}" > "${again}" \
    2>> "${errors}" || again_rc=$?
fi
if [[ ${plugin_rc} -ne 0 ]]; then
  stable="did not run: the plugin failed (exit ${plugin_rc})"
elif [[ ${again_rc} -ne 0 ]]; then
  stable="FAILED (exit ${again_rc}; its error is at the end of this file)"
elif cmp -s "${json}" "${again}"; then
  stable="read the same inventory, as the plugin's device check needs"
else
  stable="read a DIFFERENT inventory: the device check would see a change (diff below)"
fi

{
  echo "# NVML inventory on $(first_gpu name)"
  echo
  echo "Recorded $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/h200/nvml_inventory.sh."
  echo "Driver $(first_gpu driver_version);"
  echo "discovery took $(( (end - start) / 1000000 )) ms (process start to exit)."
  echo "A second discovery right after it ${stable}."
  echo
  if [[ ${plugin_rc} -eq 0 && ${again_rc} -eq 0 ]] && ! cmp -s "${json}" "${again}"; then
    echo '```'
    diff "${json}" "${again}" || true
    echo '```'
    echo
  fi
  echo "## What accelpool read through NVML"
  echo
  if [[ ${plugin_rc} -ne 0 ]]; then
    echo "The plugin's discovery failed (exit ${plugin_rc}); what it printed:"
    echo
    echo '```'
    head -c 4000 "${errors}"
    echo '```'
  else
  echo "| index | id (UUID) | model | memory MiB | NUMA | PCI bus | max shares | healthy | MIG profile |"
  echo "|---|---|---|---|---|---|---|---|---|"
  python3 - "${json}" <<'PY' || echo "(the inventory did not parse)"
import json, sys
doc = json.load(open(sys.argv[1]))
for inv in doc["inventories"]:
    for d in inv["devices"]:
        print(f"| {d['index']} | {d['id']} | {d['model']} | {d['memory_mib']} | {d['numa']} | "
              f"{d['pci_bus']} | {d['max_shares']} | {d['healthy']} | {d.get('partition') or '-'} |")
    t = inv["topology"]
    n = len(inv["devices"])
    print()
    print(f"Topology profile: `{t['kind']}`; groups {t['groups']}.")
    print()
    print("Link scores (PCIe level 10..60 + 100 per NVLink):")
    print()
    print("| | " + " | ".join(str(j) for j in range(n)) + " |")
    print("|---" * (n + 1) + "|")
    links = t["links"]
    for i in range(n):
        row = [str(links[i * n + j]) if links else "-" for j in range(n)]
        print(f"| {i} | " + " | ".join(row) + " |")
PY
  fi
  echo
  echo "## Memory in use, as the foreign memory check reads it"
  echo
  echo "\`--print-memory-use\` (NVML's \`nvmlDeviceGetMemoryInfo_v2\` used, without the driver's"
  echo "reserve) beside nvidia-smi's memory.used; on idle GPUs both should be a few MiB."
  echo
  echo '```'
  "${bin}" --backend=nvidia --print-memory-use --host-proc=/proc 2>&1 || true
  echo
  timeout 20 nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv || true
  timeout 20 nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv \
    || true
  echo '```'
  echo
  if [[ ${again_rc} -ne 0 ]]; then
    echo "## The second discovery's error"
    echo
    echo '```'
    head -c 4000 "${errors}"
    echo '```'
    echo
  fi
  echo "## nvidia-smi for comparison"
  echo
  echo '```'
  timeout 20 nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current \
    --format=csv || true
  echo
  timeout 20 nvidia-smi topo -m || true
  echo
  timeout 20 nvidia-smi -L || true
  echo '```'
} > "${md}"

cat "${md}"
echo "wrote ${md} and ${json}"
exit "${plugin_rc}"
