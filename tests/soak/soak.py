"""Soak test of `kiln serve`: many concurrent streaming clients for a bounded
time, with mixed lengths, random disconnects and some invalid requests.

Pass criteria (exit status 1 otherwise, with the reason):
- no failed request: every valid request ends with a complete stream (or an
  explicit 429), every invalid one gets a 4xx, nothing gets a 5xx or a broken
  connection;
- RSS stable: the median RSS of the last 10% of the run is within
  --max-drift (2%) of the median RSS right after the warm-up;
- no KV block leaked: after all clients leave, /metrics shows no running or
  waiting request and kiln_kv_blocks_used 0.

Writes a JSON summary, the RSS samples (CSV) and an SVG plot of RSS over time.
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import time

import httpx

WORDS = "the of and to in is that for it as was with be by on not he this are or his from at which but have an had they you".split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def invalid_request(rng, model):
    """A request the server must refuse with a 4xx."""
    kind = rng.randrange(6)
    path = "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    if kind == 0:
        return path, b"{not json", 400
    if kind == 1:
        return path, json.dumps({"model": model, "messages": msgs, "max_tokens": -5}).encode(), 400
    if kind == 2:
        return path, json.dumps({"model": model, "messages": msgs, "temperature": -1}).encode(), 400
    if kind == 3:
        return path, json.dumps({"model": "no-such-model", "messages": msgs}).encode(), 404
    if kind == 4:
        return path, json.dumps({"model": model, "messages": []}).encode(), 400
    return "/v1/completions", json.dumps({"model": model, "prompt": "x", "top_p": 7}).encode(), 400


class Stats:
    def __init__(self):
        self.ok = 0
        self.disconnected = 0
        self.invalid_ok = 0
        self.rejected_429 = 0
        self.failures = []
        self.latency_ms = []
        self.ttft_ms = []
        self.tokens = 0


async def client(i, args, stats, deadline, model):
    rng = random.Random(args.seed * 1000 + i)
    timeout = httpx.Timeout(300.0, connect=30.0)
    async with httpx.AsyncClient(base_url=args.url, timeout=timeout) as http:
        while time.monotonic() < deadline:
            r = rng.random()
            try:
                if r < args.invalid_rate:
                    path, body, want = invalid_request(rng, model)
                    resp = await http.post(path, content=body, headers={"content-type": "application/json"})
                    if 400 <= resp.status_code < 500:
                        stats.invalid_ok += 1
                    else:
                        stats.failures.append(f"invalid request answered {resp.status_code} (wanted {want})")
                    continue
                disconnect = r < args.invalid_rate + args.disconnect_rate
                words = rng.choice([8, 32, 128, 400])
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": text(rng, words)}],
                    "max_tokens": rng.choice([1, 8, 32, 128]),
                    "stream": True,
                    "temperature": rng.choice([0, 0.7]),
                    "seed": rng.randrange(1 << 30),
                }
                t0 = time.monotonic()
                first = None
                chunks = 0
                stop_after = rng.randrange(1, 6) if disconnect else None
                async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                    if resp.status_code == 429:
                        stats.rejected_429 += 1
                        await asyncio.sleep(float(resp.headers.get("retry-after", "1")))
                        continue
                    if resp.status_code != 200:
                        stats.failures.append(f"valid request answered {resp.status_code}: {(await resp.aread())[:200]!r}")
                        continue
                    done = False
                    async for line in resp.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        data = line[6:]
                        if data == "[DONE]":
                            done = True
                            break
                        ev = json.loads(data)
                        if "error" in ev:
                            stats.failures.append(f"stream error: {ev['error']}")
                            break
                        if first is None:
                            first = time.monotonic()
                        chunks += 1
                        if stop_after is not None and chunks >= stop_after:
                            break  # leaving the block closes the connection mid-stream
                if stop_after is not None and not done:
                    stats.disconnected += 1
                    continue
                if not done:
                    stats.failures.append("stream ended without [DONE]")
                    continue
                stats.ok += 1
                stats.tokens += chunks
                stats.latency_ms.append((time.monotonic() - t0) * 1e3)
                if first is not None:
                    stats.ttft_ms.append((first - t0) * 1e3)
            except (httpx.HTTPError, json.JSONDecodeError) as e:
                stats.failures.append(f"{type(e).__name__}: {e}")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def sample_rss(pid, samples, stop, t0):
    while not stop.is_set():
        samples.append((time.monotonic() - t0, rss_kib(pid)))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass


def metrics(url):
    out = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        name = k.split("{")[0]
        out[name] = out.get(name, 0.0) + float(v)
    return out


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def svg_plot(samples, warmup, path):
    w, h, pad = 720, 320, 50
    ts = [t for t, _ in samples]
    vs = [v / 1024 for _, v in samples]
    t1, v0, v1 = max(ts) or 1, min(vs) * 0.98, max(vs) * 1.02 or 1
    x = lambda t: pad + (w - 2 * pad) * t / t1
    y = lambda v: h - pad - (h - 2 * pad) * (v - v0) / max(v1 - v0, 1e-9)
    pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(ts, vs))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
        f'<line x1="{x(warmup):.1f}" y1="{pad}" x2="{x(warmup):.1f}" y2="{h - pad}" stroke="gray" stroke-dasharray="4"/>',
        f'<text x="{x(warmup) + 4:.1f}" y="{pad + 12}" fill="gray">end of warm-up</text>',
        f'<polyline points="{pts}" fill="none" stroke="#c0392b" stroke-width="1.5"/>',
        f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">time (s)</text>',
        f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">server RSS (MiB)</text>',
        f'<text x="{pad - 4}" y="{y(v0) + 4:.1f}" text-anchor="end">{v0:.0f}</text>',
        f'<text x="{pad - 4}" y="{y(v1) + 4:.1f}" text-anchor="end">{v1:.0f}</text>',
        f'<text x="{w - pad}" y="{h - pad + 16}" text-anchor="end">{t1:.0f}</text>',
        "</svg>",
    ]
    with open(path, "w") as f:
        f.write("\n".join(parts))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=None, help="seconds (default: 20%% of the run)")
    ap.add_argument("--invalid-rate", type=float, default=0.05)
    ap.add_argument("--disconnect-rate", type=float, default=0.10)
    ap.add_argument("--max-drift", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="target/soak")
    args = ap.parse_args()
    model = args.model or httpx.get(args.url + "/v1/models").json()["data"][0]["id"]
    warmup = args.warmup if args.warmup is not None else 0.2 * args.duration
    stats, samples, stop = Stats(), [], asyncio.Event()
    t0 = time.monotonic()
    sampler = asyncio.create_task(sample_rss(args.pid, samples, stop, t0))
    deadline = t0 + args.duration
    await asyncio.gather(*(client(i, args, stats, deadline, model) for i in range(args.clients)))
    wall = time.monotonic() - t0
    # All clients gone: the engine must drain to nothing.
    idle, m = False, {}
    for _ in range(120):
        m = metrics(args.url)
        if m.get("kiln_queue_running", 1) == 0 and m.get("kiln_queue_waiting", 1) == 0 and m.get("kiln_kv_blocks_used", 1) == 0:
            idle = True
            break
        await asyncio.sleep(0.5)
    stop.set()
    await sampler
    after = [v for t, v in samples if t >= warmup]
    n = max(1, len(after) // 10)
    base, end = statistics.median(after[:n]), statistics.median(after[-n:])
    drift = (end - base) / base if base else float("nan")
    import os

    os.makedirs(args.out, exist_ok=True)
    with open(f"{args.out}/rss.csv", "w") as f:
        f.write("seconds,rss_kib\n" + "".join(f"{t:.1f},{v}\n" for t, v in samples))
    svg_plot(samples, warmup, f"{args.out}/rss.svg")
    summary = {
        "clients": args.clients,
        "duration_s": round(wall, 1),
        "requests_ok": stats.ok,
        "disconnected_on_purpose": stats.disconnected,
        "invalid_refused_4xx": stats.invalid_ok,
        "rejected_429": stats.rejected_429,
        "failures": len(stats.failures),
        "failure_examples": stats.failures[:10],
        "tokens": stats.tokens,
        "latency_ms_p50": pct(stats.latency_ms, 50),
        "latency_ms_p99": pct(stats.latency_ms, 99),
        "ttft_ms_p50": pct(stats.ttft_ms, 50),
        "ttft_ms_p99": pct(stats.ttft_ms, 99),
        "rss_mib_after_warmup": round(base / 1024, 1),
        "rss_mib_end": round(end / 1024, 1),
        "rss_mib_max": round(max(v for _, v in samples) / 1024, 1),
        "rss_drift": round(drift, 4),
        "kv_blocks_used_after": m.get("kiln_kv_blocks_used"),
        "running_after": m.get("kiln_queue_running"),
        "waiting_after": m.get("kiln_queue_waiting"),
        "cancelled_total": m.get("kiln_cancelled_total"),
        "preemptions_total": m.get("kiln_preemptions_total"),
    }
    with open(f"{args.out}/summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    problems = []
    if stats.failures:
        problems.append(f"{len(stats.failures)} failed requests")
    if stats.ok == 0:
        problems.append("no request completed")
    if not idle:
        problems.append(f"engine not idle after the clients left (kv_blocks_used={m.get('kiln_kv_blocks_used')})")
    if not abs(drift) <= args.max_drift:
        problems.append(f"RSS drift {drift:.2%} > {args.max_drift:.0%}")
    if problems:
        print("SOAK FAILED: " + "; ".join(problems), file=sys.stderr)
        sys.exit(1)
    print("soak passed", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
