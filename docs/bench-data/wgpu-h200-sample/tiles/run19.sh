#!/usr/bin/env bash
# Prefill A/B of the product tiles: t64 (64 x 64 only, KILN_WGPU_TILE128_FROM=off), g512 (the default: 128 x 128
# where that grid has 512 workgroups, else 64 x 64), wide (128 x 128 where 512, else 64 in x 128 out), allwide
# (64 in x 128 out for every prompt product). Then a profile of the 8B F16 prompt with the default.
# usage: bash .gpu-ab/run19.sh MODEL...
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
meta=$B/smollm2-meta.gguf
for m in "$@"; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do for c in t64 g512 wide allwide; do
    case $c in t64) e="KILN_WGPU_TILE128_FROM=off";; g512) e="KILN_WGPU_TILE_WIDE=";; wide) e="KILN_WGPU_TILE_WIDE=1";;
      allwide) e="KILN_WGPU_TILE_WIDE=1 KILN_WGPU_TILE128_GROUPS=100000000";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 16 --iterations 2" >> $f
    env $e timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 16 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-80)"
  done; done
  if [ $m = l8b-f16 ]; then
    for c in g512 wide; do
      case $c in g512) e="KILN_WGPU_TILE_WIDE=";; wide) e="KILN_WGPU_TILE_WIDE=1";; esac
      echo "== profile $c: $e KILN_WGPU_PROFILE=1 kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 2 --iterations 1" > $OUT/prof-$m-$c.txt
      env $e KILN_WGPU_PROFILE=1 timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 2 --iterations 1 >> $OUT/prof-$m-$c.txt 2>&1
      head -12 $OUT/prof-$m-$c.txt | cut -c1-90
    done
  fi
done
