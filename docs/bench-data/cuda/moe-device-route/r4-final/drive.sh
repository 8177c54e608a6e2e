#!/usr/bin/env bash
# Call 4: m3 (faster moe_route, cluster attention for 4 KV heads of 128, 2x-mean tiles) vs m2 and main.
set -u
R=$OUT; X=/tmp/x; mkdir -p $X
. scripts/gpu/lib.sh
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $X/gpu.txt
unpack /tmp/km .gpu-m/random-model.xz .gpu-m/ggml-vocab-qwen2.gguf.xz
mkdir -p /tmp/m
( /tmp/km/random-model --meta /tmp/km/ggml-vocab-qwen2.gguf --out /tmp/m/q3.gguf --arch qwen3moe --layers 48 --hidden 2048 \
    --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K \
    --embd-type Q4_K --more-bits Q6_K --head-type Q6_K > $X/model.log 2>&1; touch /tmp/m/ok ) &
unpack /tmp/k0 .gpu-m/kiln-main.xz; mv /tmp/k0/kiln-main /tmp/k0/kiln

unpack /tmp/k3 .gpu-m/m3/kiln.xz .gpu-m/m3/cuda-tiny-cases.xz
log "tiny (m3)"
timeout 170 /tmp/k3/cuda-tiny-cases > $X/tiny.txt 2>&1; echo "rc $?" >> $X/tiny.txt
grep -E "^test|rc |  tile|FAIL" $X/tiny.txt | grep -v " ok$" ; grep -c " ok$" $X/tiny.txt
for _ in $(seq 90); do [ -f /tmp/m/ok ] && break; sleep 2; done
B="--prompt-lens 512 --gen-len 128 --iterations 3 --no-bandwidth"
for r in 1 2; do
  for v in main m3; do
    case $v in main) K=/tmp/k0/kiln;; m3) K=/tmp/k3/kiln;; esac
    timeout 60 $K bench /tmp/m/q3.gguf --device cuda $B > $X/bench-$v-$r.txt 2>&1
    echo "$v $r: $(grep -E '^ +512' $X/bench-$v-$r.txt)"
  done
done
tar czf $R/r4.tgz -C $X .
log "depth: m3 default (cluster) vs group"
for a in auto group; do
  timeout 120 /tmp/k3/kiln bench /tmp/m/q3.gguf --device cuda --cuda attention=$a --prompt-lens 16 --gen-len 32 --iterations 1 \
    --ctx-sweep 512,4096,16384 --sweep-gen 32 --ctx-size 16640 --no-bandwidth > $X/depth-$a.txt 2>&1
  echo "$a:"; grep -E "^ +[0-9]" $X/depth-$a.txt | head -6
done
log "16 streams"
for v in main m3; do
  case $v in main) K=/tmp/k0/kiln;; m3) K=/tmp/k3/kiln;; esac
  timeout 100 $K bench /tmp/m/q3.gguf --device cuda --streams 16 --prompt-lens 128 --gen-len 128 --iterations 2 --no-bandwidth > $X/streams-$v.txt 2>&1
  echo "$v: $(grep -E '^ +128' $X/streams-$v.txt)"
done
tar czf $R/r4.tgz -C $X .
log end
