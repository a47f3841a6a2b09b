#!/usr/bin/env bash
# Configures and builds everything into build/ (warnings are errors).
# Usage: scripts/build.sh [extra cmake -D options]
# Env: BUILD_DIR (default build), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths relative to the checkout, so another clone of the repository reuses the cache.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DACCELPOOL_WERROR=ON "${launcher[@]}" "$@" >"$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; echo "build: cmake configure failed (log above)" >&2; exit 1; }
echo "build: compiling into $BUILD_DIR with $JOBS jobs"
cmake --build "$BUILD_DIR" -j"$JOBS"
