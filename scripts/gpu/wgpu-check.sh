#!/usr/bin/env bash
# Runs on the GPU machine (docs/wgpu.md): the wgpu backend on NVIDIA's
# Vulkan driver. 1) the adapters wgpu sees; 2) the shared tiny-model cases
# on wgpu (the list CI runs on lavapipe); 3) batch-1 decode and a 512-token
# prefill of kiln-wgpu against kiln-cuda, side by side in one run, on
# random-weight models of real shapes (speed does not depend on weight
# values). Results go to $OUT (or ./gpu-out): list-devices.txt,
# tiny-cases.txt, bench-<model>-<device>.txt, summary.txt.
#
# Built here (no Rust there), stripped, optionally gzipped or xz-compressed, into $BIN
# (default .gpu-bin):
#   cargo build --release -p kiln --features cuda,wgpu          -> kiln
#   cargo build --release -p kiln-wgpu --features wgpu --example wgpu-tiny-cases
#                                                               -> wgpu-tiny-cases
#   cargo build --release -p kiln-models --example random-model -> random-model
#   cargo test --release -p kiln-wgpu --features wgpu --test kernels --no-run
#                                                               -> kernels-test (optional)
#   random-model --strip SmolLM2-135M-Instruct.Q4_1.gguf smollm2-meta.gguf
# and the Vulkan loader, downloaded here once into .gl (device/README.md):
#   echo /.gl/ >>.git/info/exclude; mkdir -p .gl /tmp/amd64/partial
#   o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#   apt-get $o update
#   (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# Run there, carrying .gpu-bin and .gl:
#   scripts/gpu/wgpu-check.sh
# STEPS (comma separated; default all): tiny, kernels (the operation tests,
# where kernels-test was carried), bench, peer (llama.cpp's Vulkan
# llama-bench, as llama-bench-vk in $BIN, on the same files), profile (GPU time per
# kernel with KILN_WGPU_PROFILE=1, after bench made the models). MODELS: the bench
# models (default smol-q4_1,smol-f16,q05-q4_1,q05-f16; also l8b-f16 and l8b-q4km,
# the 8B shape, and q15-q4km, Qwen2.5-1.5B's; wgpu reads their K-quants in place).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-bin}
OUT=${OUT:-gpu-out}
M=${MODELS_DIR:-/tmp/kiln-models}
STEPS=${STEPS:-tiny,kernels,bench,peer,profile}
MODELS=${MODELS:-smol-q4_1,smol-f16,q05-q4_1,q05-f16}
mkdir -p "$OUT" "$M"
if ls "$BIN"/*.gz >/dev/null 2>&1 || ls "$BIN"/*.xz >/dev/null 2>&1; then
    unpack /tmp/kiln-bin "$BIN"/*
    BIN=/tmp/kiln-bin
fi
B=$BIN
for b in kiln wgpu-tiny-cases random-model smollm2-meta.gguf; do
    [ -e "$BIN/$b" ] || { echo "error: $BIN/$b is missing (see this script's header)" >&2; exit 1; }
done

nvidia_vulkan || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
log "adapters"
"$BIN/kiln" list-devices 2>&1 | tee "$OUT/list-devices.txt"
grep -q '^wgpu:0' "$OUT/list-devices.txt" || { echo "error: wgpu found no adapter (above)" >&2; exit 1; }

status=0
if want tiny; then
    log "tiny-model cases on wgpu"
    "$BIN/wgpu-tiny-cases" 2>&1 | tee "$OUT/tiny-cases.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    log "tiny-model cases on wgpu, every K-quant decode product by integer dots"
    KILN_WGPU_DOT_FROM=0 "$BIN/wgpu-tiny-cases" 2>&1 | tee -a "$OUT/tiny-cases.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if want kernels; then
    # The operation tests against the CPU backend (tests/kernels.rs), the
    # only place the cooperative-matrix prompt tiles run (lavapipe offers
    # none): cargo test --release -p kiln-wgpu --features wgpu --test
    # kernels --no-run, its binary carried as kernels-test.
    if [ -x "$BIN/kernels-test" ]; then
        log "operation tests on wgpu"
        (cd /tmp && "$BIN/kernels-test" --nocapture) 2>&1 | tee "$OUT/kernels.txt"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    else
        echo "no kernels-test in $BIN: the kernels step needs it (see this script's header)"
    fi
fi

if want bench; then
    meta="$BIN/smollm2-meta.gguf"
    # SmolLM2-135M's shape, and Qwen2.5-0.5B's dimensions (0.59B with the vocabulary) as llama.
    q05=$SHAPE_059
    for m in ${MODELS//,/ }; do
        case $m in
            smol-q4_1) gen "$m" --meta "$meta" --type Q4_1 --embd-type Q8_0 ;;
            smol-f16) gen "$m" --meta "$meta" --type F16 --embd-type F16 ;;
            q05-q4_1) gen "$m" --meta "$meta" $q05 --type Q4_1 --embd-type Q8_0 ;;
            q05-f16) gen "$m" --meta "$meta" $q05 --type F16 --embd-type F16 ;;
            l8b-f16 | l8b-q4km | q15-q4km) gen "$m" --meta "$meta" ${MODEL_ARGS[$m]} ;;
            *) echo "unknown model $m"; continue ;;
        esac
        for dev in cuda wgpu; do
            log "bench $m on $dev"
            timeout 300 "$BIN/kiln" bench "$M/$m.gguf" --device "$dev" --prompt-lens 512 --gen-len 128 --iterations 3 \
                >"$OUT/bench-$m-$dev.txt" 2>&1 || { echo "bench $m $dev failed:"; tail -n 20 "$OUT/bench-$m-$dev.txt"; status=1; }
            tail -n 8 "$OUT/bench-$m-$dev.txt"
        done
        # Greedy text of both devices on the random model (random weights
        # have many near ties: a difference late in the text is expected).
        for dev in cuda wgpu; do
            timeout 120 "$BIN/kiln" run "$M/$m.gguf" "The capital of France is" --raw -n 24 --temperature 0 \
                --device "$dev" 2>/dev/null >"$OUT/greedy-$m-$dev.txt"
        done
        cmp -s "$OUT/greedy-$m-cuda.txt" "$OUT/greedy-$m-wgpu.txt" && same=same || same=DIFFERENT
        echo "$m greedy text cuda vs wgpu: $same" | tee -a "$OUT/summary.txt"
    done
fi
if want peer; then
    # llama.cpp's Vulkan backend on the same files (llama-bench-vk, built
    # here with Vulkan headers 1.4 and glslc: docs/wgpu.md), prompt 512 and
    # 128 generated tokens as kiln bench above.
    if [ -x "$BIN/llama-bench-vk" ]; then
        for m in ${MODELS//,/ }; do
            [ -f "$M/$m.gguf" ] || continue
            log "llama.cpp Vulkan, $m"
            timeout 300 "$BIN/llama-bench-vk" -m "$M/$m.gguf" -ngl 99 -p 512 -n 128 -r 3 >"$OUT/llama-vk-$m.txt" 2>&1
            grep -E '^\|' "$OUT/llama-vk-$m.txt" | tail -n 3
        done
    else
        echo "no llama-bench-vk in $BIN: the peer step needs it (see docs/wgpu.md)"
    fi
fi
if want profile; then
    # GPU time per kernel (KILN_WGPU_PROFILE: timestamps between the
    # dispatches; the steps run slower meanwhile, so speeds come from bench).
    for m in ${MODELS//,/ }; do
        [ -f "$M/$m.gguf" ] || continue
        log "kernel profile of $m on wgpu"
        KILN_WGPU_PROFILE=1 timeout 300 "$BIN/kiln" bench "$M/$m.gguf" --device wgpu --prompt-lens 512 --gen-len 64 \
            --iterations 1 >"$OUT/profile-$m.txt" 2>&1
        grep -A 14 '^wgpu profile' "$OUT/profile-$m.txt"
    done
fi
grep -hE '^[0-9]+ passed' "$OUT/tiny-cases.txt" 2>/dev/null | sed 's/^/tiny cases on wgpu: /' | tee -a "$OUT/summary.txt"
exit $status
