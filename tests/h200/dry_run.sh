#!/usr/bin/env bash
# Dry run of the H200 plan (scripts/h200/run_enforcement.sh) on a machine
# without a GPU: nvidia-smi, nvcc and python3 are stand-ins (tests/h200/mock)
# that print what each case was started with. The real shim is built and
# preloaded into the stand-in processes. Checks the script's plumbing, which
# otherwise first runs on the GPU machine: every section runs inside the
# budget, each "container" gets its own state dir, the calibration and the
# measured context size reach the cases that need them.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT
log="${out}/enforcement_raw.txt"
# ENFORCE_BUILD_SHIM=1: the shim is built from this checkout even where a
# bundle in .h200/ would give it prebuilt.
PATH="${here}/mock:${PATH}" ENFORCE_BUILD_SHIM=1 ENFORCE_SECONDS=1 ENFORCE_SHARE_SECONDS=1 ENFORCE_PAIR_SECONDS=1 \
  ENFORCE_RESNET_SECONDS=1 ENFORCE_REPLICA_DELAY_S=0 ENFORCE_LAUNCHES=10 \
  bash "${repo}/scripts/h200/run_enforcement.sh" "${out}" > /dev/null 2>&1
fails=0
check() {  # check <description> <command...>
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
has() { grep -qE -- "$1" "${log}"; }
count() { grep -cE -- "$1" "${log}"; }
check "the raw log was written" test -s "${log}"
check "the shim was built here" has '^shim=built$'
check "the probe was built" has '^probe=built$'
for s in "1. versions" "2. memory cap" "3. what the process" "5. compute share" "8. two containers" \
         "9. one container" "10. launch overhead" "4. PyTorch memory" "12. ResNet50" \
         "four ResNet50 replicas" "2b. contexts" "6. bypass" "7. PyTorch compute" "11. allocation" "12. MPS" \
         "done"; do
  check "section ran: ${s}" has "^=== ${s}"
done
check "nothing was skipped for the budget" bash -c "! grep -q 'over the .*budget' '${log}'"
check "every case exited 0" bash -c "! grep -E '^exit=' '${log}' | grep -qv '^exit=0$'"
check "every case reported its exit (62 in the plan)" test "$(count '^exit=')" -ge 62
check "the solo calibration reached the share runs" has 'args=share kernel 1000 1 123456 1.0012 '
check "the 10 us and 50 ms probes got a solo calibration too" \
  test "$(grep -cE 'args=share kernel (10|50000) 1 123456 1.0012 ' "${log}")" -eq 2
check "the measured context size reached the PyTorch memory cases" \
  test "$(count 'torch_enforce.py mem .* ctx=512 ')" -eq 3
check "14 memcap cases at a 1 GiB cap, each in its own container" \
  test "$(grep -E '^cmd=memcap .* mem=1024$' "${log}" | grep -v 'alloc 3145728\|alloc 629145' \
    | sed 's/.*state=\([^ ]*\).*/\1/' | sort -u | wc -l)" -eq 14
check "contexts cycle natively and under the 1 GiB cap" \
  test "$(grep -cE '^cmd=contexts 8 268435456 ' "${log}")" -eq 2
check "the graph pool is read natively and under the shim" \
  test "$(grep -cE '^cmd=graphattrs 268435456 ' "${log}")" -eq 2
check "the 30/70 pair ran in two containers" test "$(grep -E '^(A\(30\)|B\(70\)):' "${log}" \
  | sed 's/.*state=\([^ ]*\).*/\1/' | sort -u | wc -l)" -eq 2
check "four limited replicas, four containers, 25 % and a quarter of the memory" \
  test "$(grep -E '^\[[1-4]\] py=.*resnet 1 1 .* lim=25 mem=35942 ' "${log}" \
    | sed 's/.*state=\([^ ]*\).*/\1/' | sort -u | wc -l)" -eq 4
check "the SIGKILL case shares one container across its processes" \
  test "$(sed -n '/^=== 9\./,/^=== 10\./p' "${log}" | grep -E '^cmd=.* mem=1024$' \
    | sed 's/.*state=\([^ ]*\).*/\1/' | sort -u | wc -l)" -eq 1
check "the MPS replicas get the env the plugin's MPS mode sets, no shim" \
  test "$(grep -cE '^\[[1-4]\] py=.*resnet 1 1 .* state=none .* mps=25 pinned=0=35942M ' "${log}")" -eq 4
check "every memcap case stops at 4 GiB (16 GiB under MPS), far below the card" \
  bash -c "! grep -E '^cmd=memcap ' '${log}' | grep -vqE '^cmd=memcap [a-z]+ [0-9]+ (4294967296|17179869184) '"
check "every memcap case carries its bound (17 cases)" \
  test "$(grep -cE '^cmd=memcap [a-z]+ [0-9]+ [0-9]+ ' "${log}")" -eq 17
# The whole plan through run_all.sh, as the GPU machine runs it in one 600 s
# command: the inventory (a plugin stand-in that takes 3 s, run twice)
# counts against the deadline, and a case that would run far past it (1000 s pair windows)
# is cut, so the run ends by the deadline. Only the named section runs.
plugin="${out}/plugin"
printf '#!/bin/bash\nsleep 3\necho "{\\"inventories\\": []}"\n' > "${plugin}"
chmod +x "${plugin}"
all_out="${out}/all"
mkdir -p "${all_out}"
t0=${SECONDS}
OUT="${all_out}" ACCELPOOL_PLUGIN_BIN="${plugin}" ENFORCE_SECTIONS="pair" \
  PATH="${here}/mock:${PATH}" ENFORCE_PAIR_SECONDS=1000 ENFORCE_SECONDS=1000 \
  ENFORCE_DEADLINE_S=60 bash "${repo}/scripts/h200/run_all.sh" > "${out}/all.log" 2>&1
took=$((SECONDS - t0))
log="${all_out}/enforcement_raw.txt"
check "run_all ended by its deadline (took ${took}s of 60)" test "${took}" -le 75
check "run_all sampled NVML beside the run" test -s "${all_out}/nvml_samples.csv"
# What the inventory took depends on the machine's load (ctest runs this beside
# the Arm emulation): read it from run_all's own line, then check the sums.
spent="$(sed -n 's/^run_all: inventory took \([0-9]*\)s$/\1/p' "${out}/all.log")"
check "the inventory ran both discoveries (took ${spent:-?}s, >= 6)" test "${spent:-0}" -ge 6
check "the inventory's time was taken off the enforcement budget and deadline" \
  has "^budget_s=$((500 - ${spent:-0})) deadline_s=$((60 - ${spent:-0}))\$"
check "a case past the deadline had its timeout cut" has '^\(timeout cut from 1060s to'
check "the cases after it were skipped" test "$(count '^SKIPPED: over the')" -ge 2
check "ENFORCE_SECTIONS=pair runs the pair and nothing else" \
  bash -c "grep -q '^=== 8. two containers' '${log}' && ! grep -q '^=== 2. memory cap' '${log}'"
check "the results fit what comes back from \$OUT (<= 8 plain files, safe names)" \
  bash -c "test \$(find '${all_out}' -type f | wc -l) -le 8 && \
    ! find '${all_out}' -mindepth 1 | sed 's|^${all_out}/||' | grep -qvE '^[A-Za-z0-9._-]+$'"
echo "h200 dry run: ${fails} failed"
[[ ${fails} -eq 0 ]]
