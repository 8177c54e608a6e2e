// The attention input after its product, one workgroup per (row, head) of
// qkv rows laid out [Q heads | K heads | V heads]: Q and K get the optional
// per-head RMSNorm and RoPE at the row's position, in place; K and V are
// then written as f16 into the row's KV slot, laid out
// [block][kv head][slot in block][head dim] per layer.

struct Params {
    heads: u32,     // query heads
    kv_heads: u32,
    head_dim: u32,
    stride: u32,    // floats per qkv row
    block_size: u32,
    rot_dim: u32,
    neox: u32,      // 1: pairs (i, i + rot_dim/2); 0: (2i, 2i+1)
    qk_norm: u32,   // 1: per-head RMSNorm of Q and K first
    eps: f32,
    max_pos: u32,   // positions past the table are left unrotated
    positions: u32, // offset of the step's positions in `step`
    slots: u32,     // offset of the step's KV slots in `step`
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read> cos_t: array<f32>;
@group(0) @binding(4) var<storage, read> sin_t: array<f32>;
@group(0) @binding(5) var<storage, read> q_norm: array<f32>;
@group(0) @binding(6) var<storage, read> k_norm: array<f32>;
@group(0) @binding(7) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(8) var<storage, read_write> v_cache: array<u32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = wid.y;
    let h = wid.x;
    let hd = p.head_dim;
    let base = t * p.stride + h * hd;
    let rotated = h < p.heads + p.kv_heads;
    // Per-head norm (uniform branch: every thread of the group takes it).
    var s = 1.0;
    if (rotated && p.qk_norm == 1u) {
        var ss = 0.0;
        for (var d = lid.x; d < hd; d += 64u) {
            ss += qkv[base + d] * qkv[base + d];
        }
        red[lid.x] = ss;
        workgroupBarrier();
        for (var half = 32u; half > 0u; half >>= 1u) {
            if (lid.x < half) {
                red[lid.x] += red[lid.x + half];
            }
            workgroupBarrier();
        }
        s = inverseSqrt(red[0] / f32(hd) + p.eps);
    }
    if (rotated) {
        let is_q = h < p.heads;
        let pos = step[p.positions + t];
        let half_rot = p.rot_dim / 2u;
        let rot = pos < p.max_pos;
        // Each thread owns whole pairs, so it reads both before writing.
        for (var i = lid.x; i < half_rot; i += 64u) {
            var i0 = 2u * i;
            var i1 = 2u * i + 1u;
            if (p.neox == 1u) {
                i0 = i;
                i1 = i + half_rot;
            }
            var a = qkv[base + i0];
            var b = qkv[base + i1];
            if (p.qk_norm == 1u) {
                if (is_q) {
                    a *= s * q_norm[i0];
                    b *= s * q_norm[i1];
                } else {
                    a *= s * k_norm[i0];
                    b *= s * k_norm[i1];
                }
            }
            if (rot) {
                let c = cos_t[pos * half_rot + i];
                let sn = sin_t[pos * half_rot + i];
                qkv[base + i0] = a * c - b * sn;
                qkv[base + i1] = a * sn + b * c;
            } else {
                qkv[base + i0] = a;
                qkv[base + i1] = b;
            }
        }
        // Dimensions past the rotated ones are only normed.
        if (p.qk_norm == 1u) {
            for (var d = p.rot_dim + lid.x; d < hd; d += 64u) {
                if (is_q) {
                    qkv[base + d] *= s * q_norm[d];
                } else {
                    qkv[base + d] *= s * k_norm[d];
                }
            }
        }
    }
    if (h < p.heads) {
        return;
    }
    storageBarrier();
    // K or V into the cache, two values per word.
    let is_k = h < p.heads + p.kv_heads;
    var kvh = h - p.heads;
    if (!is_k) {
        kvh -= p.kv_heads;
    }
    let slot = step[p.slots + t];
    let block = slot / p.block_size;
    let at = ((block * p.kv_heads + kvh) * p.block_size + slot % p.block_size) * hd / 2u;
    for (var d = lid.x; d < hd / 2u; d += 64u) {
        let word = pack2x16float(vec2<f32>(qkv[base + 2u * d], qkv[base + 2u * d + 1u]));
        if (is_k) {
            k_cache[at + d] = word;
        } else {
            v_cache[at + d] = word;
        }
    }
}
