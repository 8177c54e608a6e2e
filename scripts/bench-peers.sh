#!/usr/bin/env bash
# kiln vs llama.cpp, side by side, on the same GGUF with the same threads.
#
#   scripts/bench-peers.sh [MODEL.gguf]
#
# 1. Builds llama.cpp once (scripts/build-llama-cpp.sh, cached outside the repo)
#    and kiln (cargo build --release).
# 2. Engine: for each round, runs llama-bench then `kiln bench` (alternating, so
#    both see the same machine noise): prefill at PROMPTS, decode of GEN tokens
#    at depths PROMPTS. Prints kiln/llama.cpp ratios for prefill, decode and TTFT
#    per round, and writes plots with llama.cpp on the same axes.
# 3. Server: if `kiln serve` works, starts it and llama-server and drives both
#    with `kiln bench serve` at N = 1, 4, 16, 64 concurrent clients,
#    alternating, and prints throughput ratios and TTFT p50/p99. Then the
#    shared-prefix workload (common ~1000-token system prompt, distinct
#    questions) against kiln, kiln --no-prefix-cache and llama-server (one
#    slot per client), for the TTFT gain of prefix caching. Skipped with a
#    note if `kiln serve` does not come up.
#
# Everything lands in $OUT (default /tmp/kiln-bench-peers): JSON per run,
# ratios.md, plots/. The machine's load average is printed next to the numbers.
#
# Environment: THREADS (2), PROMPTS (128,512,2048), GEN (128), REPS (5),
#   ROUNDS (1), SERVE_NS (1,4,16,64), SERVE_PROMPT (128), SERVE_GEN (64),
#   SHARED_NS (1,4: concurrent clients), SHARED_REQS (16), SHARED_PREFIX (1000), SHARED_Q (32: question
#   length), SKIP_ENGINE (0),
#   SKIP_SERVE (0), SKIP_SHARED (0), KILN (path of a built kiln; default: cargo build --release),
#   KILN_LLAMA_BIN (llama.cpp bin dir), OUT.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
MODEL="${1:-${KILN_MODEL:-$HOME/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}}"
THREADS="${THREADS:-2}"
PROMPTS="${PROMPTS:-128,512,2048}"
GEN="${GEN:-128}"
REPS="${REPS:-5}"
ROUNDS="${ROUNDS:-1}"
SERVE_NS="${SERVE_NS:-1,4,16,64}"
SHARED_NS="${SHARED_NS:-1,4}"
SHARED_REQS="${SHARED_REQS:-16}"
SHARED_PREFIX="${SHARED_PREFIX:-1000}"
SHARED_Q="${SHARED_Q:-32}"
SERVE_PROMPT="${SERVE_PROMPT:-128}"
SERVE_GEN="${SERVE_GEN:-64}"
OUT="${OUT:-/tmp/kiln-bench-peers}"
mkdir -p "$OUT"

log() { echo "[bench-peers] $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

[[ -f "$MODEL" ]] || { echo "model not found: $MODEL (run: kiln pull smollm2)" >&2; exit 1; }

BIN="${KILN_LLAMA_BIN:-$("$HERE/build-llama-cpp.sh" | tail -1)}"
if [[ -z "${KILN:-}" ]]; then
    log "building kiln (release)"
    (cd "$ROOT" && cargo build --release -p kiln >&2)
    KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"
fi
[[ -x "$KILN" ]] || { echo "kiln binary not found: $KILN" >&2; exit 1; }

{
    echo "# kiln vs llama.cpp"
    echo
    echo "- model: $MODEL"
    echo "- threads: $THREADS, prompts: $PROMPTS, gen: $GEN, reps: $REPS, rounds: $ROUNDS"
    echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), cores: $(nproc)"
    echo "- kiln commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- llama.cpp: $BIN"
} >"$OUT/ratios.md"

# Depths for llama-bench's decode tests: the kiln prompt lengths.
[[ "${SKIP_ENGINE:-0}" == 1 ]] && ROUNDS=0
for round in $(seq 1 "$ROUNDS"); do
    log "round $round: llama-bench (load $(load))"
    LB=("$BIN/llama-bench" -m "$MODEL" -t "$THREADS" -r "$REPS" -o json)
    "${LB[@]}" -p "$PROMPTS" -n 0 -d 0 >"$OUT/llama-pp-$round.json" 2>"$OUT/llama-bench.log"
    "${LB[@]}" -p 0 -n "$GEN" -d "$PROMPTS" >"$OUT/llama-tg-$round.json" 2>>"$OUT/llama-bench.log"
    python3 - "$OUT/llama-pp-$round.json" "$OUT/llama-tg-$round.json" >"$OUT/llama-$round.json" <<'EOF'
import json, sys
print(json.dumps([r for f in sys.argv[1:] for r in json.load(open(f))], indent=1))
EOF
    log "round $round: kiln bench (load $(load))"
    "$KILN" bench "$MODEL" --threads "$THREADS" --prompt-lens "$PROMPTS" --gen-len "$GEN" \
        --iterations "$REPS" --peer-json "$OUT/llama-$round.json" --plot "$OUT/plots" --json \
        >"$OUT/kiln-$round.json" 2>"$OUT/kiln-$round.txt"
    cat "$OUT/kiln-$round.txt" >&2
done

[[ "$ROUNDS" -gt 0 ]] && python3 - "$OUT" "$ROUNDS" >>"$OUT/ratios.md" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for r in range(1, rounds + 1):
    peer = json.load(open(f"{out}/llama-{r}.json"))
    pp = {p["n_prompt"]: p["avg_ts"] for p in peer if p["n_gen"] == 0 and p.get("n_depth", 0) == 0}
    tg = {p.get("n_depth", 0): p["avg_ts"] for p in peer if p["n_prompt"] == 0}
    for k in json.load(open(f"{out}/kiln-{r}.json")):
        n = k["prompt_tokens"]
        if n not in pp or n not in tg:
            continue
        peer_ttft = n * 1e3 / pp[n] + 1e3 / tg[n]
        rows.setdefault(n, []).append(dict(
            kp=k["prefill_tok_s"], pp=pp[n], kd=k["decode_tok_s"], pd=tg[n], kt=k["ttft_ms"], pt=peer_ttft,
            lim=k.get("decode_limit_tok_s"), load=k.get("load_avg_1m")))
med = lambda xs: statistics.median(xs)
print("\n## Engine (median over rounds; ratios > 1 favour kiln for tok/s, < 1 for TTFT)\n")
print("| prompt | kiln prefill tok/s | llama.cpp prefill tok/s | ratio | kiln decode tok/s | llama.cpp decode tok/s (same depth) | ratio | kiln TTFT ms | llama.cpp TTFT ms (est.) | ratio | bandwidth limit tok/s | kiln of limit | load 1m |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in sorted(rows):
    rs = rows[n]
    g = lambda k: med([x[k] for x in rs])
    ratio = lambda a, b: med([x[a] / x[b] for x in rs])
    lim = med([x["lim"] for x in rs]) if all(x["lim"] for x in rs) else None
    lim_s, frac_s = (f"{lim:.0f}", f"{100 * g('kd') / lim:.0f}%") if lim else ("-", "-")
    print(f"| {n} | {g('kp'):.1f} | {g('pp'):.1f} | {ratio('kp','pp'):.2f} | {g('kd'):.1f} | {g('pd'):.1f} | {ratio('kd','pd'):.2f} | "
          f"{g('kt'):.0f} | {g('pt'):.0f} | {ratio('kt','pt'):.2f} | {lim_s} | {frac_s} | {g('load'):.2f} |")
EOF

# ---- server throughput ----
KPORT=18181; LPORT=18182
MAXN=$(tr ',' '\n' <<<"$SERVE_NS" | sort -n | tail -1)
CTX=$(( MAXN * (SERVE_PROMPT + SERVE_GEN + 64) ))
# Waits for $2/health while process $1 lives; fails if it exits first.
wait_up() {
    for _ in $(seq 180); do
        kill -0 "$1" 2>/dev/null || return 1
        curl -sf "http://127.0.0.1:$2/health" >/dev/null && return 0
        sleep 1
    done
    return 1
}
KPID=""; LPID=""
trap 'for p in $KPID $LPID; do kill "$p" 2>/dev/null || true; done' EXIT
if [[ "${SKIP_SERVE:-0}" == 1 ]]; then
    echo -e "\n(server comparison skipped: SKIP_SERVE=1)" | tee -a "$OUT/ratios.md" >&2
else
    "$KILN" serve --model "$MODEL" --port "$KPORT" --threads "$THREADS" --max-queue $(( MAXN * 2 + 8 )) >"$OUT/kiln-serve.log" 2>&1 &
    KPID=$!
    if ! wait_up "$KPID" "$KPORT"; then
        echo -e "\n(server comparison skipped: \`kiln serve\` did not come up: $(grep -m1 -i error "$OUT/kiln-serve.log" || tail -1 "$OUT/kiln-serve.log"))" | tee -a "$OUT/ratios.md" >&2
        SKIP_SERVE=1
    fi
fi
if [[ "${SKIP_SERVE:-0}" != 1 ]]; then
    "$BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$MAXN" -c "$CTX" --port "$LPORT" --host 127.0.0.1 >"$OUT/llama-server.log" 2>&1 &
    LPID=$!
    wait_up "$LPID" "$LPORT" || { echo "llama-server did not come up; see $OUT/llama-server.log" >&2; exit 1; }
    # The name kiln serves the model under (its catalogue name or file stem).
    KNAME=$(curl -sf "http://127.0.0.1:$KPORT/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
    echo -e "\n## Server (/v1/completions, prompt ~$SERVE_PROMPT tokens, max_tokens $SERVE_GEN, ignore_eos)\n" >>"$OUT/ratios.md"
    echo "| N | kiln tok/s | llama-server tok/s | ratio | kiln TTFT p50 / p99 ms | llama-server TTFT p50 / p99 ms | errors (kiln/llama) | load 1m |" >>"$OUT/ratios.md"
    echo "|---|---|---|---|---|---|---|---|" >>"$OUT/ratios.md"
    for n in ${SERVE_NS//,/ }; do
        req=$(( n * 2 > 4 ? n * 2 : 4 ))
        common=(--concurrency "$n" --requests "$req" --prompt-len "$SERVE_PROMPT" --gen-len "$SERVE_GEN" --json)
        log "server N=$n: llama-server (load $(load))"
        "$KILN" bench serve --url "http://127.0.0.1:$LPORT" "${common[@]}" >"$OUT/serve-llama-$n.json" 2>/dev/null || true
        log "server N=$n: kiln (load $(load))"
        "$KILN" bench serve --url "http://127.0.0.1:$KPORT" --model "$KNAME" "${common[@]}" >"$OUT/serve-kiln-$n.json" 2>/dev/null || true
        python3 - "$OUT/serve-kiln-$n.json" "$OUT/serve-llama-$n.json" "$n" >>"$OUT/ratios.md" <<'EOF'
import json, sys
def rd(p):
    try: return json.load(open(p))
    except Exception: return {}
k, l, n = rd(sys.argv[1]), rd(sys.argv[2]), sys.argv[3]
f = lambda d, key: d.get(key) if isinstance(d.get(key), (int, float)) else float("nan")
r = f(k, "output_tok_s") / f(l, "output_tok_s") if f(l, "output_tok_s") else float("nan")
print(f"| {n} | {f(k,'output_tok_s'):.1f} | {f(l,'output_tok_s'):.1f} | {r:.2f} | {f(k,'ttft_ms_p50'):.0f} / {f(k,'ttft_ms_p99'):.0f} | "
      f"{f(l,'ttft_ms_p50'):.0f} / {f(l,'ttft_ms_p99'):.0f} | "
      f"{k.get('errors','?')}/{l.get('errors','?')} | {f(l,'load_avg_1m'):.2f} |")
EOF
    done
fi

# ---- shared prefix: TTFT with and without prefix caching ----
if [[ "${SKIP_SERVE:-0}" != 1 && "${SKIP_SHARED:-0}" != 1 ]]; then
    kill "$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true; LPID=""
    # llama-server with one slot per client, each large enough for the prompt.
    SMAX=$(tr ',' '\n' <<<"$SHARED_NS" | sort -n | tail -1)
    "$BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$SMAX" -c $(( SMAX * (SHARED_PREFIX + SHARED_Q + SERVE_GEN + 256) )) \
        --port "$LPORT" --host 127.0.0.1 >"$OUT/llama-server-shared.log" 2>&1 &
    LPID=$!
    NPORT=18183
    "$KILN" serve --model "$MODEL" --port "$NPORT" --threads "$THREADS" --no-prefix-cache >"$OUT/kiln-serve-nocache.log" 2>&1 &
    NPID=$!
    trap 'for p in $KPID $LPID $NPID; do kill "$p" 2>/dev/null || true; done' EXIT
    wait_up "$LPID" "$LPORT" || { echo "llama-server did not come up; see $OUT/llama-server-shared.log" >&2; exit 1; }
    wait_up "$NPID" "$NPORT" || { echo "kiln serve --no-prefix-cache did not come up; see $OUT/kiln-serve-nocache.log" >&2; exit 1; }
    {
        echo -e "\n## Shared prefix (chat, ~$SHARED_PREFIX-token common system prompt, distinct ~$SHARED_Q-token questions, $SHARED_REQS requests per row, max_tokens $SERVE_GEN)\n"
        echo "| server | clients | TTFT p50 ms | TTFT p99 ms | tok/s | errors | load 1m |"
        echo "|---|---|---|---|---|---|---|"
    } >>"$OUT/ratios.md"
    for n in ${SHARED_NS//,/ }; do
        common=(--workload shared-prefix --prefix-len "$SHARED_PREFIX" --concurrency "$n" --requests "$SHARED_REQS"
            --prompt-len "$SHARED_Q" --gen-len "$SERVE_GEN" --json)
        for who in kiln kiln-no-prefix-cache llama-server; do
            case $who in
                kiln) url="http://127.0.0.1:$KPORT"; extra=(--model "$KNAME") ;;
                kiln-no-prefix-cache) url="http://127.0.0.1:$NPORT"; extra=(--model "$KNAME") ;;
                llama-server) url="http://127.0.0.1:$LPORT"; extra=() ;;
            esac
            log "shared prefix N=$n: $who (load $(load))"
            "$KILN" bench serve --url "$url" "${extra[@]}" "${common[@]}" >"$OUT/shared-$who-$n.json" 2>/dev/null || true
            python3 - "$OUT/shared-$who-$n.json" "$who" "$n" >>"$OUT/ratios.md" <<'EOF'
import json, sys
try: d = json.load(open(sys.argv[1]))
except Exception: d = {}
f = lambda key: d.get(key) if isinstance(d.get(key), (int, float)) else float("nan")
print(f"| {sys.argv[2]} | {sys.argv[3]} | {f('ttft_ms_p50'):.0f} | {f('ttft_ms_p99'):.0f} | {f('output_tok_s'):.1f} | {d.get('errors','?')} | {f('load_avg_1m'):.2f} |")
EOF
        done
    done
    echo >>"$OUT/ratios.md"
    for n in ${SHARED_NS//,/ }; do
        python3 - "$OUT/shared-kiln-$n.json" "$OUT/shared-kiln-no-prefix-cache-$n.json" "$n" >>"$OUT/ratios.md" <<'EOF'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    print(f"- {sys.argv[3]} client(s): TTFT p50 without / with prefix caching = {b['ttft_ms_p50'] / a['ttft_ms_p50']:.1f}x")
except Exception as e:
    print(f"- {sys.argv[3]} client(s): no ratio ({e})")
EOF
    done
fi

echo >&2
cat "$OUT/ratios.md"
echo -e "\nplots: $OUT/plots/*.png (and .svg); raw JSON: $OUT/*.json" >&2
