#!/usr/bin/env bash
# The wgpu table in one call, decode at equal depth on both sides: per file, kiln-wgpu after a 512-token prompt
# (prefill, and decode from depth 512; again with KILN_WGPU_FUSE_COMBINE=0, the attention splits merged by their own
# dispatch), kiln-wgpu after a 1-token prompt (decode from an empty cache), llama.cpp's Vulkan backend (pp512 and
# tg128 from an empty cache; tg128 from depth 512), kiln-cuda after a 512-token prompt; greedy text of wgpu against
# cuda and against the unfused merge. The operation tests first.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/kernels-test.xz
nvidia_vulkan || exit 1
( cd /tmp && timeout 150 $B/kernels-test --nocapture ) > $OUT/kernels-test.txt 2>&1
echo "kernels test rc $?"; grep -E "at most|test result|panicked" $OUT/kernels-test.txt
meta=$B/smollm2-meta.gguf
PROMPT=$(printf 'The river runs past the old mill and the bridge, and the town sleeps beside it. %.0s' 1 2 3 4)
kb() { # label env... -- args
  local label=$1; shift
  echo "== $label" >> $f
  timeout 100 env "$@" >> $f 2>&1
}
for m in ${MODELS:-smol-q4_1 s059-f16 q15-q4km l8b-f16 l8b-q4km}; do
  case $m in
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  kb "wgpu p512" $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3
  kb "wgpu p512 unfused" KILN_WGPU_FUSE_COMBINE=0 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3
  kb "llama p512 n128 d0" $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3
  kb "wgpu p1" $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 1 --gen-len 128 --iterations 3
  kb "llama n128 d512" $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 0 -n 128 -d 512 -r 3
  kb "wgpu p512 again" $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3
  kb "wgpu p512 unfused again" KILN_WGPU_FUSE_COMBINE=0 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3
  kb "cuda p512" $B/kiln bench $M/$m.gguf --device cuda --prompt-lens 512 --gen-len 128 --iterations 3
  timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/g-wgpu.txt
  KILN_WGPU_FUSE_COMBINE=0 timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/g-unfused.txt
  timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device cuda 2>/dev/null > /tmp/g-cuda.txt
  for g in unfused cuda; do
    cmp -s /tmp/g-wgpu.txt /tmp/g-$g.txt && echo "== $m greedy: wgpu = $g" >> $f || { echo "== $m greedy: wgpu DIFFERS from $g" >> $f; cat /tmp/g-wgpu.txt /tmp/g-$g.txt >> $f; }
  done
  echo "$m: $(grep -E '^== |^ +(1|512) +128 +0 \||pp512|tg128' $f | sed -E 's/^== (.*)/[\1]/; s/^ +(1|512) +128 +0 \| +[0-9.]+ \[[0-9.-]+\] \| +([0-9.]+) \[[0-9.-]+\] \| +([0-9.]+) \[[0-9.-]+\] \|.*/pf \2 dec \3/; s/.*(pp512|tg128)( @ d512)? \| +([0-9.]+) ± ([0-9.]+).*/\1 \3/' | tr -s ' ' | tr '\n' ' ')"
  rm -f $M/$m.gguf
done
