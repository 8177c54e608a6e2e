#!/usr/bin/env bash
# Runs on the GPU machine, for its CPU: LoRA's CPU numbers of #32 (decode
# overhead at batch 1 and at 16 streams over 8 adapters, adapter load time)
# on a quiet host, which the shared 2-core development machine is not
# (there the base model's own speed moved 4x between runs). No GPU is used.
#
#   BIN=.gpu-lcpu scripts/gpu/lora-cpu.sh
#
# Expects in $BIN: kiln.gz (a release build), random-model.gz,
# random-lora.gz (`cargo build --release -p kiln-models --example
# random-model --example random-lora`) and smollm2-meta.gguf
# (`random-model --strip` of the default model). The model is the default
# model's shape and types (Q4_1, Q8_0 embedding) with random weights, and
# 8 random rank-16 PEFT adapters on all seven projections (speed does not
# depend on the values). `kiln bench --lora` alternates the base model and
# the adapters iteration by iteration in one process.
#
# Environment: THREADS (default 2, as BENCHMARKS.md's CPU rows), ROUNDS
# (default 3), ISAS (the `--cpu-isa` levels to run, default "native":
# none given). Results in $OUT (default gpu-out): lora-cpu.txt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-lcpu}
RESULTS=${OUT:-gpu-out}
B=/tmp/klcpu
M=/tmp/klcpu-models
THREADS=${THREADS:-2}
mkdir -p "$RESULTS" "$M"
[ -x "$B/kiln" ] || unpack "$B" "$BIN"/kiln.gz "$BIN"/random-model.gz "$BIN"/random-lora.gz || exit 1
smollm2_shape "$BIN/smollm2-meta.gguf"
model=$M/smollm2-shape.gguf
loras=()
for k in 0 1 2 3 4 5 6 7; do
    [ -d "$M/r16-$k" ] || "$B/random-lora" "$model" "$M/r16-$k" 16 "$k" > /dev/null || exit 1
    loras+=(--lora "$M/r16-$k")
done
out=$RESULTS/lora-cpu.txt
{
    log "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $THREADS threads"
    for r in $(seq "${ROUNDS:-3}"); do
        for isa in ${ISAS:-native}; do
            isa_arg=()
            [ "$isa" = native ] || isa_arg=(--cpu-isa "$isa")
            log "round $r, $isa: batch 1, one adapter"
            "$B/kiln" bench "$model" --lora "$M/r16-0" --prompt-lens 128,512 --gen-len 64 --iterations 5 \
                --no-bandwidth --threads "$THREADS" "${isa_arg[@]}" 2>&1
            log "round $r, $isa: 16 streams over 8 adapters"
            "$B/kiln" bench "$model" "${loras[@]}" --streams 16 --prompt-lens 128 --gen-len 32 --iterations 3 \
                --no-bandwidth --threads "$THREADS" "${isa_arg[@]}" 2>&1
        done
    done
} | tee "$out"
