// The gated unit: out[t][i] = act(gu[t][i]) · gu[t][ff + i] over rows of
// [gate | up] (act.wgsl's `act`, prepended: SiLU, or GELU's tanh form
// when p.gelu is 1).

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
    out[k] = act(vec4<f32>(g), p.gelu == 1u).x * u;
}
