#!/usr/bin/env python3
"""Replays kiln's prompt lookup (crates/kiln-engine/src/spec.rs: longest
suffix of 4 down to MIN_NGRAM tokens, latest occurrence, adaptive length
and pauses) over a prompt and the answer greedy decoding gave it, and
prints what each shortest n-gram proposes and keeps and the speedup a
verification cost implies (a step of k + 1 rows costs 1 + COST * k decode
steps). Greedy answers are deterministic, so a proposal is kept exactly
when it matches the answer's next tokens.

  llama-tokenize -m MODEL.gguf -f PROMPT.txt --ids --log-disable > p.ids
  kiln run MODEL "$(cat PROMPT.txt)" -n 200 --temperature 0 > answer.txt
  llama-tokenize -m MODEL.gguf -f answer.txt --ids --log-disable > a.ids
  ngram_sim.py p.ids a.ids [--cost 0.08,0.2,0.4] [--steps 1:1,2:1.17,5:1.69,9:1.45]

--steps takes measured step costs instead (`kiln bench --step-rows`: rows
of one step and its cost in one-row steps), interpolated between rows.
"""
import argparse
import ast

MAX_NGRAM = 4


def lookup(h, want, min_n):
    n, last, best = len(h), h[-1], (0, 0)
    for end in range(n - 1, max(n - 8192, 1) - 1, -1):
        if h[end - 1] != last:
            continue
        length = 0
        for k in range(1, min(MAX_NGRAM, end) + 1):
            if h[end - k] != h[n - k]:
                break
            length = k
        if length > best[0]:
            best = (length, end)
            if length == MAX_NGRAM:
                break
    length, start = best
    return h[start:min(start + want, n)] if length >= min_n else []


def step_cost(table, rows):
    """Cost of a step of `rows` rows, in one-row steps, from (rows, cost) pairs."""
    pts = sorted(table)
    if rows <= pts[0][0]:
        return pts[0][1]
    for (r0, c0), (r1, c1) in zip(pts, pts[1:]):
        if rows <= r1:
            return c0 + (c1 - c0) * (rows - r0) / (r1 - r0)
    return pts[-1][1] * rows / pts[-1][0]


def replay(prompt, answer, min_n, cost, max_draft=8):
    length, misses, pause, next_pause = min(4, max_draft), 0, 0, 16
    i = steps = proposed = kept_all = 0
    work = 0.0
    while i < len(answer):
        draft = []
        if pause:
            pause -= 1
        else:
            draft = lookup(prompt + answer[:i], min(length, len(answer) - i - 1), min_n)
        kept = 0
        while kept < len(draft) and draft[kept] == answer[i + kept]:
            kept += 1
        steps += 1
        work += step_cost(cost, len(draft) + 1) if isinstance(cost, list) else 1 + cost * len(draft)
        if draft:
            proposed += len(draft)
            kept_all += kept
            if kept == len(draft):
                length = min(length + 2, max_draft)
            elif kept == 0:
                length = max(length // 2, 1)
            else:
                length = min(kept, max_draft)
            if kept == 0:
                misses += 1
                if misses >= 3:
                    pause, next_pause, misses = next_pause, min(next_pause * 2, 256), 0
            else:
                misses, next_pause = 0, 16
        i += kept + 1
    return len(answer) / work, proposed, kept_all, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prompt_ids")
    ap.add_argument("answer_ids")
    ap.add_argument("--cost", default="0.08,0.2,0.4")
    ap.add_argument("--steps", help="ROWS:COST,... measured step costs")
    ap.add_argument("--min-ngram", default="2,3")
    a = ap.parse_args()
    prompt = ast.literal_eval(open(a.prompt_ids).read().strip())
    answer = ast.literal_eval(open(a.answer_ids).read().strip())
    print("| shortest n-gram | cost per extra row | speedup | proposed | kept | steps | tokens |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    costs = [float(c) for c in a.cost.split(",")]
    if a.steps:
        costs = [[tuple(float(v) for v in p.split(":")) for p in a.steps.split(",")]]
    for min_n in (int(n) for n in a.min_ngram.split(",")):
        for cost in costs:
            s, p, k, st = replay(prompt, answer, min_n, cost)
            shown = "measured" if isinstance(cost, list) else cost
            print(f"| {min_n} | {shown} | {s:.2f} | {p} | {k} | {st} | {len(answer)} |")


if __name__ == "__main__":
    main()
