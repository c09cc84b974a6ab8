#!/usr/bin/env bash
# Soak test (not in CTest): one `kvtier serve` with a disk tier under
# `kvtier loadgen` for SOAK_SECONDS (default 600), with clients that hang up
# mid-request and cache flushes, reporting the server's RSS and open file
# descriptors at the start and the end. A leak shows as growth between the two.
#
#   scripts/soak.sh                      # 10 minutes, the tiny model
#   SOAK_SECONDS=60 MODEL=small scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${KVTIER_BINARY:-build/tools/kvtier}
SECONDS_TOTAL=${SOAK_SECONDS:-600}
MODEL=${MODEL:-tiny}
PORT=${PORT:-18500}
WORK=$(mktemp -d /tmp/kvtier-soak.XXXXXX)
URL="http://127.0.0.1:$PORT"

cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  jobs -p | xargs -r kill 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$BIN" ] || { echo "soak: $BIN not found; run make build first" >&2; exit 1; }

"$BIN" serve --model "$MODEL" --port "$PORT" --disk-dir "$WORK/disk" --device-capacity 64MiB \
  --host-capacity 128MiB --disk-capacity 512MiB --threads 1 >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 600); do
  curl -sf "$URL/health" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf "$URL/health" >/dev/null || { echo "soak: the server did not start" >&2; cat "$WORK/server.log" >&2; exit 1; }

# RSS in KiB and the number of open descriptors of the server.
resources() {
  local rss fds
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status")
  fds=$(ls "/proc/$SERVER_PID/fd" | wc -l)
  echo "$rss $fds"
}

# Warm up for a minute's worth of traffic first, so that the start figure
# includes the caches' steady allocations rather than an empty process.
"$BIN" loadgen --url "$URL" --users 4 --rounds 2 --history-tokens 1000 --answer-tokens 8 --quiet >/dev/null
read -r RSS0 FDS0 < <(resources)
echo "soak: start  rss=${RSS0} KiB  fds=${FDS0}  (model $MODEL, ${SECONDS_TOTAL} s)"

END=$((SECONDS + SECONDS_TOTAL))
# Closed-loop chat load, a new seed (new conversations) each pass.
( seed=1; while [ $SECONDS -lt $END ]; do
    "$BIN" loadgen --url "$URL" --users 8 --rounds 6 --history-tokens 1500 --answer-tokens 16 --seed $seed \
      --duration $((END - SECONDS > 0 ? END - SECONDS : 1)) --timeout 120 --quiet >/dev/null 2>&1 || true
    seed=$((seed + 1)); done ) &
LOAD_PIDS=($!)
# Clients that hang up: streaming and non-streaming requests cut off after 50 ms.
( while [ $SECONDS -lt $END ]; do
    prompt=$(seq -s, 3 $((3 + RANDOM % 400)))
    curl -s -m 0.05 "$URL/v1/completions" -d "{\"prompt\":[${prompt}],\"max_tokens\":200,\"ignore_eos\":true,\"stream\":true}" >/dev/null 2>&1 || true
    curl -s -m 0.05 "$URL/v1/completions" -d "{\"prompt\":[${prompt}],\"max_tokens\":200,\"ignore_eos\":true}" >/dev/null 2>&1 || true
    sleep 0.2; done ) &
LOAD_PIDS+=($!)
# A cache flush every 30 s.
( while [ $SECONDS -lt $END ]; do sleep 30; curl -s -X POST "$URL/v1/cache/flush" -H 'Content-Type: application/json' -d '{}' >/dev/null || true; done ) &
LOAD_PIDS+=($!)

while [ $SECONDS -lt $END ]; do
  sleep 60
  read -r RSS FDS < <(resources)
  echo "soak: $((SECONDS_TOTAL - (END - SECONDS))) s  rss=${RSS} KiB  fds=${FDS}"
done
wait "${LOAD_PIDS[@]}"
sleep 2  # let cancelled requests finish
read -r RSS1 FDS1 < <(resources)
METRICS=$(curl -s "$URL/metrics")
outcome() { awk -v o="outcome=\"$1\"" 'index($0, "kvtier_server_requests_total{" o "}") == 1 {print $2}' <<<"$METRICS"; }
FLUSHES=$(awk '/^kvtier_http_responses_total\{endpoint="\/v1\/cache\/flush",code="200"\}/ {print $2}' <<<"$METRICS")
echo "soak: end    rss=${RSS1} KiB  fds=${FDS1}  requests ok=$(outcome ok) cancelled=$(outcome cancelled)" \
  "failed=$(outcome failed)  flushes=${FLUSHES:-0}"
echo "soak: rss growth $((RSS1 - RSS0)) KiB, fd growth $((FDS1 - FDS0))"
