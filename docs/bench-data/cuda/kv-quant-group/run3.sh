#!/usr/bin/env bash
# The per-step choice (grouped above 2048 keys): checks and the depth sweep.
. scripts/gpu/lib.sh
start_run kq3 .gpu-kq
gen q-hd128 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 1024 --heads 8 --kv-heads 4 --ff 2048 --type F16 --embd-type F16 --head-type F16
gen q-hd64 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 --type F16 --embd-type F16 --head-type F16
for mk in "q-hd128 q8_0/q8_0" "q-hd64 q8_0/q8_0" "q-hd128 q4_0/q4_0"; do
  set -- $mk
  log "cuda-check --kv $2 $1"
  timeout 100 $B/cuda-check --kv $2 $M/$1.gguf 2>&1 | grep -E "PASS|FAIL" | grep -E "FAIL|decode|greedy|mixed" | head -8
done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
log "bench kv q8_0 attention=auto"
timeout 150 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,4096,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k q8_0 --cache-type-v q8_0 --no-bandwidth 2>&1 | grep "^ *\*"
