//! Causal attention that reads K/V in place from the paged cache.
//!
//! Cache layout, per layer: `[num_blocks][n_kv_heads][block_size][head_dim]`
//! `f32`, so one head's keys within a block are contiguous. A sequence's
//! logical position `p` lives in block `block_table[p / block_size]` at slot
//! `p % block_size`. Nothing is gathered or concatenated: each step costs
//! O(context) reads and no copies.

use std::cell::RefCell;

use super::{axpy_impl, dot_impl};
use crate::pool::{split_range, ThreadPool};

/// Shape of one layer's K (or V) cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    /// Tokens per block.
    pub block_size: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
}

impl KvLayout {
    /// Floats in one block.
    pub fn block_len(&self) -> usize {
        self.block_size * self.n_kv_heads * self.head_dim
    }

    #[inline]
    fn offset(&self, block: usize, head: usize, slot: usize) -> usize {
        ((block * self.n_kv_heads + head) * self.block_size + slot) * self.head_dim
    }
}

/// One sequence's part of a batched attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnSeq<'a> {
    /// First row of this sequence's queries in `q` / `out`.
    pub q_start: usize,
    /// Number of query rows (1 for decode, the chunk length for prefill).
    pub n_q: usize,
    /// Position of the first query row; query `i` attends to positions `0..=pos0 + i`.
    pub pos0: usize,
    /// The sequence's blocks; must cover position `pos0 + n_q - 1`.
    pub block_table: &'a [u32],
}

/// Writes K and V rows (`slots.len()` rows of `n_kv_heads × head_dim`) into
/// the cache at flat slots `block * block_size + offset`. Slots outside the
/// cache are ignored (callers validate block tables first).
pub fn write_kv(layout: KvLayout, k_cache: &mut [f32], v_cache: &mut [f32], slots: &[u32], k: &[f32], v: &[f32]) {
    let hd = layout.head_dim;
    let row = layout.n_kv_heads * hd;
    for (t, &slot) in slots.iter().enumerate() {
        let (block, off) = (slot as usize / layout.block_size, slot as usize % layout.block_size);
        for h in 0..layout.n_kv_heads {
            let dst = layout.offset(block, h, off);
            let src = t * row + h * hd;
            if let (Some(kd), Some(ks)) = (k_cache.get_mut(dst..dst + hd), k.get(src..src + hd)) {
                kd.copy_from_slice(ks);
            }
            if let (Some(vd), Some(vs)) = (v_cache.get_mut(dst..dst + hd), v.get(src..src + hd)) {
                vd.copy_from_slice(vs);
            }
        }
    }
}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Batched causal attention over the paged cache.
///
/// `q` and `out` hold rows of `n_heads × head_dim`; query head `h` uses KV
/// head `h / (n_heads / n_kv_heads)`. Work is split across the pool by
/// (query row, KV head): each KV row is read once for all query heads that
/// share it.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention(
    pool: &ThreadPool,
    layout: KvLayout,
    k_cache: &[f32],
    v_cache: &[f32],
    seqs: &[AttnSeq<'_>],
    q: &[f32],
    n_heads: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n_items: usize = seqs.iter().map(|s| s.n_q).sum::<usize>() * layout.n_kv_heads;
    let out_ptr = SendPtr(out.as_mut_ptr());
    let out_len = out.len();
    pool.run(&|ith, nth| {
        let range = split_range(n_items, ith, nth);
        SCORES.with(|cell| {
            let mut scores = cell.borrow_mut();
            let mut item = 0usize;
            for s in seqs {
                let span = s.n_q * layout.n_kv_heads;
                if item + span <= range.start || item >= range.end {
                    item += span;
                    continue;
                }
                for i in 0..s.n_q {
                    for kvh in 0..layout.n_kv_heads {
                        if range.contains(&item) {
                            let row = s.q_start + i;
                            // SAFETY: each (row, kv head) item writes only the
                            // output columns of its own query heads, and items
                            // are partitioned between threads.
                            let out_all = unsafe { std::slice::from_raw_parts_mut(out_ptr.get(), out_len) };
                            let args = Item { layout, k_cache, v_cache, s, i, kvh, q, n_heads, scale, row };
                            run_item(&args, out_all, &mut scores);
                        }
                        item += 1;
                    }
                }
            }
        });
    });
}

#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: used only to hand disjoint output regions to pool threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// One (query row, KV head) work item.
struct Item<'a, 'b> {
    layout: KvLayout,
    k_cache: &'a [f32],
    v_cache: &'a [f32],
    s: &'a AttnSeq<'b>,
    i: usize,
    kvh: usize,
    q: &'a [f32],
    n_heads: usize,
    scale: f32,
    row: usize,
}

/// Dispatches to the widest instruction set this CPU has (detected once).
fn run_item(it: &Item<'_, '_>, out: &mut [f32], scores: &mut Vec<f32>) {
    #[cfg(target_arch = "x86_64")]
    {
        static LEVEL: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
        let level = *LEVEL.get_or_init(|| {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                2
            } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                1
            } else {
                0
            }
        });
        // SAFETY: the features were detected above.
        match level {
            2 => return unsafe { item_avx512(it, out, scores) },
            1 => return unsafe { item_avx2(it, out, scores) },
            _ => {}
        }
    }
    one_item::<false>(it, out, scores)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,fma")]
unsafe fn item_avx512(it: &Item<'_, '_>, out: &mut [f32], scores: &mut Vec<f32>) {
    one_item::<true>(it, out, scores)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn item_avx2(it: &Item<'_, '_>, out: &mut [f32], scores: &mut Vec<f32>) {
    one_item::<true>(it, out, scores)
}

#[inline(always)]
fn one_item<const FMA: bool>(it: &Item<'_, '_>, out: &mut [f32], scores: &mut Vec<f32>) {
    let Item { layout, k_cache, v_cache, s, i, kvh, q, n_heads, scale, row } = *it;
    let hd = layout.head_dim;
    let group = n_heads / layout.n_kv_heads.max(1);
    let ctx = s.pos0 + i + 1;
    let bs = layout.block_size;
    if scores.len() < group * ctx {
        scores.resize(group * ctx, 0.0);
    }
    let q_row = &q[row * n_heads * hd..(row + 1) * n_heads * hd];
    let heads = kvh * group..(kvh + 1) * group;
    // Scores: q·k for every cached position, all heads of the group.
    for p in 0..ctx {
        let Some(&block) = s.block_table.get(p / bs) else { break };
        let off = layout.offset(block as usize, kvh, p % bs);
        let Some(k) = k_cache.get(off..off + hd) else { break };
        for (g, h) in heads.clone().enumerate() {
            scores[g * ctx + p] = dot_impl::<FMA>(&q_row[h * hd..(h + 1) * hd], k) * scale;
        }
    }
    for g in 0..group {
        super::softmax_inplace(&mut scores[g * ctx..(g + 1) * ctx]);
    }
    let o_row = &mut out[row * n_heads * hd..(row + 1) * n_heads * hd];
    for h in heads.clone() {
        o_row[h * hd..(h + 1) * hd].fill(0.0);
    }
    for p in 0..ctx {
        let Some(&block) = s.block_table.get(p / bs) else { break };
        let off = layout.offset(block as usize, kvh, p % bs);
        let Some(v) = v_cache.get(off..off + hd) else { break };
        for (g, h) in heads.clone().enumerate() {
            axpy_impl::<FMA>(scores[g * ctx + p], v, &mut o_row[h * hd..(h + 1) * hd]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain attention over contiguous K/V for one sequence, the reference.
    fn naive(
        q: &[f32],
        k: &[Vec<f32>],
        v: &[Vec<f32>],
        n_heads: usize,
        n_kv: usize,
        hd: usize,
        pos0: usize,
        n_q: usize,
    ) -> Vec<f32> {
        let group = n_heads / n_kv;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = vec![0.0; n_q * n_heads * hd];
        for i in 0..n_q {
            for h in 0..n_heads {
                let kvh = h / group;
                let qv = &q[(i * n_heads + h) * hd..][..hd];
                let ctx = pos0 + i + 1;
                let mut s: Vec<f64> = (0..ctx)
                    .map(|p| {
                        qv.iter().zip(&k[p][kvh * hd..][..hd]).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s
                    .iter_mut()
                    .map(|x| {
                        *x = (*x - m).exp();
                        *x
                    })
                    .sum();
                for d in 0..hd {
                    let acc: f64 = (0..ctx).map(|p| s[p] / z * v[p][kvh * hd + d] as f64).sum();
                    out[(i * n_heads + h) * hd + d] = acc as f32;
                }
            }
        }
        out
    }

    fn rnd(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    }

    #[test]
    fn paged_equals_naive_with_scattered_blocks_and_batches() {
        let (n_heads, n_kv, hd, bs) = (6, 2, 16, 4);
        let layout = KvLayout { block_size: bs, n_kv_heads: n_kv, head_dim: hd };
        let num_blocks = 32;
        let mut kc = vec![0.0; num_blocks * layout.block_len()];
        let mut vc = kc.clone();
        let mut seed = 7u64;
        // Two sequences: one prefill chunk of 5 after 6 cached tokens, one decode at position 9.
        let specs = [(6usize, 5usize, vec![9u32, 3, 17, 0]), (9, 1, vec![30, 1, 12])];
        let pool = ThreadPool::new(3);
        let mut q_all = Vec::new();
        let mut expected = Vec::new();
        let mut seqs = Vec::new();
        let mut q_start = 0;
        for (pos0, n_q, table) in &specs {
            let total = pos0 + n_q;
            let k: Vec<Vec<f32>> = (0..total).map(|_| (0..n_kv * hd).map(|_| rnd(&mut seed)).collect()).collect();
            let v: Vec<Vec<f32>> = (0..total).map(|_| (0..n_kv * hd).map(|_| rnd(&mut seed)).collect()).collect();
            let slots: Vec<u32> = (0..total).map(|p| table[p / bs] * bs as u32 + (p % bs) as u32).collect();
            write_kv(layout, &mut kc, &mut vc, &slots, &k.concat(), &v.concat());
            let q: Vec<f32> = (0..n_q * n_heads * hd).map(|_| rnd(&mut seed)).collect();
            expected.extend(naive(&q, &k, &v, n_heads, n_kv, hd, *pos0, *n_q));
            q_all.extend(q);
            seqs.push((q_start, *n_q, *pos0));
            q_start += n_q;
        }
        let attn: Vec<AttnSeq> = seqs
            .iter()
            .zip(&specs)
            .map(|(&(q_start, n_q, pos0), s)| AttnSeq { q_start, n_q, pos0, block_table: &s.2 })
            .collect();
        let mut out = vec![0.0; q_all.len()];
        paged_attention(&pool, layout, &kc, &vc, &attn, &q_all, n_heads, 1.0 / (hd as f32).sqrt(), &mut out);
        for (a, b) in out.iter().zip(&expected) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
