#!/bin/sh
# kvtier's CLI under QEMU's Westmere CPU model (SSE4.2, no AVX): usage: QEMU KVTIER SOURCE_DIR QUANTIZE_DIR
set -eu
qemu=$1 kvtier=$2 src=$3 dir=$4
run() { "$qemu" -cpu Westmere "$kvtier" "$@"; }
model=$src/tests/data/models/fixture-trained-q8_0.gguf
run model info "$model" | grep -q "tensor types 9 F32, 29 Q8_0"
test "$(run model tokenize --model "$model" --text hello)" = "$("$kvtier" model tokenize --model "$model" --text hello)"
run model quantize "$dir/tiny-f16.gguf" "$dir/tiny-f16-q4_k_m-westmere.gguf" --dtype q4_k_m > /dev/null
cmp "$dir/tiny-f16-q4_k_m-westmere.gguf" "$dir/tiny-f16-q4_k_m.gguf"
if run serve --model "$model" --port 0 > "$dir/serve-westmere.log" 2>&1; then
  echo "serve started on a CPU without AVX2"; exit 1
fi
grep -q "this CPU lacks AVX2" "$dir/serve-westmere.log"
echo "cli without avx: ok"
