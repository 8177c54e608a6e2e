#!/usr/bin/env bash
# Decode down products with their gated unit staged in workgroup memory (default) against the unit written apart
# or read from the buffers (KILN_WGPU_STAGE_GLU=0), alternating with llama.cpp's Vulkan backend; greedy text of
# both; the operation tests on this driver.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/kernels-test.xz
nvidia_vulkan || exit 1
( cd /tmp && timeout 200 $B/kernels-test every_format --nocapture ) > $OUT/kernels-test.txt 2>&1
echo "kernels test rc $?"; grep -E "at most|test result|panicked" $OUT/kernels-test.txt
meta=$B/smollm2-meta.gguf
PROMPT=$(printf 'The river runs past the old mill and the bridge, and the town sleeps beside it. %.0s' 1 2 3 4)
for m in ${MODELS:-s059-f16 smol-q4_1}; do
  case $m in
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do
    for v in 1 0; do
      echo "== KILN_WGPU_STAGE_GLU=$v kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
      KILN_WGPU_STAGE_GLU=$v timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
    done
    echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
    timeout 100 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
  done
  for v in 1 0; do KILN_WGPU_STAGE_GLU=$v timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/g-$v.txt; done
  cmp -s /tmp/g-1.txt /tmp/g-0.txt && echo "== $m greedy: staged = unstaged" >> $f || { echo "== $m greedy: staged DIFFERS" >> $f; cat /tmp/g-1.txt /tmp/g-0.txt >> $f; }
  echo "$m: $(grep -E '^== KILN|^ +512 |tg128|greedy' $f | sed -E 's/kiln bench.*//; s/^ +512 +128 +0 \|.*\| +([0-9.]+) \[[0-9.-]+\] \| +[0-9.]+ \|.*/decode \1/; s/.*tg128 \| +([0-9.]+).*/llama \1/' | tr -s ' ' | tr '\n' ' ')"
done
