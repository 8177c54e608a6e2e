// GGML Q5_K: Q4_K's blocks (f16 d and dmin, 12 scale bytes) with 32
// bytes of fifth bits after the scales, then the 128 bytes of nibbles:
// bit 2c of byte l is the fifth bit of value l of sub-block 2c, bit 2c + 1
// that of sub-block 2c + 1; x = d·sc·q − dmin·m (176 bytes, read 16 at a
// time: words.wgsl).
const BLOCK_VEC4S: u32 = 11u;

// Unit u: as Q4_K's (sub-blocks j = (u / 8) % 4 and j + 4, nibble word
// k = u % 8 of each), with word k of the fifth bits (bits j and j + 4).
fn unit_cols(u: u32) -> vec2<u32> {
    let col = 64u * (u >> 5u) + 8u * ((u >> 3u) & 3u) + (u & 7u);
    return vec2<u32>(col, col + 32u);
}

fn unit(row: u32, u: u32) -> Unit {
    let j = (u >> 3u) & 3u;
    let k = u & 7u;
    let o = (row >> 4u) + (u >> 5u) * BLOCK_VEC4S;
    let hd = w[o];
    let dm = unpack2x16float(hd.x);
    let s = k_scales(hd.y, hd.z, hd.w, j);
    let h = w[o + 1u + (k >> 2u)][k & 3u];
    let sh = 4u * (j & 1u);
    let q = o + 3u + 2u * (j >> 1u) + (k >> 2u);
    let qa = wide_nibbles(w[q][k & 3u], sh, h, j, 1u);
    let qb = wide_nibbles(w[q + 4u][k & 3u], sh, h, j + 4u, 1u);
    let c = unit_cols(u);
    return Unit(dm.x * s.x * qa - dm.y * s.y, dm.x * s.z * qb - dm.y * s.w, c.x, c.y);
}

// Piece p: as Q4_K's (nibble vec4 i = p % 8 of block p / 8, sub-blocks
// 2c and 2c + 1 with c = i / 2, values 16·(i % 2) .. + 15), with fifth-bit
// vec4 i % 2 (bits 2c and 2c + 1).
fn piece_cols(p: u32) -> vec2<u32> {
    let ca = 64u * (p >> 3u) + 16u * ((p >> 1u) & 3u) + 4u * (p & 1u);
    return vec2<u32>(ca, ca + 8u);
}

// Piece p's values (nibbles with their fifth bits above them) and
// scales, as Q4_K's.
fn piece(row: u32, p: u32) -> Piece {
    let i = p & 7u;
    let c = i >> 1u;
    let o = (row >> 4u) + (p >> 3u) * BLOCK_VEC4S;
    let hd = w[o];
    let h = w[o + 1u + (i & 1u)];
    let q = w[o + 3u + i];
    let s = k_pair_scales(hd.y, hd.z, hd.w, c);
    let dm = unpack2x16float(hd.x);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m1 = vec4<u32>(0x01010101u);
    let ja = vec4<u32>(2u * c);
    let a = (q & m4) | (((h >> ja) & m1) << vec4<u32>(4u));
    let b = ((q >> vec4<u32>(4u)) & m4) | (((h >> (ja + vec4<u32>(1u))) & m1) << vec4<u32>(4u));
    return Piece(a, b, dm.x * s.xz, dm.y * s.yw);
}
