#!/usr/bin/env bash
# Runs on the GPU machine: each kernel's time in a decode step of ROWS rows
# of one sequence (`kiln bench --step-rows`), read by Nsight Compute one
# kernel at a time (kernels serialized, so the times add up to more than a
# step with launch overlap, but name where a step's time goes). One CSV per
# row count; scripts/gpu/step-kernels.py sums them by kernel.
#
#   BIN=.gpu-tc3 MODELS="l8b-f16 l8b-q4km" ROWS="1 5" scripts/gpu/step-kernels.sh
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run steps .gpu-tc3
gpu_info
MODELS=${MODELS:-l8b-f16}
gen_named $MODELS
for m in $MODELS; do
    for r in ${ROWS:-1 5}; do
        log "$m rows $r"
        timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip ${SKIP:-3000} \
            --launch-count ${COUNT:-700} "$B/kiln" bench "$M/$m.gguf" --device cuda --cuda graphs=off \
            --step-rows "$r" --step-context ${STEP_CTX:-512} > "$OUT/kernels-$m-$r.csv" 2> "$OUT/kernels-$m-$r.err"
        tail -n 3 "$OUT/kernels-$m-$r.err"
    done
done
log done
mkdir -p "$RESULTS" && tar czf "$RESULTS/step-kernels.tgz" -C "$W" .
