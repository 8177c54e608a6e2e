#!/usr/bin/env bash
# Cooperative-matrix prompt tiles: adapters, the kernels test on NVIDIA's Vulkan, 8B prefill coop vs f16 tiles vs llama.cpp Vulkan.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/llama-bench-vk.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/kernels-test.xz
nvidia_vulkan || exit 1
meta=$B/smollm2-meta.gguf
$B/kiln list-devices 2>&1 | tee $OUT/list-devices.txt
KILN_WGPU_COOP=0 $B/kiln list-devices 2>&1 | tail -2 >> $OUT/list-devices.txt
( cd /tmp && timeout 240 $B/kernels-test every_format --nocapture ) > $OUT/kernels-test.txt 2>&1
echo "kernels test rc $?"; tail -5 $OUT/kernels-test.txt
for m in ${MODELS:-l8b-f16}; do
  gen $m --meta $meta ${MODEL_ARGS[$m]}
  f=$OUT/m-$m.txt
  for r in 1; do
    echo "== kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 16 --iterations 3" >> $f
    timeout 120 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 16 --iterations 3 >> $f 2>&1
    echo "== KILN_WGPU_COOP=0 kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 16 --iterations 3" >> $f
    KILN_WGPU_COOP=0 timeout 120 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 16 --iterations 3 >> $f 2>&1
    echo "== llama-bench-vk -m $m.gguf -ngl 99 -p 512 -n 16 -r 3" >> $f
    timeout 150 $B/llama-bench-vk -m $M/$m.gguf -ngl 99 -p 512 -n 16 -r 3 >> $f 2>&1
  done
  echo "$m: $(grep -E '^ +512 |tg16|pp512' $f | cut -c1-110 | tr -s ' ' | tr '\n' ';')"
done
