# shellcheck shell=bash
# Shared functions for the end-to-end scripts (sourced, not run).

log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# free_port [taken...]: a loopback TCP port nobody listens on and not in taken.
free_port() {
  # Below the kernel's ephemeral range: a port there can be taken at any
  # moment as the local end of an outgoing connection, and then a server's
  # bind fails although nothing listens on it.
  local p t _ low=32768 span
  read -r low _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  span=$((low - 20000))
  [ "${span}" -ge 1000 ] || span=10000
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % span))
    for t in "$@"; do [ "$p" = "$t" ] && continue 2; done
    if ! (exec 3<>"/dev/tcp/127.0.0.1/${p}") 2>/dev/null; then echo "$p"; return 0; fi
  done
  die "no free loopback port found"
}

# grep_output [grep options] PATTERN: grep all of stdin, read to its end first.
# Written as `cmd | grep_output -q P`, not `cmd | grep -q P`: grep -q exits at
# its first match and closes the pipe, and a cmd still writing then dies of
# SIGPIPE, which fails the pipeline under pipefail although the line was there
# (tests/e2e/check_pipes.py finds the second form).
grep_output() { local all; all="$(cat)"; grep "$@" <<<"${all}"; }

# now_ms: wall clock in milliseconds.
now_ms() { date +%s%3N; }
