#!/usr/bin/env bash
# A/B of the gated unit apart (KILN_WGPU_GLU_APART_FROM), 64 threads a row pair in the dot product (KILN_WGPU_DOT_TPR), no zeroed
# workgroup memory (KILN_WGPU_ZERO_WG=0); then the table against llama.cpp's Vulkan backend and kiln-cuda. One file per model.
# usage: bash .gpu-ab/run14.sh MODEL...
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
for e in "" "KILN_WGPU_DOT_FROM=0 KILN_WGPU_DOT_TPR=64 KILN_WGPU_ZERO_WG=0 KILN_WGPU_GLU_APART_FROM=0"; do
  env $e timeout 120 $B/wgpu-tiny-cases > /tmp/t.txt 2>&1; echo "tiny [$e]: $(tail -1 /tmp/t.txt)"; grep FAIL /tmp/t.txt; cat /tmp/t.txt >> $OUT/tiny.txt
done
meta=$B/smollm2-meta.gguf
NEVER=18446744073709551615
for m in "$@"; do
  case $m in
    q15-q4km) gen $m --meta $meta --layers 28 --hidden 1536 --heads 12 --kv-heads 2 --ff 8960 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K ;;
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  case $m in
    l8b-q4km) cfgs="old def zero0"; rounds="1 2";;
    l8b-f16) cfgs="old def zero0"; rounds="1 2";;
    q15-q4km) cfgs="old def"; rounds="1";;
    q05-f16) cfgs="old def"; rounds="1";;
    smol-q4_1) cfgs="old def"; rounds="1";;
  esac
  for r in $rounds; do for c in $cfgs; do
    case $c in old) e="KILN_WGPU_GLU_APART_FROM=$NEVER KILN_WGPU_DOT_TPR=32";; base) e="KILN_WGPU_GLU_APART_FROM=$NEVER";; def) e="KILN_WGPU_DOT_FROM=";; glu0) e="KILN_WGPU_GLU_APART_FROM=0";;
      tpr64) e="KILN_WGPU_DOT_TPR=64";; zero0) e="KILN_WGPU_ZERO_WG=0";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
    env $e timeout 150 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
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
