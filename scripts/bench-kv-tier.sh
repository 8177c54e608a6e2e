#!/usr/bin/env bash
# The host KV tier: restore vs recompute, side by side.
#
#   scripts/bench-kv-tier.sh [MODEL.gguf]
#
# Starts two `kiln serve` processes with the same deliberately small KV cache
# (KV_TOKENS, default 2048 tokens), one with `--kv-tier-mib TIER_MIB` (256) and
# one without, and drives each in turn with the multi-turn chat workload of
# `kiln bench serve` (N concurrent conversations, TURNS turns, each turn
# resending the history). The conversations together outgrow the KV cache, so
# a conversation's history is evicted between its turns: without the tier it
# is recomputed, with it the evicted blocks are copied back. Prints TTFT and
# throughput of both and the tier counters from /metrics.
#
# Environment: THREADS (2), N (8), TURNS (4), REQS (48), PROMPT (128), GEN (64),
#   KV_TOKENS (2048), TIER_MIB (256), DEVICE (cpu; cuda on the GPU machine),
#   KILN (built binary; default: cargo build --release), OUT
#   (/tmp/kiln-bench-kv-tier).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
MODEL="${1:-${KILN_MODEL:-$HOME/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}}"
THREADS="${THREADS:-2}"; N="${N:-8}"; TURNS="${TURNS:-4}"; REQS="${REQS:-48}"
PROMPT="${PROMPT:-128}"; GEN="${GEN:-64}"; KV_TOKENS="${KV_TOKENS:-2048}"; TIER_MIB="${TIER_MIB:-256}"
DEVICE="${DEVICE:-cpu}"
OUT="${OUT:-/tmp/kiln-bench-kv-tier}"
mkdir -p "$OUT"
[[ -f "$MODEL" ]] || { echo "model not found: $MODEL (run: kiln pull smollm2)" >&2; exit 1; }
if [[ -z "${KILN:-}" ]]; then
    (cd "$ROOT" && cargo build --release -p kiln >&2)
    KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"
fi
PIDS=""
trap 'for p in $PIDS; do kill "$p" 2>/dev/null || true; done' EXIT
wait_up() {
    for _ in $(seq 120); do
        kill -0 "$1" 2>/dev/null || return 1
        curl -sf "http://127.0.0.1:$2/health" >/dev/null && return 0
        sleep 1
    done
    return 1
}
start() { # port, extra args...
    local port=$1; shift
    "$KILN" serve --model "$MODEL" --port "$port" --device "$DEVICE" --threads "$THREADS" --ctx-size "$KV_TOKENS" \
        --kv-cache-tokens "$KV_TOKENS" "$@" >"$OUT/serve-$port.log" 2>&1 &
    PIDS="$PIDS $!"
    wait_up "$!" "$port" || { echo "kiln serve did not come up: $OUT/serve-$port.log" >&2; exit 1; }
}
start 18191
start 18192 --kv-tier-mib "$TIER_MIB"
NAME=$(curl -sf http://127.0.0.1:18191/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
{
    echo "# KV tier: multi-turn chat, N = $N conversations x $TURNS turns, $REQS requests, question ~$PROMPT tokens, max_tokens $GEN"
    echo
    echo "- model: $MODEL, device: $DEVICE, threads: $THREADS, KV cache: $KV_TOKENS tokens, tier: $TIER_MIB MiB"
    echo "- kiln commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| server | TTFT p50 ms | TTFT p99 ms | tok/s | prompt tokens reused | preemptions | tier blocks saved | tier blocks restored | tier copy µs/block | errors |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$OUT/report.md"
for port in 18191 18192; do
    who=$([[ $port == 18191 ]] && echo "no tier" || echo "tier $TIER_MIB MiB")
    echo "[bench-kv-tier] $who" >&2
    "$KILN" bench serve --url "http://127.0.0.1:$port" --model "$NAME" --workload multi-turn --turns "$TURNS" \
        --concurrency "$N" --requests "$REQS" --prompt-len "$PROMPT" --gen-len "$GEN" --json >"$OUT/bench-$port.json" 2>/dev/null
    curl -sf "http://127.0.0.1:$port/metrics" >"$OUT/metrics-$port.txt"
    python3 - "$OUT/bench-$port.json" "$OUT/metrics-$port.txt" "$who" >>"$OUT/report.md" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m = {}
for line in open(sys.argv[2]):
    if line.startswith("#") or not line.strip():
        continue
    k, v = line.rsplit(" ", 1)
    m[k.split("{")[0]] = m.get(k.split("{")[0], 0) + float(v)
g = lambda k: int(m.get(k, 0))
moved = g('kiln_kv_tier_saved_blocks_total') + g('kiln_kv_tier_restored_blocks_total')
per_block = f"{m.get('kiln_kv_tier_copy_seconds_total', 0) * 1e6 / moved:.0f}" if moved else "-"
print(f"| {sys.argv[3]} | {d['ttft_ms_p50']:.0f} | {d['ttft_ms_p99']:.0f} | {d['output_tok_s']:.1f} | "
      f"{g('kiln_prefix_cache_hit_tokens_total')} / {g('kiln_prompt_tokens_total')} | {g('kiln_preemptions_total')} | "
      f"{g('kiln_kv_tier_saved_blocks_total')} | {g('kiln_kv_tier_restored_blocks_total')} | {per_block} | {d['errors']} |")
PY
done
cat "$OUT/report.md"
