#!/usr/bin/env bash
# A short demo of the allocation core on production data: replays the Alibaba GPU trace
# (1,213 nodes, 6,212 GPUs) through accelpool's policy, FGD and BestFit, as kube-scheduler
# applies them with accelpool's extender, for three seeds; then a mixed-vendor topology
# workload (Ascend 910C modules, 910A rings, NVIDIA HGX, super-nodes) against a
# topology-blind policy. Expects a build in build/ (scripts/build.sh).
# Usage: scripts/sim-demo.sh [trace-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
SIM=build/src/sim/accelpool-sim
[[ -x $SIM ]] || { echo "sim-demo: $SIM not built; run scripts/build.sh" >&2; exit 1; }
TRACE=${1:-../shared/traces/alibaba-gpu-v2023}
if [[ -f $TRACE/openb_node_list_gpu_node.csv ]]; then
  NODES=$TRACE/openb_node_list_gpu_node.csv PODS=$TRACE/openb_pod_list_default.csv
else
  # The shipped 1-in-12 slice of the same trace (src/sim/testdata/README.md).
  TRACE=src/sim/testdata NODES=src/sim/testdata/nodes.csv PODS=src/sim/testdata/pods.csv
fi
OUT=${OUT:-out/sim-demo}
mkdir -p "$OUT"
echo "== Trace replay: $TRACE (kube-scheduler mode, seeds 42-44)"
"$SIM" --nodes "$NODES" --pods "$PODS" \
  --policy accelpool,fgd,bestfit --mode kube --seeds 42-44 --jobs 2 --out "$OUT"
echo
echo "== Topology workload: mixed vendors with super-nodes, accelpool vs topology-blind"
"$SIM" --topology --seed 42 --out "$OUT"
echo
echo "sim-demo: CSV curves and summaries in $OUT"
