#!/usr/bin/env bash
# The GPU check of docs/GPU.md: builds kvtier with CUDA, runs every CUDA test
# (a skip counts as a failure here: this script is for machines with a GPU),
# runs `kvtier bench cuda` (copy engine vs cudaMemcpy, gather vs D2D, TTFT
# from pinned host vs GPU recompute on the 1b preset), and the `--device
# cuda` variants of `bench tiers` / `bench ttft` when those flags exist.
# Prints a short table last. Meant to finish in under 5 minutes on a
# 16-core box with an H100/H200.
#
#   scripts/gpu-check.sh [build-dir]        env: CUDA_ARCH (default 90), JOBS, OUT (results folder)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-$BUILD/gpu-check}
mkdir -p "$OUT"
declare -a SUMMARY
note() { SUMMARY+=("$(printf '%-34s %s' "$1" "$2")"); }
t0=$(date +%s)

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$OUT/device.txt" || true

echo "== configure + build (KVTIER_CUDA=ON, arch $ARCH)"
tb=$(date +%s)
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
     > "$OUT/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target kvtier cuda_memory_test cuda_copy_engine_test cuda_engine_test \
     > "$OUT/build.log" 2>&1; then
  note "build" "ok ($(( $(date +%s) - tb )) s)"
else
  tail -40 "$OUT/configure.log" "$OUT/build.log"
  note "build" "FAILED (see $OUT/build.log)"
  printf '%s\n' "${SUMMARY[@]}"
  exit 1
fi

echo "== CUDA tests"
status=0
(cd "$BUILD" && timeout 240 ctest -L cuda --output-on-failure) 2>&1 | tee "$OUT/ctest.log"
if grep -q "100% tests passed" "$OUT/ctest.log" && ! grep -q "(Skipped)" "$OUT/ctest.log"; then
  note "CUDA tests" "all passed, none skipped"
else
  note "CUDA tests" "FAILED or SKIPPED (see $OUT/ctest.log)"
  status=1
fi

echo "== kvtier bench cuda"
KV="$BUILD/tools/kvtier"
if timeout 180 "$KV" bench cuda --model 1b --prefix 4096,16384 --repeats 3 2>&1 | tee "$OUT/bench_cuda.txt"; then
  note "bench cuda" "ok ($OUT/bench_cuda.txt)"
else
  note "bench cuda" "FAILED"
  status=1
fi

for b in tiers ttft; do
  if "$KV" bench "$b" --help 2>/dev/null | grep -q -- "--device"; then
    args=(--device cuda)
    [ "$b" = ttft ] && args+=(--model 1b --prefix 4096,16384)
    [ "$b" = tiers ] && args+=(--dir "$BUILD/bench-tiers")
    if timeout 120 "$KV" bench "$b" "${args[@]}" 2>&1 | tee "$OUT/bench_$b.txt"; then note "bench $b --device cuda" "ok"; else note "bench $b --device cuda" "FAILED"; status=1; fi
  else
    note "bench $b --device cuda" "not available in this build (flag missing)"
  fi
done

echo
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${SUMMARY[@]}"
if [ -s "$OUT/bench_cuda.txt" ]; then echo; grep -E "GB/s|H2D|D2H|gather|prefix|^ +[0-9]+ " "$OUT/bench_cuda.txt"; fi
exit $status
