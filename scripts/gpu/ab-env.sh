#!/usr/bin/env bash
# A/B of run-time switches of one kiln build on the GPU machine, alternated
# on one model (docs/cuda.md, "Switches for A/B runs"): `kiln bench` decode
# after the prompts of $PROMPTS (default 16) and at depth 2048, ROUNDS
# rounds of every variant in turn, so that drift hits all alike.
#
#   scripts/gpu/ab-env.sh MODEL.gguf 'nographs:KILN_CUDA=graphs=off' 'base:' ...
#
# Each variant is `name:` then the environment it runs with (empty for the
# defaults); CUDA settings go in `KILN_CUDA=key=value,...` (`kiln run --cuda
# help` lists them). $KILN: the binary (default /tmp/kiln-bin/kiln). Output:
# $OUT/abenv-NAME-ROUND.txt and one summary line per run (prompt=tok/s,
# the depth row last).
set -uo pipefail
KILN=${KILN:-/tmp/kiln-bin/kiln}; OUT=${OUT:-gpu-out}; ROUNDS=${ROUNDS:-2}; PROMPTS=${PROMPTS:-16}
model=$1; shift
mkdir -p "$OUT"
for r in $(seq "$ROUNDS"); do
    for v in "$@"; do
        name=${v%%:*} envs=${v#*:}
        # shellcheck disable=SC2086 # the variant's assignments split on spaces
        env $envs "$KILN" bench "$model" --device cuda --prompt-lens "$PROMPTS" --gen-len 128 --iterations 3 \
            --ctx-sweep 2048 --sweep-gen 64 --no-bandwidth > "$OUT/abenv-$name-$r.txt" 2>&1
        echo "$name round $r: $(grep -E '^ +\*?[0-9]+ ' "$OUT/abenv-$name-$r.txt" | awk -F'|' '{split($1,a," "); split($4,d," "); print a[1] "=" d[1]}' | tr '\n' ' ')"
    done
done
