#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a given time and records the results.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60, all targets)
#
# Needs the nightly toolchain (rustup) and installs cargo-fuzz if missing.
# Seeds come from the fuzz-seeds example (tiny models of every architecture,
# HF configs, safetensors, chat templates including the default model's, and
# request bodies for every route), written to fuzz/corpus/TARGET alongside
# what earlier runs found. A crash stops its target, leaves the input in
# fuzz/artifacts/TARGET/ and makes the script exit non-zero; the summary
# (executions, exec/s, coverage, crashes) goes to stdout and
# target/fuzz-results.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SECS="${1:-60}"
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(gguf hf_config safetensors chat_template detok_stop server_requests tool_parse grammar)
cd "$ROOT"

rustup toolchain list | grep -q nightly || { echo "error: the nightly toolchain is needed (rustup toolchain install nightly)" >&2; exit 1; }
command -v cargo-fuzz >/dev/null || cargo +nightly install cargo-fuzz --locked

REAL="${KILN_MODEL:-$HOME/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
cargo build --release -p kiln-models --example fuzz-seeds >&2
target/release/examples/fuzz-seeds fuzz/corpus $( [[ -f "$REAL" ]] && echo "$REAL" ) >&2

OUT=target/fuzz-results.md
mkdir -p target
{
    echo "| target | seconds | executions | exec/s | coverage (edges) | corpus | crashes |"
    echo "|---|---|---|---|---|---|---|"
} >"$OUT"
status=0
for t in "${TARGETS[@]}"; do
    echo "[fuzz] $t for ${SECS}s" >&2
    log="target/fuzz-$t.log"
    rc=0
    (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$SECS" -rss_limit_mb=4096 \
        -timeout=30 -print_final_stats=1) >"$log" 2>&1 || rc=$?
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    speed=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
    crashes=$(find "fuzz/artifacts/$t" -type f 2>/dev/null | wc -l)
    echo "| $t | $SECS | ${runs:-?} | ${speed:-?} | ${cov:-?} | $corpus | $crashes |" >>"$OUT"
    if [[ $rc -ne 0 ]]; then
        echo "[fuzz] $t FAILED (exit $rc); see $log and fuzz/artifacts/$t" >&2
        grep -m5 -E 'panicked|ERROR|SUMMARY' "$log" >&2 || true
        status=1
    fi
done
cat "$OUT"
exit $status
