#!/usr/bin/env bash
# Builds the end-to-end control-plane tools once into tests/e2e/.bin/:
#   kube-apiserver, kube-scheduler, kubectl,
#   kube-controller-manager                  (tests/e2e/tools, Kubernetes v1.37.2)
#   etcd                                     (tests/e2e/tools/etcd)
#   kwok                                     (tests/e2e/tools/kwok)
#   helm                                     (tests/e2e/tools/helm)
#   kubeletsim                               (tests/e2e/kubeletsim)
# Each group has a cache key (its go.mod, go.sum, sources, the Go version and
# the build flags); a group whose key matches its stamp in .bin/ is skipped.
#
# Usage: tests/e2e/build-tools.sh [--force] [group...]
# Environment: E2E_GO_P (parallel compiles, default 2), E2E_NICE (default 15).
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="${E2E_DIR}/.bin"
GO_P="${E2E_GO_P:-2}"
NICE="${E2E_NICE:-15}"
K8S_VERSION="v1.37.2"
FORCE=0
GROUPS_WANTED=()
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    kube|etcd|kwok|helm|kubeletsim) GROUPS_WANTED+=("$a") ;;
    *) echo "build-tools: unknown argument '$a' (groups: kube etcd kwok helm kubeletsim; flag: --force)" >&2; exit 2 ;;
  esac
done
[ ${#GROUPS_WANTED[@]} -eq 0 ] && GROUPS_WANTED=(kube etcd kwok helm kubeletsim)

log() { printf '[build-tools %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed. Install Go 1.26 or newer (for example 'apt-get install golang-go' on a" \
      "release that ships it, or the official tarball) and put it on PATH, then rerun."
  exit 1
fi
# Go 1.21+ fetches a newer toolchain through the module proxy when a go.mod
# asks for one (GOTOOLCHAIN=auto), so an older local Go still works.
GO_VERSION="$(go env GOVERSION)"
mkdir -p "${BIN}"

KUBE_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  KUBE_LDFLAGS+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=37"
  KUBE_LDFLAGS+=" -X ${pkg}.gitTreeState=clean"
done

# group -> "module dir|binaries (name=package)|ldflags"
group_spec() {
  case "$1" in
    kube) echo "tools|kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager|${KUBE_LDFLAGS}" ;;
    etcd) echo "tools/etcd|etcd=.|-s -w" ;;
    kwok) echo "tools/kwok|kwok=sigs.k8s.io/kwok/cmd/kwok|-s -w" ;;
    helm) echo "tools/helm|helm=helm.sh/helm/v3/cmd/helm|-s -w" ;;
    kubeletsim) echo "kubeletsim|kubeletsim=.|-s -w" ;;
  esac
}

cache_key() {
  local dir="$1" flags="$2" files nested n
  files="$(cd "${dir}" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | LC_ALL=C sort)"
  # Nested modules (tools/etcd under tools) have keys of their own.
  nested="$(cd "${dir}" && find . -mindepth 2 -name go.mod -printf '%h\n')"
  for n in ${nested}; do files="$(grep -v "^${n}/" <<<"${files}")"; done
  { echo "${GO_VERSION} ${flags} $(uname -m)"; (cd "${dir}" && xargs sha256sum <<<"${files}"); } |
    sha256sum | cut -d' ' -f1
}

# kwok only acts through Stage objects. Take the default "fast" stages that
# ship with the pinned kwok module (node init, heartbeat with lease, pod
# ready/complete/delete) into .bin/kwok-stages.yaml for cluster.sh.
write_kwok_stages() {
  local mod
  mod="$(cd "$1" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" || return 1
  {
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      printf -- '---\n'; cat "${mod}/kustomize/stage/${f}"
    done
  } > "${BIN}/kwok-stages.yaml"
}

build_group() {
  local group="$1" spec dir bins flags key stamp
  spec="$(group_spec "$group")"
  dir="${E2E_DIR}/${spec%%|*}"; spec="${spec#*|}"
  bins="${spec%%|*}"; flags="${spec#*|}"
  key="$(cache_key "${dir}" "${flags}")"
  stamp="${BIN}/.stamp-${group}"
  local all_there=1
  for b in ${bins}; do [ -x "${BIN}/${b%%=*}" ] || all_there=0; done
  if [ "${group}" = kwok ] && [ ! -f "${BIN}/kwok-stages.yaml" ]; then all_there=0; fi
  if [ "${FORCE}" = 0 ] && [ "${all_there}" = 1 ] && [ -f "${stamp}" ] && [ "$(cat "${stamp}")" = "${key}" ]; then
    log "${group}: up to date (key ${key:0:12}), skipped"
    return 0
  fi
  local start=$SECONDS names=() pkgs=()
  for b in ${bins}; do names+=("${b%%=*}"); pkgs+=("${b#*=}"); done
  log "${group}: building ${names[*]} (go build -p ${GO_P}, nice ${NICE}) ..."
  local out="${BIN}"
  if [ ${#pkgs[@]} -eq 1 ]; then out="${BIN}/${names[0]}"; fi
  # -v names each package as it compiles: print a progress line every 100.
  set +e
  (cd "${dir}" && GOFLAGS="${GOFLAGS:-} -mod=readonly" nice -n "${NICE}" \
     go build -v -p "${GO_P}" -ldflags "${flags}" -o "${out}" "${pkgs[@]}" 2>&1) |
    awk -v g="${group}" -v t0="${SECONDS}" '
      /^(#|go: |.*\.go:[0-9]+)/ { print; fflush(); next }
      { n++; if (n % 100 == 0) { printf "[build-tools] %s: %d packages compiled\n", g, n; fflush() } }
      END { printf "[build-tools] %s: %d packages compiled in total\n", g, n }'
  local rc=${PIPESTATUS[0]}
  set -e
  if [ "${rc}" != 0 ]; then
    log "${group}: build FAILED (exit ${rc}); see the compiler output above. A 'go: ... proxy' error" \
        "means the module proxy could not be reached: check the network, then rerun."
    return "${rc}"
  fi
  for n in "${names[@]}"; do [ -x "${BIN}/${n}" ] || { log "${group}: ${n} missing after build"; return 1; }; done
  if [ "${group}" = kwok ]; then write_kwok_stages "${dir}" || return 1; fi
  echo "${key}" > "${stamp}"
  local took=$((SECONDS - start))
  log "${group}: done in ${took}s"
  echo "$(date -u +%FT%TZ) ${group} ${took}s go=${GO_VERSION} p=${GO_P}" >> "${BIN}/build-times.txt"
}

total_start=$SECONDS
for g in "${GROUPS_WANTED[@]}"; do build_group "$g"; done
log "all tools ready in ${BIN} ($((SECONDS - total_start))s this run)"
