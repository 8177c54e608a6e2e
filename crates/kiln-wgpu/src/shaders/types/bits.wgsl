// What the formats share: how the products read them, and how their
// fields become floats.

// Eight weights of a row as the products read them: `a` holds columns
// 4·ca .. 4·ca + 3 and `b` columns 4·cb .. 4·cb + 3 (each format's `unit`
// says which eight a unit is).
struct Unit {
    a: vec4<f32>,
    b: vec4<f32>,
    ca: u32,
    cb: u32,
}

// Small integers (below 2^23) as floats without a conversion
// instruction (a quarter of the float rate on NVIDIA): 2^23 + v has v
// in its mantissa, and subtracting 2^23 is exact. Only one such value
// may enter a float sum: NVIDIA's Vulkan compiler reassociates float
// adds, and (a − 2^23) + 16·(b − 2^23) became a + 16·b − 17·2^23, which
// lost the low bits (Q6_K's 6-bit values were off by up to 8). Fields
// are combined as integers first (`fields`).
fn small_floats(v: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
}

// The `mask` bits at bit `shift` of each byte of `q`.
fn fields(q: u32, shift: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(q) >> vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u)) & vec4<u32>(mask);
}

// The four nibbles of `q` at bit `shift` of each byte, as floats.
fn nibbles(q: u32, shift: u32) -> vec4<f32> {
    return small_floats(fields(q, shift, 0xfu));
}

// Nibbles of `q` at `shift` with 2-bit (`mask` 3) or 1-bit (`mask` 1)
// fields of `h` at `hshift` above them, as floats (Q6_K's and Q5_K's
// values).
fn wide_nibbles(q: u32, shift: u32, h: u32, hshift: u32, mask: u32) -> vec4<f32> {
    return small_floats(fields(q, shift, 0xfu) | (fields(h, hshift, mask) << vec4<u32>(4u)));
}

// The four bytes of `q` as signed integers, as floats (each byte with its
// sign bit flipped is the value + 128).
fn signed_bytes(q: u32) -> vec4<f32> {
    return small_floats(fields(q ^ 0x80808080u, 0u, 0xffu)) - vec4<f32>(128.0);
}

// The four f16 values of words a and b, as floats.
fn halves(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
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
    return small_floats(hi);
}

// The scales and mins of sub-blocks 2c and 2c + 1 (c < 4) of a Q4_K or
// Q5_K block, as (sc_2c, m_2c, sc_2c+1, m_2c+1) (`k_scales` of the two
// sub-blocks below 4, or above).
fn k_pair_scales(s0: u32, s1: u32, s2: u32, c: u32) -> vec4<f32> {
    let jb = (2u * c) & 3u;
    let a = k_scales(s0, s1, s2, jb);
    let b = k_scales(s0, s1, s2, jb + 1u);
    return select(vec4<f32>(a.xy, b.xy), vec4<f32>(a.zw, b.zw), c >= 2u);
}

// The sum of a vector's four values.
fn sum4(v: vec4<f32>) -> f32 {
    return dot(v, vec4<f32>(1.0));
}

// 32 input values the decode product multiplies a piece of a row with
// (k_piece.wgsl's `piece_dot`): columns 4·c.x .. 4·c.x + 15 as a0..a3 and
// 4·c.y .. 4·c.y + 15 as b0..b3, where c is the format's `piece_cols`.
struct X8 {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    b0: vec4<f32>,
    b1: vec4<f32>,
    b2: vec4<f32>,
    b3: vec4<f32>,
}
