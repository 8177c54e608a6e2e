#!/usr/bin/env bash
# The L2 prefetch of a quantized cache's keys before the wait: two builds
# of kiln with a switch since removed (KILN_NVCC_FLAGS=-DGRP_Q_PREFETCH=0:
# none, which is the kept code; =2: each next tile's), alternated twice;
# run2.sh's build asked for all of the block's keys. The f16 cache once per
# build as an anchor between the calls.
. scripts/gpu/lib.sh
BIN=.gpu-pf
start_run pf .gpu-pf
[ -x "$B/kiln-pf0" ] || unpack "$B" .gpu-pf/*
gpu_info
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
for v in pf0 pf2 pf0 pf2; do
  log "bench $v q8_0"
  timeout 200 $B/kiln-$v bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,4096,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k q8_0 --cache-type-v q8_0 --no-bandwidth 2>&1 | grep "^ *\*"
done
for v in pf0 pf2; do
  log "bench $v f16"
  timeout 200 $B/kiln-$v bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --no-bandwidth 2>&1 | grep "^ *\*"
done
