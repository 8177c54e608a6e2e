#!/usr/bin/env bash
# Runs on the GPU machine: LoRA adapters on CUDA (docs/lora.md, BENCHMARKS.md
# "LoRA adapters").
#
# - checks: the LoRA cases of cuda-tiny-cases (random adapters on tiny
#   models against the float64 reference of W + scale·B·A, GGUF equal to
#   PEFT, a mixed batch equal to each sequence alone, a zero B equal to the
#   base), then CUDA against the CPU: `kiln run` greedy, 48 tokens, raw
#   prompt, on a SmolLM2-shaped random Q8_0 model with a random rank-16
#   adapter, on both devices, with the adapter and without (the CPU keeps
#   8-bit factors, CUDA f16: the tokens are printed side by side; the cases
#   above are the pass/fail check).
# - bench: an 8B-shaped random model ($MODEL, default l8b-q4km: llama.cpp's
#   Q4_K_M mix), $ADAPTERS (default 100) random rank-16 adapters on all
#   seven projections of every layer (GGUF, F16 factors), and `kiln bench
#   --device cuda --lora`, which runs the base and the adapters side by
#   side in one process: batch 1 with one adapter (prompts of 128 and 512,
#   128 generated) and 16 streams over 8 adapters (prompts of 128, 64
#   generated), 3 rounds each; the adapters' load time (read, check,
#   upload) is printed by the same runs.
# - serve: `kiln serve --device cuda` with all $ADAPTERS registered at
#   start (start-up time, /v1/models count, GPU memory with and without
#   them), one more loaded and unloaded at run time through
#   /v1/load_lora_adapter (the call's time), and decode through the server
#   with `kiln bench serve`: the base, adapter a0 and adapter a57
#   alternating, 1 and 16 concurrent streams, 3 rounds.
#
#   [BIN=.gpu-lora] [PART=checks|bench|serve|all] [MODEL=l8b-q4km] [ADAPTERS=100] [ROUNDS=3] scripts/gpu/lora-bench.sh
#
# DEVICE=cpu runs the bench and serve parts on the CPU (a dry run of the
# script on a build machine, with a small MODEL and ADAPTERS).
#
# Expects in $BIN (files may be gzipped): kiln (a stripped CUDA build),
# cuda-tiny-cases (the kiln-cuda example), random-model and random-lora
# (kiln-models examples), ggml-vocab-llama-bpe.gguf. Results in $OUT
# (default gpu-out) as lora-bench-$PART.tgz and checks.txt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run lora .gpu-lora
log() { echo "== $(date +%T) $*" | tee -a "$OUT/checks.txt"; }
gpu_info
fail=0
PART=${PART:-all}
MODEL=${MODEL:-l8b-q4km}
ADAPTERS=${ADAPTERS:-100}
DEVICE=${DEVICE:-cuda}
finish() {
    log done
    mkdir -p "$RESULTS" && tar czf "$RESULTS/lora-bench-$PART.tgz" -C "$W" . && cp "$W"/checks.txt "$RESULTS"/
    exit $fail
}
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | head -n1; }

if [ "$PART" = checks ] || [ "$PART" = all ]; then
    log "cuda-tiny-cases (LoRA cases)"
    timeout 300 "$B/cuda-tiny-cases" lora_matches_reference lora_gguf_equals_peft \
        lora_mixed_batch_equals_each_alone lora_zero_b_equals_base >> "$OUT/checks.txt" 2>&1 || fail=1
    gen smol --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 30 --hidden 576 --heads 9 --kv-heads 3 --ff 1536 \
        --type Q8_0 --embd-type Q8_0 --head-type Q8_0
    [ -f "$M/smol-r16.gguf" ] || "$B/random-lora" "$M/smol.gguf" "$M/smol-r16.gguf" 16 1 | tail -n1
    for lora in none r16; do
        flag=; [ $lora = r16 ] && flag="--lora $M/smol-r16.gguf"
        for dev in cpu cuda; do
            # shellcheck disable=SC2086 # $flag is two words or none
            timeout 120 "$B/kiln" run "$M/smol.gguf" "The quick brown fox" --raw -n 48 --temperature 0 --device $dev \
                $flag -q > "$OUT/run-$lora-$dev.txt" 2> "$OUT/run-$lora-$dev.err" || fail=1
        done
        if cmp -s "$OUT/run-$lora-cpu.txt" "$OUT/run-$lora-cuda.txt"; then
            log "kiln run, adapter $lora: CPU and CUDA text equal"
        else
            log "kiln run, adapter $lora: CPU and CUDA text differ (see run-$lora-*.txt)"
        fi
    done
    log "checks: $([ $fail = 0 ] && echo passed || echo FAILED)"
    [ "$PART" = checks ] && finish
fi

gen_named "$MODEL"
mkdir -p "$M/lora-$MODEL"
log "writing $ADAPTERS random rank-16 adapters"
for i in $(seq 0 $((ADAPTERS - 1))); do
    [ -f "$M/lora-$MODEL/a$i.gguf" ] || "$B/random-lora" "$M/$MODEL.gguf" "$M/lora-$MODEL/a$i.gguf" 16 "$i" > /dev/null \
        || { log "random-lora failed"; fail=1; finish; }
done
du -sh "$M/lora-$MODEL" | tee -a "$OUT/checks.txt"

if [ "$PART" = bench ] || [ "$PART" = all ]; then
    eight=()
    for i in 0 1 2 3 4 5 6 7; do eight+=(--lora "$M/lora-$MODEL/a$i.gguf"); done
    for round in $(seq "${ROUNDS:-3}"); do
        log "bench batch 1, round $round"
        timeout 500 "$B/kiln" bench "$M/$MODEL.gguf" --device "$DEVICE" --lora "$M/lora-$MODEL/a0.gguf" \
            --prompt-lens 128,512 --gen-len 128 --iterations 5 --no-bandwidth --json \
            >> "$OUT/bench-b1.jsonl" 2>> "$OUT/bench-b1.txt" || fail=1
        log "bench 16 streams over 8 adapters, round $round"
        timeout 500 "$B/kiln" bench "$M/$MODEL.gguf" --device "$DEVICE" "${eight[@]}" --streams 16 \
            --prompt-lens 128 --gen-len 64 --iterations 3 --no-bandwidth --json \
            >> "$OUT/bench-s16.jsonl" 2>> "$OUT/bench-s16.txt" || fail=1
    done
    grep -a -A3 "^LoRA:" "$OUT/bench-b1.txt" "$OUT/bench-s16.txt" >> "$OUT/checks.txt"
fi

if [ "$PART" = serve ] || [ "$PART" = all ]; then
    name=$MODEL url=http://127.0.0.1:8092
    serve() { # LOG ARGS...: starts kiln serve; sets pid
        local logf=$1
        shift
        "$B/kiln" serve -m "$M/$MODEL.gguf" --device "$DEVICE" --port 8092 --max-running 64 "$@" > "$logf" 2>&1 &
        pid=$!
        wait_up "$url" $pid
    }
    stop() { kill "$pid"; wait "$pid" 2>/dev/null; }
    load() { # NAME CONCURRENCY FILE
        "$B/kiln" bench serve --url "$url" --concurrency "$2" --requests $(($2 < 8 ? 8 : 2 * $2)) --prompt-len 128 \
            --gen-len 128 --model "$1" --warmup 2 --json >> "$3" 2>> "${3%.jsonl}.txt"
    }
    serve "$OUT/serve-plain.log" && echo "GPU memory, no adapters: $(gpu_mem)" | tee -a "$OUT/checks.txt"
    stop
    regs=()
    for i in $(seq 0 $((ADAPTERS - 1))); do regs+=(--lora "a$i=$M/lora-$MODEL/a$i.gguf"); done
    t0=$(date +%s.%N)
    if serve "$OUT/serve.log" "${regs[@]}" --allow-lora-loading; then
        t1=$(date +%s.%N)
        {
            echo "serve with $ADAPTERS adapters up in $(awk "BEGIN { print $t1 - $t0 }") s"
            echo "GPU memory, $ADAPTERS adapters: $(gpu_mem)"
            echo "/v1/models lists $(curl -s "$url/v1/models" | grep -o '"parent"' | wc -l) adapters"
        } | tee -a "$OUT/checks.txt"
        body() { printf '{"lora_name": "extra", "lora_path": "%s"}' "$M/lora-$MODEL/a1.gguf"; }
        for k in 1 2 3; do
            tl=$(curl -s -o "$OUT/load-$k.json" -w '%{http_code} %{time_total}' -H 'content-type: application/json' \
                -d "$(body)" "$url/v1/load_lora_adapter")
            tu=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H 'content-type: application/json' \
                -d '{"lora_name": "extra"}' "$url/v1/unload_lora_adapter")
            echo "runtime load (status, s): $tl; unload: $tu" | tee -a "$OUT/checks.txt"
        done
        for round in 1 2 3; do
            for n in 1 16; do
                for m in "$name" a0 a57; do
                    log "serve $m, $n streams, round $round"
                    load "$m" "$n" "$OUT/serve-$m-$n.jsonl"
                done
            done
        done
        for n in 1 16; do
            for m in "$name" a0 a57; do
                echo "## $m, $n streams" >> "$OUT/checks.txt"
                tail -n 3 "$OUT/serve-$m-$n.txt" >> "$OUT/checks.txt"
            done
        done
    else
        log "kiln serve with $ADAPTERS adapters did not come up (serve.log)"
        fail=1
    fi
    stop
fi
finish
