#!/usr/bin/env bash
# A/B on the 0.5B F16 shape: the gated unit apart before its 8.7 MB down products (the default, from 4 MiB) vs inside them.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
meta=$B/smollm2-meta.gguf
m=q05-f16; gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16
f=$OUT/m-$m-glu.txt
for r in 1 2 3; do for c in apart fused; do
  case $c in apart) e="KILN_WGPU_GLU_APART_FROM=";; fused) e="KILN_WGPU_GLU_APART_FROM=18446744073709551615";; esac
  echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
  env $e timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
  echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
done; done
