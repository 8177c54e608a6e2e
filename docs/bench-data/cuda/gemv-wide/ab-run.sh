#!/usr/bin/env bash
# gemv-wide: correctness (cuda-check, greedy text on/off) and the A/B.
. scripts/gpu/lib.sh
start_run lf .gpu-lf
gen_named l8b-f16 s059-f16
for m in l8b-f16 s059-f16; do [ -f $M/$m-a0.gguf ] || $B/random-lora $M/$m.gguf $M/$m-a0.gguf 16 0 | tail -n1; done
log cuda-check s059-f16
timeout 200 $B/cuda-check $M/s059-f16.gguf 2>&1 | grep -E "PASS|FAIL" | tail -n 12
for m in l8b-f16 s059-f16; do
  for lo in none a0; do
    flag=; [ $lo = a0 ] && flag="--lora $M/$m-a0.gguf"
    for w in on off; do
      timeout 100 $B/kiln run $M/$m.gguf "The quick brown fox" --raw -n 32 --temperature 0 --device cuda --cuda gemv-wide=$w $flag -q > $OUT/run-$m-$lo-$w.txt 2>&1
    done
    cmp -s $OUT/run-$m-$lo-on.txt $OUT/run-$m-$lo-off.txt && echo "$m $lo: text equal" || { echo "$m $lo: TEXT DIFFERS"; head -c 300 $OUT/run-$m-$lo-*.txt; }
  done
done
for m in l8b-f16 s059-f16; do
  for w in off on off on; do
    log "bench $m gemv-wide=$w"
    timeout 200 $B/kiln bench $M/$m.gguf --device cuda --cuda gemv-wide=$w --lora $M/$m-a0.gguf --prompt-lens 128 --gen-len 128 --iterations 3 --no-bandwidth 2>&1 | grep -A1 "^prompt   gen |"
  done
done
