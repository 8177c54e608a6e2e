#!/usr/bin/env bash
# Runs on the GPU machine: `cuda-check` (CUDA against the CPU) on random
# mixture-of-experts files of one shape (4 layers, hidden 1024, 16 heads
# over 4 KV heads, 8 experts of 512, 2 per token) for Mixtral, Qwen3-MoE
# and gpt-oss (sinks, a window of 128, biases, the clamped SwiGLU), with
# Q8_0 and F16 weights. With F16 weights every family agrees within 0.3% of
# the logit range; with Q8_0 experts a few rows differ by far more in every
# family, where the two engines' 8-bit activations route a row to another
# expert (docs/gpt-oss.md).
#
#   [BIN=.gpu-win] scripts/gpu/moe-check.sh
#
# Expects in $BIN (files may be gzipped): cuda-check and tiny-gguf.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-win}
B=/tmp/kmoe
M=${MODELS:-/tmp/kiln-models}
mkdir -p "$M"
[ -x "$B/cuda-check" ] || unpack "$B" "$BIN"/cuda-check* "$BIN"/tiny-gguf*
for a in mixtral qwen3moe gpt-oss; do
    for ty in Q8_0 F16; do
        f=$M/cmp-$a-$ty.gguf
        "$B/tiny-gguf" --arch $a --type $ty --layers 4 --hidden 1024 --heads 16 --kv-heads 4 --experts 8 --used 2 \
            --expert-ff 512 --ctx 8192 --window 128 --out "$f" 2>&1 | tail -n 1
        echo "== $a $ty"
        timeout 120 "$B/cuda-check" "$f" 2>&1 | grep -vE "sampler|tier|restored"
    done
done
