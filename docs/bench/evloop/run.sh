#!/usr/bin/env bash
# Event-loop prototype beside Bulwark's fast engine and nginx, in the
# pinned layout of the shared gateways harness (upstream alone on CPU 1;
# the proxy under test and wrk on CPU 0), interleaved, REPS rounds:
#
#   docs/bench/evloop/run.sh            # ~4 min
#   REPS=1 DURATION=4 docs/bench/evloop/run.sh
#
# ~5 min with the defaults. Needs go, wrk, nginx, taskset, curl and the harness's upstream
# (GATEWAYS=../shared/bench/gateways by default). Loopback only; every
# process it starts is stopped on exit. One line per run: req/s, p99,
# the proxy's CPU (user+system, all threads) per request, and how often
# per request the proxy was switched out while runnable (preempted) or
# blocked. See docs/benchmarks.md, "An event-loop prototype".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
GATEWAYS=${GATEWAYS:-$(cd "$repo/.." && pwd)/shared/bench/gateways}
REPS=${REPS:-3}
DURATION=${DURATION:-8}
CONNS=${CONNS:-50}
for t in go wrk nginx taskset curl; do
	command -v "$t" >/dev/null || { echo "run.sh: $t not found" >&2; exit 2; }
done
[ -d "$GATEWAYS/cmd/upstream" ] || { echo "run.sh: no upstream at $GATEWAYS/cmd/upstream (set GATEWAYS)" >&2; exit 2; }

tmp=$(mktemp -d)
chmod 755 "$tmp"
UPSTREAM_PID="" CUR="" # the upstream, and the proxy being measured
cleanup() {
	local p
	for p in $CUR $UPSTREAM_PID; do kill "$p" 2>/dev/null || true; done
	[ -f "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Ports below the ephemeral range (a port inside it can be held by a
# client socket), as the gateways harness picks them.
read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
base=$((10000 + RANDOM % (lo > 10200 ? lo - 10100 : 20000)))
UP=127.0.0.1:$base BW=127.0.0.1:$((base + 1)) EV=127.0.0.1:$((base + 2)) NG=127.0.0.1:$((base + 3))

echo "building (upstream, bulwark, evloop)..." >&2
(cd "$GATEWAYS" && go build -o "$tmp/upstream" ./cmd/upstream)
(cd "$repo" && go build -o "$tmp/bulwark" ./cmd/bulwark)
(cd "$here" && go build -o "$tmp/evloop" .)

cat >"$tmp/bulwark-on.yaml" <<EOF
listen: { addr: "$BW" }
shield: { enabled: true, window: 60s, per_peer: 1000000, global: 1000000, max_peers: 4096 }
upstreams:
  - name: bench
    targets: ["http://$UP"]
routes:
  - name: all
    match: { path: "/" }
    upstream: bench
    rate_limit: { qps: 1000000, burst: 1000000, key: client_ip }
control: { enabled: false }
EOF
cat >"$tmp/nginx.conf" <<EOF
worker_processes auto;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $tmp; proxy_temp_path $tmp;
  fastcgi_temp_path $tmp; uwsgi_temp_path $tmp; scgi_temp_path $tmp;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
  upstream app { server $UP; keepalive 256; keepalive_requests 1000000; }
  server {
    listen $NG;
    location / {
      limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
EOF

taskset -c 1 "$tmp/upstream" -addr "$UP" >"$tmp/upstream.log" 2>&1 &
UPSTREAM_PID=$!

ready() { # url
	local i
	for i in $(seq 50); do
		curl -sf --noproxy '*' --max-time 1 "$1/" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "run.sh: $1 did not answer" >&2
	return 1
}

# measure NAME URL PID...: one warm-up and one measured wrk run.
measure() {
	local name=$1 url=$2
	shift 2
	local pids=("$@") out c0 c1 s0 s1 req
	ticks() { local p; for p in "${pids[@]}"; do awk '{print $14+$15}' "/proc/$p/stat"; done | awk '{s+=$1} END {print s}'; }
	switches() { local p; for p in "${pids[@]}"; do cat /proc/"$p"/task/*/status; done | awk '/^voluntary_ctxt/ {v+=$2} /^nonvoluntary_ctxt/ {n+=$2} END {print v, n}'; }
	taskset -c 0 wrk -t1 -c"$CONNS" -d2s "$url/" >/dev/null
	c0=$(ticks)
	s0=$(switches)
	out=$(taskset -c 0 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$url/")
	c1=$(ticks)
	s1=$(switches)
	req=$(awk '/requests in/ {print $1}' <<<"$out")
	awk -v name="$name" -v req="$req" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
		-v v0="${s0% *}" -v v1="${s1% *}" -v n0="${s0#* }" -v n1="${s1#* }" \
		-v rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")" -v p99="$(awk '$1=="99%" {print $2}' <<<"$out")" \
		'BEGIN { printf "%-26s %9.0f req/s  p99 %-8s  %5.1f µs CPU/req  preempted %.2f/req  blocked %.2f/req\n", name, rps, p99, c * 1e6 / hz / req, (n1 - n0) / req, (v1 - v0) / req }'
}

run_evloop() { # label args...
	local label=$1
	shift
	taskset -c 0 "$tmp/evloop" -addr "$EV" -upstream "$UP" "$@" >"$tmp/evloop.log" 2>&1 &
	CUR=$!
	ready "http://$EV" && measure "$label" "http://$EV" "$CUR"
	stop
}

stop() { # the proxy being measured
	kill "$CUR"
	wait "$CUR" 2>/dev/null || true
	CUR=""
}

for r in $(seq "$REPS"); do
	echo "round $r/$REPS, wrk -t1 -c$CONNS -d${DURATION}s" >&2
	taskset -c 0 "$tmp/bulwark" serve --config "$tmp/bulwark-on.yaml" >"$tmp/bulwark.log" 2>&1 &
	CUR=$!
	ready "http://$BW" && measure "bulwark-on (fast engine)" "http://$BW" "$CUR"
	stop

	run_evloop "evloop -layers" -layers
	run_evloop "evloop -mode coro" -mode coro
	run_evloop "evloop -layers -io syscall" -layers -io syscall
	run_evloop "evloop"
	run_evloop "evloop -wait thread" -wait thread

	taskset -c 0 nginx -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon off;' >"$tmp/nginx.log" 2>&1 &
	CUR=$!
	if ready "http://$NG"; then
		measure "nginx + limit_req" "http://$NG" "$(cat "$tmp/nginx.pid")" $(pgrep -P "$(cat "$tmp/nginx.pid")")
	fi
	stop
	rm -f "$tmp/nginx.pid"
done
