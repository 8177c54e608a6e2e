#!/usr/bin/env bash
# Regenerates the measured tables of BENCHMARKS.md in one command.
#
#   scripts/bench-report.sh            # everything (~35 min on a 2-core machine)
#   ONLY=q4_1,tier scripts/bench-report.sh   # some sections
#
# Sections (ids for ONLY): q4_1 (default model: engine, server at N = 1, 4,
# 16, 64, shared prefix), q8_0 and f16 (the same model converted with
# llama.cpp's quantize tool), 1b-q4_0 and 1b-q8_0 (a random-weight 1B-class
# llama of real shape, made by the random-model example), tier (host KV tier,
# scripts/bench-kv-tier.sh), steps (what each CPU-speed commit gained,
# scripts/bench-steps.sh), chunk (TTFT by --prefill-chunk, the chunk-sweep
# example). The peer sections run kiln and llama.cpp side by side
# (scripts/bench-peers.sh) and its table replaces the text between
# `<!-- generated:ID -->` and `<!-- /generated -->` in BENCHMARKS.md; the
# prose around the tables is written by hand and should be re-read when the
# numbers move. Plots of the default model go to docs/bench-plots/.
#
# Environment: THREADS (2), WORK (/tmp/kiln-bench-report: models and raw
# output), ONLY, KILN_LLAMA_BIN.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
WORK="${WORK:-/tmp/kiln-bench-report}"
ONLY="${ONLY:-q4_1,q8_0,f16,1b-q4_0,1b-q8_0,tier,steps,chunk}"
export THREADS="${THREADS:-2}"
mkdir -p "$WORK/models"
want() { [[ ",$ONLY," == *",$1,"* ]]; }
log() { echo "[bench-report] $*" >&2; }

(cd "$ROOT" && cargo build --release -p kiln && cargo build --release -p kiln-models --example random-model) >&2
KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"
RANDOM_MODEL="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/random-model"
export KILN
BIN="${KILN_LLAMA_BIN:-$("$HERE/build-llama-cpp.sh" | tail -1)}"
export KILN_LLAMA_BIN="$BIN"

# The default model, fetched through kiln's own cache.
DEFAULT=$("$KILN" pull smollm2 2>/dev/null | tail -1 | grep -o '/.*\.gguf' || true)
[[ -f "$DEFAULT" ]] || DEFAULT="${KILN_HOME:-$HOME/.cache/kiln}/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f "$DEFAULT" ]] || { echo "cannot find the default model; run: kiln pull smollm2" >&2; exit 1; }

model() { # id -> path (made on first use)
    local out="$WORK/models/$1.gguf"
    if [[ ! -f "$out" ]]; then
        log "making $1"
        case $1 in
            q8_0) LD_LIBRARY_PATH="$BIN" "$BIN/llama-quantize" --allow-requantize "$DEFAULT" "$out" Q8_0 >&2 ;;
            f16) LD_LIBRARY_PATH="$BIN" "$BIN/llama-quantize" --allow-requantize "$DEFAULT" "$out" F16 >&2 ;;
            1b-q4_0 | 1b-q8_0)
                local t=${1#1b-}
                "$RANDOM_MODEL" --meta "$DEFAULT" --out "$out" --type "${t^^}" --embd-type "${t^^}" \
                    --layers 22 --hidden 2048 --ff 5632 --heads 32 --kv-heads 4 >&2 ;;
        esac
    fi
    echo "$out"
}

declare -A TABLE
run_peers() { # id, model, extra env...
    local id=$1 m=$2; shift 2
    log "section $id: $m"
    env OUT="$WORK/$id" "$@" "$HERE/bench-peers.sh" "$m" >&2
    TABLE[$id]="$WORK/$id/ratios.md"
}

want q4_1 && run_peers q4_1 "$DEFAULT"
want q8_0 && run_peers q8_0 "$(model q8_0)" PROMPTS=128,512 SKIP_SERVE=1
want f16 && run_peers f16 "$(model f16)" PROMPTS=128,512 SKIP_SERVE=1
want 1b-q4_0 && run_peers 1b-q4_0 "$(model 1b-q4_0)" PROMPTS=128,512 REPS=3 SKIP_SERVE=1
want 1b-q8_0 && run_peers 1b-q8_0 "$(model 1b-q8_0)" PROMPTS=128,512 REPS=3 SKIP_SERVE=1
if want tier; then
    log "section tier"
    OUT="$WORK/tier" "$HERE/bench-kv-tier.sh" "$DEFAULT" >&2
    TABLE[tier]="$WORK/tier/report.md"
fi
if want steps; then
    log "section steps"
    mkdir -p "$WORK/steps"
    "$HERE/bench-steps.sh" "$DEFAULT" >"$WORK/steps/table.md"
    TABLE[steps]="$WORK/steps/table.md"
fi
if want chunk; then
    log "section chunk"
    mkdir -p "$WORK/chunk"
    (cd "$ROOT" && cargo build --release -p kiln-engine --example chunk-sweep) >&2
    "${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/chunk-sweep" "$DEFAULT" 1024 "$THREADS" 3 >"$WORK/chunk/raw.txt"
    python3 - "$WORK/chunk/raw.txt" >"$WORK/chunk/table.md" <<'PY'
import re, sys
rows = [re.search(r"chunk\s+(\d+): TTFT\s+([\d.]+) ms\s+\(([\d.]+) tok/s\)", l) for l in open(sys.argv[1])]
rows = [m.groups() for m in rows if m]
best = min(rows, key=lambda r: float(r[1]))[0]
b = lambda c, v: f"**{v}**" if c == best else v
print("| `--prefill-chunk` | " + " | ".join(r[0] for r in rows) + " |")
print("|---|" + "---|" * len(rows))
print("| TTFT ms (1024-token prompt, best of 3) | " + " | ".join(b(r[0], r[1]) for r in rows) + " |")
print("| prefill tok/s | " + " | ".join(b(r[0], r[2]) for r in rows) + " |")
PY
    TABLE[chunk]="$WORK/chunk/table.md"
fi
if want q4_1 && [[ -d "$WORK/q4_1/plots" ]]; then
    mkdir -p "$ROOT/docs/bench-plots"
    cp "$WORK"/q4_1/plots/*.png "$WORK"/q4_1/plots/*.svg "$ROOT/docs/bench-plots/"
fi

# Splice each table into BENCHMARKS.md (headings of the raw report demoted
# below the section's own).
for id in "${!TABLE[@]}"; do
    python3 - "$ROOT/BENCHMARKS.md" "$id" "${TABLE[$id]}" <<'PY'
import re, sys
path, sid, table = sys.argv[1:4]
body = open(table).read().strip().splitlines()
body = [("###" + l[1:] if l.startswith("## ") else ("**" + l[2:] + "**" if l.startswith("# ") else l)) for l in body]
text = open(path).read()
start, end = f"<!-- generated:{sid} -->", "<!-- /generated -->"
i = text.find(start)
if i < 0:
    sys.exit(f"BENCHMARKS.md has no {start} marker")
j = text.find(end, i)
text = text[: i + len(start)] + "\n" + "\n".join(body) + "\n" + text[j:]
open(path, "w").write(text)
print(f"[bench-report] BENCHMARKS.md: section {sid} updated", file=sys.stderr)
PY
done
log "done; raw output in $WORK"
