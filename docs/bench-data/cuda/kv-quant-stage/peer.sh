#!/usr/bin/env bash
# #36's llama.cpp side: llama-bench with a q8_0 (and an f16) KV cache at
# depth 0 and 32768, and kiln's q8_0 decode at 128 and 32000 keys, on the
# same random-weight 8B F16 file, in one run (llama.cpp built by
# peer-start.sh while run2.sh ran; the machine stayed warm between them).
. scripts/gpu/lib.sh
start_run kq5 .gpu-kq4
L=/tmp/kqkv-llama
for _ in $(seq 60); do grep -q BUILD-DONE /tmp/peer-build.txt && break; sleep 5; done
tail -2 /tmp/peer-build.txt
gen l8b-f16-128k --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[l8b-f16]} --ctx 131072
log "llama-bench -ctk q8_0 -ctv q8_0 -d 0,32768"
$L/build/bin/llama-bench -m $M/l8b-f16-128k.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 64 -d 0,32768 -r 2 -o md 2>&1 | grep -E "^\|"
log "kiln q8_0"
timeout 200 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,32000 --sweep-gen 64 --sweep-iterations 2 --ctx-size 32768 --cache-type-k q8_0 --cache-type-v q8_0 --no-bandwidth 2>&1 | grep "^ *\*"
log "llama-bench f16 cache"
$L/build/bin/llama-bench -m $M/l8b-f16-128k.gguf -ngl 99 -fa 1 -p 0 -n 64 -d 0,32768 -r 2 -o md 2>&1 | grep -E "^\|"
log "kiln f16"
timeout 200 $B/kiln bench $M/l8b-f16-128k.gguf --device cuda --prompt-lens 128 --gen-len 32 --iterations 1 --ctx-sweep 128,32000 --sweep-gen 64 --sweep-iterations 2 --ctx-size 32768 --no-bandwidth 2>&1 | grep "^ *\*"
