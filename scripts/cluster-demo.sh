#!/usr/bin/env bash
# Three kvtier instances sharing a Redis tier (with a tier secret), the router
# in front, all on loopback; `kvtier loadgen --chat` through the router, then
# the router's view of each backend (docs/SCALING.md).
#
# Usage: scripts/cluster-demo.sh [POLICY] [USERS] [ROUNDS]
#   POLICY: cache-aware (default), round-robin or least-loaded. KVTIER: the binary (build/tools/kvtier).
#   Environment: INSTANCES (3), CAPACITY (8MiB: each instance's device and host tiers, small so that no
#   single one holds every conversation), HOST_CAPACITY (CAPACITY: the host tier alone), DISK_CAPACITY (256MiB: each instance's disk tier; 0: none), REDIS (1: the shared remote tier; 0: none), KILL_AFTER (seconds:
#   the second instance is killed with SIGKILL that long into the load; the summary counts what failed),
#   PRESET (tiny: the model preset, with Qwen2's vocabulary and Qwen2.5's template), SYSTEM_PROMPT_TOKENS (200: one system prompt every conversation shares; 0: none, so what is cached
#   is each conversation's own history, as when many applications share the instances).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/server_lib.sh
K=${KVTIER:-build/tools/kvtier}
POLICY=${1:-cache-aware}
USERS=${2:-24}
ROUNDS=${3:-4}
D=$(mktemp -d /tmp/kvtier-cluster.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do stop "$p"; done
  rm -rf "$D"
}
trap cleanup EXIT

PRESET=${PRESET:-tiny}
MODEL=$D/$PRESET-qwen2-chat.gguf
"$K" model make --preset "$PRESET" --dtype f16 --vocab tests/data/vocab/ggml-vocab-qwen2.gguf \
  --chat-template tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja --out "$MODEL" >/dev/null
head -c 32 /dev/urandom | base64 > "$D/tier.secret"
chmod 600 "$D/tier.secret"

REDIS_PORT=${REDIS_PORT:-6391}
redis-server --port "$REDIS_PORT" --save '' --appendonly no --bind 127.0.0.1 >"$D/redis.log" 2>&1 &
PIDS+=($!)
BACKENDS=()
INSTANCES=${INSTANCES:-3}
CAPACITY=${CAPACITY:-8MiB}
HOST_CAPACITY=${HOST_CAPACITY:-$CAPACITY}
DISK_CAPACITY=${DISK_CAPACITY:-256MiB}
REMOTE=()
[ "${REDIS:-1}" = 1 ] && REMOTE=(--remote "redis://127.0.0.1:$REDIS_PORT" --tier-secret-file "$D/tier.secret")
for i in $(seq 1 "$INSTANCES"); do
  port=$((8190 + i))
  DISK=()
  [ "$DISK_CAPACITY" != 0 ] && DISK=(--disk-dir "$D/disk$i" --disk-capacity "$DISK_CAPACITY")
  "$K" serve --model "$MODEL" --port "$port" --threads 1 --device-capacity "$CAPACITY" --host-capacity "$HOST_CAPACITY" \
    "${DISK[@]}" "${REMOTE[@]}" >"$D/backend$i.log" 2>&1 &
  PIDS+=($!)
  BACKENDS+=(--backend "http://127.0.0.1:$port")
done
for i in $(seq 1 "$INSTANCES"); do wait_up $((8190 + i)); done
"$K" route --model "$MODEL" --port 8190 --policy "$POLICY" "${BACKENDS[@]}" >"$D/router.log" 2>&1 &
PIDS+=($!)
wait_up 8190

echo "== loadgen --chat through the router ($POLICY; $INSTANCES instances of $PRESET, $CAPACITY device + $HOST_CAPACITY host + $DISK_CAPACITY disk; Redis ${REDIS:-1}), $USERS users x $ROUNDS rounds"
LOAD=(--url http://127.0.0.1:8190 --chat --users "$USERS" --rounds "$ROUNDS" --system-prompt-tokens "${SYSTEM_PROMPT_TOKENS:-200}"
  --history-tokens 400 --question-tokens 24 --answer-tokens 8 --quiet)
if [ -n "${KILL_AFTER:-}" ]; then
  "$K" loadgen "${LOAD[@]}" --json >"$D/loadgen.json" &
  LOADGEN=$!
  sleep "$KILL_AFTER"
  echo "== killing instance 2 (SIGKILL) ${KILL_AFTER}s into the load"
  kill -KILL "${PIDS[2]}"
  wait "$LOADGEN" || true
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({k: j[k] for k in ("requests", "errors", "cached_share", "ttft_ms") if k in j}))' "$D/loadgen.json"
else
  "$K" loadgen "${LOAD[@]}"
fi
echo "== the router's view"
curl -s http://127.0.0.1:8190/health | python3 -m json.tool
curl -s http://127.0.0.1:8190/metrics | grep -E '^kvtier_router_(decisions|failovers|cut_streams|matched|request_pages|predicted|actual|cached_tokens)'
