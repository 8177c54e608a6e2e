#!/usr/bin/env bash
# Subgroup row sums in the decode products: the kernel tests and tiny cases with them (and the kernel tests without),
# then an A/B of decode, sub (default) vs nosub (KILN_WGPU_SUBGROUPS=0), and greedy text cuda = wgpu.
# usage: bash .gpu-ab/run23.sh MODEL...
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz .gpu-ab/wgpu-kernels-test.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
$B/kiln list-devices > $OUT/devices.txt 2>&1; cat $OUT/devices.txt | cut -c1-300
timeout 120 $B/wgpu-tiny-cases > /tmp/t.txt 2>&1; echo "tiny: $(tail -1 /tmp/t.txt)"; grep FAIL /tmp/t.txt; cat /tmp/t.txt >> $OUT/tiny.txt
for e in "KILN_WGPU_SUBGROUPS=" "KILN_WGPU_SUBGROUPS=0"; do
  env $e timeout 200 $B/wgpu-kernels-test > /tmp/k.txt 2>&1; echo "kernels [$e]: $(grep 'test result' /tmp/k.txt)"; grep -A3 panicked /tmp/k.txt | head -5
  echo "== [$e] kernels test" >> $OUT/kernels.txt; cat /tmp/k.txt >> $OUT/kernels.txt
done
meta=$B/smollm2-meta.gguf
for m in "$@"; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do for c in nosub sub; do
    case $c in nosub) e="KILN_WGPU_SUBGROUPS=0";; sub) e="KILN_WGPU_SUBGROUPS=";; esac
    echo "== $c round $r: $e kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2" >> $f
    env $e timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 2 > /tmp/o.txt 2>&1; cat /tmp/o.txt >> $f
    echo "$m $c r$r: $(grep -E '^ +[0-9]+ ' /tmp/o.txt | tail -1 | cut -c1-100)"
  done; done
  for dev in cuda wgpu; do timeout 100 $B/kiln run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device $dev 2>/dev/null > /tmp/greedy-$dev.txt; done
  cmp -s /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt && echo "== $m greedy cuda/wgpu same" | tee -a $f || { echo "== $m greedy cuda/wgpu DIFFERENT" | tee -a $f; cat /tmp/greedy-cuda.txt /tmp/greedy-wgpu.txt >> $f; }
done
