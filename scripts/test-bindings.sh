#!/usr/bin/env bash
# Lints, builds and tests the Python and Node.js bindings (.ci/run runs it).
# They are not members of the Cargo workspace (an extension module cannot
# link as a test binary) but build into the same target directory, so the
# kiln crates are compiled once for both. Debug builds: the numeric crates
# are optimized even there (the bindings copy the workspace's profiles).
# Python: a virtualenv in target/bindings-venv with maturin and pytest.
# Node: `npm ci` and `node --test`. The tests use a tiny random model and
# the default model (fetched into $KILN_HOME like the Rust tests do).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
command -v node >/dev/null || { echo "error: node (18 or later) is needed for the Node.js binding" >&2; exit 1; }
command -v npm >/dev/null || { echo "error: npm is needed for the Node.js binding" >&2; exit 1; }

for b in bindings/python bindings/node; do
  echo "== $b: cargo fmt --check, clippy (warnings denied)"
  (cd "$b" && cargo fmt -- --check && cargo clippy --locked -- -D warnings)
done

echo "== bindings/python: build (maturin develop) and pytest"
venv="$CARGO_TARGET_DIR/bindings-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.5,<2" "pytest>=7"
(cd bindings/python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --locked -q)
"$venv/bin/python" -m pytest -q bindings/python/tests

echo "== bindings/node: build (napi, debug) and node --test"
(cd bindings/node && npm ci --no-audit --no-fund --loglevel=error && npm run build:debug && npm test)
