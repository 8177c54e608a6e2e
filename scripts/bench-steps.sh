#!/usr/bin/env bash
# What each optimization step gained, side by side in one run.
#
#   scripts/bench-steps.sh MODEL.gguf [LABEL=COMMIT ...]
#
# Builds `forward-bench` (raw forward passes: prefill of P tokens in one
# pass, then G decode steps; crates/kiln-models/examples) at
# each commit in a git worktree (cached under $KILN_STEPS_CACHE, default
# ~/.cache/kiln/steps), then runs the binaries round-robin ROUNDS times on
# the same model and threads and prints the median prefill and decode tok/s
# of each step, with the ratio to the first one.
#
# Environment: THREADS (2), PROMPT (512), GEN (128), ROUNDS (5).
# Default steps: the commits of the CPU-speed work (see BENCHMARKS.md).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
MODEL="${1:?usage: bench-steps.sh MODEL.gguf [LABEL=COMMIT ...]}"
shift
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-512}"
GEN="${GEN:-128}"
ROUNDS="${ROUNDS:-5}"
CACHE="${KILN_STEPS_CACHE:-$HOME/.cache/kiln/steps}"
STEPS=("$@")
if [[ ${#STEPS[@]} -eq 0 ]]; then
    STEPS=(
        "start=378addf"
        "f16-paged-attention=c6d74f6"
        "packed-int-matmul=528512e"
        "attention-4-pairs=058e2ff"
        "packed-float-matmul=7db5fbf"
        "parallel-row-ops=e2c0060"
    )
fi
log() { echo "[bench-steps] $*" >&2; }
mkdir -p "$CACHE"

BINS=()
for step in "${STEPS[@]}"; do
    label="${step%%=*}"
    commit="$(git -C "$ROOT" rev-parse --short "${step#*=}")"
    bin="$CACHE/forward-bench-$commit"
    if [[ ! -x "$bin" ]]; then
        wt="$CACHE/wt-$commit"
        [[ -d "$wt" ]] || git -C "$ROOT" worktree add --detach "$wt" "$commit" >&2
        log "building forward-bench at $commit ($label)"
        (cd "$wt" && CARGO_TARGET_DIR="$CACHE/target" cargo build --release -q -p kiln-models --example forward-bench >&2)
        cp "$CACHE/target/release/examples/forward-bench" "$bin"
        git -C "$ROOT" worktree remove --force "$wt" >&2 || true
    fi
    BINS+=("$label=$bin")
done

OUT="$(mktemp -d)"
for r in $(seq 1 "$ROUNDS"); do
    for entry in "${BINS[@]}"; do
        label="${entry%%=*}"
        log "round $r: $label (load $(cut -d' ' -f1 /proc/loadavg))"
        # One measured repetition per run: the binary prints its last rep.
        "${entry#*=}" "$MODEL" "$PROMPT" "$GEN" "$THREADS" | tail -1 >>"$OUT/$label.txt"
    done
done

python3 - "$OUT" "${BINS[@]}" <<'EOF'
import re, statistics, sys
out, entries = sys.argv[1], sys.argv[2:]
rows = []
for e in entries:
    label = e.split("=", 1)[0]
    pf, dc = [], []
    for line in open(f"{out}/{label}.txt"):
        m = re.search(r"prefill \d+ tok: ([\d.]+) tok/s \| decode \d+ tok: ([\d.]+) tok/s", line)
        if m:
            pf.append(float(m.group(1)))
            dc.append(float(m.group(2)))
    rows.append((label, statistics.median(pf), min(pf), max(pf), statistics.median(dc), min(dc), max(dc)))
base = rows[0]
print("| step | prefill tok/s (median, min-max) | vs first | decode tok/s (median, min-max) | vs first |")
print("|---|---|---|---|---|")
for l, p, p0, p1, d, d0, d1 in rows:
    print(f"| {l} | {p:.0f} ({p0:.0f}-{p1:.0f}) | {p / base[1]:.2f}x | {d:.1f} ({d0:.1f}-{d1:.1f}) | {d / base[4]:.2f}x |")
EOF
