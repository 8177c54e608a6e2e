#!/usr/bin/env bash
# Runs on the GPU machine: the tensor-core decode products of 16-bit
# weights for 2 to 8 rows (kernels/gemv_tc.cu) against gemv.cu's CUDA-core
# ones, in one binary (`--cuda tc-rows=0` turns them off): correctness
# against the CPU, step costs by row count, speculative output, and small
# batches served (docs/cuda.md, BENCHMARKS.md).
#
#   [STEP_MODELS="l8b-f16 s059-f16"] [SERVE_STREAMS="2 4 8"] scripts/gpu/tc-bench.sh
#   CHECK_TC="2 auto 0" STEP_TC="0 auto" SERVE_MODELS= ... (fewer settings;
#   an empty SERVE_MODELS skips serving)
#
# Expects in $BIN (default .gpu-tc2; files may be gzipped): kiln (a CUDA
# build), random-model, ggml-vocab-llama-bpe.gguf, and optionally
# cuda-tiny-cases and cuda-check. Results in $OUT.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run tc .gpu-tc2
gpu_info
STEP_MODELS=${STEP_MODELS:-l8b-f16 s059-f16}
gen_named $STEP_MODELS s059-f16 d-other

if [ -x "$B/cuda-check" ]; then
    # Every row count against the CPU, with the tensor-core forms from 2
    # rows, from the default, and off.
    for tc in ${CHECK_TC:-2 2,tc-shape=1x8 auto 0 0,graphs=off 2,graphs=off}; do
        log "cuda-check --rows, tc-rows=$tc" | tee -a "$OUT/checks.txt"
        KILN_CUDA=tc-rows=$tc timeout 300 "$B/cuda-check" --rows "$M/s059-f16.gguf" >> "$OUT/checks.txt" 2>&1
    done
fi
if [ -x "$B/cuda-tiny-cases" ]; then
    log "cuda-tiny-cases" | tee -a "$OUT/checks.txt"
    timeout 300 "$B/cuda-tiny-cases" >> "$OUT/checks.txt" 2>&1
fi

log "steps" | tee -a "$OUT/steps.txt"
for m in $STEP_MODELS; do
    for tc in ${STEP_TC:-0 2 2,tc-shape=2x8 2,tc-shape=1x8}; do
        echo "## $m tc-rows=$tc" >> "$OUT/steps.txt"
        timeout 300 "$B/kiln" bench "$M/$m.gguf" --device cuda --cuda tc-rows=$tc --step-rows 1,2,3,4,5,6,8 \
            --step-context ${STEP_CTX:-512} --json >> "$OUT/steps.jsonl" 2>> "$OUT/steps.txt"
    done
done

log "same output" | tee -a "$OUT/same.txt"
prompt="one two three four five six seven eight nine ten one two three four five six seven eight nine ten one two three"
run() { timeout 300 "$B/kiln" run "$@" --device cuda -n 120 --temperature 0 --ignore-eos 2> "$OUT/run-stderr.txt"; tail -n 3 "$OUT/run-stderr.txt" >> "$OUT/same.txt"; }
for m in ${SAME_MODELS:-s059-f16 l8b-f16}; do
    plain=$(run "$M/$m.gguf" "$prompt" --cuda tc-rows=0)
    for d in ngram "$M/d-other.gguf"; do
        spec=$(run "$M/$m.gguf" "$prompt" --draft "$d" --draft-max 5)
        if [ "$plain" = "$spec" ]; then same=yes; else same=NO; fi
        echo "$m draft $(basename "$d"): same as plain decoding (tc off): $same" | tee -a "$OUT/same.txt"
    done
done

log "serve" | tee -a "$OUT/serve.txt"
for m in ${SERVE_MODELS-l8b-f16}; do
    for tc in 0 auto; do
        "$B/kiln" serve -m "$M/$m.gguf" --device cuda --cuda tc-rows=$tc --port 8090 --max-running 64 \
            > "$OUT/serve-$m-tc$tc.log" 2>&1 &
        pid=$!
        if wait_up http://127.0.0.1:8090 $pid; then
            for n in ${SERVE_STREAMS:-2 4 8}; do
                "$B/kiln" bench serve --url http://127.0.0.1:8090 --concurrency "$n" --requests $((n < 8 ? 8 : 2 * n)) \
                    --prompt-len 128 --gen-len 128 --model "$m" --warmup 2 --json > "$OUT/serve-$m-tc$tc-$n.json" \
                    2> "$OUT/serve-$m-tc$tc-$n.txt"
                echo "$m tc-rows=$tc streams=$n: $(tail -n 2 "$OUT/serve-$m-tc$tc-$n.txt" | tr '\n' ' ')" | tee -a "$OUT/serve.txt"
            done
        fi
        kill $pid; wait $pid 2>/dev/null
    done
done
log done
mkdir -p "$RESULTS" && tar czf "$RESULTS/tc-bench.tgz" -C "$W" . && cp "$W"/checks.txt "$W"/serve.txt "$RESULTS"/ 2>/dev/null
