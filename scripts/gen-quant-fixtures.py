#!/usr/bin/env python3
"""Writes crates/kiln-kernels/tests/fixtures/dequant.bin: random GGUF blocks of
every type kiln reads, with their dequantization by an independent reference,
the `gguf` PyPI package (`gguf.quants.dequantize`).

Usage: pip install gguf numpy && python3 scripts/gen-quant-fixtures.py

gguf-py has no dequantizer for the activation types Q8_1 and Q8_K (and lists
Q8_1 with an outdated 40-byte size; ggml's block_q8_1 is 36 bytes: f16 d,
f16 s, 32 x i8); for those two the reference is the plain formula `d * q`,
written here in numpy.

File format (little-endian), repeated records:
    u32 ggml type id, u32 n_elements, u32 n_bytes, n_bytes raw block bytes,
    n_elements f32 reference values.
"""
import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/kiln-kernels/tests/fixtures/dequant.bin"
rng = np.random.default_rng(20240611)

# type: (block elements, block bytes, byte offsets of f16 scale fields, offset of an f32 scale or None)
LAYOUT = {
    T.Q4_0: (32, 18, [0], None),
    T.Q4_1: (32, 20, [0, 2], None),
    T.Q5_0: (32, 22, [0], None),
    T.Q5_1: (32, 24, [0, 2], None),
    T.Q8_0: (32, 34, [0], None),
    T.Q8_1: (32, 36, [0, 2], None),
    T.Q2_K: (256, 84, [80, 82], None),
    T.Q3_K: (256, 110, [108], None),
    T.Q4_K: (256, 144, [0, 2], None),
    T.Q5_K: (256, 176, [0, 2], None),
    T.Q6_K: (256, 210, [208], None),
    T.Q8_K: (256, 292, [], 0),
    T.MXFP4: (32, 17, [], None),
}


def random_blocks(qtype, n_blocks):
    bs, size, f16_offs, f32_off = LAYOUT[qtype]
    raw = bytearray(rng.integers(0, 256, size=n_blocks * size, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        for off in f16_offs:
            v = np.float16(rng.choice([-1, 1]) * rng.uniform(1e-3, 2.0))
            raw[b * size + off : b * size + off + 2] = v.tobytes()
        if f32_off is not None:
            raw[b * size + f32_off : b * size + f32_off + 4] = struct.pack("<f", rng.uniform(-2, 2))
        if qtype == T.MXFP4:
            # E8M0 scale byte: any is exact; keep the values in a readable range.
            raw[b * size] = int(rng.integers(100, 155))
    return bytes(raw), n_blocks * bs


def reference(qtype, raw, n):
    data = np.frombuffer(raw, dtype=np.uint8)
    if qtype == T.Q8_1:
        blocks = data.reshape(-1, 36)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (d * blocks[:, 4:].view(np.int8).astype(np.float32)).reshape(-1)
    if qtype == T.Q8_K:
        blocks = data.reshape(-1, 292)
        d = blocks[:, 0:4].copy().view(np.float32)
        return (d * blocks[:, 4:260].view(np.int8).astype(np.float32)).reshape(-1)
    out = dequantize(data, qtype).astype(np.float32).reshape(-1)
    assert out.size == n, (qtype, out.size, n)
    return out


def float_record(qtype, n):
    if qtype == T.F32:
        vals = rng.standard_normal(n).astype(np.float32)
        raw = vals.tobytes()
    elif qtype == T.F16:
        vals = rng.standard_normal(n).astype(np.float16)
        raw = vals.tobytes()
    else:  # BF16: random finite bit patterns of normal range
        f = rng.standard_normal(n).astype(np.float32) * 10.0
        raw = (f.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return raw, reference_float(qtype, raw)


def reference_float(qtype, raw):
    return dequantize(np.frombuffer(raw, dtype=np.uint8), qtype).astype(np.float32).reshape(-1) \
        if qtype != T.F32 else np.frombuffer(raw, dtype=np.float32)


def main():
    records = []
    for qtype in (T.F32, T.F16, T.BF16):
        raw, ref = float_record(qtype, 64)
        records.append((qtype, raw, ref))
    for qtype, (bs, _, _, _) in LAYOUT.items():
        raw, n = random_blocks(qtype, 6 if bs == 32 else 3)
        records.append((qtype, raw, reference(qtype, raw, n)))
    with open(OUT, "wb") as f:
        for qtype, raw, ref in records:
            ref = np.ascontiguousarray(ref, dtype="<f4")
            assert np.all(np.isfinite(ref))
            f.write(struct.pack("<III", int(qtype), ref.size, len(raw)))
            f.write(raw)
            f.write(ref.tobytes())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(records)} records)")


if __name__ == "__main__":
    main()
