#!/usr/bin/env bash
# Cooperative tiles: each row's columns together (default) vs each column's rows; rounds of 64 (default) vs 32; 128-row tiles from grids of 128 (default with coop) vs 768; prefill vs llama.cpp Vulkan on 4 shapes.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/kernels-test.xz
nvidia_vulkan || exit 1
meta=$B/smollm2-meta.gguf
( cd /tmp && timeout 200 $B/kernels-test every_format --nocapture ) > $OUT/kernels-test.txt 2>&1
echo "kernels test rc $?"; grep -E "at most|test result|panicked" $OUT/kernels-test.txt
( cd /tmp && KILN_WGPU_COOP_K_INNER=0 KILN_WGPU_COOP_ROUND=32 timeout 200 $B/kernels-test every_format --nocapture ) > $OUT/kernels-test-col32.txt 2>&1
echo "kernels test (columns, 32) rc $?"; grep -E "cooperative|test result|panicked" $OUT/kernels-test-col32.txt
kb() { # LABEL ENV...: a prefill kiln bench of $m
  local label=$1; shift
  echo "== $label kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 4 --iterations 3" >> $f
  env "$@" timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 4 --iterations 3 >> $f 2>&1
}
for m in l8b-f16 l8b-q4km q15-q4km s059-f16; do
  gen $m --meta $meta ${MODEL_ARGS[$m]}
  f=$OUT/m-$m.txt
  kb default X=1
  kb cols KILN_WGPU_COOP_K_INNER=0
  case $m in l8b*) kb round32 KILN_WGPU_COOP_ROUND=32 ;; *) kb groups768 KILN_WGPU_TILE128_GROUPS=768 ;; esac
  echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 0 -r 3" >> $f
  timeout 100 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 0 -r 3 >> $f 2>&1
  echo "$m: $(grep -E '^== |^ +512 |pp512' $f | sed -E 's/kiln bench.*//; s/^ +512 +4 +0 \| +([0-9.]+) .*\| +([0-9.]+) \[.*\| +[0-9.]+ \[.*/TTFT \1/; s/.*pp512 \| +([0-9.]+).*/pp512 \1/' | tr -s ' ' | tr '\n' ' ')"
  [ $m = l8b-f16 ] && KILN_WGPU_PROFILE=1 timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 2 --iterations 1 > $OUT/profile-$m.txt 2>&1
  rm -f $M/$m.gguf
done
