#!/usr/bin/env bash
# The bindings' cost, side by side in one run: `kiln bench` (the engine,
# read by Rust threads), the Python binding (threads, then asyncio tasks)
# and the Node.js binding on the same model, prompt and generation lengths
# and threads, at 1 and 16 concurrent streams. The harnesses run one after
# another, in a rotated order each round, ROUNDS times. Each binding's
# bench also measures the engine the way `kiln bench` does inside its own
# process, alternating iteration by iteration, which cancels the machine's
# load drift: the table gives both ratios (to the `kiln bench` process, and
# to the engine in the same process), medians over rounds.
#
#   scripts/bench-bindings.sh                  # smollm2, prompt 128, gen 128
#   ROUNDS=5 ITERATIONS=5 scripts/bench-bindings.sh MODEL
#   HARNESSES="engine node" STREAMS=16 scripts/bench-bindings.sh
#
# Needs a release build of kiln (cargo build --release -p kiln), the Python
# binding installed (pip install ./bindings/python) and the Node binding
# built (cd bindings/node && npm install && npm run build).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-smollm2}"
ROUNDS="${ROUNDS:-3}"
ITERATIONS="${ITERATIONS:-5}"
PROMPT="${PROMPT:-128}"
GEN="${GEN:-128}"
THREADS="${THREADS:-$(nproc)}"
STREAMS="${STREAMS:-1 16}"
PYTHON="${PYTHON:-python3}"
KILN="${KILN_BIN:-${CARGO_TARGET_DIR:-target}/release/kiln}"
OUT="${OUT:-target/bench-bindings}"
mkdir -p "$OUT"
rm -f "$OUT"/*.json

common=(--prompt-len "$PROMPT" --gen-len "$GEN" --iterations "$ITERATIONS" --threads "$THREADS")
run() { # harness streams round
  local f="$OUT/$1-$2-$3.json"
  case "$1" in
    engine) "$KILN" bench "$MODEL" --prompt-lens "$PROMPT" "${common[@]:2}" --streams "$2" --no-bandwidth --json 2>/dev/null >"$f" ;;
    python) "$PYTHON" bindings/python/bench.py "$MODEL" "${common[@]}" --streams "$2" >"$f" ;;
    python-asyncio) "$PYTHON" bindings/python/bench.py "$MODEL" "${common[@]}" --streams "$2" --asyncio >"$f" ;;
    node) node bindings/node/bench.mjs "$MODEL" "${common[@]}" --streams "$2" >"$f" ;;
  esac
  echo "round $3, $2 stream(s): $1 done" >&2
}

read -ra harnesses <<<"${HARNESSES:-engine python python-asyncio node}"
for r in $(seq 1 "$ROUNDS"); do
  for s in $STREAMS; do
    for i in "${!harnesses[@]}"; do
      run "${harnesses[$(( (i + r) % ${#harnesses[@]} ))]}" "$s" "$r"
    done
  done
done

"$PYTHON" - "$OUT" "$MODEL" "$PROMPT" "$GEN" "$THREADS" "$ROUNDS" "$ITERATIONS" <<'PY'
import glob, json, os, statistics, sys
out, model, prompt, gen, threads, rounds, iterations = sys.argv[1:]
runs = {}
for f in glob.glob(os.path.join(out, "*.json")):
    harness, streams, _ = os.path.basename(f)[:-5].rsplit("-", 2)
    d = json.load(open(f))
    runs.setdefault((int(streams), harness), []).append(d[0] if isinstance(d, list) else d)
med = statistics.median
print(f"model {model}, prompt {prompt} tokens, {gen} generated (EOS ignored), {threads} threads, "
      f"{rounds} rounds of {iterations} iterations; decode tok/s and TTFT per stream, medians")
print("| streams | harness | decode tok/s | / `kiln bench` | / engine, same process | TTFT ms | − `kiln bench` | − engine, same process |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for streams in sorted({s for s, _ in runs}):
    base = runs.get((streams, "engine"), [])
    bd = med(r["decode_tok_s"] for r in base) if base else float("nan")
    bt = med(r["ttft_ms"] for r in base) if base else float("nan")
    if base:
        print(f"| {streams} | `kiln bench` | {bd:.1f} | 1 | | {bt:.2f} | | |")
    for h in ["python", "python-asyncio", "node"]:
        rs = runs.get((streams, h))
        if not rs:
            continue
        d, t = med(r["decode_tok_s"] for r in rs), med(r["ttft_ms"] for r in rs)
        paired = med(r["decode_tok_s"] / r["engine_decode_tok_s"] for r in rs)
        paired_t = med(r["ttft_ms"] - r["engine_ttft_ms"] for r in rs)
        print(f"| {streams} | {h} | {d:.1f} | {d / bd:.3f} | {paired:.3f} | {t:.2f} | {t - bt:+.2f} | {paired_t:+.2f} |")
PY
