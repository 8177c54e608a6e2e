#!/usr/bin/env python3
"""Sums the per-kernel CSVs of scripts/gpu/step-kernels.sh by kernel and
grid: launches and mean time, largest total first.

  scripts/gpu/step-kernels.py kernels-l8b-f16-5.csv [...]
"""
import collections
import csv
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    head, body = rows[0], rows[1:]
    name, grid, value = head.index("Kernel Name"), head.index("Grid Size"), head.index("Metric Value")
    total, count = collections.defaultdict(float), collections.Counter()
    for r in body:
        key = f"{r[name]} {r[grid]}"
        total[key] += float(r[value].replace(",", "")) / 1000
        count[key] += 1
    print(f"## {path}: {len(body)} kernels, {sum(total.values()):.0f} us")
    for key, t in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{key:60s} launches {count[key]:4d} mean {t / count[key]:8.2f} us total {t:9.1f} us")
