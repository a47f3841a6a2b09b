#!/usr/bin/env bash
# The chart's alerting rules with Prometheus' own tool: `promtool check rules`
# (syntax, PromQL, templates) and `promtool test rules` (the unit tests in
# tests/alerts/accelpool.rules.test.yaml: each alert fires on the series it is
# about and stays quiet on a healthy pool). promtool comes with Debian's
# prometheus package (scripts/packages.txt); without it the test is skipped
# (exit 77) and says how to get it.
#   tests/alerts/check.sh [promtool]
set -uo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
promtool="${1:-$(command -v promtool || true)}"
if [[ -z "${promtool}" || ! -x "${promtool}" ]]; then
  echo "promtool not found: install Debian's prometheus package (scripts/setup.sh does)" >&2
  exit 77
fi
"${promtool}" check rules "${dir}/../../charts/accelpool/alerts/accelpool.rules.yaml" || exit 1
cd "${dir}" && "${promtool}" test rules accelpool.rules.test.yaml
