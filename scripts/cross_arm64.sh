#!/usr/bin/env bash
# Builds libaccelpool-cuda and its tests for 64-bit Arm (the Grace CPUs of
# GH200 and GB200 nodes) with Debian's cross compiler, and runs them under
# qemu-user: the shim, the fake driver and the probe are all aarch64 code,
# loaded by aarch64 glibc, so the Arm branch of glibc_compat.h, the dlsym and
# cuGetProcAddress hooks, the ELF lookups and the accounting run for real.
#
# Usage: scripts/cross_arm64.sh      (ctest runs it as ShimOnArm64)
# Env:   BUILD_DIR (default build-arm64), JOBS (default 2)
#
# Left out, because qemu-user cannot stand in for an Arm kernel there:
#   - process identity across processes: qemu answers /proc/self/stat itself,
#     with a start time per thread, while other processes read the host's
#     /proc/<pid>/stat, so a live process looks like a reused pid;
#   - a robust mutex whose owner died: qemu-user has no set_robust_list;
#   - a process that execs itself or another program: without binfmt_misc
#     the kernel cannot exec an Arm program;
#   - whether another process maps the region: its /proc/<pid>/maps is the
#     host's view of qemu, not the emulated program's mappings.
# Exits 77 (skipped) when the cross compiler or qemu-user is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-arm64}
JOBS=${JOBS:-2}

for tool in aarch64-linux-gnu-g++ qemu-aarch64-static; do
  if ! command -v "$tool" >/dev/null; then
    echo "cross_arm64: SKIPPED: $tool not found (scripts/setup.sh installs" \
         "g++-aarch64-linux-gnu and qemu-user-static)"
    exit 77
  fi
done

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
fi
echo "cross_arm64: configuring $BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DACCELPOOL_SHIM_ONLY=ON -DACCELPOOL_WERROR=ON "${launcher[@]}" >"$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; echo "cross_arm64: configure failed (log above)" >&2; exit 1; }
echo "cross_arm64: building with $JOBS jobs"
cmake --build "$BUILD_DIR" -j"$JOBS"

# The tests' own child processes (the probe) are Arm programs too.
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
export ACCELPOOL_TEST_EXEC_WRAPPER
ACCELPOOL_TEST_EXEC_WRAPPER=$(command -v qemu-aarch64-static)
excluded='SharedRegionTest\.(LockHolderKilledLeavesAUsableRegion|SigkilledHolderIsReclaimedOnTheNextCharge'
excluded+='|LiveProcessWhoseMainThreadExitedKeepsItsSlot'
excluded+='|KilledButUnreapedProcessIsReclaimed|CommandNameWithParenthesesAndStatesIsParsedFromTheLastParen'
excluded+='|AnExecedImageThatDoesNotUseTheRegionLeavesItsSlotFree)'
excluded+='|ShimTest\.(MemoryAPoolKeepsStaysChargedForTheContainerUntilTrimmed'
excluded+='|ConcurrentThreadsNeverExceedTheCapAndLeaveNothingCharged'
excluded+='|ProcessesOfAContainerShareOneCapAndAKilledOneIsReclaimed|AProcessThatExecsItselfLeavesOneSlot'
excluded+='|ConcurrentFirstLookupsInitialiseOnceAndAllGetTheHooks'
excluded+='|AForkedChildGetsItsOwnSlotAndLeavesTheParentsCharge|AnImageReplacedByExecLeavesNoChargeBehind'
excluded+='|AProcessesDevicesAreTheContainersDevicesOfTheSameUuid)'
echo "cross_arm64: running the tests under qemu-user (left out: $excluded)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" --timeout 300 -E "$excluded"
