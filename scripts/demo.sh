#!/usr/bin/env bash
# Sets everything up and runs the accelpool demo.
# When the end-to-end control plane is available (tests/e2e/demo.sh) the demo runs a local
# kube-apiserver + kube-scheduler with simulated accelerator nodes of several vendors, our
# extender and device plugins, and sample workloads. Otherwise it replays the Alibaba GPU trace
# through the allocation core with accelpool's policy beside FGD and BestFit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
if [[ -x tests/e2e/demo.sh ]]; then
  exec bash tests/e2e/demo.sh
fi
exec bash scripts/sim-demo.sh
