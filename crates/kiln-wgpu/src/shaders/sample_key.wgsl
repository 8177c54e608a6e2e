// Sampling on the device (sample_max.wgsl, then sample.wgsl), shared
// parts. A logit's key orders logits as unsigned integers: a larger logit
// has a larger key; NaN is 0 (below every number) and -inf KEY_NEG_INF.
// A token's candidate for the argmax is (key, !id): of two, the larger
// key, then the lower id. (NaN is told by its bits: WGSL lets compilers
// assume floats are never NaN.)

struct Params {
    vocab: u32,
    // Workgroups of sample_max per row (argmax candidates per row).
    chunks: u32,
    // The draws' first word in `meta` (8 words per logit row).
    draws: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;

const KEY_NEG_INF: u32 = 0x007fffffu;

fn fkey(f: f32) -> u32 {
    let u = bitcast<u32>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0u;
    }
    return select(u | 0x80000000u, ~u, (u & 0x80000000u) != 0u);
}

// The logit whose key is k.
fn unkey(k: u32) -> f32 {
    return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u));
}

fn better(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (b.x > a.x || (b.x == a.x && b.y > a.y)) {
        return b;
    }
    return a;
}
