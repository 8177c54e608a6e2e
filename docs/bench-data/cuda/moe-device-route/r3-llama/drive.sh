#!/usr/bin/env bash
# Call 3: llama.cpp side by side with main and m2 on the Qwen3-30B-A3B shape; m2 variants; route check.
set -u
R=$OUT; X=/tmp/x; mkdir -p $X
. scripts/gpu/lib.sh
log() { echo "== $(date +%T) $*"; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $X/gpu.txt
mkdir -p /tmp/peer/src /tmp/m
tar -xJf .gpu-m/llama-src.tar.xz -C /tmp/peer/src
( cmake -S /tmp/peer/src/llama.cpp -B /tmp/peer/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DCMAKE_BUILD_TYPE=Release > $X/cmake.log 2>&1 && cmake --build /tmp/peer/build -j16 --target llama-bench > $X/build.log 2>&1 \
    && touch /tmp/peer/ok ) &
unpack /tmp/k0 .gpu-m/kiln-main.xz; mv /tmp/k0/kiln-main /tmp/k0/kiln
unpack /tmp/k2 .gpu-m/m2/kiln.xz .gpu-m/m2/cuda-tiny-cases.xz
unpack /tmp/km .gpu-m/random-model.xz .gpu-m/ggml-vocab-qwen2.gguf.xz
( /tmp/km/random-model --meta /tmp/km/ggml-vocab-qwen2.gguf --out /tmp/m/q3.gguf --arch qwen3moe --layers 48 --hidden 2048 \
    --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K \
    --embd-type Q4_K --more-bits Q6_K --head-type Q6_K > $X/model.log 2>&1; touch /tmp/m/ok ) &
log "route check"
timeout 120 /tmp/k2/cuda-tiny-cases moe_device_route_equals_host moe_chunked_and_batched_equal_one_pass > $X/tiny.txt 2>&1; echo "rc $?" >> $X/tiny.txt
grep -E "^test|rc |  tile" $X/tiny.txt
for _ in $(seq 90); do [ -f /tmp/m/ok ] && break; sleep 2; done
B="--prompt-lens 512 --gen-len 128 --iterations 3 --no-bandwidth"
log "variants (llama.cpp building alongside)"
for v in auto moe-tile=16 moe-tile=64 attention=cluster min-split-keys=32 attention=head; do
  C=""; [ $v = auto ] || C="--cuda $v"
  timeout 60 /tmp/k2/kiln bench /tmp/m/q3.gguf --device cuda $C $B > $X/var-$v.txt 2>&1
  echo "$v: $(grep -E '^ +512' $X/var-$v.txt)"
done
log "waiting for llama.cpp"
while [ ! -f /tmp/peer/ok ] && [ $(( $(date +%s) - T0 )) -lt 420 ]; do sleep 5; done
tail -n 1 $X/build.log
if [ -f /tmp/peer/ok ]; then
  for r in 1 2; do
    for v in main m2 llama; do
      log "$v $r"
      case $v in
        main) timeout 60 /tmp/k0/kiln bench /tmp/m/q3.gguf --device cuda $B > $X/final-$v-$r.txt 2>&1; grep -E "^ +512" $X/final-$v-$r.txt;;
        m2) timeout 60 /tmp/k2/kiln bench /tmp/m/q3.gguf --device cuda $B > $X/final-$v-$r.txt 2>&1; grep -E "^ +512" $X/final-$v-$r.txt;;
        llama) timeout 90 /tmp/peer/build/bin/llama-bench -m /tmp/m/q3.gguf -p 512 -n 128 -r 3 -ngl 99 -o md 2>> $X/llama.err | tee -a $X/llama.md | grep -E "pp512|tg128";;
      esac
    done
  done
fi
tar czf $R/r3.tgz -C $X .
log end
