#!/usr/bin/env bash
# Two kiln binaries (before / after a change) and llama.cpp, alternated in
# one run on each model: decode (and prefill) at one depth, on both sides.
#
#   scripts/bench-ab.sh KILN_BEFORE KILN_AFTER MODEL.gguf [MODEL.gguf ...]
#
# Per round and model, in this order: kiln before, kiln after, llama-bench;
# each kiln run is `kiln bench MODEL --cpu-isa $ISA --threads $THREADS
# --prompt-lens $PROMPT --gen-len $GEN --iterations $ITER --no-bandwidth`
# (decode after the prompt), llama.cpp `llama-bench -m MODEL -t $THREADS
# -p 0 -n $GEN -d $PROMPT -r $ITER` (decode at the same depth). Every run is
# under `nice -n $NICE`. Prints one line per run (who, model, prefill and
# decode tok/s, the 1-minute load average after it),
# then per model the median of the rounds and the ratios, and kiln's
# weight bytes per token (from `kiln bench`'s header).
#
# Environment: ISA (default avx2), ROUNDS (5), THREADS (2), PROMPT (128),
# GEN (32), ITER (2), NICE (-10), LLAMA_BIN (llama-bench's directory;
# default `LLAMA_ISA=$ISA scripts/build-llama-cpp.sh`; `none`: no peer).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $# -ge 3 ]] || { sed -n '2,18p' "$0" >&2; exit 2; }
BEFORE="$1"
AFTER="$2"
shift 2
ISA="${ISA:-avx2}"
ROUNDS="${ROUNDS:-5}"
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-128}"
GEN="${GEN:-32}"
ITER="${ITER:-2}"
NICE="${NICE:--10}"
if [[ -z "${LLAMA_BIN:-}" ]]; then
  LLAMA_BIN="$(LLAMA_ISA="$ISA" "$HERE/build-llama-cpp.sh" | tail -1)"
fi
export LD_LIBRARY_PATH="${LLAMA_BIN}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT="$(mktemp -d /tmp/kiln-bench-ab.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT

load() { cut -d' ' -f1 /proc/loadavg; }

# kiln BINARY MODEL TAG: appends "TAG MODEL prefill decode load" to $OUT/runs.
kiln_run() {
  local bin="$1" model="$2" tag="$3"
  nice -n "$NICE" "$bin" bench "$model" --cpu-isa "$ISA" --threads "$THREADS" --prompt-lens "$PROMPT" \
    --gen-len "$GEN" --iterations "$ITER" --no-bandwidth --json >"$OUT/k.json" 2>"$OUT/k.err"
  python3 - "$OUT/k.json" "$tag" "$model" "$(load)" >>"$OUT/runs" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))[0]
print(sys.argv[2], sys.argv[3].rsplit("/", 1)[-1], f"{r['prefill_tok_s']:.1f}", f"{r['decode_tok_s']:.2f}", sys.argv[4])
EOF
  tail -n 1 "$OUT/runs"
}

# The weight bytes a decode step reads (`kiln bench`'s header, printed with
# the bandwidth measurement: one short run per binary and model).
bytes_of() {
  "$1" bench "$2" --cpu-isa "$ISA" --threads "$THREADS" --prompt-lens 8 --gen-len 4 --iterations 1 \
    --warmup 0 --bandwidth-mib 64 --json 2>&1 >/dev/null | grep -o 'weights [0-9.]* [kMG]B' | head -1 || true
}

llama_run() {
  local model="$1"
  nice -n "$NICE" "$LLAMA_BIN/llama-bench" -m "$model" -t "$THREADS" -p 0 -n "$GEN" -d "$PROMPT" -r "$ITER" \
    -o json >"$OUT/l.json" 2>"$OUT/l.err" || { cat "$OUT/l.err" >&2; exit 1; }
  python3 - "$OUT/l.json" "$model" "$(load)" >>"$OUT/runs" <<'EOF'
import json, sys
r = [x for x in json.load(open(sys.argv[1])) if x["n_gen"] > 0][0]
print("llama.cpp", sys.argv[2].rsplit("/", 1)[-1], "-", f"{r['avg_ts']:.2f}", sys.argv[3])
EOF
  tail -n 1 "$OUT/runs"
}

echo "# kiln before: $BEFORE; after: $AFTER; llama.cpp: $LLAMA_BIN; --cpu-isa $ISA, $THREADS threads," \
  "prompt $PROMPT, gen $GEN, $ITER iterations, $ROUNDS rounds, nice $NICE"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
touch "$OUT/runs"
for m in "$@"; do
  for b in "$BEFORE" "$AFTER"; do
    echo "# $(basename "$m"), $b: $(bytes_of "$b" "$m") per token"
  done
done
for round in $(seq 1 "$ROUNDS"); do
  for m in "$@"; do
    kiln_run "$BEFORE" "$m" before
    kiln_run "$AFTER" "$m" after
    [[ "$LLAMA_BIN" == none ]] || llama_run "$m"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT/runs" <<'EOF'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
pre = defaultdict(list)
for line in open(sys.argv[1]):
    tag, model, prefill, decode, load = line.split()
    runs[(model, tag)].append(float(decode))
    if prefill != "-":
        pre[(model, tag)].append(float(prefill))
for model in dict.fromkeys(m for m, _ in runs):
    med = {t: statistics.median(v) for (m, t), v in runs.items() if m == model}
    cells = [f"{t} {med[t]:.2f} ({', '.join(f'{x:.1f}' for x in runs[(model, t)])})" for t in med]
    print(f"{model}: decode tok/s, median of rounds: " + "; ".join(cells))
    if "before" in med and "after" in med:
        pb, pa = statistics.median(pre[(model, "before")]), statistics.median(pre[(model, "after")])
        print(f"  after / before {med['after'] / med['before']:.3f}; prefill tok/s before {pb:.1f}, after {pa:.1f}")
    if "llama.cpp" in med:
        for t in ("before", "after"):
            print(f"  {t} / llama.cpp {med[t] / med['llama.cpp']:.3f}")
EOF
