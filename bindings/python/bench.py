"""Decode tok/s and TTFT through the Python binding, measured as `kiln bench` measures the engine.

Each iteration runs `--streams` generations at once on fresh random prompts of
`--prompt-len` tokens (EOS ignored, `--gen-len` tokens each): all are submitted,
then each is read on its own thread (or, with `--asyncio`, its own task).
TTFT is submission to the first token; decode tok/s counts the tokens after the
first over the time from the first to the last. Every iteration through the
binding is paired with one of the engine measured as `kiln bench` measures it
(Rust threads reading the same engine in this process), in alternating order,
so the two see the same load. Prints medians over every stream of every
measured iteration as JSON (`kiln bench --json`'s names; `engine_*` for the
paired engine runs).

    python bindings/python/bench.py smollm2 --prompt-len 128 --gen-len 128 --streams 16
"""

import argparse
import asyncio
import json
import random
import statistics
import threading
import time

import kiln


def measure(stream, start):
    arrivals = []
    for ev in stream:
        if not ev.eos:
            arrivals.append(time.perf_counter())
    return sample(arrivals, start)


async def ameasure(stream, start):
    arrivals = []
    async for ev in stream:
        if not ev.eos:
            arrivals.append(time.perf_counter())
    return sample(arrivals, start)


def sample(arrivals, start):
    decode_s = arrivals[-1] - arrivals[0]
    return {
        "ttft_ms": (arrivals[0] - start) * 1e3,
        "decode_tok_s": (len(arrivals) - 1) / decode_s if decode_s > 0 else 0.0,
        "gen_tokens": len(arrivals),
    }


def run_threads(m, prompts, opts):
    submitted = []
    for p in prompts:
        start = time.perf_counter()
        submitted.append((m.stream(p, **opts), start))
    if len(submitted) == 1:
        return [measure(*submitted[0])]
    out = [None] * len(submitted)

    def read(i):
        out[i] = measure(*submitted[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(submitted))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def run_tasks(m, prompts, opts):
    async def main():
        tasks = []
        for p in prompts:
            start = time.perf_counter()
            tasks.append(ameasure(m.astream(p, **opts), start))
        return await asyncio.gather(*tasks)

    return asyncio.run(main())


def random_prompts(m, rng, n, length):
    """`n` prompts of exactly `length` token ids, from random words (no prefix-cache hits)."""
    words = ["time", "river", "blue", "seven", "market", "quiet", "engine", "paper", "north", "garden", "light", "stone"]
    out = []
    for _ in range(n):
        ids = []
        while len(ids) < length:
            text = " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(length))
            ids = m.tokenize(text, add_special=False)
        out.append(ids[:length])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="smollm2")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--asyncio", action="store_true", help="read streams with asyncio tasks instead of threads")
    a = ap.parse_args()

    m = kiln.Model(a.model, threads=a.threads)
    rng = random.Random(a.seed)
    opts = dict(max_tokens=a.gen_len, ignore_eos=True, seed=a.seed)
    run = run_tasks if a.asyncio else run_threads

    def binding():
        return run(m, random_prompts(m, rng, a.streams, a.prompt_len), opts)

    def engine():
        got = m._bench_engine(random_prompts(m, rng, a.streams, a.prompt_len), a.gen_len, a.seed)
        return [{"ttft_ms": t, "decode_tok_s": d, "gen_tokens": n} for t, d, n in got]

    for _ in range(a.warmup):
        engine()
        binding()
    samples, engine_samples = [], []
    for i in range(a.iterations):
        if i % 2:
            samples += binding()
            engine_samples += engine()
        else:
            engine_samples += engine()
            samples += binding()
    assert all(s["gen_tokens"] == a.gen_len for s in samples + engine_samples), "every generation must run to --gen-len"
    med = lambda xs, k: statistics.median(s[k] for s in xs)
    print(json.dumps({
        "binding": "python-asyncio" if a.asyncio else "python",
        "model": a.model,
        "streams": a.streams,
        "prompt_tokens": a.prompt_len,
        "gen_tokens": a.gen_len,
        "iterations": a.iterations,
        "ttft_ms": med(samples, "ttft_ms"),
        "decode_tok_s": med(samples, "decode_tok_s"),
        "engine_ttft_ms": med(engine_samples, "ttft_ms"),
        "engine_decode_tok_s": med(engine_samples, "decode_tok_s"),
    }))

if __name__ == "__main__":
    main()
