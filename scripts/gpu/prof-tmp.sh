#!/usr/bin/env bash
# device: make the 8B model, then ncu decode kernels at empty and depth
set -uo pipefail
B=/tmp/kiln-ab; M=/tmp/kiln-models; mkdir -p $B $M
cp .gpu-ab/* $B/ && gunzip -f $B/kiln.gz $B/cuda-check.gz; chmod +x $B/*; tar -xzf $B/gguf-py.tar.gz -C $B
[ -f $M/llama3-8b/model-f16.gguf ] || python3 scripts/gpu/make-model.py $M/llama3-8b --shape llama3-8b --vocab .gpu-ab/ggml-vocab-llama-bpe.gguf --gguf-py $B/gguf-py 2>&1 | tail -n1
for tag in group split; do
  [ $tag = split ] && export KILN_CUDA_GROUP=0
  for p in 16:2500 2048:4000; do
    pr=${p%%:*}; PROMPT=$pr SKIP=${p#*:} COUNT=500 GEN=40 BIN=$B scripts/gpu/profile.sh $M/llama3-8b/model-f16.gguf "$tag-$pr" 2>&1 | head -9
  done
done
