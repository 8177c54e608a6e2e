# What the GPU machine's scripts share (no Rust and no network there).
# Source it, don't run it:  . "$(dirname "$0")/lib.sh"
#
# Functions that read variables of the script: gen and gen_named write
# models into $M with $B/random-model; gpu_info writes $OUT/gpu.txt; want
# reads $STEPS.

# log WORDS...: a time-stamped heading.
log() { echo "== $(date +%T) $*"; }

# want STEP: whether the comma-separated $STEPS names STEP.
want() { [[ ",$STEPS," == *",$1,"* ]]; }

# unpack DEST FILE...: copies the carried FILEs into DEST, unpacks the
# gzipped and xz-compressed ones (binaries are carried compressed: one run
# carries at most 64 MiB, and `xz -9` makes a CUDA build about a third
# smaller than gzip; a .tar.gz archive stays whole) and makes them
# executable.
unpack() {
    local dest=$1 f
    shift
    mkdir -p "$dest" && cp "$@" "$dest"/ || return 1
    for f in "$dest"/*.gz; do
        case $f in
            *.tar.gz) ;;
            *) [ -f "$f" ] && gunzip -f "$f" ;;
        esac
    done
    for f in "$dest"/*.xz; do
        [ -f "$f" ] && unxz -f "$f"
    done
    chmod +x "$dest"/*
}

# start_run NAME DEFAULT_BIN: a run whose results come back as one archive
# (the device runner returns a handful of files): $W=$OUT=/tmp/kNAME-out,
# emptied; $RESULTS (the caller's $OUT, default gpu-out) receives the
# archive; binaries from $BIN (default DEFAULT_BIN) unpacked once into
# $B=/tmp/kNAME; models in $M.
start_run() {
    BIN=${BIN:-$2}
    RESULTS=${OUT:-gpu-out}
    W=/tmp/k$1-out
    OUT=$W
    M=${MODELS:-/tmp/kiln-models}
    B=/tmp/k$1
    mkdir -p "$OUT" "$M"
    rm -f "$OUT"/*
    [ -x "$B/kiln" ] || unpack "$B" "$BIN"/*
}

# nvidia_vulkan: NVIDIA's Vulkan driver for wgpu and llama.cpp's Vulkan
# build. The machine has NVIDIA's driver and ICD but may lack the Vulkan
# loader and libglvnd's GL libraries it loads through (without them wgpu
# finds no adapter): the .deb files carried in .gl (wgpu-check.sh's
# header says how to download them) are unpacked into / first. Exports
# the ICD and EGL vendor files and KILN_WGPU_BACKEND=vulkan.
nvidia_vulkan() {
    local f
    if ls .gl/*.deb >/dev/null 2>&1; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    ldconfig -p | grep libvulkan.so.1 >/dev/null || { echo "error: no Vulkan loader: carry .gl (see scripts/gpu/wgpu-check.sh's header)" >&2; return 1; }
    f=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    [ -f "$f" ] && export VK_DRIVER_FILES="${VK_DRIVER_FILES:-$f}"
    f=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    [ -f "$f" ] && export __EGL_VENDOR_LIBRARY_FILENAMES="${__EGL_VENDOR_LIBRARY_FILENAMES:-$f}"
    export KILN_WGPU_BACKEND=${KILN_WGPU_BACKEND:-vulkan}
}

# gpu_info: the GPU's name, memory, clock and driver into $OUT/gpu.txt.
gpu_info() {
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
}

# wait_up URL PID: waits up to two minutes for a server's /health; gives up
# early if the process PID died.
wait_up() {
    local _
    for _ in $(seq 240); do
        curl -sf "$1/health" >/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}

# gen NAME ARGS...: the random-weight GGUF $M/NAME.gguf, written by
# $B/random-model with ARGS unless it is there already.
gen() {
    local name=$1
    shift
    [ -f "$M/$name.gguf" ] || "$B/random-model" --out "$M/$name.gguf" "$@" 2>&1 | tail -n1
}

# Real models' dimensions as llama (random-model's flags): Llama-3-8B,
# Qwen2.5-0.5B (0.59B with Llama 3's vocabulary) and Qwen2.5-1.5B (whose
# widths are whole K-quant blocks, so its Q4_K_M mix is Q4_K and Q6_K).
SHAPE_8B="--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ff 14336"
SHAPE_059="--layers 24 --hidden 896 --heads 14 --kv-heads 2 --ff 4864"
SHAPE_15B="--layers 28 --hidden 1536 --heads 12 --kv-heads 2 --ff 8960"

# The models the scripts make by name: a shape and weight types (l8b-q4km
# is llama.cpp's Q4_K_M mix), and d-other, a small unrelated draft model.
declare -A MODEL_ARGS=(
    [l8b-f16]="$SHAPE_8B --type F16 --embd-type F16 --head-type F16"
    [l8b-q4km]="$SHAPE_8B --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K"
    [q15-q4km]="$SHAPE_15B --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K"
    [s059-f16]="$SHAPE_059 --type F16 --embd-type F16 --head-type F16"
    [s059-q8]="$SHAPE_059 --type Q8_0 --embd-type Q8_0 --head-type Q8_0"
    [d-other]="--layers 2 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 --type Q8_0 --embd-type Q8_0 --seed 9"
    # Small F16 files for the KV-cache checks: head dim 64 (4 heads per KV
    # head), 128 (2), and 16 heads on one KV head; a8b-2l has the 8B's
    # attention in 2 layers (its one-row steps difference into attention).
    [q-hd64]="--layers 4 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 --type F16 --embd-type F16 --head-type F16"
    [q-hd128]="--layers 4 --hidden 1024 --heads 8 --kv-heads 4 --ff 2048 --type F16 --embd-type F16 --head-type F16"
    [q-g16]="--layers 2 --hidden 2048 --heads 16 --kv-heads 1 --ff 1024 --type F16 --embd-type F16 --head-type F16"
    [a8b-2l]="--layers 2 --hidden 4096 --heads 32 --kv-heads 8 --ff 1024 --type F16 --embd-type F16 --head-type F16 --ctx 131072"
)

# smollm2_shape META: $M/smollm2-shape.gguf, the default model's shape and
# types (Q4_1, Q8_0 embedding) with random weights, from META (the real
# file's metadata, `random-model --strip`), unless it is there already.
smollm2_shape() {
    [ -f "$M/smollm2-shape.gguf" ] ||
        "$B/random-model" --meta "$1" --out "$M/smollm2-shape.gguf" --type Q4_1 --embd-type Q8_0 | tail -n1
}

# gen_named NAME...: the models of MODEL_ARGS (a name it lacks gets
# random-model's defaults) with Llama 3's vocabulary,
# $B/ggml-vocab-llama-bpe.gguf.
gen_named() {
    local m
    for m in "$@"; do
        # shellcheck disable=SC2086 # the flags split on spaces
        gen "$m" --meta "$B/ggml-vocab-llama-bpe.gguf" ${MODEL_ARGS[$m]:-}
    done
}
