#!/usr/bin/env bash
# Batch-1 decode against llama.cpp's Vulkan backend at the same depth: the earlier tables compared kiln's decode
# after a 512-token prompt (`kiln bench --prompt-lens 512`) with llama-bench's tg128, which starts from an empty
# cache. Here both sides decode 128 tokens from (about) an empty cache (kiln: a 1-token prompt; llama-bench -n 128)
# and from a 512-token one (llama-bench -d 512 -n 128 -p 0), kiln and llama.cpp alternating, twice; prefill as
# before; the operation tests (coop tiles) first.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/kernels-test.xz
nvidia_vulkan || exit 1
( cd /tmp && timeout 150 $B/kernels-test --nocapture ) > $OUT/kernels-test.txt 2>&1
echo "kernels test rc $?"; grep -E "at most|test result|panicked" $OUT/kernels-test.txt
meta=$B/smollm2-meta.gguf
for m in ${MODELS:-s059-f16 smol-q4_1 l8b-f16 l8b-q4km q15-q4km}; do
  case $m in
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do
    for p in 1 512; do
      echo "== kiln bench $m.gguf --device wgpu --prompt-lens $p --gen-len 128 --iterations 3" >> $f
      timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens $p --gen-len 128 --iterations 3 >> $f 2>&1
      d=$((p == 1 ? 0 : 512))
      echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 0 -n 128 -d $d -r 3" >> $f
      timeout 100 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 0 -n 128 -d $d -r 3 >> $f 2>&1
    done
  done
  echo "$m: $(grep -E '^== kiln|^ +(1|512) +128 +0 \||tg128' $f | sed -E 's/^== kiln bench.*prompt-lens ([0-9]+).*/[p\1]/; /^==/d; s/^ +(1|512) +128 +0 \|.*\| +([0-9.]+) \[[0-9.-]+\] \| +[0-9.]+ \|.*/kiln \2/; s/.*tg128( @ d512)? \| +([0-9.]+ ± [0-9.]+).*/llama \2/' | tr -s ' ' | tr '\n' ' ')"
  rm -f $M/$m.gguf
done
