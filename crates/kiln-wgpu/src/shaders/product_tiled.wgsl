// y = x·Wᵀ (+ bias) (+ y) for steps of many input rows (prompts): a
// workgroup of 256 takes a tile of 64 input rows × 64 output rows of one
// chunk of W, and walks the columns 32 at a time (4 units of each output
// row; the format's `unit` and `unit_cols` are prepended to this file).
// Each round the workgroup copies the 64 rows' 4 units and the input
// values of the same 32 columns into workgroup memory as `TF` (f32, or
// f16 where the adapter has shader-f16: tiled_f32.wgsl, tiled_f16.wgsl), [column]
// [row], so that every weight and input value read from the buffers
// serves 64 multiply-adds; each thread then takes 4 input rows × 4 output
// rows (its sums in four named vec4s: arrays in registers go to memory on
// NVIDIA's Vulkan compiler) and reads one vec4 of each tile per column.
// The next round's weights and inputs are read into registers while this
// one is multiplied. Columns follow the units' order, not the row's: the
// input values of a round are gathered where `unit_cols` says the units'
// columns are. 16 KiB of workgroup memory in f32 (WebGPU's least limit).
// (Tried: 64 threads of 8 × 8 rows each, 0.81–0.89x of this on an H200.)

// (`Params`, the bindings and `finish`: product_io.wgsl; `finish4`,
// `fetch_w`, `fetch_x`, `put_w`, `put_x`: tiled_io.wgsl; both prepended.)

// Input rows and output rows per workgroup, units per round (8 columns
// each), columns per round; vec4s per column of a tile.
// BN is set by `shaders::product_rows`, which the backend's workgroup
// count uses too; the threads' layout below is for 64.
const BM: u32 = 64u;
const BN: u32 = PRODUCT_ROWSu;
const_assert BN == 64u;
const BU: u32 = 4u;
const BK: u32 = 32u;
const Q: u32 = 16u;


// [column of the round][row / 4]: a thread's four rows are one vec4.
var<workgroup> xt: array<vec4<TF>, BK * Q>;
var<workgroup> wt: array<vec4<TF>, BK * Q>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = (wid.x + wid.y * 65535u) * BN;
    let t0 = wid.z * BM;
    // The rows this thread multiplies: input rows t0 + 4ty .. + 3, output
    // rows r0 + 4tx .. + 3 (a warp of 32 reads 16 consecutive vec4s of
    // `wt` and 2 of `xt`).
    let tx = lid.x % 16u;
    let ty = lid.x / 16u;
    // What it copies each round: unit lq of output row r0 + lr, and two
    // of the round's eight vec4s of input row t0 + lr (rows past the end
    // read the last one; their sums are never written).
    let lr = lid.x % 64u;
    let lq = lid.x / 64u;
    let wrow = min(r0 + lr, p.rows - 1u) * p.row_bytes;
    let xrow = p.x_off / 4u + min(t0 + lr, p.n - 1u) * (p.x_stride / 4u);
    let busy = t0 + 4u * ty < p.n;
    let nu = p.cols / 8u;
    // Sums in `TF` (h), folded into f32 ones (s) every FOLD_ROUNDS rounds
    // where `TF` is f16; in f32 the s stay zero and drop out.
    var h0 = vec4<TF>(0.0);
    var h1 = vec4<TF>(0.0);
    var h2 = vec4<TF>(0.0);
    var h3 = vec4<TF>(0.0);
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    var s3 = vec4<f32>(0.0);
    // Round u0's weights (unit u0 + lq of the row: columns 8lq .. 8lq + 7
    // of the round, `a` then `b`) and inputs (half h % 2 of unit u0 + h / 2
    // is columns 4h .. 4h + 3; this thread copies h = lq and lq + 4) are
    // read into registers while the round before is multiplied.
    let kw = 8u * lq * Q + lr / 4u;
    let kx = 4u * lq * Q + lr / 4u;
    let c = lr % 4u;
    let half = (lq & 1u) != 0u;
    var v = fetch_w(wrow, lq, nu);
    var xa = fetch_x(xrow, lq / 2u, half, nu);
    var xb = fetch_x(xrow, lq / 2u + 2u, half, nu);
    for (var u0 = 0u; u0 < nu; u0 += BU) {
        put_w(kw, c, v.a);
        put_w(kw + 4u * Q, c, v.b);
        put_x(kx, c, xa);
        put_x(kx + 16u * Q, c, xb);
        workgroupBarrier();
        let un = u0 + BU;
        v = fetch_w(wrow, un + lq, nu);
        xa = fetch_x(xrow, un + lq / 2u, half, nu);
        xb = fetch_x(xrow, un + lq / 2u + 2u, half, nu);
        if (busy) {
            for (var k = 0u; k < BK; k++) {
                let a = xt[k * Q + ty];
                let b = wt[k * Q + tx];
                h0 += a.x * b;
                h1 += a.y * b;
                h2 += a.z * b;
                h3 += a.w * b;
            }
            if (FOLD && (u0 / BU) % FOLD_ROUNDS == FOLD_ROUNDS - 1u) {
                s0 += vec4<f32>(h0);
                s1 += vec4<f32>(h1);
                s2 += vec4<f32>(h2);
                s3 += vec4<f32>(h3);
                h0 = vec4<TF>(0.0);
                h1 = vec4<TF>(0.0);
                h2 = vec4<TF>(0.0);
                h3 = vec4<TF>(0.0);
            }
        }
        workgroupBarrier();
    }
    let r = r0 + 4u * tx;
    let t = t0 + 4u * ty;
    finish4(r, t, s0 + vec4<f32>(h0));
    finish4(r, t + 1u, s1 + vec4<f32>(h1));
    finish4(r, t + 2u, s2 + vec4<f32>(h2));
    finish4(r, t + 3u, s3 + vec4<f32>(h3));
}
