// What the tiled products (product_tiled.wgsl, product_tiled128.wgsl)
// share: writing a thread's sums, reading a round's units and input
// values (zeros past the row's end), and putting them into the tiles
// (`wt`, `xt`, Q vec4s of `TF` a column: each kernel declares them).
// Prepended after product_io.wgsl and one of tiled_f32.wgsl or
// tiled_f16.wgsl, which say what `TF`, `tf` and `FOLD` are.

// Writes output rows `r` .. `r` + 3 of input row `t` (those that exist).
fn finish4(r: u32, t: u32, s: vec4<f32>) {
    if (t >= p.n) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        if (r + i < p.rows) {
            finish(r + i, t, s[i]);
        }
    }
}

// Unit u of the row at byte `row` (zeros past the row's `nu` units).
fn fetch_w(row: u32, u: u32, nu: u32) -> Unit {
    if (u < nu) {
        return unit(row, u);
    }
    return Unit(vec4<f32>(0.0), vec4<f32>(0.0), 0u, 0u);
}

// The input vec4 at half `b` (`a` or `b`) of unit u of the input row at
// vec4 `row` (zeros past the row's `nu` units).
fn fetch_x(row: u32, u: u32, b: bool, nu: u32) -> vec4<f32> {
    if (u < nu) {
        let c = unit_cols(u);
        return x[row + select(c.x, c.y, b)];
    }
    return vec4<f32>(0.0);
}

// Four values into column `c` of a tile's vec4s i, i + Q, i + 2Q, i + 3Q
// (consecutive columns of the round), as the tiles' type `TF` (`tf`).
// Two functions: WGSL passes no pointers to workgroup memory without an
// extension naga's validator refuses here.
fn put_w(i: u32, c: u32, v: vec4<f32>) {
    wt[i][c] = tf(v.x);
    wt[i + Q][c] = tf(v.y);
    wt[i + 2u * Q][c] = tf(v.z);
    wt[i + 3u * Q][c] = tf(v.w);
}

fn put_x(i: u32, c: u32, v: vec4<f32>) {
    xt[i][c] = tf(v.x);
    xt[i + Q][c] = tf(v.y);
    xt[i + 2u * Q][c] = tf(v.z);
    xt[i + 3u * Q][c] = tf(v.w);
}
