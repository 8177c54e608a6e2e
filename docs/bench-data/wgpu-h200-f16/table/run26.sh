#!/usr/bin/env bash
# The table: kiln-wgpu (f16 prompt tiles, bind groups found without allocating) against llama.cpp's Vulkan
# backend on the same random-weight files; decode A/B against the build before the bind-group cache (kiln-new,
# KILN_WGPU_F16_FOLD=1 = this build's tiles); greedy text of a 60-token prompt with f16 and f32 tiles; the tiny
# cases and the operation tests (f16 tiles against the CPU) on this driver.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/kiln-new.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz .gpu-ab/kernels.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
$B/kiln list-devices > $OUT/devices.txt 2>&1
timeout 120 $B/wgpu-tiny-cases > $OUT/tiny.txt 2>&1; echo "tiny: $(tail -1 $OUT/tiny.txt)"; grep FAIL $OUT/tiny.txt
timeout 200 $B/kernels --test-threads 1 --nocapture > $OUT/kernels.txt 2>&1; echo "kernels: $(grep -E 'test result|f16 prompt' $OUT/kernels.txt | tr '\n' ' ')"
meta=$B/smollm2-meta.gguf
PROMPT=$(printf 'The river runs past the old mill and the bridge, and the town sleeps beside it. %.0s' 1 2 3 4)
for m in ${MODELS:-smol-q4_1 q05-f16 q15-q4km l8b-f16 l8b-q4km}; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for v in kiln kiln-new; do
    echo "== $v: kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
    KILN_WGPU_F16_FOLD=1 timeout 120 $B/$v bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
  done
  echo "== llama.cpp vulkan: llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 128 -r 3" >> $f
  timeout 150 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 128 -r 3 >> $f 2>&1
  echo "== kiln: kiln bench (again, after llama.cpp)" >> $f
  timeout 120 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
  for t in 1 0; do KILN_WGPU_F16=$t timeout 100 $B/kiln run $M/$m.gguf "$PROMPT" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/greedy-$t.txt; done
  cmp -s /tmp/greedy-1.txt /tmp/greedy-0.txt && echo "== $m greedy f16/f32 tiles same" >> $f || { echo "== $m greedy f16/f32 tiles DIFFERENT" >> $f; cat /tmp/greedy-1.txt /tmp/greedy-0.txt >> $f; }
  echo "$m: $(grep -E '^ +512 |tg128|pp512|greedy' $f | cut -c1-110 | tr -s ' ' | tr '\n' ';')"
done
