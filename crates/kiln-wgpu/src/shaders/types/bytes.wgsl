// Reads of a weight matrix kept as the GGUF file stores it (`w`, bound by
// the kernel that includes this file): any byte, and f16 values at even
// byte offsets (blocks of 18 or 34 bytes are not word-aligned).

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
