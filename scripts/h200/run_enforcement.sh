#!/usr/bin/env bash
# The H200 enforcement plan of docs/enforcement.md, as one command:
#
#   scripts/h200/run_enforcement.sh [output_dir]
#
# Builds libaccelpool-cuda (g++) and the driver-API probe (nvcc) from this
# checkout, then runs every case natively, with the shim loaded and limits
# off, and with limits on. All output is raw key=value lines, also written to
# <output_dir>/enforcement_raw.txt (default: $OUT if set, else out/enforcement).
# Needs: an NVIDIA GPU and driver, nvcc + CUDA headers, g++, python3 with
# torch (torchvision optional). Budget: about 7 minutes with the defaults;
# ENFORCE_SECONDS (default 6) sets the length of each timed run (the plan's
# 30 s windows: ENFORCE_SECONDS=30, about 25 minutes), ENFORCE_BUDGET_S
# (default 420) skips the sections that would start after it.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT_DIR=${1:-${OUT:-$ROOT/out/enforcement}}
mkdir -p "$OUT_DIR"
RAW="$OUT_DIR/enforcement_raw.txt"
exec > >(tee "$RAW") 2>&1

T=${ENFORCE_SECONDS:-6}
BUDGET=${ENFORCE_BUDGET_S:-420}
LAUNCHES=${ENFORCE_LAUNCHES:-1000000}
START=$SECONDS
WORK=$(mktemp -d /tmp/accelpool-enforce.XXXXXX)

section() { echo; echo "=== $* (t=$((SECONDS - START))s)"; }
budget_left() {
  if (( SECONDS - START > BUDGET )); then
    echo "SKIPPED: over the ${BUDGET}s budget"
    return 1
  fi
}
# run <label> <timeout_s> <cmd...>: one raw result block.
run() {
  local label=$1 tmo=$2
  shift 2
  echo "--- $label"
  timeout --kill-after=5 "$tmo" "$@"
  echo "exit=$?"
}
state_dir() { mktemp -d "$WORK/container.XXXX"; }

section "environment"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvcc --version | tail -2
HAVE_TORCH=1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
  || { echo "torch=missing: PyTorch sections will be SKIPPED"; HAVE_TORCH=0; }
torch_ok() { [ "$HAVE_TORCH" = 1 ] || { echo "SKIPPED: torch not installed"; return 1; }; }

section "build"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SRC="$ROOT/src/cuda"
g++ -std=c++20 -O2 -fPIC -shared -fno-exceptions -fno-rtti -fno-threadsafe-statics \
  -fvisibility=hidden -I"$ROOT/src" \
  "$SRC"/{alloc_table,config,elf_lookup,log,shared_region,symbols,throttle}.cc \
  "$SRC"/{accounting,hooks_info,hooks_launch,hooks_memory,hooks_nvml,hooks_vmm,shim}.cc \
  -o "$WORK/libaccelpool-cuda.so" -ldl -lpthread -Wl,--as-needed -Wl,-z,now -Wl,-z,nodelete \
  && echo "shim=built" || { echo "shim=FAILED"; exit 1; }
"$NVCC" -O2 -std=c++17 -arch=sm_90 -o "$WORK/enforce_probe" "$HERE/enforce_probe.cu" \
  -lcuda -lnvidia-ml && echo "probe=built" || { echo "probe=FAILED"; exit 1; }
SHIM="$WORK/libaccelpool-cuda.so"
P="$WORK/enforce_probe"
PY="python3 $HERE/torch_enforce.py"
# The three ways: native, shim loaded with limits off, shim with limits (each
# "container" gets a fresh state dir). Paths under /tmp have no spaces, so
# these prefixes are used unquoted.
NATIVE="env -u LD_PRELOAD"
OFF="env LD_PRELOAD=$SHIM"
ON() { echo "env LD_PRELOAD=$SHIM ACCELPOOL_CUDA_STATE_DIR=$(state_dir)"; }

section "1. versions, context size, hooked symbols"
run "info native" 60 $NATIVE "$P" info
run "info shim-off" 60 $OFF "$P" info
run "info shim-on (debug log: hooked symbols)" 60 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=4096 \
  ACCELPOOL_CUDA_COMPUTE_LIMIT=50 ACCELPOOL_CUDA_LOG_LEVEL=debug "$P" share kernel 1000 1 2>&1 \
  | grep -E "hooked|share_pct|exit=" | sort | uniq -c
[ "$HAVE_TORCH" = 1 ] && run "torch shim-on (debug log: hooked symbols)" 120 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=4096 \
  ACCELPOOL_CUDA_COMPUTE_LIMIT=50 ACCELPOOL_CUDA_LOG_LEVEL=debug $PY matmul 1 2>&1 \
  | grep -E "cuLaunchKernel|cuLaunchKernelEx|cuGraphLaunch|cuMemAlloc|cuMemCreate|cuMemAllocAsync|matmul" \
  | sort | uniq -c

section "2-3. memory cap exactness and truth check (cap 1 GiB)"
for size in 1048576 2097152 67108864 33554433 33554431; do
  run "memcap alloc $size" 120 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=1024 "$P" memcap alloc "$size"
done
for api in pitch managed async pool vmm array host; do
  run "memcap $api 64MiB" 120 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=1024 "$P" memcap "$api" 67108864
done
run "memcap alloc 1GiB native (no cap)" 180 $NATIVE "$P" memcap alloc 1073741824
run "meminfo native" 60 $NATIVE "$P" meminfo
run "meminfo shim-off" 60 $OFF "$P" meminfo
run "meminfo shim-on cap 1GiB" 60 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=1024 "$P" meminfo
run "nvidia-smi shim-on cap 1GiB" 60 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=1024 \
  nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv

section "4. PyTorch memory (cap 4 GiB)"
budget_left && torch_ok && {
  run "torch mem native" 120 $NATIVE $PY mem
  run "torch mem cap 4GiB" 120 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=4096 $PY mem
  run "torch mem cap 4GiB expandable" 120 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=4096 \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY mem
  run "torch mem cap 4GiB cudaMallocAsync" 120 $(ON) ACCELPOOL_CUDA_MEMORY_LIMIT=4096 \
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync $PY mem
}

section "5. compute share, 1 ms kernels, ${T}s each"
budget_left && {
  run "share native" $((T + 60)) $NATIVE "$P" share kernel 1000 "$T"
  run "share shim-off" $((T + 60)) $OFF "$P" share kernel 1000 "$T"
  for pct in 100 50 25 10; do
    run "share limit $pct" $((T + 60)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=$pct \
      "$P" share kernel 1000 "$T"
  done
}

section "6. bypass and cost probes at 50%"
budget_left && {
  run "sync after each launch" $((T + 60)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=50 \
    "$P" share sync 1000 "$T"
  run "10 us kernels" $((T + 60)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=50 "$P" share kernel 10 "$T"
  run "50 ms kernels" $((T + 60)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=50 \
    "$P" share kernel 50000 "$T"
  for mode in graph ex coop; do
    run "$mode" $((T + 60)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=50 "$P" share "$mode" 1000 "$T"
  done
}

section "7. PyTorch compute"
budget_left && torch_ok && {
  run "matmul native" $((T + 90)) $NATIVE $PY matmul "$T"
  run "matmul shim-off" $((T + 90)) $OFF $PY matmul "$T"
  for pct in 100 50 25; do
    run "matmul limit $pct" $((T + 90)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=$pct $PY matmul "$T"
  done
  run "resnet50 b8 native" $((T + 120)) $NATIVE $PY resnet "$T"
  run "resnet50 b8 limit 100" $((T + 120)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=100 \
    ACCELPOOL_CUDA_MEMORY_LIMIT=16384 $PY resnet "$T"
  run "resnet50 b8 limit 50" $((T + 120)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=50 $PY resnet "$T"
}

section "8. two containers, caps 30 and 70, matmul-sized kernels"
budget_left && {
  echo "--- unlimited aggregate (two native processes)"
  $NATIVE "$P" share kernel 1000 $((2 * T)) > "$WORK/u1" 2>&1 &
  p1=$!
  $NATIVE "$P" share kernel 1000 $((2 * T)) > "$WORK/u2" 2>&1 &
  wait $p1 $!
  cat "$WORK/u1" "$WORK/u2"
  echo "--- A=30 B=70 (separate containers)"
  $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=30 "$P" share kernel 1000 $((2 * T)) > "$WORK/a" 2>&1 &
  p1=$!
  $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=70 "$P" share kernel 1000 $((2 * T)) > "$WORK/b" 2>&1 &
  wait $p1 $!
  echo "A:"; cat "$WORK/a"; echo "B:"; cat "$WORK/b"
  run "A alone at 30 (ceiling or elastic?)" $((T + 60)) $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=30 \
    "$P" share kernel 1000 "$T"
}

section "9. one container, two processes, one cap; SIGKILL and a third process"
budget_left && {
  C=$(state_dir)
  IN_C="env LD_PRELOAD=$SHIM ACCELPOOL_CUDA_STATE_DIR=$C ACCELPOOL_CUDA_MEMORY_LIMIT=1024"
  mkfifo "$WORK/holdA" "$WORK/holdB"
  $IN_C "$P" hold 600 < "$WORK/holdA" > "$WORK/A.out" 2>&1 &
  PID_A=$!
  exec 7> "$WORK/holdA"
  $IN_C "$P" hold 300 < "$WORK/holdB" > "$WORK/B.out" 2>&1 &
  PID_B=$!
  exec 8> "$WORK/holdB"
  sleep 8
  echo "A: $(cat "$WORK/A.out")"
  echo "B: $(cat "$WORK/B.out")"
  run "third process wants 300 MiB while A and B hold 900 (expect OOM)" 60 $IN_C "$P" memcap alloc 314572800
  kill -KILL "$PID_A"
  wait "$PID_A" 2>/dev/null
  echo "A killed with SIGKILL"
  run "meminfo after the kill (expect free ~ 1024-300 MiB, no stale usage)" 60 $IN_C "$P" meminfo
  run "third process wants 600 MiB (expect success)" 60 $IN_C "$P" memcap alloc 629145600
  exec 7>&- 8>&-
  wait "$PID_B"
}

section "10. launch overhead, ${LAUNCHES} empty kernels"
budget_left && {
  run "overhead native" 120 $NATIVE "$P" overhead "$LAUNCHES"
  run "overhead shim-off" 120 $OFF "$P" overhead "$LAUNCHES"
  run "overhead limit 100" 120 $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=100 "$P" overhead "$LAUNCHES"
  run "overhead limit 50" 120 $(ON) ACCELPOOL_CUDA_COMPUTE_LIMIT=50 "$P" overhead 100000
}

section "11. allocation latency (8 processes) and startup (1 and 32 processes)"
budget_left && {
  for way in native limited; do
    echo "--- allocbench 8 processes $way"
    C=$(state_dir)
    pids=()
    for i in $(seq 8); do
      if [ "$way" = native ]; then
        $NATIVE "$P" allocbench 50 > "$WORK/ab$i" 2>&1 &
      else
        env LD_PRELOAD="$SHIM" ACCELPOOL_CUDA_STATE_DIR="$C" ACCELPOOL_CUDA_MEMORY_LIMIT=65536 \
          "$P" allocbench 50 > "$WORK/ab$i" 2>&1 &
      fi
      pids+=($!)
    done
    wait "${pids[@]}"
    cat "$WORK"/ab*
    for n in 1 32; do
      echo "--- startup $n processes $way"
      pids=()
      for i in $(seq "$n"); do
        if [ "$way" = native ]; then
          $NATIVE "$P" startup > "$WORK/st$i" 2>&1 &
        else
          env LD_PRELOAD="$SHIM" ACCELPOOL_CUDA_STATE_DIR="$C" ACCELPOOL_CUDA_MEMORY_LIMIT=65536 \
            "$P" startup > "$WORK/st$i" 2>&1 &
        fi
        pids+=($!)
      done
      wait "${pids[@]}"
      cat "$WORK"/st* | sort -t= -k2 -n | sed -n '1p;$p'
      rm -f "$WORK"/st*
    done
  done
}

section "12. MPS as the vendor reference"
command -v nvidia-cuda-mps-control >/dev/null || echo "SKIPPED: nvidia-cuda-mps-control not found"
budget_left && command -v nvidia-cuda-mps-control >/dev/null && {
  export CUDA_MPS_PIPE_DIRECTORY="$WORK/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$WORK/mps-log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "mps=started"
  for pct in 50 25; do
    run "MPS share $pct" $((T + 60)) env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct \
      "$P" share kernel 1000 "$T"
  done
  run "MPS memcap 1G" 120 env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G "$P" memcap alloc 67108864
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

section "done"
echo "total_s=$((SECONDS - START)) raw=$RAW"
rm -rf "$WORK"
