#!/usr/bin/env bash
# Runs on the GPU machine: Nsight Compute's analysis of the tensor-core
# quantized products (kernels/mmq.cu) in one prompt step of the 8B Q4_K_M
# shape: where their time goes (throughput against the SM's and memory's
# peaks, warp stalls, occupancy, registers).
#
#   BIN=.gpu-prof ROWS="64 128" scripts/gpu/mmq-profile.sh
#
# Expects in $BIN: kiln (a CUDA build), random-model and
# ggml-vocab-llama-bpe.gguf. For each prompt length in ROWS (one step of
# that many rows), the first COUNT launches of mmq_q4k kernels after the
# load; ncu's full report per kernel in $OUT/mmq-ROWS.txt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run prof .gpu-prof
gpu_info
gen_named l8b-q4km > /dev/null
COUNT=${COUNT:-4}
for rows in ${ROWS:-64 128}; do
    log "mmq at $rows rows" | tee "$OUT/mmq-$rows.txt"
    KILN_CUDA=graphs=off timeout 300 ncu --clock-control none --kernel-name regex:mmq_q4k --launch-count "$COUNT" \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
        "$B/kiln" bench "$M/l8b-q4km.gguf" --device cuda --prompt-lens "$rows" --gen-len 2 --iterations 1 \
        --warmup 0 --no-bandwidth >> "$OUT/mmq-$rows.txt" 2>&1
done
cp "$OUT"/* "$RESULTS"/ 2>/dev/null
