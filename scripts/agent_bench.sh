#!/usr/bin/env bash
# Issue 33 section 5: agent sessions (`kvtier loadgen --agent`) against `kvtier serve`, with and without
# retention hints and prefetch, and against llama.cpp's llama-server on the same GGUF (--jinja), on a
# workload whose sessions together exceed the device and host tiers (the disk holds the rest).
# One server at a time, a fresh cache directory per run. llama.cpp is the peer, built by
# ../shared/tools/build-llama-cpp.sh for measurements only; pass "" as LLAMA_BIN_DIR to skip it.
# Usage: scripts/agent_bench.sh LLAMA_BIN_DIR MODEL.gguf [REPETITIONS] [OUT_DIR]
# Prints one JSON line per run (server, config, repetition, loadgen's summary) and keeps them in OUT_DIR.
set -euo pipefail
L=${1?usage: scripts/agent_bench.sh LLAMA_BIN_DIR MODEL.gguf [REPETITIONS] [OUT_DIR]}
M=${2:?model file}
N=${3:-3}
O=${4:-/tmp/kvtier-agent}
K=${KVTIER:-$PWD/build/tools/kvtier}  # KVTIER: another binary (e.g. a GPU bundle's wrapper)
mkdir -p "$O"
# 8 sessions of 6 turns: a shared system prompt with 8 tools, then tool results of 60 words after 400 ms.
# Environment: SESSIONS, HISTORY (each session's own context, words), QUESTION, TOOL_RESULT (words),
# DEVICE and HOST (the tiers), TURNS (per session), TOOL_MS (--tool-latency-ms), JITTER (--tool-latency-jitter) change the load; the defaults are the runs of
# docs/PERF.md's first table.
# SERVE_FLAGS: more flags for kvtier serve (`--device cuda` on a GPU machine).
# CONFIGS: which of "plain retain prefetch both" to run.
# LOWER: the tier below the host: disk (the default: a fresh directory per run) or redis (a fresh
# redis-server per run on port 6393, as a shared store would be; needs redis-server on PATH).
LOAD=(--agent --sessions "${SESSIONS:-8}" --turns "${TURNS:-6}" --tools 8 --system-prompt-tokens 300 --history-tokens "${HISTORY:-0}"
      --question-tokens "${QUESTION:-40}" --tool-result-tokens "${TOOL_RESULT:-60}" --tool-latency-ms "${TOOL_MS:-400}"
      --tool-latency-jitter "${JITTER:-0}" --answer-tokens 8
      --json --quiet)

# shellcheck source=scripts/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

one_run() {  # NAME CONFIG REP PORT "LOADGEN FLAGS" -- server command...
  local name=$1 config=$2 rep=$3 port=$4 flags=$5
  shift 6
  "$@" >"$O/$name-$config-$rep.log" 2>&1 &
  local pid=$!
  wait_up "$port"
  # shellcheck disable=SC2086 # flags are words
  "$K" loadgen --url "http://127.0.0.1:$port" "${LOAD[@]}" $flags >"$O/$name-$config-$rep.json" || true
  if [ "$name" = kvtier ] && command -v curl >/dev/null; then  # the cache's counters and the last requests, for a closer look
    curl -sf "http://127.0.0.1:$port/v1/cache/stats" >"$O/$name-$config-$rep.stats.json" || true
    curl -sf "http://127.0.0.1:$port/v1/requests/recent?limit=64" >"$O/$name-$config-$rep.recent.json" || true
  fi
  stop "$pid"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({"server": sys.argv[2], "config": sys.argv[3], "rep": int(sys.argv[4]), **j}))' \
    "$O/$name-$config-$rep.json" "$name" "$config" "$rep"
}

for rep in $(seq 1 "$N"); do
  for config in ${CONFIGS:-plain retain prefetch both}; do
    case $config in
      plain) flags="" ;;
      retain) flags="--retain-s 600" ;;
      prefetch) flags="--prefetch" ;;
      both) flags="--prefetch --retain-s 600" ;;
    esac
    D="$O/disk-$config-$rep"
    rm -rf "$D" && mkdir -p "$D"
    lower=(--disk-dir "$D")
    if [ "${LOWER:-disk}" = redis ]; then
      redis-server --port 6393 --save '' --appendonly no --bind 127.0.0.1 --dir "$D" >"$D/redis.log" 2>&1 &
      redis_pid=$!
      for _ in $(seq 1 50); do redis-cli -p 6393 ping >/dev/null 2>&1 && break; sleep 0.1; done
      lower=(--remote redis://127.0.0.1:6393 --remote-insecure)
    fi
    # Device 24 MiB and host 24 MiB of f16 KV (8 KiB a token on the small preset: 3072 tokens each) against
    # eight sessions of about 2000 tokens each.
    one_run kvtier "$config" "$rep" 8082 "$flags" -- "$K" serve --model "$M" --kv-dtype f16 --device-capacity "${DEVICE:-24MiB}" \
      --host-capacity "${HOST:-24MiB}" "${lower[@]}" --threads 2 --port 8082 ${SERVE_FLAGS:-}
    if [ "${LOWER:-disk}" = redis ]; then stop "$redis_pid"; fi
  done
  if [ -n "$L" ]; then
    one_run llama.cpp plain "$rep" 8081 "" -- "$L/llama-server" -m "$M" -t 2 -c 32768 -np 4 --cache-ram 48 --jinja --port 8081
  fi
done | tee "$O/runs.jsonl"
