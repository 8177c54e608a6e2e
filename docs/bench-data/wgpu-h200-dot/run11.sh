#!/usr/bin/env bash
# Integer-dot decode products (KILN_WGPU_DOT_FROM) and unchecked shaders (KILN_WGPU_UNCHECKED) A/B; one file per model.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
timeout 120 $B/wgpu-tiny-cases > $OUT/tiny.txt 2>&1; echo "tiny: $(tail -1 $OUT/tiny.txt)"; grep FAIL $OUT/tiny.txt
KILN_WGPU_DOT_FROM=0 timeout 120 $B/wgpu-tiny-cases > $OUT/tiny-dot.txt 2>&1; echo "tiny dot: $(tail -1 $OUT/tiny-dot.txt)"; grep FAIL $OUT/tiny-dot.txt
meta=$B/smollm2-meta.gguf
for m in l8b-q4km q05-q4km; do
  case $m in
    q05-q4km) gen $m --meta $meta $SHAPE_059 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  if [ $m = l8b-q4km ]; then cfgs="off def defU offU"; else cfgs="off def all"; fi
  for r in 1 2; do for c in $cfgs; do
    case $c in off) e="KILN_WGPU_DOT_FROM=off";; def) e="KILN_WGPU_DOT_FROM=";; all) e="KILN_WGPU_DOT_FROM=0";; defU) e="KILN_WGPU_UNCHECKED=1";; offU) e="KILN_WGPU_DOT_FROM=off KILN_WGPU_UNCHECKED=1";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
    env $e timeout 150 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
  done; done
  echo "== llama.cpp vulkan: llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
  timeout 120 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
  for dev in cuda wgpu; do timeout 100 $B/kiln run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device $dev 2>/dev/null > /tmp/greedy-$dev.txt; done
  cmp -s /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt && echo "== $m greedy cuda/wgpu same" >> $f || { echo "== $m greedy cuda/wgpu DIFFERENT" >> $f; cat /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt >> $f; }
  echo "$m: $(grep -E 'tg128|pp512|greedy' $f | cut -c1-120 | tr -s ' ')"
done
KILN_WGPU_PROFILE=1 timeout 200 $B/kiln bench $M/l8b-q4km.gguf --device wgpu --prompt-lens 512 --gen-len 64 --iterations 1 > $OUT/prof-l8b.txt 2>&1; grep -A30 "wgpu profile" $OUT/prof-l8b.txt | head -40
