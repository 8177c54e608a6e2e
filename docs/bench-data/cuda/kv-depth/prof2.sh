#!/usr/bin/env bash
# As prof1.sh, with `kiln bench --step-rows` taking the cache types (it
# ignored them before): step times at 128 and 32000 keys per cache type,
# then the grouped kernel at 32000 keys under Nsight Compute with
# per-instruction stall samples (SASS), summarized by sass-stalls.py.
. scripts/gpu/lib.sh
start_run adepth2 ${BIN:-.gpu-kd}
gpu_info
gen a8b-2l --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 2 --hidden 4096 --heads 32 --kv-heads 8 --ff 1024 \
    --type F16 --embd-type F16 --head-type F16 --ctx 131072
step() {  # KV CTX [CUDA-OPTS]
    echo "-- kv $1 ctx $2 ${3:-}"
    timeout 60 $B/kiln bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context $2 --iterations 10 \
        --cache-type-k $1 --cache-type-v $1 ${3:+--cuda $3} 2>&1 | grep -E "^\| 1 |KV cache"
}
for kv in f16 q8_0 q4_0; do step $kv 128; step $kv 32000; done
for kv in q8_0 f16; do
    log "ncu $kv"
    timeout 150 ncu --clock-control none -k regex:^attn_group --launch-count 1 --set full --import-source no \
        -o $OUT/rep-$kv $B/kiln bench $M/a8b-2l.gguf --device cuda --step-rows 1 --step-context 32000 \
        --iterations 1 --cache-type-k $kv --cache-type-v $kv > $OUT/sass-$kv.err 2>&1
    ncu -i $OUT/rep-$kv.ncu-rep --page source --print-source sass --csv > $OUT/sass-$kv.csv 2>> $OUT/sass-$kv.err
    ncu -i $OUT/rep-$kv.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(sys.stdin))
for h,v in zip(r[0],r[-1]):
    if ('issue_stalled' in h and 'per_issue_active' in h) or h.startswith('gpu__time_duration.sum') or 'dram__bytes_read.sum' == h or 'smsp__inst_executed.sum' == h or 'launch__registers' in h:
        print(h, v)" > $OUT/raw-$kv.txt
    sort -t' ' -k2 -g -r $OUT/raw-$kv.txt | head -16
    tail -n 2 $OUT/sass-$kv.err
    python3 docs/bench-data/cuda/kv-depth/sass-stalls.py $OUT/sass-$kv.csv 2048 | tee $OUT/sass-$kv.txt | head -70
done
cp $OUT/*.txt ${RESULTS}/ 2>/dev/null
xz -T4 -c $OUT/sass-q8_0.csv > ${RESULTS}/sass-q8_0.csv.xz
