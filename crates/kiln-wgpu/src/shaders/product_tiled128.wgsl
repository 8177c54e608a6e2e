// y = x·Wᵀ (+ bias) (+ y) for steps of many input rows (prompts), in
// tiles of 128 input rows × 128 output rows: product_tiled.wgsl's scheme
// (units and their input values copied into workgroup memory as `TF`, f32
// or f16, the next round read into registers meanwhile) with each of the
// 256 threads multiplying 8 input rows × 8 output rows, so that a column
// of the tiles costs a thread four 16-byte reads of workgroup memory for
// 64 multiply-adds (the 64-row tile's two for 16 left those reads nearly
// as busy as the multiply-adds). A round is 16 columns (2 units of each
// output row), so the two tiles are 16 KiB in f32, WebGPU's least limit.
// A thread's rows are 4tx .. 4tx + 3 and 64 + 4tx .. + 3 of the output
// tile, 4ty .. + 3 and 64 + 4ty .. + 3 of the input tile: each read of
// a tile is 16 consecutive vec4s across a half-warp.

// (`Params`, the bindings and `finish`: product_io.wgsl; `finish4`,
// `fetch_w`, `fetch_x`, `put_w`, `put_x`: tiled_io.wgsl; both prepended,
// the format's `unit` and `unit_cols` before them.)

const BM: u32 = 128u;
const BN: u32 = PRODUCT_ROWSu;
const_assert BN == 128u;
const BU: u32 = 2u;
const BK: u32 = 16u;
// Vec4s per column of a tile.
const Q: u32 = 32u;
const H: u32 = 16u;

// [column of the round][row / 4].
var<workgroup> xt: array<vec4<TF>, BK * Q>;
var<workgroup> wt: array<vec4<TF>, BK * Q>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = (wid.x + wid.y * 65535u) * BN;
    let t0 = wid.z * BM;
    let tx = lid.x % H;
    let ty = lid.x / H;
    // What it copies each round: unit lq of the round of output row r0 +
    // lr, and the input values of the same unit of input row t0 + lr (rows
    // past the end read the last one; their sums are never written).
    let lr = lid.x % BN;
    let lq = lid.x / BN;
    let wrow = min(r0 + lr, p.rows - 1u) * p.row_bytes;
    let xrow = p.x_off / 4u + min(t0 + lr, p.n - 1u) * (p.x_stride / 4u);
    let busy = t0 + 4u * ty < p.n;
    let nu = p.cols / 8u;
    // Unit lq's columns are 8lq .. 8lq + 3 (`a`) and 8lq + 4 .. + 7 (`b`)
    // of the round.
    let kw = 8u * lq * Q + lr / 4u;
    let c = lr % 4u;
    var v = fetch_w(wrow, lq, nu);
    var xa = fetch_x(xrow, lq, false, nu);
    var xb = fetch_x(xrow, lq, true, nu);
    // s{i}{j}: input row i of the thread's 8 (0-3: 4ty + i, 4-7: 64 + 4ty
    // + i - 4) × output rows 4tx .. + 3 (j = 0) or 64 + 4tx .. + 3 (j = 1).
    // Sums in `TF` (h), folded into f32 ones (s) every FOLD_ROUNDS rounds
    // where `TF` is f16; in f32 the s stay zero and drop out.
    var h00 = vec4<TF>(0.0);
    var h01 = vec4<TF>(0.0);
    var h10 = vec4<TF>(0.0);
    var h11 = vec4<TF>(0.0);
    var h20 = vec4<TF>(0.0);
    var h21 = vec4<TF>(0.0);
    var h30 = vec4<TF>(0.0);
    var h31 = vec4<TF>(0.0);
    var h40 = vec4<TF>(0.0);
    var h41 = vec4<TF>(0.0);
    var h50 = vec4<TF>(0.0);
    var h51 = vec4<TF>(0.0);
    var h60 = vec4<TF>(0.0);
    var h61 = vec4<TF>(0.0);
    var h70 = vec4<TF>(0.0);
    var h71 = vec4<TF>(0.0);
    var s00 = vec4<f32>(0.0);
    var s01 = vec4<f32>(0.0);
    var s10 = vec4<f32>(0.0);
    var s11 = vec4<f32>(0.0);
    var s20 = vec4<f32>(0.0);
    var s21 = vec4<f32>(0.0);
    var s30 = vec4<f32>(0.0);
    var s31 = vec4<f32>(0.0);
    var s40 = vec4<f32>(0.0);
    var s41 = vec4<f32>(0.0);
    var s50 = vec4<f32>(0.0);
    var s51 = vec4<f32>(0.0);
    var s60 = vec4<f32>(0.0);
    var s61 = vec4<f32>(0.0);
    var s70 = vec4<f32>(0.0);
    var s71 = vec4<f32>(0.0);
    for (var u0 = 0u; u0 < nu; u0 += BU) {
        put_w(kw, c, v.a);
        put_w(kw + 4u * Q, c, v.b);
        put_x(kw, c, xa);
        put_x(kw + 4u * Q, c, xb);
        workgroupBarrier();
        let un = u0 + BU + lq;
        v = fetch_w(wrow, un, nu);
        xa = fetch_x(xrow, un, false, nu);
        xb = fetch_x(xrow, un, true, nu);
        if (busy) {
            for (var k = 0u; k < BK; k++) {
                let a0 = xt[k * Q + ty];
                let a1 = xt[k * Q + H + ty];
                let b0 = wt[k * Q + tx];
                let b1 = wt[k * Q + H + tx];
                h00 += a0.x * b0;
                h01 += a0.x * b1;
                h10 += a0.y * b0;
                h11 += a0.y * b1;
                h20 += a0.z * b0;
                h21 += a0.z * b1;
                h30 += a0.w * b0;
                h31 += a0.w * b1;
                h40 += a1.x * b0;
                h41 += a1.x * b1;
                h50 += a1.y * b0;
                h51 += a1.y * b1;
                h60 += a1.z * b0;
                h61 += a1.z * b1;
                h70 += a1.w * b0;
                h71 += a1.w * b1;
            }
            if (FOLD && (u0 / BU) % FOLD_ROUNDS == FOLD_ROUNDS - 1u) {
                s00 += vec4<f32>(h00);
                s01 += vec4<f32>(h01);
                s10 += vec4<f32>(h10);
                s11 += vec4<f32>(h11);
                s20 += vec4<f32>(h20);
                s21 += vec4<f32>(h21);
                s30 += vec4<f32>(h30);
                s31 += vec4<f32>(h31);
                s40 += vec4<f32>(h40);
                s41 += vec4<f32>(h41);
                s50 += vec4<f32>(h50);
                s51 += vec4<f32>(h51);
                s60 += vec4<f32>(h60);
                s61 += vec4<f32>(h61);
                s70 += vec4<f32>(h70);
                s71 += vec4<f32>(h71);
                h00 = vec4<TF>(0.0);
                h01 = vec4<TF>(0.0);
                h10 = vec4<TF>(0.0);
                h11 = vec4<TF>(0.0);
                h20 = vec4<TF>(0.0);
                h21 = vec4<TF>(0.0);
                h30 = vec4<TF>(0.0);
                h31 = vec4<TF>(0.0);
                h40 = vec4<TF>(0.0);
                h41 = vec4<TF>(0.0);
                h50 = vec4<TF>(0.0);
                h51 = vec4<TF>(0.0);
                h60 = vec4<TF>(0.0);
                h61 = vec4<TF>(0.0);
                h70 = vec4<TF>(0.0);
                h71 = vec4<TF>(0.0);
            }
        }
        workgroupBarrier();
    }
    let r = r0 + 4u * tx;
    let t = t0 + 4u * ty;
    finish4(r, t, s00 + vec4<f32>(h00));
    finish4(r + 64u, t, s01 + vec4<f32>(h01));
    finish4(r, t + 1u, s10 + vec4<f32>(h10));
    finish4(r + 64u, t + 1u, s11 + vec4<f32>(h11));
    finish4(r, t + 2u, s20 + vec4<f32>(h20));
    finish4(r + 64u, t + 2u, s21 + vec4<f32>(h21));
    finish4(r, t + 3u, s30 + vec4<f32>(h30));
    finish4(r + 64u, t + 3u, s31 + vec4<f32>(h31));
    finish4(r, t + 64u, s40 + vec4<f32>(h40));
    finish4(r + 64u, t + 64u, s41 + vec4<f32>(h41));
    finish4(r, t + 65u, s50 + vec4<f32>(h50));
    finish4(r + 64u, t + 65u, s51 + vec4<f32>(h51));
    finish4(r, t + 66u, s60 + vec4<f32>(h60));
    finish4(r + 64u, t + 66u, s61 + vec4<f32>(h61));
    finish4(r, t + 67u, s70 + vec4<f32>(h70));
    finish4(r + 64u, t + 67u, s71 + vec4<f32>(h71));
}
