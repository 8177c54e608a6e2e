#!/usr/bin/env bash
# Decode output products merging attention's key splits (default) against the attn_combine dispatch
# (KILN_WGPU_FUSE_COMBINE=0), alternating twice after a 512-token prompt; the 8B F16's decode from an empty
# cache against llama.cpp's Vulkan backend, once.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
nvidia_vulkan || exit 1
meta=$B/smollm2-meta.gguf
kb() { local label=$1; shift; echo "== $label" >> $f; timeout 100 env "$@" >> $f 2>&1; }
for m in ${MODELS:-smol-q4_1 s059-f16 l8b-f16}; do
  case $m in
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do
    kb "fused" $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3
    kb "unfused" KILN_WGPU_FUSE_COMBINE=0 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3
  done
  if [ $m = l8b-f16 ]; then
    for r in 1; do
      kb "wgpu p1" $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 1 --gen-len 128 --iterations 3
      kb "llama d0" $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 0 -n 128 -r 3
    done
  fi
  echo "$m: $(grep -E '^== |^ +(1|512) +128 +0 \||tg128' $f | sed -E 's/^== (.*)/[\1]/; s/^ +(1|512) +128 +0 \| +[0-9.]+ \[[0-9.-]+\] \| +([0-9.]+) \[[0-9.-]+\] \| +([0-9.]+) \[[0-9.-]+\] \|.*/\3/; s/.*(tg128)( @ d512)? \| +([0-9.]+) ± ([0-9.]+).*/\3/' | tr -s ' ' | tr '\n' ' ')"
  rm -f $M/$m.gguf
done
