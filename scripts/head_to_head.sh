#!/usr/bin/env bash
# Issue 30 item 10: kvtier serve against llama.cpp's llama-server on one GGUF file, both driven
# by the same `kvtier loadgen --chat` load, fresh and then after a restart (kvtier keeping its
# disk directory). One server at a time. llama.cpp is the peer, built by
# ../shared/tools/build-llama-cpp.sh for measurements only.
# Usage: scripts/head_to_head.sh LLAMA_BIN_DIR MODEL.gguf [REPETITIONS] [OUT_DIR]
# Prints one JSON line per run (server, repetition, run, loadgen's summary) and keeps them in OUT_DIR.
set -euo pipefail
L=${1:?usage: scripts/head_to_head.sh LLAMA_BIN_DIR MODEL.gguf [REPETITIONS] [OUT_DIR]}
M=${2:?model file}
N=${3:-3}
O=${4:-/tmp/kvtier-h2h}
K=$PWD/build/tools/kvtier
mkdir -p "$O"
LOAD=(--chat --users 8 --rounds 3 --system-prompt-tokens 600 --history-tokens 1200 --question-tokens 24
      --answer-tokens 16 --json --quiet)

# shellcheck source=scripts/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

one_run() {  # NAME REP RUN PORT -- server command...
  local name=$1 rep=$2 run=$3 port=$4
  shift 5
  "$@" >"$O/$name-$rep-$run.log" 2>&1 &
  local pid=$!
  wait_up "$port"
  # loadgen exits non-zero when a request failed (llama.cpp fails some on random text); the run still counts
  "$K" loadgen --url "http://127.0.0.1:$port" "${LOAD[@]}" >"$O/$name-$rep-$run.json" || true
  stop "$pid"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({"server": sys.argv[2], "rep": int(sys.argv[3]), "run": int(sys.argv[4]), **j}))' \
    "$O/$name-$rep-$run.json" "$name" "$rep" "$run"
}

for rep in $(seq 1 "$N"); do
  D="$O/disk-$rep"
  rm -rf "$D" && mkdir -p "$D"
  LLAMA=("$L/llama-server" -m "$M" -t 2 -c 32768 -np 4 --cache-ram 64 --jinja --port 8081)
  KV=("$K" serve --model "$M" --kv-dtype f16 --device-capacity 256MiB --host-capacity 64MiB --disk-dir "$D" --threads 2 --port 8082)
  one_run llama.cpp "$rep" 1 8081 -- "${LLAMA[@]}"
  one_run kvtier "$rep" 1 8082 -- "${KV[@]}"
  one_run llama.cpp "$rep" 2 8081 -- "${LLAMA[@]}"
  one_run kvtier "$rep" 2 8082 -- "${KV[@]}"
done | tee "$O/runs.jsonl"
