#!/usr/bin/env bash
# A/B: host = sampling on the host and 64-row tiles only (the code before); t64 = sampling on the device, 64-row
# tiles; dev = the defaults (device sampling, 128-row tiles from 128 rows). Greedy (kiln bench) and a
# temperature/top-k/top-p run (kiln run); then the table against llama.cpp's Vulkan backend and kiln-cuda.
# ROUNDS (default "1 2") sets the A/B rounds.
# usage: bash .gpu-ab/run17.sh MODEL...
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
if [ "${TINY:-1}" = 1 ]; then
  timeout 120 $B/wgpu-tiny-cases > /tmp/t.txt 2>&1; echo "tiny: $(tail -1 /tmp/t.txt)"; grep FAIL /tmp/t.txt; cat /tmp/t.txt >> $OUT/tiny.txt
fi
meta=$B/smollm2-meta.gguf
for m in "$@"; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in ${ROUNDS:-1 2}; do for c in host t64 all dev; do
    case $c in host) e="KILN_WGPU_HOST_SAMPLING=1 KILN_WGPU_TILE128_FROM=off";; t64) e="KILN_WGPU_TILE128_FROM=off";; all) e="KILN_WGPU_TILE128_GROUPS=0";; dev) e="KILN_WGPU_HOST_SAMPLING=";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
    env $e timeout 150 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
    case $c in t64|all) continue;; esac
    echo "== $c round $r: $e kiln run $m.gguf 'The capital of France is' --raw -n 200 --ignore-eos --temperature 0.8 --top-k 40 --top-p 0.9 --min-p 0.02 --seed 7 --device wgpu" >> $f
    env $e timeout 150 $B/kiln run $M/$m.gguf "The capital of France is" --raw -n 200 --ignore-eos --temperature 0.8 --top-k 40 --top-p 0.9 --min-p 0.02 --seed 7 --device wgpu > /tmp/o.txt 2>&1; tail -c 600 /tmp/o.txt >> $f; echo >> $f
    echo "$m $c sampled r$r: $(grep -iE 'tok/s' /tmp/o.txt | tail -1 | cut -c1-120)"
  done; done
  echo "== kiln wgpu: kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
  timeout 120 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
  echo "== llama.cpp vulkan: llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
  timeout 120 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
  if [ $m != smol-q4_1 ]; then
    echo "== kiln cuda: kiln bench $m.gguf --device cuda --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
    timeout 120 $B/kiln bench $M/$m.gguf --device cuda --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
  fi
  for dev in cuda wgpu; do timeout 100 $B/kiln run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device $dev 2>/dev/null > /tmp/greedy-$dev.txt; done
  cmp -s /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt && echo "== $m greedy cuda/wgpu same" >> $f || { echo "== $m greedy cuda/wgpu DIFFERENT" >> $f; cat /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt >> $f; }
  echo "$m: $(grep -E '^ +512 |tg128|pp512|greedy' $f | tail -6 | cut -c1-110 | tr -s ' ')"
done
