#!/usr/bin/env bash
# Runs on the GPU machine: the block forms of the tensor-core quantized
# products (kernels/mmq.cu: 64 or 128 weight rows, 16 to 128 inputs per
# block; kernels/mmq_reg.cu for 9 to 32 rows), checked against the CPU and
# timed against the build before them and against each other (`--cuda
# mmq-tall=off`, `mmq-reg=off`, `mmq-rows=N`).
#
#   BIN=.gpu-mmq STEPS=check,rows,sweep,serve scripts/gpu/mmq-forms.sh
#
# $BIN holds kiln (this build), kiln-main (the build before), cuda-check,
# random-model and ggml-vocab-llama-bpe.gguf (files may be gzipped).
# Results come back as $OUT/mmq-forms.tar.gz.
# - check: `cuda-check --rows` (1 to 512 rows in one step, CPU vs GPU
#   logits) on small Q4_K_M-mix, Q8_0 and 2048-wide models, with every
#   step above 8 rows on the tensor-core products (mmq-rows=2048: the
#   128 × 128 form from 65 rows) and with mmq-tall=off.
# - rows: `kiln bench --step-rows` (one step of N rows at context 512,
#   every row's logits: what N streams' decode step multiplies) on the
#   8B-shaped Q4_K_M mix for each variant, and the F16 file.
# - sweep: TTFT of one-step prompts of 64 to 2048 tokens, same variants.
# - serve: serve-bench.sh at $STREAMS, $ROUNDS rounds (default 2) of
#   $SERVE_SIDES (default: the Q4_K_M file on kiln-main and this build and
#   the F16 file on this build; q4km-regoff: this build with mmq-reg=off).
# - peer: llama-server (llama.cpp built here in the background from
#   $BIN/llama-src.tar.xz, made by scripts/gpu/slim-llama-src.sh) on the
#   Q4_K_M file at $STREAMS, after the serve step, as serve-bench.sh drives
#   it. The build takes minutes: start it in an earlier call
#   (STEPS=peer-start) of the same warm machine.
# - peer-bench: llama-bench's prefill (-p $LENS, default 512,2048) and
#   decode on the Q4_K_M and F16 files beside `kiln bench` on the same
#   files (same build as peer).
# VARIANTS (rows, sweep): main (kiln-main), new, tall-off, regoff
# (mmq-reg=off), split0 (mmq-split-cost=0: K splits chosen without a
# block's fixed cost), rowsN (mmq-rows=N), and this build on the F16 file;
# serve sides q4km-regoff and q4km-split0 likewise.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run mmq .gpu-mmq
STEPS=${STEPS:-check,rows,sweep}
STREAMS=${STREAMS:-16 64}
VARIANTS=${VARIANTS:-main new tall-off rows2048}
gpu_info
# A failed build (or one from another source) starts again from scratch.
[ -f /tmp/peer/failed ] && rm -rf /tmp/peer
if { want peer || want peer-start || want peer-bench; } && [ ! -f /tmp/peer/started ]; then
    mkdir -p /tmp/peer/src && touch /tmp/peer/started
    [ -d /tmp/peer/src/llama.cpp ] || tar -xJf "$BIN"/llama-src.tar.xz -C /tmp/peer/src
    # The build outlives this command (a session of its own), once per machine.
    setsid nohup bash -c "cmake -S /tmp/peer/src/llama.cpp -B /tmp/peer/build -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release \
        > /tmp/peer/cmake.log 2>&1 && cmake --build /tmp/peer/build -j16 --target llama-server llama-bench \
        > /tmp/peer/build.log 2>&1 && touch /tmp/peer/ok || touch /tmp/peer/failed" > /dev/null 2>&1 &
fi
if want rows || want sweep || want serve || want peer || want peer-bench; then
    gen_named l8b-q4km l8b-f16 > "$OUT/gen.txt" 2>&1 &
    GEN=$!
fi
# model_of NAME: the 8B file variant NAME runs on.
model_of() { if [ "$1" = f16 ]; then echo "$M/l8b-f16.gguf"; else echo "$M/l8b-q4km.gguf"; fi; }
# setting_of NAME: the --cuda setting of this build that variant (or serve
# side suffix) NAME runs with, empty for none.
setting_of() {
    case $1 in
        tall-off) echo mmq-tall=off ;;
        regoff) echo mmq-reg=off ;;
        split0) echo mmq-split-cost=0 ;;
        rows*) echo "mmq-rows=${1#rows}" ;;
    esac
}
# run_variant NAME ARGS...: `kiln ARGS` as variant NAME runs it (its
# binary, its --cuda setting after ARGS); f16 is this build on the F16 file.
run_variant() {
    local v=$1 set
    shift
    set=$(setting_of "$v")
    if [ "$v" = main ]; then
        timeout 240 "$B/kiln-main" "$@"
    elif [ -n "$set" ]; then
        timeout 240 "$B/kiln" "$@" --cuda "$set"
    else
        timeout 240 "$B/kiln" "$@"
    fi
}
if want check; then
    V=$B/ggml-vocab-llama-bpe.gguf
    small="--layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024"
    gen hd64-q4km --meta "$V" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q4_K --embd-type Q6_K --more-bits Q6_K
    gen hd128-q8 --meta "$V" $small --type Q8_0 --embd-type Q8_0
    gen wide-q4km --meta "$V" --layers 2 --hidden 2048 --heads 16 --kv-heads 4 --ff 4096 --type Q4_K --embd-type Q6_K --more-bits Q6_K
    for set in ${CHECK_SETS:-mmq-rows=2048 mmq-rows=2048,mmq-tall=off}; do
        log "cuda-check --rows, $set"
        for m in hd64-q4km wide-q4km hd128-q8; do
            KILN_CUDA=$set timeout 180 "$B/cuda-check" --rows "$M/$m.gguf" 2>&1 | tee -a "$OUT/check-$set.txt"
        done
    done
    log "cuda-check (defaults)"
    for m in hd64-q4km wide-q4km; do timeout 120 "$B/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    cat "$OUT"/check*.txt | grep -c ^PASS; cat "$OUT"/check*.txt | grep ^FAIL
fi
[ -n "${GEN:-}" ] && { log "waiting for the 8B models"; wait "$GEN"; cat "$OUT/gen.txt"; }
if want rows; then
    for v in $VARIANTS f16; do
        log "step rows: $v"
        run_variant "$v" bench "$(model_of "$v")" --device cuda --step-rows "${ROWS:-16,32,64,128,256,512}" \
            --step-context 512 > "$OUT/rows-$v.txt" 2>&1
        grep -E '^\| [0-9]+ ' "$OUT/rows-$v.txt" | head -n 12
    done
fi
if want sweep; then
    for v in $VARIANTS f16; do
        log "TTFT sweep: $v"
        run_variant "$v" bench "$(model_of "$v")" --device cuda --prompt-lens "${LENS:-64,128,256,512,1024,2048}" \
            --gen-len 16 --iterations 3 > "$OUT/sweep-$v.txt" 2>&1
        grep -E '^ +\*?[0-9]+ ' "$OUT/sweep-$v.txt" | head -n 12
    done
fi
if want serve; then
    # A serve side FILE-VARIANT: kiln-main, or this build as a wrapper that
    # sets the variant's --cuda setting (serve-bench.sh runs $BIN/kiln).
    side_bin() {
        local v=$1 set
        set=$(setting_of "$v")
        if [ "$v" = main ]; then
            mkdir -p /tmp/kmmq-main && ln -sf "$B/kiln-main" /tmp/kmmq-main/kiln && echo /tmp/kmmq-main
        elif [ -n "$set" ]; then
            mkdir -p "/tmp/kmmq-$v"
            printf '#!/bin/sh\nKILN_CUDA=%s exec %s/kiln "$@"\n' "$set" "$B" > "/tmp/kmmq-$v/kiln"
            chmod +x "/tmp/kmmq-$v/kiln" && echo "/tmp/kmmq-$v"
        else
            echo "$B"
        fi
    }
    for round in $(seq "${ROUNDS:-2}"); do
        for side in ${SERVE_SIDES:-q4km-main q4km-new f16-new}; do
            m=l8b-${side%-*} bin=$(side_bin "${side#*-}")
            log "serve $side, round $round"
            SIDES=kiln BIN=$bin OUT=$OUT scripts/gpu/serve-bench.sh "$M/$m.gguf" "$side-r$round" "$STREAMS" | grep -i 'tok/s'
        done
    done
fi
if want peer; then
    log "waiting for the llama.cpp build"
    for _ in $(seq 120); do [ -f /tmp/peer/ok ] || [ -f /tmp/peer/failed ] && break; sleep 5; done
    if [ -f /tmp/peer/ok ]; then
        SIDES=llama BIN=$B LLAMA=/tmp/peer/build/bin OUT=$OUT scripts/gpu/serve-bench.sh "$M/l8b-q4km.gguf" \
            q4km-llama "$STREAMS" | grep -i 'tok/s'
    else
        tail -n 20 /tmp/peer/cmake.log /tmp/peer/build.log
    fi
fi
if want peer-bench; then
    log "waiting for the llama.cpp build"
    for _ in $(seq 120); do [ -f /tmp/peer/ok ] || [ -f /tmp/peer/failed ] && break; sleep 5; done
    for m in l8b-q4km l8b-f16; do
        log "prefill $m: kiln, then llama-bench"
        timeout 200 "$B/kiln" bench "$M/$m.gguf" --device cuda --prompt-lens "${LENS:-512,2048}" --gen-len 64 \
            --iterations 3 > "$OUT/pb-kiln-$m.txt" 2>&1
        grep -E '^ +\*?[0-9]+ ' "$OUT/pb-kiln-$m.txt"
        [ -f /tmp/peer/ok ] && timeout 200 /tmp/peer/build/bin/llama-bench -m "$M/$m.gguf" -ngl 99 -fa 1 \
            -p "${LENS:-512,2048}" -n 64 -r 3 -o md 2>&1 | tee "$OUT/pb-llama-$m.txt" | grep -E '^\|'
    done
fi
tar -C "$W" -czf "$RESULTS/mmq-forms.tar.gz" .
log done
