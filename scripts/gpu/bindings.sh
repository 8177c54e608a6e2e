#!/usr/bin/env bash
# Runs on the GPU machine, for its CPU: the bindings' cost
# (scripts/bench-bindings.sh) on a quiet host with cores to spare, which the
# 2-core development machine is not (there a reader thread takes its time
# out of the engine's steps). No GPU is used.
#
#   BIN=.gpu-bind scripts/gpu/bindings.sh
#
# Expects in $BIN: kiln.gz or kiln.xz (any release build of this commit),
# the Python wheel (`pip wheel --no-deps -w $BIN ./bindings/python`), the
# Node.js addon (kiln.linux-x64-gnu.node.gz or .xz) and its native.js from
# `npm run build`, node.xz (a Node.js binary: the machine has none),
# random-model.gz or .xz and smollm2-meta.gguf (`random-model --strip` of the
# default model: its tokenizer and shape). The model is SmolLM2-135M's
# shape and types (Q4_1, Q8_0 embedding) with random weights: speed does
# not depend on the values, and EOS is ignored.
#
# Environment: THREADS (engine threads, default 4 of the host's cores),
# ROUNDS, ITERATIONS, STREAMS, HARNESSES as scripts/bench-bindings.sh.
# Results in $OUT (default gpu-out): bindings.md (the table) and the raw
# JSON of every run.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-.gpu-bind}
RESULTS=${OUT:-gpu-out}
B=/tmp/kbind
M=/tmp/kbind-models
mkdir -p "$RESULTS" "$M" "$B"
if [ ! -x "$B/node" ]; then
    unpack "$B" "$BIN"/kiln.[gx]z "$BIN"/random-model.[gx]z "$BIN"/*.node.[gx]z || exit 1
    python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$BIN/node.xz" "$B/node" || exit 1
    chmod +x "$B/node"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$B/site" "$BIN"/kiln_llm-*.whl || exit 1
fi
export PATH="$B:$PATH" PYTHONPATH="$B/site"
cp "$B/kiln.linux-x64-gnu.node" "$BIN/native.js" bindings/node/ || exit 1
smollm2_shape "$BIN/smollm2-meta.gguf"
{
    log "host"
    nproc
    grep -m1 "model name" /proc/cpuinfo
    node --version
    python3 --version
    # What could make one process's engine slower than another's.
    env | grep -E '^(LD_PRELOAD|MALLOC|GLIBC_TUNABLES|PYTHON|OMP|MKL)' || true
    cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true
} | tee "$RESULTS/host.txt"

THREADS=${THREADS:-4} KILN_BIN="$B/kiln" OUT="$RESULTS/raw" \
    bash scripts/bench-bindings.sh "$M/smollm2-shape.gguf" | tee "$RESULTS/bindings.md"
# The device runner returns only a few files: every run's JSON in one archive.
tar -czf "$RESULTS/raw.tar.gz" -C "$RESULTS" raw && rm -rf "$RESULTS/raw"
