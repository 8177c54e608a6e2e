"""Summarizes `ncu -i REPORT --page source --print-source sass --csv`:
warp-stall samples and executed warp instructions by opcode, and the
instructions with the most samples with their two main stall reasons.

    python3 sass-stalls.py sass.csv [warps]   # warps: the launch's warps (per-warp counts)
"""
import csv
import sys
from collections import defaultdict

rows = [r for r in csv.reader(open(sys.argv[1], newline="")) if r]
warps = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
head, data = rows[start], rows[start + 1:]
src = head.index("Source")
samp = head.index("Warp Stall Sampling (All Samples)")
exe = head.index("Instructions Executed")
stalls = {h: i for i, h in enumerate(head) if h.startswith("stall_") and "Not Issued" not in h}


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


tot = sum(num(r[samp]) for r in data) or 1.0
texe = sum(num(r[exe]) for r in data) or 1.0
print(f"{len(data)} instructions, {tot:.0f} stall samples, {texe:.0f} warp instructions executed "
      f"({texe / warps:.0f} per warp)")
by_op = defaultdict(lambda: [0.0, 0.0])
for r in data:
    words = r[src].split()
    if not words:
        continue
    op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
    by_op[op][0] += num(r[samp])
    by_op[op][1] += num(r[exe])
print("opcode      samples  executed  per warp")
for op, (n, e) in sorted(by_op.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"  {op:10s} {100 * n / tot:6.1f}% {100 * e / texe:7.1f}% {e / warps:9.0f}")
print("most sampled instructions (index, samples, executed, SASS, two main stall reasons):")
for k in sorted(sorted(range(len(data)), key=lambda k: -num(data[k][samp]))[:30]):
    r = data[k]
    why = sorted(((num(r[i]), h) for h, i in stalls.items()), reverse=True)[:2]
    print(f"  {k:5d} {100 * num(r[samp]) / tot:5.1f}% {num(r[exe]):8.0f}  {r[src].strip()[:56]:56s} "
          + ", ".join(f"{h[6:]} {v:.0f}" for v, h in why))
