#!/usr/bin/env bash
# LoRA on the 8B F16: where a batch-1 decode step's extra time goes.
. scripts/gpu/lib.sh
start_run lf .gpu-lf
gen_named l8b-f16 l8b-q4km
for m in l8b-f16 l8b-q4km; do [ -f $M/$m-a0.gguf ] || $B/random-lora $M/$m.gguf $M/$m-a0.gguf 16 0 | tail -n1; done
log bench
for m in l8b-f16 l8b-q4km; do
timeout 200 $B/kiln bench $M/$m.gguf --device cuda --lora $M/$m-a0.gguf --prompt-lens 128 --gen-len 128 --iterations 3 --no-bandwidth 2>&1 | grep -v "^\s*$" | tail -n 14
done
for m in l8b-f16; do
for side in base lora; do
  flag=; [ $side = lora ] && flag="--lora $M/$m-a0.gguf"
  log "ncu $m $side"
  KILN_CUDA=graphs=off timeout 250 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $B/kiln run $M/$m.gguf "The quick brown fox" --raw -n 3 --temperature 0 --device cuda $flag -q > $OUT/ncu-$m-$side.csv 2> $OUT/ncu-$m-$side.err
  python3 - $OUT/ncu-$m-$side.csv <<'PY'
import csv, sys, statistics, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
by = collections.defaultdict(list)
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", ""))
    if r.get("Metric Unit") == "nsecond": v /= 1000
    elif r.get("Metric Unit") == "msecond": v *= 1000
    by[(r["Kernel Name"].split("(")[0][:40], r["Grid Size"], r["Block Size"])].append(v)
tot = 0
for k, v in sorted(by.items()):
    print(f"{k[0]:40s} {k[1]:16s} {k[2]:12s} {len(v):5d} {statistics.median(v):9.2f} {min(v):9.2f}")
PY
done
done
tar czf $RESULTS/lf.tgz -C $W .
