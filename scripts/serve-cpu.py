#!/usr/bin/env python3
"""What serving costs next to the engine, by per-thread CPU accounting.

Starts `kiln serve` in process and with `--isolate` (engine in a worker
process), streams ROUNDS requests of TOKENS tokens to each in turn (curl, so
no client CPU is counted), and reads every thread's CPU time from
/proc/PID/task/TID/schedstat (nanoseconds) before and after each request,
for the server and its worker process. Threads are split into

  engine:  the engine loop (`kiln-engine`) and its kernel pool
           (`kiln-worker-N`), which compute the tokens;
  serving: everything else: tokio's HTTP workers, and with --isolate the
           socket reader/ticker in the server and the forwarding threads in
           the worker.

The serving share (serving CPU / engine CPU) is the CPU serving takes from
the cores the engine fills (a floor on the slowdown: wake-ups and cache
effects come on top). Wall-clock tok/s ratios on a shared 2-core box swing
by +-15%; CPU time per thread does not.

  scripts/serve-cpu.py [--kiln BIN] [--model M] [--tokens N] [--rounds R] [--threads T]
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ENGINE = re.compile(r"^(kiln-engine|kiln-worker-\d+)$")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads(pid):
    """{tid: (name, cpu seconds)} of a process."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            ns = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        out[(pid, tid)] = (name, ns / 1e9)
    return out


def family(pid):
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    snap = threads(pid)
    for k in kids:
        snap.update(threads(int(k)))
    return snap


def split(before, after):
    """(engine seconds, serving seconds, serving seconds by thread name) between two snapshots."""
    eng, srv, by = 0.0, 0.0, {}
    for key, (name, t) in after.items():
        d = t - before.get(key, (name, 0.0))[1]
        if ENGINE.match(name):
            eng += d
        else:
            srv += d
            by[name] = by.get(name, 0.0) + d
    return eng, srv, by


def stream(port, model, n):
    body = {"model": model, "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": n, "temperature": 0, "stream": True, "ignore_eos": True}
    t0 = time.perf_counter()
    subprocess.run(["curl", "-sS", "-N", "-o", "/dev/null", f"http://127.0.0.1:{port}/v1/chat/completions",
                    "-H", "Content-Type: application/json", "-d", json.dumps(body)], check=True, timeout=600)
    return time.perf_counter() - t0


def start(kiln, model, threads_arg, extra):
    port = free_port()
    log = open(f"/tmp/serve-cpu-{port}.log", "w")
    p = subprocess.Popen([kiln, "serve", "--model", model, "--port", str(port), "--threads", str(threads_arg), *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return p, port
        except OSError:
            if p.poll() is not None:
                sys.exit(f"kiln serve {' '.join(extra)} exited; see {log.name}")
            time.sleep(0.1)
    sys.exit("the server did not come up")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not shutil.which("curl"):
        sys.exit("curl is needed")
    modes = [("in process", []), ("--isolate", ["--isolate"])]
    servers = [start(a.kiln, a.model, a.threads, extra) for _, extra in modes]
    name = json.load(urllib.request.urlopen(f"http://127.0.0.1:{servers[0][1]}/v1/models"))["data"][-1]["id"]
    try:
        for _, port in servers:
            stream(port, name, 64)  # warm
        print(f"{a.tokens} streamed tokens per request, {a.threads} engine threads, load {os.getloadavg()[0]:.2f}")
        print("| round | mode | wall s | engine CPU ms/token | serving CPU us/token | serving / engine | serving threads (s) |")
        print("|---|---|---|---|---|---|---|")
        shares = {m: [] for m, _ in modes}
        for r in range(1, a.rounds + 1):
            for (mode, _), (p, port) in zip(modes, servers):
                before = family(p.pid)
                wall = stream(port, name, a.tokens)
                eng, srv, by = split(before, family(p.pid))
                shares[mode].append(srv / eng)
                top = ", ".join(f"{k} {v:.3f}" for k, v in sorted(by.items(), key=lambda x: -x[1]) if v >= 0.0005)
                print(f"| {r} | {mode} | {wall:.2f} | {eng / a.tokens * 1e3:.3f} | {srv / a.tokens * 1e6:.1f} | "
                      f"{srv / eng * 100:.2f}% | {top} |")
        for m, v in shares.items():
            v = sorted(v)
            print(f"{m}: serving / engine CPU, median {v[len(v) // 2] * 100:.2f}% (min {v[0] * 100:.2f}%, max {v[-1] * 100:.2f}%)")
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
