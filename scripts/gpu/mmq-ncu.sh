#!/usr/bin/env bash
# Runs on the GPU machine after mmq-forms.sh (same $BIN, models in $M):
# Nsight Compute's warp-state, scheduler, memory and occupancy sections for
# the tensor-core quantized products (mmq.cu) of one prompt step of the
# 8B-shaped Q4_K_M mix, ROWS rows (default 64), each --cuda SET in $SETS.
#   BIN=.gpu-mmq ROWS=64 SETS="mmq-tall=on mmq-tall=off" scripts/gpu/mmq-ncu.sh
set -uo pipefail
. "$(dirname "$0")/lib.sh"
start_run mmq .gpu-mmq
gpu_info
gen_named l8b-q4km > /dev/null
for set in ${SETS:-mmq-tall=on mmq-tall=off}; do
    log "ncu $set, ${ROWS:-64} rows"
    KILN_CUDA=$set,graphs=off,pdl=off timeout 300 ncu --clock-control none -k regex:mmq_q4k --launch-skip 2 \
        --launch-count 2 --section WarpStateStats --section SchedulerStats --section Occupancy \
        --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SpeedOfLight \
        --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio \
        "$B/kiln" bench "$M/l8b-q4km.gguf" --device cuda --prompt-lens "${ROWS:-64}" --gen-len 2 --iterations 1 \
        --warmup 0 --no-bandwidth > "$OUT/ncu-$set.txt" 2>&1
    grep -vE '^ *-+ *$|^ *$|OPT|WRN|INF|^ +[A-Z][a-z].*[a-z]\.$' "$OUT/ncu-$set.txt" | grep -E 'mmq|  [A-Za-z]' | cut -c1-110 | head -n 120
done
tar -C "$W" -czf "$RESULTS/mmq-ncu.tar.gz" .
log done
