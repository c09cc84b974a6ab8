#!/usr/bin/env bash
# Issue 35: the latency `kvtier route` adds to a request. One `kvtier serve` (tiny model with a real
# vocabulary and chat template), and the router (cache-aware) in front of it; the same chat load,
# one user at a time so nothing queues, sent straight to the instance and through the router,
# alternating, REPS pairs. Every run after a warm-up sends the same conversations, so every request's
# prefix is cached on the instance and its TTFT is the lookup, a few tokens' compute and HTTP; the
# difference between the two is what the router adds (parse, template, tokenize, hash, choose,
# relay). Prints one JSON line per run and the median TTFT p50 / p99 with and without the router.
# Usage: scripts/router_overhead.sh [REPS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/server_lib.sh
source scripts/server_lib.sh
N=${1:-3}
O=${2:-/tmp/kvtier-router-overhead}
K=$PWD/build/tools/kvtier
mkdir -p "$O"
MODEL=$O/tiny-qwen2-chat.gguf
"$K" model make --preset tiny --dtype f16 --vocab tests/data/vocab/ggml-vocab-qwen2.gguf \
  --chat-template tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja --out "$MODEL" >/dev/null
"$K" serve --model "$MODEL" --port 8195 --threads 1 >"$O/serve.log" 2>&1 &
SERVE=$!
"$K" route --model "$MODEL" --port 8196 --backend http://127.0.0.1:8195 >"$O/route.log" 2>&1 &
ROUTE=$!
trap 'stop $ROUTE; stop $SERVE' EXIT
wait_up 8195
wait_up 8196

one_run() {  # PORT LABEL REP
  "$K" loadgen --url "http://127.0.0.1:$1" --chat --users 1 --rounds 40 --system-prompt-tokens 300 \
    --history-tokens 600 --question-tokens 24 --answer-tokens 1 --json --quiet >"$O/$2-$3.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({"via": sys.argv[2], "rep": int(sys.argv[3]), "ttft_p50_ms": j["ttft_ms"]["p50"], "ttft_p99_ms": j["ttft_ms"]["p99"], "cached_share": j["cached_share"], "errors": j["errors"]}))' \
    "$O/$2-$3.json" "$2" "$3"
}

one_run 8195 warmup 0 >/dev/null
for rep in $(seq 1 "$N"); do
  one_run 8195 direct "$rep"
  one_run 8196 router "$rep"
done | tee "$O/runs.jsonl"
curl -s http://127.0.0.1:8196/metrics | grep -E '^kvtier_router_decision_seconds_(sum|count)' >"$O/decision.txt"
python3 - "$O/runs.jsonl" "$O/decision.txt" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda via, f: statistics.median(r[f] for r in runs if r["via"] == via)
out = {}
for f in ("ttft_p50_ms", "ttft_p99_ms"):
    out[f] = {"direct": med("direct", f), "router": med("router", f), "added_ms": med("router", f) - med("direct", f)}
out["cached_share"] = {"direct": med("direct", "cached_share"), "router": med("router", "cached_share")}
d = dict(l.split() for l in open(sys.argv[2]))
out["decision_ms_mean"] = 1e3 * float(d["kvtier_router_decision_seconds_sum"]) / max(1.0, float(d["kvtier_router_decision_seconds_count"]))
print(json.dumps(out))
PY
