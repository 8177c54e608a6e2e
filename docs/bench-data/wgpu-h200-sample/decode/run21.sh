#!/usr/bin/env bash
# Decode profiles (KILN_WGPU_PROFILE=1, 16-token prompt, 64 tokens) of the small shapes, device sampling on.
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
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/prof-$m.txt
  echo "== KILN_WGPU_PROFILE=1 kiln bench $m.gguf --device wgpu --prompt-lens 16 --gen-len 64 --iterations 1" > $f
  KILN_WGPU_PROFILE=1 timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 16 --gen-len 64 --iterations 1 >> $f 2>&1
  head -22 $f | cut -c1-200
done
