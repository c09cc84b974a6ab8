#!/usr/bin/env bash
# The GPU check of docs/GPU.md: every CUDA test (a skip counts as a failure
# here: this script is for machines with a GPU), `kvtier bench cuda` (copy
# engine vs cudaMemcpy, gather vs D2D, TTFT from pinned host vs GPU recompute
# on the 1b preset), and the `--device cuda` variants of `bench tiers` /
# `bench ttft` when those flags exist, and `kvtier serve --device cuda` under
# `kvtier loadgen`. Prints a short table last and exits
# non-zero if any step failed. Meant to finish in under 5 minutes on an H100/H200.
#
# Three modes, because the Debian build dependencies (OpenBLAS, liburing,
# hiredis, tomlplusplus, cpp-httplib, xxhash, ...) exist only on the
# development machine, while the GPU image has the driver, CUDA and cuBLAS but
# none of those libraries and cannot install packages:
#   scripts/gpu-check.sh --pack FILE.tar.xz [BUILD_DIR]   (dev machine, no GPU needed)
#       Builds kvtier + the CUDA tests with CUDA in BUILD_DIR (default build;
#       configures only when BUILD_DIR/CMakeCache.txt is missing) and packs
#       bin/ (stripped binaries), lib/ (the shared libraries they use, less
#       cuBLAS, the driver and the glibc/gcc runtime) and sys/ (that runtime
#       plus ld-linux-x86-64.so.2, used only if the GPU machine's own is too old).
#   scripts/gpu-check.sh --bundle FILE.tar.xz             (GPU machine)
#       Unpacks FILE into a temp folder and runs the checks from it, with the
#       GPU machine's cuBLAS and driver.
#   scripts/gpu-check.sh [BUILD_DIR]                      (machine with GPU and deps)
#       Configures + builds with CUDA in BUILD_DIR (default build-gpu), then checks.
# BUILD_DIR is relative to the repository root; FILE to the current directory.
# Env: CUDA_ARCH (default 90), JOBS (default nproc), OUT (results folder;
# default BUILD_DIR/gpu-check, or a temp folder with --bundle),
# GPU_CHECK_NO_BUILD=1 (skip configure+build; use the binaries already in BUILD_DIR),
# GPU_CHECK_LOADER=1 (--bundle: always run through the bundled sys/ loader).
set -uo pipefail
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
die() { echo "gpu-check: $*" >&2; exit 2; }
MODE=build BUILD=build-gpu TARBALL=
case ${1:-} in
  --pack) MODE=pack; TARBALL=$(abs "${2:?--pack needs FILE.tar.xz}"); BUILD=${3:-build} ;;
  --bundle) MODE=bundle; TARBALL=$(abs "${2:?--bundle needs FILE.tar.xz}") ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) die "unknown option $1 (see --help)" ;;
  ?*) BUILD=$1 ;;
esac
[ -z "${OUT:-}" ] || OUT=$(abs "$OUT")
cd "$(dirname "$0")/.." || die "cannot cd to the repository root"
JOBS=${JOBS:-$(nproc)}
PATH=$PATH:/usr/local/nvidia/bin  # where GPU images often keep nvidia-smi
CLEAN=()
trap 'rm -rf "${CLEAN[@]}"' EXIT

# The CUDA tests: every kvtier_test(NAME ...) of tests/cuda/CMakeLists.txt.
mapfile -t TESTS < <(sed -n 's/^[[:space:]]*kvtier_test(\([A-Za-z0-9_]*\).*/\1/p' tests/cuda/CMakeLists.txt 2>/dev/null)
# Configure (always, or only when $2=missing and there is no cache) and build.
build() {
  local log=$1 when=$2
  [ -n "${GPU_CHECK_NO_BUILD:-}" ] && { echo "== GPU_CHECK_NO_BUILD: using the binaries in $BUILD"; return 0; }
  echo "== configure + build in $BUILD (KVTIER_CUDA=ON, arch ${CUDA_ARCH:-90}); log $log"
  if [ "$when" = always ] || [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" > "$log" 2>&1 || { tail -40 "$log"; return 1; }
  fi
  cmake --build "$BUILD" -j "$JOBS" --target kvtier "${TESTS[@]}" >> "$log" 2>&1 || { tail -40 "$log"; return 1; }
}

if [ "$MODE" = pack ]; then
  log=$(mktemp /tmp/gpu-pack-build.XXXXXX.log)
  build "$log" missing || die "build failed (log $log)"
  CLEAN+=("$log")
  stage=$(mktemp -d); CLEAN+=("$stage")
  mkdir -p "$stage/bin" "$stage/lib" "$stage/sys"
  bins=("$BUILD/tools/kvtier")
  for t in "${TESTS[@]}"; do bins+=("$BUILD/tests/cuda/$t"); done
  for b in "${bins[@]}"; do
    [ -x "$b" ] || die "missing $b (built with KVTIER_CUDA=ON?)"
    cp -L "$b" "$stage/bin/" || die "cannot copy $b"
    strip "$stage/bin/${b##*/}" || die "cannot strip $b"
  done
  ldd "${bins[@]}" | grep -q 'not found' && { ldd "${bins[@]}" | grep 'not found'; die "unresolved libraries"; }
  while read -r so; do
    case ${so##*/} in
      libcublas* | libcuda.so*) ;;  # taken from the GPU machine
      libc.so* | libm.so* | libmvec.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
        libutil.so* | libstdc++.so* | libgcc_s.so* | ld-linux*) cp -L "$so" "$stage/sys/" || die "cp $so" ;;
      *) cp -L "$so" "$stage/lib/" || die "cp $so" ;;
    esac
  done < <(ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u)
  [ -f "$stage/sys/ld-linux-x86-64.so.2" ] || die "no ld-linux-x86-64.so.2 among the dependencies"
  XZ_OPT=${XZ_OPT:--T0} tar -cJf "$TARBALL" -C "$stage" bin lib sys || die "tar failed"
  echo "== packed $TARBALL ($(du -h "$TARBALL" | cut -f1)): ${#bins[@]} binaries, $(find "$stage/lib" -type f | wc -l) libs in lib/, $(find "$stage/sys" -type f | wc -l) in sys/"
  exit 0
fi

RUN=()  # prefix for every binary: empty, or the bundled loader
if [ "$MODE" = bundle ]; then
  [ -f "$TARBALL" ] || die "no such bundle: $TARBALL"
  root=$(mktemp -d); CLEAN+=("$root")
  tar -xJf "$TARBALL" -C "$root" || die "cannot unpack $TARBALL"
  cublas=$(find / /usr/local -xdev -type f -name 'libcublas.so.13*' 2>/dev/null | head -1)
  cublas=${cublas%/*}
  [ -n "$cublas" ] || echo "gpu-check: warning: libcublas.so.13 not found" >&2
  driver=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')
  driver=${driver%/*}
  [ -n "$driver" ] || driver=/usr/local/nvidia/lib64
  # Only the bundled binaries see lib/: system tools keep their own libraries.
  RUN=(env "LD_LIBRARY_PATH=$root/lib:$cublas:$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  KV=$root/bin/kvtier TESTDIR=$root/bin
  if [ -n "${GPU_CHECK_LOADER:-}" ] || ! "${RUN[@]}" "$KV" --version > /dev/null 2>&1; then
    echo "== running the bundle through its own sys/ld-linux-x86-64.so.2 (GPU_CHECK_LOADER, or the system loader failed)"
    RUN=("$root/sys/ld-linux-x86-64.so.2" --library-path "$root/sys:$root/lib:$cublas:$driver")
  fi
  TESTS=()
  for f in "$root"/bin/*; do [ "${f##*/}" = kvtier ] || TESTS+=("${f##*/}"); done
  echo "== bundle in $root; cuBLAS in ${cublas:-?}; driver in $driver"
  [ -n "${OUT:-}" ] || OUT=$(mktemp -d /tmp/gpu-check.XXXXXX)
else
  OUT=$(abs "${OUT:-$BUILD/gpu-check}")
  mkdir -p "$OUT"
  build "$OUT/build.log" always || { echo "build FAILED (see $OUT/build.log)"; exit 1; }
  KV=$(abs "$BUILD/tools/kvtier") TESTDIR=$(abs "$BUILD/tests/cuda")
fi
mkdir -p "$OUT"
SUMMARY=() status=0 t0=$(date +%s)
note() { SUMMARY+=("$(printf '%-28s %-8s %4d s' "$1" "$2" "$3")"); if [ "$2" = FAILED ]; then status=1; fi; }

# step NAME TIMEOUT OUTFILE DIR CMD...: runs CMD in DIR with a timeout, output to OUTFILE; returns its rc.
step() {
  local name=$1 to=$2 file=$3 dir=$4 t rc; shift 4
  echo "== $name"
  t=$(date +%s)
  (cd "$dir" && exec timeout "$to" "$@") > "$file" 2>&1; rc=$?
  [ "$rc" = 124 ] && echo "(timed out after $to s)" >> "$file"
  LAST_S=$(($(date +%s) - t))
  return "$rc"
}

if step device 30 "$OUT/device.txt" . nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
  cat "$OUT/device.txt"; note device ok "$LAST_S"
else cat "$OUT/device.txt"; note device FAILED "$LAST_S"; fi

[ ${#TESTS[@]} -gt 0 ] || { echo "no CUDA tests found"; note "CUDA tests" FAILED 0; }
for t in "${TESTS[@]}"; do
  # The working folder is the binary's own, like CTest's; a skip ("no CUDA device") is a failure.
  if step "$t" 240 "$OUT/$t.txt" "$TESTDIR" "${RUN[@]}" "$TESTDIR/$t" && ! grep -q "no CUDA device" "$OUT/$t.txt"; then
    note "$t" ok "$LAST_S"
  else
    { grep -E "Failure|FAILED|Which is|Expected|no CUDA device|timed out" "$OUT/$t.txt" || tail -5 "$OUT/$t.txt"; } | head -40
    note "$t" FAILED "$LAST_S"
  fi
done

bench() {  # bench LABEL TIMEOUT FILE ARGS...
  local label=$1 to=$2 file=$3; shift 3
  if step "$label" "$to" "$file" . "${RUN[@]}" "$KV" bench "$@"; then cat "$file"; note "$label" ok "$LAST_S"
  else tail -20 "$file"; note "$label" FAILED "$LAST_S"; fi
}
bench "bench cuda" 180 "$OUT/bench_cuda.txt" cuda --model 1b --prefix 4096,16384 --repeats 5
for b in tiers ttft; do
  if "${RUN[@]}" "$KV" bench "$b" --help 2> /dev/null | grep -q -- "--device"; then
    dir=${TMPDIR:-/tmp}/kvtier-gpu-check-$b  # scratch (disk tier regions), not results
    mkdir -p "$dir"
    args=(--device cuda --dir "$dir")
    [ "$b" = ttft ] && args+=(--model 1b --prefix "4096,16384")
    bench "bench $b --device cuda" 150 "$OUT/bench_$b.txt" "$b" "${args[@]}"
    rm -rf "$dir"
  else
    note "bench $b --device cuda" skipped 0
  fi
done

# The server on the GPU: `kvtier serve --device cuda`, driven by loadgen (multi-round chat; cached-token share > 0).
port=18431 sdir=${TMPDIR:-/tmp}/kvtier-gpu-check-serve
rm -rf "$sdir"
"${RUN[@]}" "$KV" serve --model small --device cuda --port "$port" --disk-dir "$sdir" > "$OUT/serve.txt" 2>&1 &
spid=$!
for _ in $(seq 1 60); do (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break; sleep 0.5; done
# One user first (TTFT without queueing, and the warm-up), then four at once.
if step "serve --device cuda" 120 "$OUT/loadgen.txt" . "${RUN[@]}" "$KV" loadgen --url "http://127.0.0.1:$port" --users 1 \
     --rounds 3 --system-prompt-tokens 1000 --history-tokens 1000 --answer-tokens 16 --quiet &&
   "${RUN[@]}" "$KV" loadgen --url "http://127.0.0.1:$port" --users 4 --rounds 3 --system-prompt-tokens 1000 \
     --history-tokens 1000 --answer-tokens 16 --seed 2 --quiet >> "$OUT/loadgen.txt" 2>&1; then
  cat "$OUT/loadgen.txt"; note "serve --device cuda" ok "$LAST_S"
else tail -20 "$OUT/loadgen.txt" "$OUT/serve.txt"; note "serve --device cuda" FAILED "$LAST_S"; fi
kill "$spid" 2> /dev/null; wait "$spid" 2> /dev/null
rm -rf "$sdir"

echo
echo "== summary ($(($(date +%s) - t0)) s; outputs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
exit "$status"
