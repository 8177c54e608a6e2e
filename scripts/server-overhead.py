#!/usr/bin/env python3
"""Decode tok/s of one request three ways, alternating in one run:

- direct:   the engine without a server (`kiln run ... --ignore-eos`, its own
            decode rate);
- http:     one streamed chat completion from `kiln serve` (in process),
            measured by this client from the first to the last token;
- isolated: the same from `kiln serve --isolate` (engine in a worker process).

Prints the medians and the ratios http/direct (issue 3's server overhead)
and isolated/http (issue 7's transport cost), and writes JSON with every
trial. Standard library only, so it runs on the GPU machine too (no pip
there); any model file works, e.g. a random-weight one of real shape.

    scripts/server-overhead.py --kiln target/release/kiln --model smollm2 \
        [--device cuda] [--threads 2] [--trials 7] [--gen 256] [--json out.json]
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

PROMPT = "Write a long story about a dragon who learns to bake bread."


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def common(a):
    out = ["--device", a.device]
    if a.threads:
        out += ["--threads", str(a.threads)]
    return out


def start(a, extra, log):
    port = free_port()
    p = subprocess.Popen([a.kiln, "serve", "--model", a.model, "--port", str(port)] + common(a) + extra,
                         stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    with urllib.request.urlopen(url + "/v1/models", timeout=5) as m:
                        return p, url, json.load(m)["data"][0]["id"]
        except OSError:
            pass
        if p.poll() is not None:
            sys.exit(f"kiln serve {' '.join(extra)} exited with {p.returncode}")
        time.sleep(0.1)
    sys.exit("server did not come up")


def direct(a):
    cmd = [a.kiln, "run", a.model, PROMPT, "-n", str(a.gen), "--ignore-eos"] + common(a)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"decode (\d+) tokens at ([\d.]+) tok/s", p.stderr)
    if not m:
        sys.exit(f"no decode rate in the output of {' '.join(cmd)}:\n{p.stderr[-2000:]}")
    return float(m.group(2))


def streamed(url, model, gen):
    """Tokens after the first / seconds from the first to the last token.

    No logprobs are asked for (they would make the GPU copy every row's
    logits to the host); the token count comes from the usage record, and
    the first token is sent on its own (the server never holds it back).
    """
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": gen,
            "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    first = last = None
    tokens = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            now = time.perf_counter()
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            ch = ev.get("choices") or []
            if ch and (ch[0].get("delta") or {}).get("content"):
                first = first or now
                last = now
    if first is None or last == first or not tokens:
        sys.exit("the stream carried no tokens")
    return (tokens - 1) / (last - first)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--json")
    a = ap.parse_args()
    log = open(os.environ.get("KILN_OVERHEAD_LOG", os.devnull), "ab")
    servers = []
    try:
        inproc = start(a, [], log)
        servers.append(inproc[0])
        iso = start(a, ["--isolate"], log)
        servers.append(iso[0])
        streamed(inproc[1], inproc[2], 16)  # warm both
        streamed(iso[1], iso[2], 16)
        rows = {"direct": [], "http": [], "isolated": []}
        for t in range(a.trials):
            rows["direct"].append(direct(a))
            rows["http"].append(streamed(inproc[1], inproc[2], a.gen))
            rows["isolated"].append(streamed(iso[1], iso[2], a.gen))
            print(f"trial {t + 1}: direct {rows['direct'][-1]:.1f}, http {rows['http'][-1]:.1f}, "
                  f"isolated {rows['isolated'][-1]:.1f} tok/s", flush=True)
    finally:
        for p in servers:
            p.terminate()
            p.wait()
    med = {k: statistics.median(v) for k, v in rows.items()}
    # Per-trial ratios (neighbours in time share the machine's state).
    hd = [h / d for h, d in zip(rows["http"], rows["direct"])]
    ih = [i / h for i, h in zip(rows["isolated"], rows["http"])]
    res = {"model": a.model, "device": a.device, "threads": a.threads, "gen": a.gen, "trials": rows, "median": med,
           "http_over_direct": med["http"] / med["direct"], "isolated_over_http": med["isolated"] / med["http"],
           "median_of_trial_ratios": {"http_over_direct": statistics.median(hd), "isolated_over_http": statistics.median(ih)},
           "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    print(f"median decode tok/s: direct {med['direct']:.1f}, http {med['http']:.1f}, isolated {med['isolated']:.1f}; "
          f"http/direct {res['http_over_direct']:.4f} (per-trial median {statistics.median(hd):.4f}), "
          f"isolated/http {res['isolated_over_http']:.4f} (per-trial median {statistics.median(ih):.4f}); "
          f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
