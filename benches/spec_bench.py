#!/usr/bin/env python3
"""Decode speed of chat answers on OpenAI-compatible servers, plain and
speculative, side by side: each workload (a prompt file) is sent to every
server in turn, round after round, greedy, streamed; decode tok/s is the
answer's tokens after the first over the time from the first to the last.
Prints a table of medians and whether each speculative server's answers
equal its plain twin's (a server named `X+spec` is compared with `X`):
speculation must not change the output.

  spec_bench.py --max-tokens 200 --rounds 3 kiln=URL kiln+spec=URL ... PROMPT_FILE ...
"""
import argparse
import json
import statistics
import time
import urllib.request


def stream(url, model, prompt, max_tokens):
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    start = time.perf_counter()
    first = last = None
    text, tokens = "", 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            ev = json.loads(line[5:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            for c in ev.get("choices", []):
                piece = (c.get("delta") or {}).get("content") or ""
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    text += piece
    decode = (tokens - 1) / (last - first) if first and last and last > first else 0.0
    return text, tokens, decode, (first - start) * 1000 if first else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("servers", nargs="+", help="NAME=URL ... -- PROMPT_FILE ...")
    a = ap.parse_args()
    servers = [s.split("=", 1) for s in a.servers if "=" in s]
    files = [s for s in a.servers if "=" not in s]
    print(f"| workload | server | decode tok/s (median of {a.rounds}) | tokens | TTFT ms | same answer as plain |")
    print("| --- | --- | --- | --- | --- | --- |")
    for f in files:
        prompt = open(f).read()
        runs = {name: [] for name, _ in servers}
        texts = {}
        for _ in range(a.rounds):
            for name, url in servers:
                text, tokens, decode, ttft = stream(url, a.model, prompt, a.max_tokens)
                runs[name].append((decode, tokens, ttft))
                texts.setdefault(name, text)
        for name, _ in servers:
            d = statistics.median(r[0] for r in runs[name])
            t = runs[name][0][1]
            ttft = statistics.median(r[2] for r in runs[name])
            base = name.split("+", 1)[0]
            same = "-" if base == name or base not in texts else ("yes" if texts[name] == texts[base] else "no")
            print(f"| {f.rsplit('/', 1)[-1]} | {name} | {d:.1f} | {t} | {ttft:.1f} | {same} |")


if __name__ == "__main__":
    main()
