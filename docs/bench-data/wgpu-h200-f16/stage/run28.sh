#!/usr/bin/env bash
# A/B on the H200: normed decode products staging their row in workgroup memory (KILN_WGPU_STAGE_X=1, the
# build's default) against reading x and g from the buffers (=0), alternating, two rounds; the tiny cases.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf .gpu-ab/wgpu-tiny-cases.xz
nvidia_vulkan || exit 1
timeout 120 $B/wgpu-tiny-cases > $OUT/tiny.txt 2>&1; echo "tiny: $(tail -1 $OUT/tiny.txt)"; grep FAIL $OUT/tiny.txt
meta=$B/smollm2-meta.gguf
for m in ${MODELS:-l8b-f16 q05-f16 smol-q4_1}; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    smol-q4_1) gen $m --meta $meta --type Q4_1 --embd-type Q8_0 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  f=$OUT/m-$m.txt
  for r in 1 2; do for st in 1 0; do
    echo "== KILN_WGPU_STAGE_X=$st kiln bench $m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3" >> $f
    KILN_WGPU_STAGE_X=$st timeout 120 $B/kiln bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 128 --iterations 3 >> $f 2>&1
  done; done
  for st in 1 0; do KILN_WGPU_STAGE_X=$st timeout 100 $B/kiln run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/greedy-$st.txt; done
  cmp -s /tmp/greedy-1.txt /tmp/greedy-0.txt && echo "== $m greedy staged/unstaged same" >> $f || { echo "== $m greedy staged/unstaged DIFFERENT" >> $f; cat /tmp/greedy-1.txt /tmp/greedy-0.txt >> $f; }
  echo "$m: $(grep -E '^ +512 |greedy' $f | cut -c1-110 | tr -s ' ' | tr '\n' ';')"
done
