#!/usr/bin/env bash
# accelpool-certgen: the chart's certificate hook (used when cert-manager is off).
#
#   accelpool-certgen create --namespace NS --secret NAME --hosts h1,h2,IP [--days N]
#       Creates a self-signed CA and a serving certificate for the hosts and
#       stores them in Secret NAME (kubernetes.io/tls with ca.crt). Keeps an
#       existing Secret, so upgrades never rotate the certificate under a
#       running extender.
#   accelpool-certgen patch --namespace NS --secret NAME --webhook WEBHOOK
#       Writes the Secret's ca.crt into every webhook's clientConfig.caBundle of
#       MutatingWebhookConfiguration WEBHOOK.
#   accelpool-certgen key --namespace NS --secret NAME
#       Creates Secret NAME holding the assignment signing key set (key "k1",
#       48 random bytes as base64 text, and "signing" naming it) for the
#       extender and the device plugins (--assignment-key-dir). Keeps an
#       existing Secret: accelpool-keys rotates it (docs/operations.md).
#
# Needs openssl, curl and base64 (key: curl, base64 and /dev/urandom). Talks to the apiserver with the pod's service
# account; outside a pod set ACCELPOOL_APISERVER (URL), ACCELPOOL_CACERT and
# ACCELPOOL_CURL_AUTH (extra curl arguments, e.g. "--cert c.crt --key c.key").
set -euo pipefail

die() { echo "accelpool-certgen: $*" >&2; exit 1; }

SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount
API="${ACCELPOOL_APISERVER:-https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}}"
CACERT="${ACCELPOOL_CACERT:-${SA_DIR}/ca.crt}"
AUTH=()
if [ -n "${ACCELPOOL_CURL_AUTH:-}" ]; then
  read -r -a AUTH <<<"${ACCELPOOL_CURL_AUTH}"
elif [ -f "${SA_DIR}/token" ]; then
  AUTH=(-H "Authorization: Bearer $(cat "${SA_DIR}/token")")
else
  die "no credentials: run in a pod with a service account token, or set ACCELPOOL_CURL_AUTH"
fi

# api METHOD PATH [BODY [CONTENT-TYPE]] -> prints the body, returns 0 on 2xx;
# HTTP_CODE holds the status.
api() {
  local out code data=()
  out="$(mktemp)"
  if [ -n "${3:-}" ]; then data=(-H "Content-Type: ${4:-application/json}" --data-binary "$3"); fi
  code="$(curl -sS --max-time 30 --cacert "${CACERT}" "${AUTH[@]}" -o "${out}" -w '%{http_code}' \
    -X "$1" "${data[@]}" "${API}$2")" ||
    { rm -f "${out}"; die "cannot reach the apiserver at ${API}: check the network policy and DNS"; }
  HTTP_CODE="${code}"
  cat "${out}"; rm -f "${out}"
  [ "${code}" -ge 200 ] && [ "${code}" -lt 300 ]
}

b64() { base64 -w0 < "$1"; }

cmd="${1:-}"; shift || true
NS="" SECRET="" HOSTS="" DAYS=3650 WEBHOOK=""
for a in "$@"; do
  case "$a" in
    --namespace=*) NS="${a#*=}" ;;
    --secret=*) SECRET="${a#*=}" ;;
    --hosts=*) HOSTS="${a#*=}" ;;
    --days=*) DAYS="${a#*=}" ;;
    --webhook=*) WEBHOOK="${a#*=}" ;;
    *) die "unknown argument '$a' (see the header of this script for usage)" ;;
  esac
done
{ [ -n "${NS}" ] && [ -n "${SECRET}" ]; } || die "--namespace=NS and --secret=NAME are required"
[[ "${DAYS}" =~ ^[0-9]+$ ]] || die "--days must be a whole number, not '${DAYS}'"
SECRET_PATH="/api/v1/namespaces/${NS}/secrets/${SECRET}"

create() {
  [ -n "${HOSTS}" ] || die "create needs --hosts=name1,name2,IP"
  if api GET "${SECRET_PATH}" >/dev/null; then
    echo "secret ${NS}/${SECRET} exists; keeping it"; return 0
  fi
  [ "${HTTP_CODE}" = 404 ] || die "reading secret ${NS}/${SECRET} failed with HTTP ${HTTP_CODE}: check the hook's RBAC"
  local dir san="" h
  dir="$(mktemp -d)"
  IFS=',' read -r -a hs <<<"${HOSTS}"
  for h in "${hs[@]}"; do
    if [[ "$h" =~ ^[0-9.]+$|: ]]; then san+="IP:${h},"; else san+="DNS:${h},"; fi
  done
  openssl ecparam -name prime256v1 -genkey -noout -out "${dir}/ca.key" 2>/dev/null
  openssl req -x509 -new -key "${dir}/ca.key" -subj "/CN=accelpool-ca" -days "${DAYS}" -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${dir}/ca.crt" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out "${dir}/tls.key" 2>/dev/null
  openssl req -new -key "${dir}/tls.key" -subj "/CN=${hs[0]}" -out "${dir}/tls.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "${san%,}" > "${dir}/ext"
  openssl x509 -req -in "${dir}/tls.csr" -CA "${dir}/ca.crt" -CAkey "${dir}/ca.key" -CAcreateserial \
    -days "${DAYS}" -sha256 -extfile "${dir}/ext" -out "${dir}/tls.crt" 2>/dev/null
  local body
  body="$(printf '{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/tls","metadata":{"name":"%s","namespace":"%s","labels":{"app.kubernetes.io/part-of":"accelpool"}},"data":{"tls.crt":"%s","tls.key":"%s","ca.crt":"%s"}}' \
    "${SECRET}" "${NS}" "$(b64 "${dir}/tls.crt")" "$(b64 "${dir}/tls.key")" "$(b64 "${dir}/ca.crt")")"
  rm -rf "${dir}"
  api POST "/api/v1/namespaces/${NS}/secrets" "${body}" >/dev/null ||
    die "creating secret ${NS}/${SECRET} failed with HTTP ${HTTP_CODE}: check the hook's RBAC"
  echo "created secret ${NS}/${SECRET} for ${HOSTS}"
}

patch() {
  [ -n "${WEBHOOK}" ] || die "patch needs --webhook=NAME"
  local secret ca hook n i ops=""
  secret="$(api GET "${SECRET_PATH}")" || die "secret ${NS}/${SECRET} not readable (HTTP ${HTTP_CODE}): did the create hook run?"
  ca="$(sed -n 's/.*"ca\.crt": *"\([^"]*\)".*/\1/p' <<<"${secret}" | head -1)"
  [ -n "${ca}" ] || die "secret ${NS}/${SECRET} has no ca.crt: delete it and rerun the create hook"
  local path="/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/${WEBHOOK}"
  hook="$(api GET "${path}")" || die "webhook configuration ${WEBHOOK} not readable (HTTP ${HTTP_CODE})"
  n="$(grep -o '"clientConfig"' <<<"${hook}" | wc -l)"
  [ "${n}" -gt 0 ] || die "webhook configuration ${WEBHOOK} has no webhooks"
  for ((i = 0; i < n; i++)); do ops+="{\"op\":\"add\",\"path\":\"/webhooks/${i}/clientConfig/caBundle\",\"value\":\"${ca}\"},"; done
  api PATCH "${path}" "[${ops%,}]" application/json-patch+json >/dev/null ||
    die "patching ${WEBHOOK} failed with HTTP ${HTTP_CODE}: check the hook's RBAC"
  echo "caBundle of ${WEBHOOK} set from ${NS}/${SECRET} (${n} webhook(s))"
}

key() {
  if api GET "${SECRET_PATH}" >/dev/null; then
    echo "secret ${NS}/${SECRET} exists; keeping it"; return 0
  fi
  [ "${HTTP_CODE}" = 404 ] || die "reading secret ${NS}/${SECRET} failed with HTTP ${HTTP_CODE}: check the hook's RBAC"
  local k1 body
  k1="$(head -c 48 /dev/urandom | base64 -w0)"
  [ "${#k1}" = 64 ] || die "could not read 48 random bytes from /dev/urandom"
  body="$(printf '{"apiVersion":"v1","kind":"Secret","type":"Opaque","metadata":{"name":"%s","namespace":"%s","labels":{"app.kubernetes.io/part-of":"accelpool"}},"data":{"signing":"%s","k1":"%s"}}' \
    "${SECRET}" "${NS}" "$(printf k1 | base64 -w0)" "$(printf '%s' "${k1}" | base64 -w0)")"
  api POST "/api/v1/namespaces/${NS}/secrets" "${body}" >/dev/null || {
    [ "${HTTP_CODE}" = 409 ] && { echo "secret ${NS}/${SECRET} was created meanwhile; keeping it"; return 0; }
    die "creating secret ${NS}/${SECRET} failed with HTTP ${HTTP_CODE}: check the hook's RBAC"
  }
  echo "created assignment key secret ${NS}/${SECRET} (signing key k1)"
}

case "${cmd}" in
  create) create ;;
  patch) patch ;;
  key) key ;;
  *) die "usage: accelpool-certgen create|patch|key --namespace=NS --secret=NAME [...]" ;;
esac
