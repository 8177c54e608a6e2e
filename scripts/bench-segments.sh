#!/usr/bin/env bash
# The segment cache on the RAG workload (docs/segment-cache.md,
# BENCHMARKS.md "Segment cache"): time to first token and answer agreement
# with full prefill per segment context and recompute value, on the default
# model and on Gemma 3 270M (with --swa-full: its local layers keep whole
# segments). Prints the tables; JSON in $OUT (default bench-results).
#
#   [THREADS=2] [REQUESTS=24] scripts/bench-segments.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/bench-results}
THREADS=${THREADS:-2}
REQUESTS=${REQUESTS:-24}
mkdir -p "$OUT"
(cd "$ROOT" && cargo build --release -p kiln) >&2
KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$KILN" bench segments smollm2 --threads "$THREADS" --requests "$REQUESTS" --recompute 0,4,16,64 \
    --context 0,64 --kv-cache-tokens 262144 --json "$OUT/segments-smollm2.json"
"$KILN" pull gemma3-270m >&2
"$KILN" bench segments gemma3-270m --threads "$THREADS" --requests "$REQUESTS" --recompute 0,4,16,64 \
    --context 0,64 --swa-full --kv-cache-tokens 262144 --json "$OUT/segments-gemma3.json"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
