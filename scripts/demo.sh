#!/usr/bin/env bash
# Sets everything up and runs the accelpool demo: installs the Debian packages
# (scripts/setup.sh), builds the C++ tree into build/ (scripts/build.sh) and the end-to-end tools
# (tests/e2e/build-tools.sh; cached, the first build takes tens of minutes), then runs
# tests/e2e/demo.sh: a local kube-apiserver + kube-scheduler with the accelpool extender, five
# simulated accelerator nodes of four kinds with our device plugins, sample workloads, and the
# placement table and utilisation (also written to out/demo/).
# Usage: scripts/demo.sh            (DEMO_KEEP=1 leaves the cluster running)
#        scripts/demo.sh --sim      the trace replay instead (scripts/sim-demo.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== demo: %s\n' "$*"; }
fail() { echo "demo: $* failed; fix it and rerun scripts/demo.sh" >&2; exit 1; }
step "1/4 Debian packages (scripts/setup.sh)"
bash scripts/setup.sh || fail "installing the packages"
step "2/4 C++ build into build/ (scripts/build.sh)"
bash scripts/build.sh || fail "the C++ build"
if [[ ${1:-} == --sim ]]; then
  exec bash scripts/sim-demo.sh
fi
[[ -z ${1:-} ]] || { echo "demo: unknown argument '$1'; usage: scripts/demo.sh [--sim]" >&2; exit 2; }
step "3/4 end-to-end tools (tests/e2e/build-tools.sh, cached)"
bash tests/e2e/build-tools.sh || fail "building the end-to-end tools"
step "4/4 the demo cluster (tests/e2e/demo.sh)"
DEMO_SKIP_TOOLS=1 exec bash tests/e2e/demo.sh
