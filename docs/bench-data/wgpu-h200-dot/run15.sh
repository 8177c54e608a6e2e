#!/usr/bin/env bash
# A/B: product.wgsl's decode form and product_piece.wgsl at 64 threads a row pair (8 rows a workgroup; the default of this
# build) vs 32 (16 rows, KILN_WGPU_UNIT_TPR=32, the code before). One file per model.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
timeout 120 $B/wgpu-tiny-cases > $OUT/tiny.txt 2>&1; echo "tiny: $(tail -1 $OUT/tiny.txt)"; grep FAIL $OUT/tiny.txt
meta=$B/smollm2-meta.gguf
for m in smol-q4_1 q05-f16 q15-q4km l8b-f16; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do for c in t32 def; do
    case $c in t32) e="KILN_WGPU_UNIT_TPR=32";; def) e="KILN_WGPU_UNIT_TPR=";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
    env $e timeout 150 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
  done; done
  for dev in cuda wgpu; do timeout 100 $B/kiln run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device $dev 2>/dev/null > /tmp/greedy-$dev.txt; done
  cmp -s /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt && echo "== $m greedy cuda/wgpu same" | tee -a $f || { echo "== $m greedy cuda/wgpu DIFFERENT" | tee -a $f; cat /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt >> $f; }
done
