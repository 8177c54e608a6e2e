#!/usr/bin/env bash
# Runs on the GPU machine: the tensor-core quantized products
# (kernels/mmq.cu) checked against the CPU and timed against the build
# before them (docs/cuda.md, BENCHMARKS.md).
#
#   STEPS=check,sweep,serve scripts/gpu/mmq-bench.sh
#
# Expects in $BIN (default .gpu-q; files may be gzipped): kiln (this
# build), kiln-main (the build to compare with), optionally kiln-prev,
# cuda-check, random-model,
# smollm2-meta.gguf (optional: the check's models take
# ggml-vocab-llama-bpe.gguf's metadata without it) and
# ggml-vocab-llama-bpe.gguf. Results in $OUT.
# - check: `cuda-check --rows` (prompts of 1 to 512 rows in one step, CPU
#   vs GPU logits) on small random models of every quantized format, then
#   the plain `cuda-check` on two of them (CHECK_MODELS, CHECK_PLAIN: fewer).
# - sweep: `kiln bench` prefill at 16 to 512 rows on 8B-shaped random
#   models (Q4_K_M mix and F16, written by random-model with Llama 3's
#   tokenizer): kiln-main, kiln, and kiln with the tensor-core products off
#   (mmq-rows=0) and on for every row count (mmq-rows=512), so that the
#   split point can be read off per row count.
# - serve: scripts/gpu/serve-bench.sh at $STREAMS (default "16 64") for
#   kiln-main and kiln on the F16 and Q4_K_M files.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-q}
OUT=${OUT:-gpu-out}
M=${MODELS:-/tmp/kiln-models}
STEPS=${STEPS:-check,sweep,serve}
STREAMS=${STREAMS:-16 64}
B=/tmp/kq
mkdir -p "$OUT" "$M" /tmp/kq-main
[ -x "$B/cuda-check" ] || unpack "$B" "$BIN"/*
ln -sf "$B/kiln-main" /tmp/kq-main/kiln
gpu_info
command -v nsys ncu >> "$OUT/gpu.txt"

# The 8B shape (Llama 3: 32 layers, 4096 wide, GQA 32/8, ff 14336, vocab
# 128256): the Q4_K_M mix (Q4_K, Q6_K V/down in llama.cpp's layers, a Q6_K
# output head), and F16.
if want sweep || want serve; then
    gen_named l8b-q4km l8b-f16 > "$OUT/gen.txt" 2>&1 &
    GEN=$!
fi

if want check; then
    S=$B/smollm2-meta.gguf
    [ -f "$S" ] || S=$B/ggml-vocab-llama-bpe.gguf
    small="--layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024"
    gen hd64-q4km --meta "$S" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q4_K --embd-type Q6_K --more-bits Q6_K
    gen hd128-q4km --meta "$S" $small --type Q4_K --embd-type Q4_K --more-bits Q6_K
    gen hd128-q8 --meta "$S" $small --type Q8_0 --embd-type Q8_0
    gen hd128-q4 --meta "$S" $small --type Q4_0 --embd-type Q8_0 --more-bits Q4_1
    gen hd128-q5km --meta "$S" $small --type Q5_K --embd-type Q5_K --more-bits Q6_K
    gen hd64-q5 --meta "$S" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q5_0 --embd-type Q5_1 --more-bits Q5_1
    gen hd128-q3k --meta "$S" $small --type Q3_K --embd-type Q3_K --more-bits Q5_K
    gen hd64-q2k --meta "$S" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q2_K --embd-type Q2_K --more-bits Q4_K
    # 2048 wide: products split K over blocks that add their sums (QKV
    # after zeroing its output, the residual adds into it)
    gen wide-q4km --meta "$S" --layers 2 --hidden 2048 --heads 16 --kv-heads 4 --ff 4096 --type Q4_K --embd-type Q6_K --more-bits Q6_K
    log "cuda-check --rows"
    for m in ${CHECK_MODELS:-hd64-q4km hd128-q4km wide-q4km hd128-q8 hd128-q4 hd128-q5km hd64-q5 hd128-q3k hd64-q2k}; do
        timeout 120 "$B/cuda-check" --rows "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"
    done
    log "the same rows on the dequantize + cuBLAS path (mmq-rows=0), for comparison"
    for m in ${CHECK_PLAIN:-hd64-q4km hd128-q8}; do
        KILN_CUDA=mmq-rows=0 timeout 120 "$B/cuda-check" --rows "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"
    done
    log "cuda-check"
    for m in hd64-q4km hd128-q4; do timeout 120 "$B/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    grep -c ^PASS "$OUT/check.txt"; grep ^FAIL "$OUT/check.txt"
fi
[ -n "${GEN:-}" ] && { log "waiting for the 8B models"; wait "$GEN"; cat "$OUT/gen.txt"; }

bench() { # TAG KILN MODEL [SETTING]
    local tag=$1 kiln=$2 model=$3 set=${4:-}
    timeout 150 "$kiln" bench "$M/$model.gguf" --device cuda --prompt-lens "${LENS:-16,32,64,96,128,192,256,512}" --gen-len 64 \
        --iterations 3 ${set:+--cuda $set} --json > "$OUT/sweep-$tag.json" 2> "$OUT/sweep-$tag.txt"
    echo "$tag: $(grep -E '^ +\*?[0-9]+ ' "$OUT/sweep-$tag.txt" | awk -F'|' '{split($1,a," "); print a[1] ":" $2}' | tr -s ' ' | tr '\n' ';')"
}
if want sweep; then
    log "prefill sweep (TTFT per prompt length)"
    bench q4km-main "$B/kiln-main" l8b-q4km
    bench q4km-new "$B/kiln" l8b-q4km
    # kiln-prev (optional): an earlier build of this work, for an A/B
    [ -x "$B/kiln-prev" ] && bench q4km-prev "$B/kiln-prev" l8b-q4km
    bench q4km-nommq "$B/kiln" l8b-q4km mmq-rows=0
    bench q4km-mmq512 "$B/kiln" l8b-q4km mmq-rows=512
    bench f16-main "$B/kiln-main" l8b-f16
    bench f16-new "$B/kiln" l8b-f16
fi
# ncu: GPU time of each product of one 64-row prefill step of the Q4_K_M
# 8B, tensor-core quantized products (default) and dequantize + cuBLAS
# (mmq-rows=0), with each kernel's grid (the shapes).
if want ncu && command -v ncu >/dev/null; then
    for set in mmq-rows=auto mmq-rows=0; do
        log "ncu, 64 rows, $set"
        KILN_CUDA=$set,graphs=off timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
            --launch-skip "${NCU_SKIP:-200}" --launch-count "${NCU_COUNT:-40}" \
            "$B/kiln" bench "$M/l8b-q4km.gguf" --device cuda --prompt-lens 64 --gen-len 2 --iterations 1 --warmup 0 \
            --no-bandwidth > "$OUT/ncu-$set.csv" 2> "$OUT/ncu-$set.err"
        python3 - "$OUT/ncu-$set.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
k = {}
for r in csv.DictReader(lines):
    key = (r["ID"], r["Kernel Name"].split("(")[0], r.get("Grid Size", ""))
    k.setdefault(key, {})[r["Metric Name"]] = (float(r["Metric Value"].replace(",", "")), r["Metric Unit"])
for (i, name, grid), m in k.items():
    t, tu = m.get("gpu__time_duration.sum", (0, ""))
    b, bu = m.get("dram__bytes_read.sum", (0, ""))
    print(f"{i:>5} {name[:40]:40} {grid:>16} {t:10.1f} {tu:6} {b:10.1f} {bu}")
PY
    done
fi
if want serve; then
    for m in l8b-f16 l8b-q4km; do
        log "serve $m: main"
        SIDES=kiln BIN=/tmp/kq-main scripts/gpu/serve-bench.sh "$M/$m.gguf" "$m-main" "$STREAMS"
        log "serve $m: this build"
        SIDES=kiln BIN=$B scripts/gpu/serve-bench.sh "$M/$m.gguf" "$m-new" "$STREAMS"
    done
    for f in "$OUT"/serve-kiln-*.txt; do echo "$(basename "$f" .txt): $(grep -i 'tok/s' "$f" | head -n 2 | tr '\n' ' ')"; done
fi
log done
