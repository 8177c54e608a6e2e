#!/usr/bin/env bash
# Call 1: MoE (Qwen3-30B-A3B shape, Q4_K_M mix) baseline + ncu profile + llama.cpp build/bench.
set -u
R=$OUT; X=/tmp/x; mkdir -p $X
. scripts/gpu/lib.sh
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $X/gpu.txt
unpack /tmp/km .gpu-m/kiln.xz .gpu-m/random-model.xz .gpu-m/ggml-vocab-qwen2.gguf.xz
mkdir -p /tmp/peer/src /tmp/m
tar -xJf .gpu-m/llama-src.tar.xz -C /tmp/peer/src
( cmake -S /tmp/peer/src/llama.cpp -B /tmp/peer/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DCMAKE_BUILD_TYPE=Release > $X/cmake.log 2>&1 && nice cmake --build /tmp/peer/build -j15 --target llama-bench > $X/build.log 2>&1 \
    && touch /tmp/peer/ok ) &
log model
/tmp/km/random-model --meta /tmp/km/ggml-vocab-qwen2.gguf --out /tmp/m/q3.gguf --arch qwen3moe --layers 48 --hidden 2048 \
    --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K \
    --embd-type Q4_K --more-bits Q6_K --head-type Q6_K 2>&1 | tail -n 2
ls -la /tmp/m
log "kiln bench"
timeout 200 /tmp/km/kiln bench /tmp/m/q3.gguf --device cuda --prompt-lens 512 --gen-len 128 --iterations 3 --no-bandwidth > $X/kiln-1.txt 2>&1
grep -E "^ +512|tok/s" $X/kiln-1.txt | head
log "kiln bench graphs=off"
timeout 200 /tmp/km/kiln bench /tmp/m/q3.gguf --device cuda --cuda graphs=off --prompt-lens 512 --gen-len 64 --iterations 2 --no-bandwidth > $X/kiln-nograph.txt 2>&1
grep -E "^ +512|tok/s" $X/kiln-nograph.txt | head
log "ncu"
timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 3000 /tmp/km/kiln bench /tmp/m/q3.gguf \
    --device cuda --cuda graphs=off --prompt-lens 512 --gen-len 4 --iterations 1 --warmup 0 --no-bandwidth > $X/ncu.csv 2> $X/ncu.err
tail -n 3 $X/ncu.err; wc -l $X/ncu.csv
python3 scripts/gpu/ncu-summary.py $X/ncu.csv | head -40
log "waiting for llama.cpp"
for _ in $(seq 60); do [ -f /tmp/peer/ok ] && break; sleep 5; done
tail -n 3 $X/build.log
if [ -f /tmp/peer/ok ]; then
  for r in 1 2; do
    log "llama-bench $r"
    timeout 150 /tmp/peer/build/bin/llama-bench -m /tmp/m/q3.gguf -p 512 -n 128 -r 3 -ngl 99 -o md 2>> $X/llama.err | tee -a $X/llama.md
    log "kiln $r"
    timeout 150 /tmp/km/kiln bench /tmp/m/q3.gguf --device cuda --prompt-lens 512 --gen-len 128 --iterations 3 --no-bandwidth > $X/kiln-r$r.txt 2>&1
    grep -E "^ +512" $X/kiln-r$r.txt
  done
  strip /tmp/peer/build/bin/llama-bench; ls -la /tmp/peer/build/bin/
  xz -T16 -6 -c /tmp/peer/build/bin/llama-bench > $R/llama-bench.xz; ls -la $R
fi
tar czf $R/r1.tgz -C $X .
log end
