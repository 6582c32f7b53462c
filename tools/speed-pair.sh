#!/bin/bash
# speed.sh's method (../shared/bench/speed.sh: five A/B rounds of 4 s, 16 connections, the
# median of each round's own ratio, servers on CPU 0 and the load on CPU 1), robotsgate
# against robotsgate: two configs, or two binaries, side by side in one run.
#   tools/speed-pair.sh BIN_A [BIN_B]
#   A_TOML / B_TOML: TOML appended to A's / B's config, e.g. B_TOML=$'[evidence]\nenabled = false'
#   LOG_ALLOWED=true: every request writes an audit record (both)
# Prints A against B for plain HTTP and MITM on kept-alive connections.
set -u
BIN=$(realpath "${1:?usage: speed-pair.sh BIN_A [BIN_B]}")
BIN_B=$(realpath "${2:-$1}")
LA=${LOG_ALLOWED:-false}
HERE=$(cd "$(dirname "$0")/../../shared/bench" 2>/dev/null && pwd) || { echo "speed-pair.sh: needs ../shared/bench beside the clone"; exit 1; }
KIT=$(mktemp -d); D=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$D" "$KIT"' EXIT
(cd "$HERE" && for t in origin loadgen; do go build -o "$KIT/$t" "./$t" || exit 1; done) || { echo "kit build failed"; exit 1; }
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pin() { if command -v taskset >/dev/null; then taskset -c "$@"; else shift; "$@"; fi; }
run1() {
  pin 1 "$KIT/loadgen" -proxy "$1" -url "$3" -c 16 -duration 4s -warmup 1s -cpu-pids "proxy=$2" "${@:4}" 2>/dev/null \
    | sed -n 's/.* rps=\([0-9.]*\) .*non2xx=\([0-9]*\).* proxy_cpu_us=\([0-9.-]*\).*/\1 \2 \3/p' | awk '{print ($2==0 ? $1 : 0), $3}'; }
ratio() {
  local r=()
  for i in 1 2 3 4 5; do r+=("$(run1 "$1" "$2" "$5" "${@:6}") $(run1 "$3" "$4" "$5" "${@:6}")"); done
  printf '%s\n' "${r[@]}" | python3 -c '
import sys, statistics as s
rows = [[float(x) if x not in ("-", "") else 0 for x in l.split()] for l in sys.stdin if l.strip()]
rr = [r[0] / r[2] for r in rows if r[2] > 0]
cr = [r[3] / r[1] for r in rows if r[1] > 0 and r[3] > 0]
ra, rb = s.median(r[0] for r in rows), s.median(r[2] for r in rows)
out = f"{ra:.0f} vs {rb:.0f} req/s = {s.median(rr) if rr else 0:.2f}x"
if cr: out += f"; CPU per request {s.median(r[1] for r in rows):.1f} vs {s.median(r[3] for r in rows):.1f} us = {s.median(cr):.2f}x as efficient"
print(out)'
}
leaf() { local p=$1 c; while c=$(pgrep -P "$p" | head -1) && [[ -n $c ]]; do p=$c; done; echo "$p"; }
printf 'User-agent: *\nDisallow: /private\n' >"$D/robots.txt"
"$KIT/origin" -gen-cert "$D/up" >/dev/null 2>&1
OP=$(freeport); TP=$(freeport); AP=$(freeport); BP=$(freeport)
pin 0 "$KIT/origin" -addr 127.0.0.1:$OP -robots "$D/robots.txt" -lifetime 5m >/dev/null 2>&1 &
pin 0 "$KIT/origin" -addr 127.0.0.1:$TP -tls -cert "$D/up.crt" -key "$D/up.key" -robots "$D/robots.txt" -lifetime 5m >/dev/null 2>&1 &
mkdir -p "$D/a" "$D/b"
printf 'listen = "127.0.0.1:%s"\n[upstream]\nblock_private = false\nca = "%s/up.crt"\n[tls]\nstate_dir = "%s/a"\n[audit]\nfile = "%s/a/audit"\nlog_allowed = %s\n%s\n' $AP "$D" "$D" "$D" $LA "${A_TOML:-}" >"$D/a.toml"
printf 'listen = "127.0.0.1:%s"\n[upstream]\nblock_private = false\nca = "%s/up.crt"\n[tls]\nstate_dir = "%s/b"\n[audit]\nfile = "%s/b/audit"\nlog_allowed = %s\n%s\n' $BP "$D" "$D" "$D" $LA "${B_TOML:-}" >"$D/b.toml"
pin 0 timeout 5m "$BIN" serve -config "$D/a.toml" >"$D/a.log" 2>&1 &
APID=$!
pin 0 timeout 5m "$BIN_B" serve -config "$D/b.toml" >"$D/b.log" 2>&1 &
BPID=$!
for p in $AP $BP; do for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.2; done; done
APID=$(leaf $APID); BPID=$(leaf $BPID)
for p in $AP $BP; do [[ $(curl -s -o /dev/null -w '%{http_code}' -x 127.0.0.1:$p -A FooBot/1 http://127.0.0.1:$OP/private) == 403 ]] || { echo "not enforcing on $p"; exit 1; }; done
echo "A against B (log_allowed=$LA)"
echo "HTTP, kept alive:            $(ratio http://127.0.0.1:$AP $APID http://127.0.0.1:$BP $BPID http://127.0.0.1:$OP/page)"
echo "MITM, kept alive:            $(ratio http://127.0.0.1:$AP $APID http://127.0.0.1:$BP $BPID https://127.0.0.1:$TP/page)"
echo "audit lines: A $(wc -l <"$D/a/audit"), B $(wc -l <"$D/b/audit")"
