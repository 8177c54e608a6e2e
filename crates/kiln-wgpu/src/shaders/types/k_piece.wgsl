// The two decode products over a K-quant format's pieces (product_piece.wgsl
// by floats, product_dot.wgsl by integer dot products), from the format's
// `piece` (prepended after the format's reader, for the formats read in
// pieces only).

// Piece p of a row: 32 weights in two runs of 16 (a and b, at the columns
// the format's `piece_cols` names), each value q (below 128) one byte of
// four a word, and per run the multipliers of Σ q·x (s) and of Σ x (c):
// Σ w·x = s·Σ q·x − c·Σ x.
struct Piece {
    a: vec4<u32>,
    b: vec4<u32>,
    s: vec2<f32>,
    c: vec2<f32>,
}

// The quantized inputs of a piece (product_dot.wgsl, quant_x.wgsl's
// layout): the high and low digits of its runs a and b (16 values each,
// the columns `piece_cols` names), and each run's (dx, sx).
struct XQ {
    ha: vec4<u32>,
    la: vec4<u32>,
    hb: vec4<u32>,
    lb: vec4<u32>,
    da: vec2<f32>,
    db: vec2<f32>,
}

// Σ q·(h + l / 254) over a run of 16 small non-negative integers q (four
// bytes a word, each below 128) and its inputs' digits h and l.
fn run_dot(q: vec4<u32>, h: vec4<u32>, l: vec4<u32>) -> f32 {
    let ih = dot4I8Packed(q.x, h.x) + dot4I8Packed(q.y, h.y) + dot4I8Packed(q.z, h.z) + dot4I8Packed(q.w, h.w);
    let il = dot4I8Packed(q.x, l.x) + dot4I8Packed(q.y, l.y) + dot4I8Packed(q.z, l.z) + dot4I8Packed(q.w, l.w);
    return f32(ih) + f32(il) * (1.0 / 254.0);
}

// Σ q·x over a run of 16 values q, four bytes a word, by floats.
fn run_fdot(q: vec4<u32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return dot(small_floats(fields(q.x, 0u, 0xffu)), x0) + dot(small_floats(fields(q.y, 0u, 0xffu)), x1)
        + dot(small_floats(fields(q.z, 0u, 0xffu)), x2) + dot(small_floats(fields(q.w, 0u, 0xffu)), x3);
}

// Piece p of the row at `row` times its 32 input values.
fn piece_dot(row: u32, p: u32, v: X8) -> f32 {
    let k = piece(row, p);
    let qa = run_fdot(k.a, v.a0, v.a1, v.a2, v.a3);
    let qb = run_fdot(k.b, v.b0, v.b1, v.b2, v.b3);
    let xa = sum4(v.a0 + v.a1 + v.a2 + v.a3);
    let xb = sum4(v.b0 + v.b1 + v.b2 + v.b3);
    return k.s.x * qa + k.s.y * qb - (k.c.x * xa + k.c.y * xb);
}

// The same by integer dot products with the inputs' digits (`run_dot`).
fn piece_idot(row: u32, p: u32, v: XQ) -> f32 {
    let k = piece(row, p);
    let qa = run_dot(k.a, v.ha, v.la) * v.da.x;
    let qb = run_dot(k.b, v.hb, v.lb) * v.db.x;
    return k.s.x * qa + k.s.y * qb - (k.c.x * v.da.y + k.c.y * v.db.y);
}
