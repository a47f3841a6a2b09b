#!/usr/bin/env bash
# Regenerates the allocation-quality figures of docs/benchmarks/quality.md:
# every shipped trace x 10 seeds x 7 policies in the paper's mode and in the
# kube-scheduler mode, the stock-extender comparison, the time-based replay,
# and the PNG plots (gnuplot).
#
# Usage: scripts/quality.sh
#   TRACE_DIR  the Alibaba GPU trace (default: shared/traces/alibaba-gpu-v2023)
#   BUILD_DIR  a build with accelpool-sim (default: build)
#   OUT_DIR    CSV and JSON output (default: $BUILD_DIR/quality)
#   JOBS       replays in parallel (default: 2)
#   PLOTS_ONLY=1  redraw the plots from an earlier run's CSV files
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRACE_DIR="${TRACE_DIR:-$ROOT/shared/traces/alibaba-gpu-v2023}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
OUT_DIR="${OUT_DIR:-$BUILD_DIR/quality}"
JOBS="${JOBS:-2}"
IMG_DIR="$ROOT/docs/benchmarks/img"
SIM="$BUILD_DIR/src/sim/accelpool-sim"

if [[ ! -x "$SIM" ]]; then
  echo "quality.sh: $SIM not found; build it: cmake --build $BUILD_DIR --target accelpool-sim" >&2
  exit 1
fi
NODES="$TRACE_DIR/openb_node_list_gpu_node.csv"
if [[ ! -f "$NODES" ]]; then
  echo "quality.sh: no trace in $TRACE_DIR; set TRACE_DIR to the alibaba-gpu-v2023 folder" >&2
  exit 1
fi
if ! command -v gnuplot >/dev/null; then
  echo "quality.sh: gnuplot is needed for the plots: apt-get install gnuplot-nox" >&2
  exit 1
fi
PODS="$(ls "$TRACE_DIR"/openb_pod_list_*.csv | paste -sd, -)"
mkdir -p "$OUT_DIR" "$IMG_DIR"

if [[ "${PLOTS_ONLY:-0}" != 1 ]]; then
echo "== trace protocol: all traces, 7 policies, 10 seeds, paper and kube modes"
start=$(date +%s)
"$SIM" --nodes "$NODES" --pods "$PODS" --mode both --jobs "$JOBS" --progress \
  --out "$OUT_DIR/main" --json >"$OUT_DIR/main.json"
echo "   took $(( $(date +%s) - start )) s"

echo "== stock extender (NodeScore/10, random ties): FGD and accelpool"
"$SIM" --nodes "$NODES" --pods "$PODS" --policy fgd,accelpool --mode stock --jobs "$JOBS" \
  --progress --out "$OUT_DIR/stock" --json >"$OUT_DIR/stock.json"

echo "== time-based replay of the default trace (kube mode)"
"$SIM" --nodes "$NODES" --pods "$TRACE_DIR/openb_pod_list_default.csv" --timed --mode kube \
  --policy bestfit,fgd,accelpool --out "$OUT_DIR/timed" --json >"$OUT_DIR/timed.json"

if "$SIM" --help | grep -q -- --topology; then
  echo "== topology workloads"
  "$SIM" --topology --out "$OUT_DIR/topo" >"$OUT_DIR/topo.json"
fi
fi

echo "== plots"
POLICIES=(random dotprod clustering packing bestfit fgd accelpool)
for csv in "$OUT_DIR"/main/curve-*.csv; do
  name="$(basename "$csv" .csv)"
  name="${name#curve-}"
  plot="set terminal pngcairo size 900,540 font 'sans,11'
set output '$IMG_DIR/$name.png'
set datafile separator ','
set title 'Unallocated GPUs vs arrived workload: $name (mean of 10 seeds)'
set xlabel 'arrived GPU request (% of cluster GPUs)'
set ylabel 'unallocated GPUs (% of cluster)'
set xrange [75:130]
set yrange [0:30]
set grid
set key top right
plot "
  for k in "${!POLICIES[@]}"; do
    col=$(( 2 + 3 * k ))
    plot+="'$csv' using 1:$col with lines lw 2 title '${POLICIES[$k]}', "
  done
  gnuplot <<<"${plot%, }"
done
timed="$OUT_DIR/timed"
gnuplot <<<"set terminal pngcairo size 900,400 font 'sans,11'
set output '$IMG_DIR/timed-default.png'
set datafile separator ','
set title 'Time-based replay of the default trace: GPUs allocated over time (kube mode)'
set xlabel 'trace time (days)'
set ylabel 'allocated GPUs (% of cluster)'
set grid
plot '$timed/timed-default-bestfit.csv' using (\$1/86400):2 with lines title 'bestfit', \
     '$timed/timed-default-fgd.csv' using (\$1/86400):2 with lines title 'fgd', \
     '$timed/timed-default-accelpool.csv' using (\$1/86400):2 with lines title 'accelpool'"
echo "figures in $OUT_DIR, plots in $IMG_DIR"
