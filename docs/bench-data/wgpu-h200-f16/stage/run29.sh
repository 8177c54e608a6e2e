#!/usr/bin/env bash
# The 8B F16 (and 0.5B F16) shapes' decode with staged normed rows, side by side with llama.cpp's Vulkan backend.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
nvidia_vulkan || exit 1
meta=$B/smollm2-meta.gguf
for m in ${MODELS:-l8b-f16 q05-f16}; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do
    echo "== kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
    timeout 120 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
    echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
    timeout 150 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
  done
  echo "$m: $(grep -E '^ +512 |tg128|pp512' $f | cut -c1-110 | tr -s ' ' | tr '\n' ';')"
done
