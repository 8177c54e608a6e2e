// Argmax candidates: a workgroup of 256 takes 4096 logits of one row
// (16 a thread, at a stride of 256, read together) and writes the best
// (key, !id) of them, so that sample.wgsl starts from a few candidates
// per row rather than reading the whole row in one workgroup.

@group(0) @binding(2) var<storage, read_write> best_of: array<vec2<u32>>;

const SB: u32 = 256u;
const PER: u32 = 16u;

var<workgroup> red: array<vec2<u32>, SB>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let row = wid.y;
    let base = row * p.vocab;
    let c0 = wid.x * SB * PER;
    var best = vec2<u32>(0u, 0u);
    for (var j = 0u; j < PER; j++) {
        let i = c0 + j * SB + t;
        if (i < p.vocab) {
            best = better(best, vec2<u32>(fkey(logits[base + i]), ~i));
        }
    }
    red[t] = best;
    workgroupBarrier();
    for (var s = SB / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] = better(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        best_of[row * p.chunks + wid.x] = red[0];
    }
}
