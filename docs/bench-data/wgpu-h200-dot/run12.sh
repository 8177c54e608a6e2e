#!/usr/bin/env bash
# Faster quant_x; which shader runtime checks cost (KILN_WGPU_UNCHECKED=loops,div,bounds); DOT threshold on a 1.5B Q4_K_M; one file per model.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
for e in "" "KILN_WGPU_DOT_FROM=0" "KILN_WGPU_UNCHECKED=loops,div" "KILN_WGPU_DOT_FROM=0 KILN_WGPU_UNCHECKED=loops,div,bounds"; do
  env $e timeout 120 $B/wgpu-tiny-cases > /tmp/t.txt 2>&1; echo "tiny [$e]: $(tail -1 /tmp/t.txt)"; grep FAIL /tmp/t.txt; cat /tmp/t.txt >> $OUT/tiny.txt
done
meta=$B/smollm2-meta.gguf
for m in l8b-q4km q15-q4km q05-f16 smol-q4_1 l8b-f16; do
  case $m in
    q15-q4km) gen $m --meta $meta --layers 28 --hidden 1536 --heads 12 --kv-heads 2 --ff 8960 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K ;;
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  case $m in
    l8b-q4km) cfgs="def L LD LDB"; rounds="1 2";;
    q15-q4km) cfgs="off def all LD allLD"; rounds="1 2";;
    *) cfgs="def LD LDB"; rounds="1";;
  esac
  for r in $rounds; do for c in $cfgs; do
    case $c in off) e="KILN_WGPU_DOT_FROM=off";; def) e="KILN_WGPU_DOT_FROM=";; all) e="KILN_WGPU_DOT_FROM=0";;
      L) e="KILN_WGPU_UNCHECKED=loops";; LD) e="KILN_WGPU_UNCHECKED=loops,div";; LDB) e="KILN_WGPU_UNCHECKED=loops,div,bounds";;
      allLD) e="KILN_WGPU_DOT_FROM=0 KILN_WGPU_UNCHECKED=loops,div";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
    env $e timeout 150 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
  done; done
  if [ $m = q15-q4km ]; then
    echo "== llama.cpp vulkan: llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
    timeout 120 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
    echo "$m: $(grep -E 'tg128|pp512' $f | cut -c1-120 | tr -s ' ')"
  fi
  if [ $m = l8b-q4km ]; then KILN_WGPU_UNCHECKED=loops,div KILN_WGPU_PROFILE=1 timeout 200 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 64 --iterations 1 > $OUT/prof-$m.txt 2>&1; grep -A20 "wgpu profile" $OUT/prof-$m.txt; fi
done
KILN_WGPU_UNCHECKED=loops,div KILN_WGPU_PROFILE=1 timeout 200 $B/kiln bench $M/l8b-f16.gguf --device wgpu --prompt-lens 512 --gen-len 64 --iterations 1 > $OUT/prof-l8b-f16.txt 2>&1; grep -A16 "wgpu profile" $OUT/prof-l8b-f16.txt
