#!/usr/bin/env bash
# The figures of docs/PERF.md "Quantized engine": kvtier's engine against llama.cpp's llama-bench
# on the same GGUF files, the same thread count, in one run. llama.cpp is the peer, built from
# source by ../shared/tools/build-llama-cpp.sh for measurements only.
# Usage: scripts/perf_quantized.sh LLAMA_BIN_DIR [OUT_DIR] [THREADS]
set -euo pipefail
L=${1:?usage: scripts/perf_quantized.sh LLAMA_BIN_DIR [OUT_DIR] [THREADS]}
D=${2:-/tmp/kvtier-perf}
T=${3:-2}
K=build/tools/kvtier
mkdir -p "$D"
make_files() {  # NAME PRESET VOCAB [make args...]
  local name=$1 preset=$2 vocab=$3; shift 3
  [ -f "$D/$name-f16.gguf" ] || "$K" model make --preset "$preset" --vocab "tests/data/vocab/ggml-vocab-$vocab.gguf" \
    --dtype f16 --out "$D/$name-f16.gguf" "$@"
  [ -f "$D/$name-q4km.gguf" ] || "$L/llama-quantize" "$D/$name-f16.gguf" "$D/$name-q4km.gguf" Q4_K_M >/dev/null 2>&1
  [ -f "$D/$name-q8_0.gguf" ] || "$L/llama-quantize" "$D/$name-f16.gguf" "$D/$name-q8_0.gguf" Q8_0 >/dev/null 2>&1
}
make_files small-qwen2 small qwen2 --seed 5 --chat-template tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja
make_files 1b 1b llama-bpe
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "flags: $(grep -m1 flags /proc/cpuinfo | grep -o 'avx[^ ]*\|fma\|f16c\|amx[^ ]*' | sort -u | tr '\n' ' ')"
echo "llama.cpp: $("$L/llama-bench" --version 2>&1 | head -1)"
for f in ${FILES:-small-qwen2-q4km small-qwen2-q8_0 1b-q4km}; do
  echo "== $f ($(du -m "$D/$f.gguf" | cut -f1) MiB)"
  "$L/llama-bench" -m "$D/$f.gguf" -t "$T" -p 512 -n 64 -r 3 -o json 2>/dev/null | tee "$D/$f.llama.json" |
    python3 -c 'import json,sys; [print("llama.cpp", ("pp%d" % r["n_prompt"]) if r["n_prompt"] else ("tg%d" % r["n_gen"]), "%.1f tok/s" % r["avg_ts"]) for r in json.load(sys.stdin)]'
  "$K" bench engine --model "$D/$f.gguf" --prompt 512 --decode 64 --threads "$T" --repeats 3 --json | tee "$D/$f.kvtier.json" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); p=j["prompts"][0]; print("kvtier (%s kernels) pp512 %.1f tok/s, tg64 %.1f tok/s, ceiling %.1f tok/s, RSS %.0f MiB (%.0f before loading), weights %.1f MiB" % (j["isa"], p["prefill_tokens_per_s"], p["decode_tokens_per_s"], j["decode_ceiling_tokens_per_s"], j["rss_bytes"]/2**20, j["baseline_rss_bytes"]/2**20, j["weight_bytes"]/2**20)); [print("  kernel", k["type"], k["op"], k["isa"], k["layout"], "%.1f GB/s, %.1f GMAC/s" % (k["gbps"], k["gmacs"])) for k in j["kernels"]]'
done
