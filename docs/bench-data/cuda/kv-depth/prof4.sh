#!/usr/bin/env bash
# The committed transposed kernel (attn_group8_*, each warp its own
# 16-key tiles) under Nsight Compute, as prof3.sh, and how the 2-layer
# steps at 8192 and 32000 keys move with fewer splits per row
# (`--cuda max-splits=N`; 64 is the default and the most).
. scripts/gpu/lib.sh
start_run adepth4 ${BIN:-.gpu-kf}
exec > >(tee "$OUT/prof4.txt") 2>&1
gpu_info
gen a8b-2l --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 2 --hidden 4096 --heads 32 --kv-heads 8 --ff 1024 \
    --type F16 --embd-type F16 --head-type F16 --ctx 131072
step() {  # KV CTX [CUDA-OPTS]
    echo "-- kv $1 ctx $2 ${3:-}"
    timeout 60 $B/${KILN:-kiln} bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $2 --iterations 10 \
        --cache-type-k $1 --cache-type-v $1 ${3:+--cuda $3} 2>&1 | grep -E "^\| 1 |KV cache"
}
for ctx in 8192 32000; do
    for ms in 64 48 32 16; do printf "max-splits=%-3s " $ms; step q8_0 $ctx max-splits=$ms; done
done
for kv in q8_0; do
    log "ncu $kv"
    timeout 150 ncu --clock-control none -k regex:^attn_group --launch-count 1 --set full --import-source no \
        -o $OUT/rep-$kv $B/kiln bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context 32000 \
        --iterations 1 --cache-type-k $kv --cache-type-v $kv > $OUT/sass-$kv.err 2>&1
    ncu -i $OUT/rep-$kv.ncu-rep --page source --print-source sass --csv > $OUT/sass-$kv.csv 2>> $OUT/sass-$kv.err
    ncu -i $OUT/rep-$kv.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(sys.stdin))
for h,v in zip(r[0],r[-1]):
    if ('issue_stalled' in h and 'per_issue_active' in h) or h.startswith('gpu__time_duration.sum') or 'dram__bytes_read.sum' == h or 'smsp__inst_executed.sum' == h or 'launch__registers' in h or h in ('sm__warps_active.avg.pct_of_peak_sustained_active','dram__throughput.avg.pct_of_peak_sustained_elapsed','launch__occupancy_limit_shared_mem','launch__occupancy_limit_registers'):
        print(h, v)" > $OUT/raw-$kv.txt
    sort -t' ' -k2 -g -r $OUT/raw-$kv.txt | head -16
    tail -n 2 $OUT/sass-$kv.err
    python3 docs/bench-data/cuda/kv-depth/sass-stalls.py $OUT/sass-$kv.csv 2048 > $OUT/sass-$kv.txt 2>&1
done
cp $OUT/*.txt ${RESULTS}/ 2>/dev/null
xz -T4 -c $OUT/sass-q8_0.csv > ${RESULTS}/sass-q8_0.csv.xz
