#!/usr/bin/env bash
# Cooperative-matrix prompt tiles with the down product scaled into them; rounds of 32 vs 64 columns; tile choice; profile; prefill vs llama.cpp Vulkan on 4 shapes.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/kernels-test.xz
nvidia_vulkan || exit 1
meta=$B/smollm2-meta.gguf
( cd /tmp && timeout 200 $B/kernels-test every_format --nocapture ) > $OUT/kernels-test.txt 2>&1
echo "kernels test rc $?"; grep -E "at most|test result|panicked" $OUT/kernels-test.txt
kb() { # LABEL ENV... -- model: prefill-only kiln bench
  local label=$1; shift
  echo "== $label kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 4 --iterations 3" >> $f
  env "$@" timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 4 --iterations 3 >> $f 2>&1
}
for m in l8b-f16 l8b-q4km q15-q4km s059-f16; do
  gen $m --meta $meta ${MODEL_ARGS[$m]}
  f=$OUT/m-$m.txt
  kb default X=1
  kb round64 KILN_WGPU_COOP_ROUND=64
  case $m in l8b-f16) kb all128 KILN_WGPU_TILE128_GROUPS=0; kb nocoop KILN_WGPU_COOP=0 ;; esac
  case $m in q15-q4km|s059-f16) kb all128 KILN_WGPU_TILE128_GROUPS=0; kb no128 KILN_WGPU_TILE128_FROM=off ;; esac
  echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 0 -r 3" >> $f
  timeout 100 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 0 -r 3 >> $f 2>&1
  echo "$m: $(grep -E '^== |^ +512 |pp512' $f | sed -E 's/kiln bench.*//; s/^ +512 +4 +0 \| +([0-9.]+).*\| +([0-9.]+) \[.*/TTFT \1 ms/' | cut -c1-90 | tr -s ' ' | tr '\n' ';')"
  [ $m = l8b-f16 ] && KILN_WGPU_PROFILE=1 timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 2 --iterations 1 > $OUT/profile-$m.txt 2>&1
  rm -f $M/$m.gguf
done
