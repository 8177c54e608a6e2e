#!/usr/bin/env bash
# Batched decode (16 and 32 streams): steps of 16-47 rows in the 8-row product form (default, tiled from 48 rows)
# against the cooperative 64-row tiles (KILN_WGPU_TILED_FROM=16).
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
nvidia_vulkan || exit 1
meta=$B/smollm2-meta.gguf
for m in ${MODELS:-l8b-f16 l8b-q4km}; do
  gen $m --meta $meta ${MODEL_ARGS[$m]}
  f=$OUT/m-$m.txt
  for s in 16 32; do
    for t in 48 16; do
      echo "== KILN_WGPU_TILED_FROM=$t kiln bench $m.gguf --device wgpu --streams $s --prompt-lens 128 --gen-len 64 --iterations 2" >> $f
      KILN_WGPU_TILED_FROM=$t timeout 100 $B/kiln bench $M/$m.gguf --device wgpu --streams $s --prompt-lens 128 --gen-len 64 --iterations 2 >> $f 2>&1
    done
  done
  echo "$m: $(grep -E '^== KILN|^ +128 ' $f | sed -E 's/kiln bench.*--streams ([0-9]+).*/\1 streams:/' | cut -c1-110 | tr -s ' ' | tr '\n' ' ')"
  rm -f $M/$m.gguf
done
