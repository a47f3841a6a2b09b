# shellcheck shell=bash
# Shared functions for the end-to-end scripts (sourced, not run).

log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# free_port [taken...]: a loopback TCP port nobody listens on and not in taken.
free_port() {
  local p t _
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    for t in "$@"; do [ "$p" = "$t" ] && continue 2; done
    if ! (exec 3<>"/dev/tcp/127.0.0.1/${p}") 2>/dev/null; then echo "$p"; return 0; fi
  done
  die "no free loopback port found"
}

# now_ms: wall clock in milliseconds.
now_ms() { date +%s%3N; }
