#!/usr/bin/env bash
# Decode speed with a JSON schema against unconstrained decoding, side by
# side: ROUNDS rounds of `kiln bench` without and with `--constrain`, the
# ratio per round and its median (docs/structured-output.md).
#
#   scripts/bench-constrained.sh [ROUNDS] [MODEL] [kiln bench args...]
#
# Env: KILN_BIN (default target/release/kiln), SCHEMA (default
# benches/data/json-array-schema.json: an array that cannot close within the
# generation, so every round generates --gen-len tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
MODEL=${2:-smollm2}
shift $(( $# < 2 ? $# : 2 ))
BIN=${KILN_BIN:-target/release/kiln}
SCHEMA=${SCHEMA:-benches/data/json-array-schema.json}
decode() {
  "$BIN" bench "$MODEL" --prompt-lens 128 --gen-len 128 --iterations 5 --no-bandwidth --json "$@" 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); r=d['results'][0] if 'results' in d else d[0]; print(r['decode_tok_s'])"
}
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  free=$(decode "$@")
  constrained=$(decode --constrain "$SCHEMA" "$@")
  ratio=$(python3 -c "print(f'{$constrained / $free:.3f}')")
  ratios+=("$ratio")
  printf 'round %d: unconstrained %.1f tok/s, constrained %.1f tok/s, ratio %s\n' "$r" "$free" "$constrained" "$ratio"
done
python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'median ratio {statistics.median(v):.3f} (min {min(v):.3f}, max {max(v):.3f}) over {len(v)} rounds')" "${ratios[@]}"
