#!/usr/bin/env bash
# (Run with the binary of ab2.sh, whose `--cuda group-swap` took
# warp|block|off; the committed one takes on|off: confirm.sh.)
# The transposed products (attention_swap.cuh) against the CPU (check2:
# by warp, the default, and by block, `KILN_CUDA=group-swap=block`, and
# the raw-fragment kernel, `group-swap=off`, on the same files):
# cuda-tiny-cases' quantized-KV cases and `cuda-check --kv` on random
# llama files of head dimension 64 and 128 (groups of 4 and 2 heads: the
# transposed path), a group of 16 heads (the raw-fragment path), and the
# Gemma 3 file with a 512-key window.
. scripts/gpu/lib.sh
start_run kdchk2 ${BIN:-.gpu-kc}
log() { echo "== $(date +%T) $*"; }
exec > >(tee "$OUT/checks.txt") 2>&1
gpu_info
for sw in warp block; do
    log "cuda-tiny-cases quantized_kv_matches_cpu, group-swap=$sw"
    KILN_CUDA=group-swap=$sw timeout 300 "$B/cuda-tiny-cases" quantized_kv_matches_cpu > "$OUT/tiny-$sw.txt" 2>&1
    echo "exit $?"; grep -ciE "fail|panic" "$OUT/tiny-$sw.txt"; tail -n 4 "$OUT/tiny-$sw.txt"
done
gen_named q-hd64
gen_named q-hd128
gen_named q-g16
[ -f "$M/q-g3.gguf" ] || "$B/tiny-gguf" --arch gemma3 --type F16 --layers 6 --hidden 512 --heads 4 \
    --kv-heads 2 --expert-ff 1024 --ctx 8192 --window 512 --out "$M/q-g3.gguf" 2>/dev/null
for mk in "q-hd128 q8_0/q8_0" "q-hd128 q4_0/q4_0" "q-hd128 q8_0/q4_0" "q-hd128 q4_0/q8_0" "q-hd64 q8_0/q8_0" \
          "q-hd64 q4_0/q4_0" "q-g16 q8_0/q8_0" "q-g3 q8_0/q8_0" "q-g3 q4_0/q4_0" "q-hd128 f16/q8_0"; do
    set -- $mk
    log "cuda-check --kv $2 $1"
    timeout 120 "$B/cuda-check" --kv $2 "$M/$1.gguf" 2>&1 | grep -E "PASS|FAIL|error" | cut -c1-110
done
for mk in "q-hd128 q8_0/q8_0 block" "q-hd64 q4_0/q4_0 block" "q-hd64 q4_0/q4_0 off" "q-hd128 q4_0/q4_0 off"; do
    set -- $mk
    log "cuda-check --kv $2 $1, group-swap=$3"
    KILN_CUDA=group-swap=$3 timeout 120 "$B/cuda-check" --kv $2 "$M/$1.gguf" 2>&1 | grep -E "FAIL|error|decode|mixed" | cut -c1-110
done
log done
mkdir -p "$RESULTS" && cp "$OUT"/*.txt "$RESULTS"/
