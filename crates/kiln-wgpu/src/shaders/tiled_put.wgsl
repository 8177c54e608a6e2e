// Putting a round's values into the scalar tiled products' tiles (`wt`,
// `xt`, Q vec4s of `TF` a column: each kernel declares them). Prepended
// after tiled_io.wgsl and one of tiled_f32.wgsl or tiled_f16.wgsl, which
// say what `TF`, `tf` and `FOLD` are.

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
