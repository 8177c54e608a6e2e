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

// Eight weights of a row as the products read them: `a` holds columns
// 4·ca .. 4·ca + 3 and `b` columns 4·cb .. 4·cb + 3 (each format's `unit`
// says which eight a unit is).
struct Unit {
    a: vec4<f32>,
    b: vec4<f32>,
    ca: u32,
    cb: u32,
}

// The four nibbles of `q` at bit `shift` of each byte, as floats.
fn nibbles(q: u32, shift: u32) -> vec4<f32> {
    let v = (vec4<u32>(q) >> vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u)) & vec4<u32>(0xfu);
    return vec4<f32>(v);
}

// The four bytes of `q` as signed integers, as floats.
fn signed_bytes(q: u32) -> vec4<f32> {
    let v = bitcast<vec4<i32>>(vec4<u32>(q) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
    return vec4<f32>(v);
}

// The four 2-bit fields of `q` at bit `shift` of each byte, as floats.
fn pairs(q: u32, shift: u32) -> vec4<f32> {
    let v = (vec4<u32>(q) >> vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u)) & vec4<u32>(3u);
    return vec4<f32>(v);
}

// The four bits of `q` at bit `shift` of each byte, as floats.
fn bits(q: u32, shift: u32) -> vec4<f32> {
    let v = (vec4<u32>(q) >> vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u)) & vec4<u32>(1u);
    return vec4<f32>(v);
}

// Byte `off` as a signed integer, as a float.
fn signed_byte_at(off: u32) -> f32 {
    return f32(bitcast<i32>(byte_at(off) << 24u) >> 24u);
}

// The 6-bit scales and mins of sub-blocks j and j + 4 (j < 4) of a Q4_K
// or Q5_K block, from its 12 scale bytes (words s0, s1, s2), as (sc_j,
// m_j, sc_j+4, m_j+4): sub-block j keeps them in the low 6 bits of bytes j
// and j + 4, sub-block j + 4 in the nibbles of byte j + 8 with the top 2
// bits of bytes j and j + 4.
fn k_scales(s0: u32, s1: u32, s2: u32, j: u32) -> vec4<f32> {
    let sh = 8u * j;
    let b0 = (s0 >> sh) & 0xffu;
    let b1 = (s1 >> sh) & 0xffu;
    let b2 = (s2 >> sh) & 0xffu;
    let hi = vec4<u32>(b0 & 63u, b1 & 63u, (b2 & 0xfu) | ((b0 >> 6u) << 4u), (b2 >> 4u) | ((b1 >> 6u) << 4u));
    return vec4<f32>(hi);
}
