// What the tiled products (product_tiled.wgsl, product_tiled128.wgsl,
// product_coop.wgsl) share: writing a thread's sums and reading a round's
// units and input values (zeros past the row's end). Prepended after
// product_io.wgsl.

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
