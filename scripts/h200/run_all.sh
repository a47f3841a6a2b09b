#!/usr/bin/env bash
# Everything the H200 has to show, as one command on the GPU machine:
#   1. NVML discovery through the device plugin (scripts/h200/nvml_inventory.sh);
#   2. the enforcement plan (scripts/h200/run_enforcement.sh).
# Results land in $OUT (or out/h200): nvml-inventory-*.md/.json,
# nvml_inventory.log, enforcement_raw.txt and nvml_samples.csv. Prepare .h200/ first with
# scripts/h200/bundle.sh on a machine that builds the project; see
# docs/enforcement.md ("Running the plan on an H200").
# Pass ENFORCE_* variables through to rerun parts, e.g.
#   ENFORCE_SECTIONS="pair replicas" SKIP_INVENTORY=1 scripts/h200/run_all.sh
#
# The whole run fits one 600 s command: the inventory gets at most
# INVENTORY_TIMEOUT_S (default 90), and the enforcement plan's budget
# (ENFORCE_BUDGET_S, default 500) and deadline (ENFORCE_DEADLINE_S, default
# 570) are lowered by what the inventory took.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
out="${OUT:-${repo}/out/h200}"
mkdir -p "${out}"
start=${SECONDS}
# NVML's view once a second for the whole run (utilisation, SM clock, memory):
# the clock explains a share that is off, and a reader holding NVML open keeps
# the driver initialised between the cases' processes, as persistence mode
# would, without changing any setting of the card.
sampler=""
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,clocks.mem,memory.used,power.draw \
    --format=csv -l 1 < /dev/null > "${out}/nvml_samples.csv" 2>&1 &
  sampler=$!
  # Also when the run is cut short (a signal): nothing is left appending.
  trap '[[ -n ${sampler} ]] && kill "${sampler}" 2> /dev/null' EXIT
fi
if [[ ${SKIP_INVENTORY:-0} != 1 ]]; then
  INVENTORY_OUT="${out}" timeout --kill-after=5 "${INVENTORY_TIMEOUT_S:-90}" \
    bash "${here}/nvml_inventory.sh" 2>&1 | tee "${out}/nvml_inventory.log"
fi
spent=$((SECONDS - start))
echo "run_all: inventory took ${spent}s"
ENFORCE_BUDGET_S=$((${ENFORCE_BUDGET_S:-500} - spent)) \
  ENFORCE_DEADLINE_S=$((${ENFORCE_DEADLINE_S:-570} - spent)) \
  bash "${here}/run_enforcement.sh" "${out}"
exit $?
