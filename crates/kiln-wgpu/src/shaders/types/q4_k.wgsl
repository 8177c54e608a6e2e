// GGML Q4_K: blocks of 256 values in 8 sub-blocks of 32 (144 bytes, read
// 16 at a time: words.wgsl): f16 scales d and dmin, 12 bytes of 6-bit
// sub-block scales and mins (`k_scales`), then 128 bytes of nibbles: bytes
// 32c .. 32c + 31 hold sub-block 2c in their low nibbles and 2c + 1 in
// their high ones; x = d·sc·q − dmin·m.
const BLOCK_VEC4S: u32 = 9u;

// Unit u: nibble word k = u % 8 of sub-block j = (u / 8) % 4 and of
// sub-block j + 4 (chunks j / 2 and j / 2 + 2, the same nibbles) of block
// u / 32: columns 32j + 4k .. + 3 and 128 columns further. Sub-blocks j
// and j + 4 keep their scales in the same byte of each scale word
// (`k_scales`), so a unit decodes them without a branch.
fn unit_cols(u: u32) -> vec2<u32> {
    let col = 64u * (u >> 5u) + 8u * ((u >> 3u) & 3u) + (u & 7u);
    return vec2<u32>(col, col + 32u);
}

fn unit(row: u32, u: u32) -> Unit {
    let j = (u >> 3u) & 3u;
    let k = u & 7u;
    let o = (row >> 4u) + (u >> 5u) * BLOCK_VEC4S;
    let h = w[o];
    let dm = unpack2x16float(h.x);
    let s = k_scales(h.y, h.z, h.w, j);
    let sh = 4u * (j & 1u);
    let q = o + 1u + 2u * (j >> 1u) + (k >> 2u);
    let qa = nibbles(w[q][k & 3u], sh);
    let qb = nibbles(w[q + 4u][k & 3u], sh);
    let c = unit_cols(u);
    return Unit(dm.x * s.x * qa - dm.y * s.y, dm.x * s.z * qb - dm.y * s.w, c.x, c.y);
}

// Piece p: nibble vec4 i = p % 8 of block p / 8 (chunk c = i / 2, half
// i % 2): its low nibbles are sub-block 2c's values 16·(i % 2) .. + 15,
// its high nibbles sub-block 2c + 1's, 32 columns further.
fn piece_cols(p: u32) -> vec2<u32> {
    let ca = 64u * (p >> 3u) + 16u * ((p >> 1u) & 3u) + 4u * (p & 1u);
    return vec2<u32>(ca, ca + 8u);
}

// Piece p's values (its 16 bytes' low nibbles run a, high nibbles run
// b) and scales: w = d·sc·q − dmin·m per sub-block.
fn piece(row: u32, p: u32) -> Piece {
    let i = p & 7u;
    let o = (row >> 4u) + (p >> 3u) * BLOCK_VEC4S;
    let h = w[o];
    let q = w[o + 1u + i];
    let s = k_pair_scales(h.y, h.z, h.w, i >> 1u);
    let dm = unpack2x16float(h.x);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return Piece(q & m4, (q >> vec4<u32>(4u)) & m4, dm.x * s.xz, dm.y * s.yw);
}
