#!/usr/bin/env bash
# Runs on the GPU machine: sliding-window attention and attention sinks on
# CUDA (Gemma 3's local layers past their window, docs/long-context.md;
# gpt-oss, docs/gpt-oss.md). Checks the CUDA tiny cases
# (gemma3_sliding_window_matches_reference and gpt_oss_matches_reference
# among them) and `cuda-check` (CUDA against the CPU: one prefill, chunked
# prefill, mixed batches, decode after 1100 and 4200 tokens) on random
# Gemma 3 files of head dimension 64, 128 and 256 with a window of 512 and
# a random gpt-oss file (F16), each decode kernel forced in turn;
# then decode speed of a plain llama shape with the
# previous binary and this one alternating (a window-free model must not
# slow down), and Gemma 3 decode by context depth.
#
# PART=pool checks the window layers' own pool on CUDA: the sliding_window
# engine test (window pool against --swa-full, token and log-probability
# equal) and, on a 270M-like Gemma 3, the KV capacity and decode by depth
# with the pool and with --swa-full, alternating.
#
#   [BIN=.gpu-win] [PART=checks|bench|pool|all] scripts/gpu/window-check.sh
#
# Expects in $BIN (files may be gzipped): kiln (a CUDA build of this tree),
# kiln-base (a CUDA build before the change), cuda-check, cuda-tiny-cases (the
# kiln-cuda example), tiny-gguf, random-model, ggml-vocab-llama-bpe.gguf;
# for PART=pool: kiln, tiny-gguf and sliding_window (`cargo test --release
# -p kiln-engine --features cuda --test sliding_window --no-run`).
# Results in $OUT (default gpu-out) as window-check.tgz and checks.txt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run win .gpu-win
log() { echo "== $(date +%T) $*" | tee -a "$OUT/checks.txt"; }
gpu_info
fail=0
PART=${PART:-all}
finish() {
    log done
    mkdir -p "$RESULTS" && tar czf "$RESULTS/window-check-$PART.tgz" -C "$W" . && cp "$W"/checks.txt "$RESULTS"/
    exit $fail
}
g3_long() { # the 270M-like attention (head dim 256, one KV head, 18 layers, every sixth global), window 512
    [ -f "$M/g3-long.gguf" ] || "$B/tiny-gguf" --arch gemma3 --type F16 --layers 18 --hidden 1024 --heads 4 \
        --kv-heads 1 --expert-ff 2048 --ctx 32768 --window 512 --out "$M/g3-long.gguf" 2>/dev/null
}
if [ "$PART" = pool ]; then
    log "sliding_window engine test on CUDA"
    KILN_TEST_DEVICE=cuda timeout 300 "$B/sliding_window" --test-threads 1 >> "$OUT/checks.txt" 2>&1 || fail=1
    g3_long
    for round in 1 2; do
        for mode in pool full; do
            flag=; [ $mode = full ] && flag=--swa-full
            log "g3-long $mode round $round"
            KILN_LOG=info timeout 400 "$B/kiln" bench "$M/g3-long.gguf" --device cuda --prompt-lens 128 --gen-len 64 \
                --iterations 3 --ctx-sweep 512,16384,32000 --ctx-size 32768 --no-bandwidth --json $flag \
                >> "$OUT/pool-$mode.jsonl" 2> "$OUT/pool-$mode-$round.txt"
            grep -a "KV cache" "$OUT/pool-$mode-$round.txt" | head -3 >> "$OUT/checks.txt"
        done
    done
    log "pool: $([ $fail = 0 ] && echo passed || echo FAILED)"
    finish
fi
[ "$PART" = bench ] && echo "(checks skipped)" >> "$OUT/checks.txt"
[ "$PART" = bench ] || {
log "cuda-tiny-cases"
timeout 300 "$B/cuda-tiny-cases" >> "$OUT/checks.txt" 2>&1 || fail=1

# Gemma 3 files: 6 layers (the sixth global), window 512, context 8192.
g3() { # NAME HIDDEN HEADS KV_HEADS
    [ -f "$M/$1.gguf" ] || "$B/tiny-gguf" --arch gemma3 --type F16 --layers 6 --hidden "$2" --heads "$3" \
        --kv-heads "$4" --expert-ff 1024 --ctx 8192 --window 512 --out "$M/$1.gguf" 2>/dev/null
}
g3 g3-hd64 512 8 2
g3 g3-hd128 512 4 2
g3 g3-hd256 512 2 1
for m in g3-hd64 g3-hd128 g3-hd256; do
    for att in auto head group cluster; do
        [ "$m" = g3-hd256 ] && [ "$att" != auto ] && continue # one kernel at head dim 256
        log "cuda-check $m attention=$att"
        KILN_CUDA=attention=$att timeout 300 "$B/cuda-check" "$M/$m.gguf" >> "$OUT/checks.txt" 2>&1 || fail=1
    done
    log "cuda-check $m attention-tiles=off"
    KILN_CUDA=attention-tiles=off timeout 300 "$B/cuda-check" "$M/$m.gguf" >> "$OUT/checks.txt" 2>&1 || fail=1
done
# gpt-oss: attention sinks and a window of 128 on even layers, biased
# experts with the clamped SwiGLU (8 experts, 2 per token), head dim 64.
# F16 weights: with 8-bit expert inputs the two engines route rows near a
# tie to different experts (scripts/gpu/moe-check.sh, docs/gpt-oss.md).
[ -f "$M/oss-f16.gguf" ] || "$B/tiny-gguf" --arch gpt-oss --type F16 --layers 4 --hidden 1024 --heads 16 \
    --kv-heads 4 --experts 8 --used 2 --expert-ff 512 --ctx 8192 --window 128 --out "$M/oss-f16.gguf" 2>/dev/null
for att in auto head group; do
    log "cuda-check oss-f16 attention=$att"
    KILN_CUDA=attention=$att timeout 300 "$B/cuda-check" "$M/oss-f16.gguf" >> "$OUT/checks.txt" 2>&1 || fail=1
done
log "checks: $([ $fail = 0 ] && echo passed || echo FAILED)"
}
[ "$PART" = checks ] && finish

# A model without a window: the previous binary and this one, alternating.
gen l1b --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ff 8192 \
    --type F16 --embd-type F16 --head-type F16
for round in 1 2 3; do
    for k in kiln-base kiln; do
        echo "## $k round $round" >> "$OUT/plain.txt"
        timeout 300 "$B/$k" bench "$M/l1b.gguf" --device cuda --prompt-lens 512 --gen-len 128 --iterations 5 \
            --ctx-sweep 128,4096 --no-bandwidth --json >> "$OUT/plain-$k.jsonl" 2>> "$OUT/plain.txt"
    done
done

# Gemma 3 decode by depth.
g3_long
timeout 500 "$B/kiln" bench "$M/g3-long.gguf" --device cuda --prompt-lens 128 --gen-len 64 --iterations 3 \
    --ctx-sweep 512,4096,16384,32000 --ctx-size 32768 --no-bandwidth --json > "$OUT/gemma-depth.jsonl" \
    2> "$OUT/gemma-depth.txt"
finish
