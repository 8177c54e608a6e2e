// Causal paged attention, one workgroup per (row, query head): the row's
// query over its sequence's cached K/V at positions lo..=pos (lo = 0, or
// pos + 1 - window for a sliding-window layer), read in place
// from the blocks of its block table ([block][kv head][slot][hd], f16
// pairs), 64 positions at a time with an online softmax (each position's
// weight and V slot computed once per chunk, into workgroup memory); each thread keeps
// the output dimensions d ≡ thread (mod 64), up to 4 of them (hd ≤ 256).

struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    stride: u32,     // floats per qkv row (Q is first)
    block_size: u32,
    scale: f32,
    positions: u32,  // offsets into `step`: each row's position,
    row_seq: u32,    // its sequence,
    seq_table: u32,  // each sequence's first entry in the block tables,
    tables: u32,     // the block tables
    window: u32,     // positions a sliding-window layer attends to (0: all)
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read> v_cache: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> q: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> vbase: array<u32, 64>;
var<workgroup> red: array<f32, 64>;
var<workgroup> last_pos: u32;

const NEG: f32 = -3.0e38;

fn slot_base(table: u32, kvh: u32, j: u32) -> u32 {
    let block = step[table + j / p.block_size];
    return ((block * p.kv_heads + kvh) * p.block_size + j % p.block_size) * p.head_dim / 2u;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    let kvh = h / (p.heads / p.kv_heads);
    let table = p.tables + step[p.seq_table + step[p.row_seq + t]];
    for (var d = lid.x; d < hd; d += 64u) {
        q[d] = qkv[t * p.stride + h * hd + d];
    }
    if (lid.x == 0u) {
        last_pos = step[p.positions + t];
    }
    let pos = workgroupUniformLoad(&last_pos);
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    var m = NEG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var c0 = lo; c0 <= pos; c0 += 64u) {
        let j = c0 + lid.x;
        var s = NEG;
        if (j <= pos) {
            let kb = slot_base(table, kvh, j);
            s = 0.0;
            for (var d = 0u; d < hd / 2u; d++) {
                let k = unpack2x16float(k_cache[kb + d]);
                s += q[2u * d] * k.x + q[2u * d + 1u] * k.y;
            }
            s *= p.scale;
        }
        red[lid.x] = s;
        workgroupBarrier();
        for (var half = 32u; half > 0u; half >>= 1u) {
            if (lid.x < half) {
                red[lid.x] = max(red[lid.x], red[lid.x + half]);
            }
            workgroupBarrier();
        }
        let m_new = max(m, red[0]);
        workgroupBarrier();
        let e = select(0.0, exp(s - m_new), j <= pos);
        red[lid.x] = e;
        // Each position's weight and V slot, once for every dimension.
        sc[lid.x] = e;
        if (j <= pos) {
            vbase[lid.x] = slot_base(table, kvh, j);
        }
        workgroupBarrier();
        for (var half = 32u; half > 0u; half >>= 1u) {
            if (lid.x < half) {
                red[lid.x] += red[lid.x + half];
            }
            workgroupBarrier();
        }
        let alpha = exp(m - m_new);
        l = l * alpha + red[0];
        m = m_new;
        let n = min(64u, pos + 1u - c0);
        for (var k = 0u; k < 4u; k++) {
            let d = lid.x + 64u * k;
            if (d < hd) {
                var a = acc[k] * alpha;
                for (var jj = 0u; jj < n; jj++) {
                    let v = unpack2x16float(v_cache[vbase[jj] + d / 2u]);
                    a += sc[jj] * select(v.x, v.y, (d & 1u) == 1u);
                }
                acc[k] = a;
            }
        }
        workgroupBarrier();
    }
    for (var k = 0u; k < 4u; k++) {
        let d = lid.x + 64u * k;
        if (d < hd) {
            out[t * p.heads * hd + h * hd + d] = acc[k] / l;
        }
    }
}
