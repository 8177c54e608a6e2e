// A weight matrix kept as the GGUF file stores it, read as words (formats
// whose blocks are not 16-byte aligned: Q4_0, Q4_1, Q8_0, Q6_K): any
// byte, and f16 values at even byte offsets (blocks of 18, 34 or 210
// bytes are not word-aligned).
@group(0) @binding(1) var<storage, read> w: array<u32>;

fn byte_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

fn half_at(off: u32) -> f32 {
    let word = w[off >> 2u];
    return unpack2x16float(select(word & 0xffffu, word >> 16u, (off & 2u) != 0u)).x;
}

// Four bytes at a 2-aligned offset, little-endian.
fn word_at(off: u32) -> u32 {
    if ((off & 3u) == 0u) {
        return w[off >> 2u];
    }
    return (w[off >> 2u] >> 16u) | (w[(off >> 2u) + 1u] << 16u);
}

// Byte `off` as a signed integer, as a float.
fn signed_byte_at(off: u32) -> f32 {
    return f32(bitcast<i32>(byte_at(off) << 24u) >> 24u);
}
