"""Sums ncu's per-kernel GPU time (gpu__time_duration.sum, CSV) by kernel
name: count, total and mean microseconds, and the share of the total."""
import csv
import sys
from collections import defaultdict

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        unit = r.get("Metric Unit", "")
        v = float(r["Metric Value"].replace(",", ""))
        us = v / 1000 if unit in ("nsecond", "ns") else v * 1000 if unit in ("msecond", "ms") else v
        rows.append((r["Kernel Name"].split("(")[0], r.get("Grid Size", ""), us))
tot = defaultdict(float)
cnt = defaultdict(int)
for name, grid, us in rows:
    tot[name] += us
    cnt[name] += 1
total = sum(tot.values())
print(f"{len(rows)} kernels, {total:.1f} us in all")
for name in sorted(tot, key=tot.get, reverse=True):
    print(f"{name:40s} {cnt[name]:6d} {tot[name]:10.1f} us {tot[name] / cnt[name]:8.2f} us/call {100 * tot[name] / total:5.1f}%")
