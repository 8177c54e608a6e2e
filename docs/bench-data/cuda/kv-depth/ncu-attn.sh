# Sourced by prof*.sh (after scripts/gpu/lib.sh's start_run): ncu_attn KV
# profiles the grouped decode kernel of the 2-layer file at 32000 keys with
# a KV cache of KV on both sides (Nsight Compute, full set), then writes
# $OUT/raw-KV.txt (duration, instructions, stall reasons per issued
# instruction, occupancy limits: the raw page's metrics of that name) and
# $OUT/sass-KV.txt (sass-stalls.py over the SASS page; the CSV stays).
ncu_attn() {
    local kv=$1
    log "ncu $kv"
    timeout 150 ncu --clock-control none -k regex:^attn_group --launch-count 1 --set full --import-source no \
        -o "$OUT/rep-$kv" "$B/kiln" bench "$M/a8b-2l.gguf" --device cuda --step-rows 1 --step-context 32000 \
        --iterations 1 --cache-type-k "$kv" --cache-type-v "$kv" > "$OUT/sass-$kv.err" 2>&1
    ncu -i "$OUT/rep-$kv.ncu-rep" --page source --print-source sass --csv > "$OUT/sass-$kv.csv" 2>> "$OUT/sass-$kv.err"
    ncu -i "$OUT/rep-$kv.ncu-rep" --page raw --csv 2>/dev/null | python3 -c "
import csv, sys
r = list(csv.reader(sys.stdin))
keep = ('sm__warps_active.avg.pct_of_peak_sustained_active', 'dram__throughput.avg.pct_of_peak_sustained_elapsed',
        'launch__occupancy_limit_shared_mem', 'launch__occupancy_limit_registers', 'dram__bytes_read.sum',
        'smsp__inst_executed.sum')
for h, v in zip(r[0], r[-1]):
    if ('issue_stalled' in h and 'per_issue_active' in h) or h.startswith('gpu__time_duration.sum') \
            or 'launch__registers' in h or h in keep:
        print(h, v)" > "$OUT/raw-$kv.txt"
    sort -t' ' -k2 -g -r "$OUT/raw-$kv.txt" | head -16
    tail -n 2 "$OUT/sass-$kv.err"
    python3 docs/bench-data/cuda/kv-depth/sass-stalls.py "$OUT/sass-$kv.csv" 2048 > "$OUT/sass-$kv.txt" 2>&1
}
