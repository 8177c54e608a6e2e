#!/usr/bin/env bash
# Both sides quantized: the products take K and V fragments straight from
# two raw tiles in flight (RawK, RawV; no 16-bit pass). cuda-check --kv,
# then decode at 128 and 32000 keys (the f16 cache as the anchor between
# calls: run3.sh's staged build measured 154.9-155.7 at 32000 beside
# f16's 168.2-168.8).
. scripts/gpu/lib.sh
start_run rf .gpu-rf
gpu_info
gen q-hd64 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 --type F16 --embd-type F16 --head-type F16
gen q-hd128 --meta "$B/ggml-vocab-llama-bpe.gguf" --layers 4 --hidden 1024 --heads 8 --kv-heads 4 --ff 2048 --type F16 --embd-type F16 --head-type F16
for mk in "q-hd128 q8_0/q8_0" "q-hd128 q4_0/q4_0" "q-hd64 q8_0/q8_0"; do
  set -- $mk
  log "cuda-check --kv $2 $1"
  timeout 60 $B/cuda-check --kv $2 $M/$1.gguf 2>&1 | grep -E "PASS|FAIL"
done
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
for kv in q8_0 f16 q4_0; do
  log "bench kv $kv"
  timeout 60 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,32000 --sweep-gen 32 --sweep-iterations 2 --ctx-size 32768 --cache-type-k $kv --cache-type-v $kv --no-bandwidth 2>&1 | grep "^ *\*"
done
