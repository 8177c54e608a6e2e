#!/usr/bin/env bash
# Call 5: m4 (clustered attention only up to 4096 keys at head dim 128) depth sweep, default vs group.
set -u
R=$OUT; X=/tmp/x; mkdir -p $X
. scripts/gpu/lib.sh
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $X/gpu.txt
unpack /tmp/km .gpu-m/random-model.xz .gpu-m/ggml-vocab-qwen2.gguf.xz
mkdir -p /tmp/m
unpack /tmp/k4 .gpu-m/m4/kiln.xz
/tmp/km/random-model --meta /tmp/km/ggml-vocab-qwen2.gguf --out /tmp/m/q3.gguf --arch qwen3moe --layers 48 --hidden 2048 \
    --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K \
    --embd-type Q4_K --more-bits Q6_K --head-type Q6_K > $X/model.log 2>&1
for a in auto group; do
  log "$a"
  timeout 100 /tmp/k4/kiln bench /tmp/m/q3.gguf --device cuda --cuda attention=$a --prompt-lens 512 --gen-len 128 --iterations 2 \
    --ctx-sweep 4096,16384 --sweep-gen 32 --ctx-size 16640 --no-bandwidth > $X/depth-$a.txt 2>&1
  grep -E "^ +\*?[0-9]" $X/depth-$a.txt | head -4
done
tar czf $R/r5.tgz -C $X .
log end
