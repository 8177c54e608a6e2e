#!/usr/bin/env bash
# The table with cooperative prompt tiles: kiln-wgpu, kiln-cuda and llama.cpp's Vulkan backend on the same
# random-weight files (batch-1 decode, 512-token prefill); greedy text of wgpu (cooperative tiles), wgpu with f32
# tiles and cuda.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
nvidia_vulkan || exit 1
$B/kiln list-devices > $OUT/devices.txt 2>&1
meta=$B/smollm2-meta.gguf
PROMPT=$(printf 'The river runs past the old mill and the bridge, and the town sleeps beside it. %.0s' 1 2 3 4)
for m in ${MODELS:-smol-q4_1 s059-f16 q15-q4km l8b-f16 l8b-q4km}; do
  case $m in
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for d in wgpu cuda; do
    echo "== kiln bench $m.gguf --device $d --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
    timeout 100 $B/kiln bench $M/$m.gguf --device $d --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
  done
  echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
  timeout 100 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
  timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/g-coop.txt
  KILN_WGPU_COOP=0 KILN_WGPU_F16=0 timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/g-f32.txt
  timeout 60 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device cuda 2>/dev/null > /tmp/g-cuda.txt
  for g in f32 cuda; do
    cmp -s /tmp/g-coop.txt /tmp/g-$g.txt && echo "== $m greedy: cooperative tiles = $g" >> $f || { echo "== $m greedy: cooperative tiles DIFFER from $g" >> $f; cat /tmp/g-coop.txt /tmp/g-$g.txt >> $f; }
  done
  echo "$m: $(grep -E '^ +512 |tg128|pp512|greedy' $f | cut -c1-100 | tr -s ' ' | tr '\n' ';')"
  rm -f $M/$m.gguf
done
