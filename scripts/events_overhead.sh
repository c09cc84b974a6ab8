#!/usr/bin/env bash
# Issue 35: what a GET /v1/cache/events listener costs the server. The same chat load
# (kvtier loadgen, multi-round) against a fresh `kvtier serve` with and without a listener following
# the event stream (curl, into a file), alternating, REPS pairs; small device and host tiers so that
# the load evicts and demotes (every page leaves by an event). Prints one JSON line per run and the
# median ratios (with / without) of requests/s and of the server's CPU seconds per request.
# Usage: scripts/events_overhead.sh [MODEL] [REPS] [OUT_DIR]
set -euo pipefail
M=${1:-tiny}
N=${2:-3}
O=${3:-/tmp/kvtier-events}
K=$PWD/build/tools/kvtier
PORT=8093
mkdir -p "$O"
# shellcheck source=scripts/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

one_run() {  # CONFIG REP
  local config=$1 rep=$2 d="$O/disk-$1-$2" listener=""
  rm -rf "$d" && mkdir -p "$d"
  "$K" serve --model "$M" --port $PORT --threads 2 --device-capacity 8MiB --host-capacity 8MiB --disk-dir "$d" \
    >"$O/serve-$config-$rep.log" 2>&1 &
  local pid=$!
  wait_up $PORT
  if [ "$config" = listener ]; then
    curl -sN "http://127.0.0.1:$PORT/v1/cache/events" >"$O/events-$rep.sse" &
    listener=$!
  fi
  "$K" loadgen --url "http://127.0.0.1:$PORT" --users 16 --rounds 8 --system-prompt-tokens 300 \
    --history-tokens 2000 --question-tokens 32 --answer-tokens 8 --json --quiet >"$O/$config-$rep.json"
  # The server's CPU time (user + system, clock ticks): less noisy than wall time on a shared machine.
  local ticks
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  [ -n "$listener" ] && kill "$listener" 2>/dev/null || true
  stop "$pid"
  python3 -c 'import json,os,sys; j=json.load(open(sys.argv[1])); print(json.dumps({"config": sys.argv[2], "rep": int(sys.argv[3]), "requests_per_s": j["requests_per_s"], "server_cpu_s_per_request": int(sys.argv[4]) / os.sysconf("SC_CLK_TCK") / j["requests"], "errors": j["errors"]}))' \
    "$O/$config-$rep.json" "$config" "$rep" "$ticks"
}

for rep in $(seq 1 "$N"); do
  one_run none "$rep"
  one_run listener "$rep"
done | tee "$O/runs.jsonl"
python3 - "$O/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def ratios(field):
    by = {}
    for r in runs: by.setdefault(r["rep"], {})[r["config"]] = r[field]
    return [v["listener"] / v["none"] for v in by.values() if "listener" in v and "none" in v]
thr, cpu = ratios("requests_per_s"), ratios("server_cpu_s_per_request")
print(json.dumps({"throughput_ratio_median": statistics.median(thr), "throughput_ratios": thr,
                  "cpu_per_request_ratio_median": statistics.median(cpu), "cpu_per_request_ratios": cpu}))
PY
for f in "$O"/events-*.sse; do echo "$f: $(grep -c '^event: kv' "$f") kv messages, $(grep -c '^event: snapshot' "$f") snapshots"; done
