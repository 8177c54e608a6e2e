#!/usr/bin/env bash
# Call 2: MoE device routing (m2) vs main: tiny cases, bench A/B, 16 streams, llama-bench, ncu.
set -u
R=$OUT; X=/tmp/x; mkdir -p $X
. scripts/gpu/lib.sh
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $X/gpu.txt
unpack /tmp/k0 .gpu-m/kiln-main.xz; mv /tmp/k0/kiln-main /tmp/k0/kiln
unpack /tmp/k2 .gpu-m/m2/kiln.xz .gpu-m/m2/cuda-tiny-cases.xz
unpack /tmp/km .gpu-m/random-model.xz .gpu-m/ggml-vocab-qwen2.gguf.xz
mkdir -p /tmp/peer/src /tmp/m
tar -xJf .gpu-m/llama-src.tar.xz -C /tmp/peer/src
( cmake -S /tmp/peer/src/llama.cpp -B /tmp/peer/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DCMAKE_BUILD_TYPE=Release > $X/cmake.log 2>&1 && nice cmake --build /tmp/peer/build -j14 --target llama-bench > $X/build.log 2>&1 \
    && touch /tmp/peer/ok ) &
( /tmp/km/random-model --meta /tmp/km/ggml-vocab-qwen2.gguf --out /tmp/m/q3.gguf --arch qwen3moe --layers 48 --hidden 2048 \
    --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K \
    --embd-type Q4_K --more-bits Q6_K --head-type Q6_K > $X/model.log 2>&1; touch /tmp/m/ok ) &
log "tiny cases (m2)"
timeout 200 /tmp/k2/cuda-tiny-cases > $X/tiny.txt 2>&1; echo "rc $?" >> $X/tiny.txt
grep -E "^test|rc |  tile|FAIL|panick" $X/tiny.txt | head -40
for _ in $(seq 60); do [ -f /tmp/m/ok ] && break; sleep 2; done
cat $X/model.log | tail -n 1
B="--prompt-lens 512 --gen-len 128 --iterations 3 --no-bandwidth"
for r in 1 2; do
  for v in main m2 m2host; do
    case $v in main) K=/tmp/k0/kiln; C="";; m2) K=/tmp/k2/kiln; C="";; m2host) K=/tmp/k2/kiln; C="--cuda moe-route=host";; esac
    log "bench $v $r"
    timeout 120 $K bench /tmp/m/q3.gguf --device cuda $C $B > $X/bench-$v-$r.txt 2>&1
    grep -E "^ +512" $X/bench-$v-$r.txt
  done
done
for v in main m2; do
  case $v in main) K=/tmp/k0/kiln;; m2) K=/tmp/k2/kiln;; esac
  log "streams 16 $v"
  timeout 150 $K bench /tmp/m/q3.gguf --device cuda --streams 16 --prompt-lens 128 --gen-len 128 --iterations 2 --no-bandwidth > $X/streams-$v.txt 2>&1
  grep -E "^ +128|tok/s" $X/streams-$v.txt | head -4
done
log "waiting for llama.cpp"
for _ in $(seq 40); do [ -f /tmp/peer/ok ] && break; sleep 5; done
if [ -f /tmp/peer/ok ]; then
  for r in 1 2; do
    log "llama-bench $r"
    timeout 120 /tmp/peer/build/bin/llama-bench -m /tmp/m/q3.gguf -p 512 -n 128 -r 3 -ngl 99 -o md 2>> $X/llama.err | tee -a $X/llama.md
    log "m2 $r"
    timeout 120 /tmp/k2/kiln bench /tmp/m/q3.gguf --device cuda $B > $X/bench-m2-l$r.txt 2>&1
    grep -E "^ +512" $X/bench-m2-l$r.txt
  done
else tail -n 5 $X/build.log; fi
tar czf $R/r2.tgz -C $X .
log "ncu m2"
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 2500 /tmp/k2/kiln bench /tmp/m/q3.gguf \
    --device cuda --cuda graphs=off --prompt-lens 512 --gen-len 4 --iterations 1 --warmup 0 --no-bandwidth > $X/ncu.csv 2> $X/ncu.err
python3 scripts/gpu/ncu-summary.py $X/ncu.csv | head -30
tar czf $R/r2.tgz -C $X .
log end
