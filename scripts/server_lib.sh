# Helpers shared by the side-by-side server scripts (head_to_head.sh, agent_bench.sh); sourced, not run.

wait_up() {  # PORT
  for _ in $(seq 1 120); do
    if command -v curl >/dev/null; then
      curl -sf "http://127.0.0.1:$1/health" >/dev/null && curl -sf "http://127.0.0.1:$1/v1/models" >/dev/null && return 0
    else  # (the GPU machine's image has python3, not curl)
      python3 -c 'import sys, urllib.request as u; [u.urlopen(f"http://127.0.0.1:{sys.argv[1]}{p}", timeout=2) for p in ("/health", "/v1/models")]' \
        "$1" 2>/dev/null && return 0
    fi
    sleep 0.5
  done
  echo "server on port $1 did not come up" >&2
  return 1
}

stop() {  # PID: a signal, then (llama-server waits on a second one after a run) another, then KILL
  kill -INT "$1" 2>/dev/null || true
  for sig in TERM INT KILL; do
    for _ in $(seq 1 20); do kill -0 "$1" 2>/dev/null || break 2; sleep 0.5; done
    kill -"$sig" "$1" 2>/dev/null || true
  done
  wait "$1" 2>/dev/null || true
}
