#!/usr/bin/env bash
# Regenerates the allocation-quality figures of docs/benchmarks/quality.md:
# every shipped trace x 10 seeds x 7 policies in the paper's mode and in the
# kube-scheduler mode, the stock-extender comparison, kube mode with the
# former idle-node penalty, the time-based replay, the PNG plots (gnuplot) and
# the markdown tables of docs/benchmarks/quality.md ($OUT_DIR/tables.md).
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

echo "== kube mode with a 15-point idle-node penalty (the former default): FGD and accelpool"
"$SIM" --nodes "$NODES" --pods "$PODS" --policy fgd,accelpool --mode kube --idle-node-penalty 15 \
  --jobs "$JOBS" --progress --out "$OUT_DIR/penalty15" --json >"$OUT_DIR/penalty15.json"

echo "== kube mode with only what the extender knows (as shipped: learned workload, host terms)"
"$SIM" --nodes "$NODES" --pods "$PODS" --policy accelpool-extender,fgd-extender --mode kube \
  --jobs "$JOBS" --progress --out "$OUT_DIR/extender" --json >"$OUT_DIR/extender.json"

echo "== the extender without them (built-in workload, devices only: --learn-workload=false --host-aware=false)"
"$SIM" --nodes "$NODES" --pods "$PODS" --policy accelpool-extender --mode kube \
  --extender-workload builtin --extender-host off --jobs "$JOBS" --progress \
  --out "$OUT_DIR/extender-blind" --json >"$OUT_DIR/extender-blind.json"

echo "== time-based replay of the default trace (kube mode)"
"$SIM" --nodes "$NODES" --pods "$TRACE_DIR/openb_pod_list_default.csv" --timed --mode kube \
  --policy bestfit,fgd,accelpool --out "$OUT_DIR/timed" --json >"$OUT_DIR/timed.json"

if grep -q -- --topology <<<"$("$SIM" --help)"; then
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

# The result tables of docs/benchmarks/quality.md, from the JSON summaries.
python3 - "$OUT_DIR" >"$OUT_DIR/tables.md" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return {}
    return {(r["trace"], r["policy"], r["mode"]): r for r in json.load(open(path))}
main, stock, pen, ext = load("main"), load("stock"), load("penalty15"), load("extender")
blind = load("extender-blind")
published = {"default": [13.70, 9.38, 8.35, 8.22, 7.14, 4.77], "gpushare40": [15.14, 10.70, 10.24, 10.23, 8.56, 6.04],
             "gpushare60": [17.19, 13.18, 13.10, 12.85, 10.94, 8.75], "gpushare80": [19.38, 15.86, 15.50, 15.35, 13.34, 10.92],
             "gpushare100": [21.10, 18.02, 17.78, 17.87, 15.38, 13.36], "multigpu20": [13.08, 8.15, 6.66, 6.50, 6.27, 4.47],
             "multigpu30": [13.37, 6.89, 5.45, 5.30, 5.43, 3.64], "multigpu40": [14.62, 5.96, 4.65, 4.41, 4.90, 3.09],
             "multigpu50": [18.72, 5.27, 4.31, 3.94, 4.38, 2.91]}
traces = ["default"] + ["gpushare%d" % g for g in (20, 40, 60, 80, 100)] + ["multigpu%d" % g for g in (20, 30, 40, 50)]
policies = ["random", "dotprod", "clustering", "packing", "bestfit", "fgd", "accelpool"]
def cell(table, t, p, m, bold=False):
    r = table.get((t, p, m))
    if r is None:
        return "-"
    u = r["unallocated_pct_at_100"]
    if u["mean"] is None:  # the arrivals stopped short of 100 %
        return "n/a"
    s = "%.2f ±%.2f" % (u["mean"], u["sd"])
    return "**%s**" % s if bold else s
print("| trace | " + " | ".join(policies) + " |")
print("|" + "---|" * (len(policies) + 1))
for t in traces:
    pub = published.get(t)
    cells = []
    for i, p in enumerate(policies):
        c = cell(main, t, p, "paper")
        if i < 6:
            c += " (%s)" % ("%.2f" % pub[i] if pub else "-")
        cells.append(c)
    print("| %s | %s |" % (t, " | ".join(cells)))
print()
print("| policy | paper | kube |")
print("|---|---|---|")
for p in policies:
    f = [main.get(("default", p, m), {}).get("first_failure_arrived_pct", -1) for m in ("paper", "kube")]
    print("| %s | %s | %s |" % (p, *("-" if x is None else "%.2f" % x for x in f)))
print()
print("| trace | published FGD | our FGD (paper) | accelpool paper | accelpool kube | FGD kube "
      "| kube, penalty 15: FGD | kube, penalty 15: accelpool | FGD stock | accelpool stock |")
print("|" + "---|" * 10)
for t in traces:
    pub = published.get(t)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        t, "%.2f" % pub[5] if pub else "-", cell(main, t, "fgd", "paper"),
        cell(main, t, "accelpool", "paper"), cell(main, t, "accelpool", "kube", True),
        cell(main, t, "fgd", "kube"), cell(pen, t, "fgd", "kube"), cell(pen, t, "accelpool", "kube"),
        cell(stock, t, "fgd", "stock"), cell(stock, t, "accelpool", "stock")))
print()
print("| trace | published FGD | accelpool kube (trace workload, host terms) | FGD kube | "
      "accelpool-extender kube (as shipped: learned, host) | fgd-extender kube (same information) "
      "| accelpool-extender, built-in mix, devices only |")
print("|" + "---|" * 7)
for t in traces:
    pub = published.get(t)
    print("| %s | %s | %s | %s | %s | %s | %s |" % (
        t, "%.2f" % pub[5] if pub else "-", cell(main, t, "accelpool", "kube"),
        cell(main, t, "fgd", "kube"), cell(ext, t, "accelpool-extender", "kube", True),
        cell(ext, t, "fgd-extender", "kube"), cell(blind, t, "accelpool-extender", "kube")))
PY
echo "tables in $OUT_DIR/tables.md"
