// The gated unit: out[t][i] = act(gu[t][i]) · gu[t][ff + i] over rows of
// [gate | up] (act: SiLU, or GELU's tanh form when p.gelu is 1).

struct Params {
    ff: u32,
    total: u32, // rows × ff
    gelu: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gu: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let k = gid.x + gid.y * nw.x * 256u;
    if (k >= p.total) {
        return;
    }
    let t = k / p.ff;
    let i = k % p.ff;
    let g = gu[t * 2u * p.ff + i];
    let u = gu[t * 2u * p.ff + p.ff + i];
    var a: f32;
    if (p.gelu == 1u) {
        // tanh saturates long before ±15; clamping keeps every driver's
        // tanh away from overflow.
        let z = clamp(0.7978845608 * (g + 0.044715 * g * g * g), -15.0, 15.0);
        a = 0.5 * g * (1.0 + tanh(z));
    } else {
        a = g / (1.0 + exp(-g));
    }
    out[k] = a * u;
}
