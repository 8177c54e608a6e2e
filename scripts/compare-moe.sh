#!/usr/bin/env bash
# Random-weight mixture-of-experts GGUFs (Qwen3-MoE, Mixtral and gpt-oss,
# F32, Q8_0, Q4_K and MXFP4) and Gemma 3 (F32, Q8_0, Q4_K) written by
# kiln's `tiny-gguf` example (gpt-oss and Gemma 3's local layers with a
# sliding window of 8 positions, so the 28 compared positions cross it),
# each compared with
# llama.cpp's logits on the same file by scripts/compare-logits.py
# (teacher-forced along llama.cpp's greedy continuation).
#
#   scripts/compare-moe.sh [OUT_DIR]
#
# Needs llama.cpp's peers (scripts/build-llama-cpp.sh: kiln-golden-dump).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-$(mktemp -d)}"
BIN="${KILN_PEERS:-$HOME/.cache/kiln/peers}/llama.cpp-11434.0.0/build/bin"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TARGET="${CARGO_TARGET_DIR:-$HERE/../target}"
export CARGO_TARGET_DIR="$TARGET"
cargo build --release -q -p kiln-models --example tiny-gguf --example logits-dump
mkdir -p "$OUT"
for ty in F32 Q8_0 Q4_K MXFP4; do
    for arch in qwen3moe mixtral gpt-oss gemma3; do
        [ "$arch-$ty" = gemma3-MXFP4 ] && continue
        f="$OUT/$arch-$ty.gguf"
        layers=2
        [ "$arch" = gemma3 ] && layers=6 # the sixth layer is global
        "$TARGET/release/examples/tiny-gguf" --arch "$arch" --type "$ty" --layers $layers --out "$f" 2>/dev/null
        res="$(python3 "$HERE/compare-logits.py" "$f" "hello there, the answer is" 8)"
        same="$(grep -c ' same ' <<<"$res" || true)"
        total="$(grep -c '^pos ' <<<"$res" || true)"
        echo "$arch $ty: greedy argmax equal at $same/$total positions; $(tail -1 <<<"$res")"
    done
done
