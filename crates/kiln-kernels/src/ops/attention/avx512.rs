//! The tile kernel with AVX-512 F + F16C + FMA, for blocks of 16 tokens.
//!
//! The (row, head) pairs of a tile are processed up to four at a time
//! against a *span* of up to four blocks (64 keys), reading K and V
//! straight from the cache (`PAIRS`: the `Bf16Pairs` format, whose values
//! widen exactly with a shift or a mask; else `f16`, widened with F16C),
//! two dimensions (K) or two keys (V) per step: each K row (16 keys of one dimension) and
//! each V row chunk is widened once and used by every pair of the batch,
//! and the query element (or the softmax weight) is a broadcast operand of
//! the multiply-add, so the inner loops are one load+convert per 1–4 fused
//! multiply-adds. Per pair and block the 16 scores are one vector; the
//! online-softmax update (max, exponentials, sum, rescale) runs once per
//! span, so its horizontal reductions are shared by 64 keys instead of 16,
//! and the output accumulates 64 dimensions (four vectors) at a time in
//! registers across the whole span.
//!
//! Safety: callers check the CPU features, `block_size == 16` and
//! `head_dim % 16 == 0` ([`super::AttnPath::supports`]).

use std::arch::x86_64::*;
use std::ops::Range;

use super::tile::{pair_stride, Tile};
use super::Call;
use crate::ops::vmath::exp512;

const BS: usize = 16;
/// Blocks per online-softmax update.
const SPAN: usize = 4;
/// Pairs processed together.
const MAX_NP: usize = 4;

/// Fetches blocks `blocks` of the tile's table into L1 ahead of their use:
/// blocks are scattered in memory, and hardware prefetchers do not cross
/// into the next one. (Shared with the bf16 kernel: both formats are 16
/// bits a value.)
pub(super) fn prefetch_span(call: &Call<'_>, tile: &Tile<'_>, blocks: Range<usize>) {
    let len = BS * call.layout.head_dim;
    for bi in blocks {
        let Some(&blk) = tile.table.get(bi) else { break };
        let at = call.layout.head_offset(blk as usize, tile.kvh);
        if let (Some(kb), Some(vb)) = (call.k_cache.get(at..at + len), call.v_cache.get(at..at + len)) {
            prefetch(kb);
            prefetch(vb);
        }
    }
}

/// Prefetches every cache line of `data` into L1.
#[inline(always)]
fn prefetch(data: &[u16]) {
    let p = data.as_ptr().cast::<i8>();
    for off in (0..data.len() * 2).step_by(64) {
        // SAFETY: prefetching is a hint: the address is inside `data`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
    }
}

/// One (row, head) pair of the current span: its valid keys per block.
#[derive(Clone, Copy)]
struct Pair {
    q: *const f32,
    st: *mut f32,
    masks: [__mmask16; SPAN],
}

/// The blocks of the current span: K and V pointers, first position.
#[derive(Clone, Copy)]
struct Blk {
    k: *const u16,
    v: *const u16,
    p0: usize,
}

#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
pub(super) fn run<const PAIRS: bool>(call: &Call<'_>, tile: &Tile<'_>, range: Range<usize>, state: &mut [f32]) {
    let hd = call.layout.head_dim;
    let group = call.group();
    let stride = pair_stride(hd);
    let len = BS * hd;
    assert!(state.len() >= tile.nrows * group * stride);
    assert!(hd.is_multiple_of(16) && call.layout.block_size == BS);
    // Query vectors are read through raw pointers: check them once.
    for r in 0..tile.nrows {
        for g in 0..group {
            assert_eq!(tile.query(call, r, g).len(), hd);
        }
    }
    let blocks = range.start / BS..range.end.div_ceil(BS);
    let none = Blk { k: std::ptr::null(), v: std::ptr::null(), p0: 0 };
    let mut batch = [Pair { q: std::ptr::null(), st: std::ptr::null_mut(), masks: [0; SPAN] }; MAX_NP];
    let mut bi = blocks.start;
    while bi < blocks.end {
        // The next SPAN blocks that are in the table and the cache (a table
        // that ends early ends the context there).
        let mut span = [none; SPAN];
        let mut nb = 0;
        while nb < SPAN && bi < blocks.end {
            let Some(&blk) = tile.table.get(bi) else {
                bi = blocks.end;
                break;
            };
            let base = call.layout.head_offset(blk as usize, tile.kvh);
            if let (Some(kb), Some(vb)) = (call.k_cache.get(base..base + len), call.v_cache.get(base..base + len)) {
                span[nb] = Blk { k: kb.as_ptr(), v: vb.as_ptr(), p0: bi * BS };
                nb += 1;
            }
            bi += 1;
        }
        if nb == 0 {
            continue;
        }
        prefetch_span(call, tile, bi..(bi + SPAN).min(blocks.end));
        let span = &span[..nb];
        let mut n = 0;
        for r in 0..tile.nrows {
            let mut masks = [0 as __mmask16; SPAN];
            for (m, b) in masks.iter_mut().zip(span) {
                let cols = tile.valid_cols(r, b.p0, BS, &range);
                *m = (((1u32 << cols.end) - 1) & !((1u32 << cols.start) - 1)) as u16;
            }
            if masks.iter().all(|&m| m == 0) {
                continue;
            }
            for g in 0..group {
                let st = state[(r * group + g) * stride..][..stride].as_mut_ptr();
                batch[n] = Pair { q: tile.query(call, r, g).as_ptr(), st, masks };
                n += 1;
                if n == MAX_NP {
                    // SAFETY: K/V blocks of `len` elements (checked above),
                    // query and state pointers of `hd` / `hd + 2` floats.
                    unsafe { update::<PAIRS>(span, hd, call.scale, &batch[..n]) };
                    n = 0;
                }
            }
        }
        if n > 0 {
            // SAFETY: as above.
            unsafe { update::<PAIRS>(span, hd, call.scale, &batch[..n]) };
        }
    }
}

/// Dispatches a batch of pairs and a span of blocks to the kernel of their sizes.
///
/// # Safety
/// Each block's `k` and `v` point to `16 * hd` readable `f16` values; each
/// pair's `q` to `hd` floats and `st` to `hd + 2` writable floats, distinct
/// per pair.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
unsafe fn update<const PAIRS: bool>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match span.len() {
        1 => update_nb::<PAIRS, 1>(span, hd, scale, pairs),
        2 => update_nb::<PAIRS, 2>(span, hd, scale, pairs),
        3 => update_nb::<PAIRS, 3>(span, hd, scale, pairs),
        _ => update_nb::<PAIRS, 4>(span, hd, scale, pairs),
    }
}

/// As [`update`], for a span of `NB` blocks.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
unsafe fn update_nb<const PAIRS: bool, const NB: usize>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match pairs.len() {
        1 => update_n::<PAIRS, 1, NB>(span, hd, scale, pairs),
        2 => update_n::<PAIRS, 2, NB>(span, hd, scale, pairs),
        3 => update_n::<PAIRS, 3, NB>(span, hd, scale, pairs),
        _ => update_n::<PAIRS, 4, NB>(span, hd, scale, pairs),
    }
}

/// Widens 16 `f16` values at `p`.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn load16(p: *const u16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
}

/// Widens 16 bf16 pairs at `p`: (low halves, high halves).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_pairs(p: *const u16) -> (__m512, __m512) {
    let w = _mm512_loadu_si512(p.cast());
    let hi = _mm512_and_si512(w, _mm512_set1_epi32(0xFFFF_0000u32 as i32));
    (_mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)), _mm512_castsi512_ps(hi))
}

/// K rows (16 keys each) of dimensions `2 * d2` and `2 * d2 + 1` of a block.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn k_rows<const PAIRS: bool>(k: *const u16, d2: usize) -> (__m512, __m512) {
    if PAIRS {
        load_pairs(k.add(d2 * BS * 2))
    } else {
        (load16(k.add(2 * d2 * BS)), load16(k.add((2 * d2 + 1) * BS)))
    }
}

/// V rows of keys `j` and `j + 1` (`j` even) of a block, dimensions `c..c + 16`.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn v_rows<const PAIRS: bool>(v: *const u16, hd: usize, j: usize, c: usize) -> (__m512, __m512) {
    if PAIRS {
        load_pairs(v.add(((j / 2) * hd + c) * 2))
    } else {
        (load16(v.add(j * hd + c)), load16(v.add((j + 1) * hd + c)))
    }
}

/// `NP` pairs against `NB` blocks: scores, online softmax, V accumulation.
///
/// # Safety
/// As [`update`], with `pairs.len() >= NP` and `span.len() >= NB`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn update_n<const PAIRS: bool, const NP: usize, const NB: usize>(
    span: &[Blk],
    hd: usize,
    scale: f32,
    pairs: &[Pair],
) {
    // Scores: one accumulator per pair and block (NP · NB independent chains).
    let mut s = [[_mm512_setzero_ps(); NB]; NP];
    for d2 in 0..hd / 2 {
        let mut k0 = [_mm512_setzero_ps(); NB];
        let mut k1 = [_mm512_setzero_ps(); NB];
        for b in 0..NB {
            (k0[b], k1[b]) = k_rows::<PAIRS>(span[b].k, d2);
        }
        for i in 0..NP {
            let q0 = _mm512_set1_ps(*pairs[i].q.add(2 * d2));
            let q1 = _mm512_set1_ps(*pairs[i].q.add(2 * d2 + 1));
            for b in 0..NB {
                s[i][b] = _mm512_fmadd_ps(k1[b], q1, _mm512_fmadd_ps(k0[b], q0, s[i][b]));
            }
        }
    }
    // Online softmax per pair, once for the span.
    let mut pj = [[[0f32; BS]; NB]; NP];
    let mut alpha = [1f32; NP];
    let mut rescale = [false; NP];
    let neg = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in 0..NP {
        let Pair { st, masks, .. } = pairs[i];
        let mut sc = [neg; NB];
        let mut mx = neg;
        for b in 0..NB {
            sc[b] = _mm512_mask_mov_ps(neg, masks[b], _mm512_mul_ps(s[i][b], _mm512_set1_ps(scale)));
            mx = _mm512_max_ps(mx, sc[b]);
        }
        let m_old = *st;
        let m_new = m_old.max(_mm512_reduce_max_ps(mx));
        let mv = _mm512_set1_ps(m_new);
        let mut sum = _mm512_setzero_ps();
        for b in 0..NB {
            let p = _mm512_maskz_mov_ps(masks[b], exp512(_mm512_sub_ps(sc[b], mv)));
            sum = _mm512_add_ps(sum, p);
            _mm512_storeu_ps(pj[i][b].as_mut_ptr(), p);
        }
        // The running max rarely changes after the first spans: rescale
        // only when it does.
        rescale[i] = m_new != m_old;
        alpha[i] = if !rescale[i] {
            1.0
        } else if m_old == f32::NEG_INFINITY {
            0.0
        } else {
            _mm512_cvtss_f32(exp512(_mm512_set1_ps(m_old - m_new)))
        };
        *st = m_new;
        *st.add(1) = *st.add(1) * alpha[i] + _mm512_reduce_add_ps(sum);
    }
    // acc = acc · alpha + Σ_j p_j · V_j, 64 dimensions at a time.
    let mut c = 0;
    while c + 64 <= hd {
        pv::<PAIRS, NP, NB, 4>(span, hd, c, pairs, &pj, &alpha, &rescale);
        c += 64;
    }
    while c < hd {
        pv::<PAIRS, NP, NB, 1>(span, hd, c, pairs, &pj, &alpha, &rescale);
        c += 16;
    }
}

/// Dimensions `c..c + 16 W` of the V accumulation for `NP` pairs over the
/// span's `NB` blocks, the accumulators kept in registers throughout.
///
/// # Safety
/// As [`update`]; `c + 16 W <= hd`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn pv<const PAIRS: bool, const NP: usize, const NB: usize, const W: usize>(
    span: &[Blk],
    hd: usize,
    c: usize,
    pairs: &[Pair],
    pj: &[[[f32; BS]; NB]; NP],
    alpha: &[f32; NP],
    rescale: &[bool; NP],
) {
    let mut a = [[_mm512_setzero_ps(); W]; NP];
    for i in 0..NP {
        let acc = pairs[i].st.add(2 + c);
        for (q, a) in a[i].iter_mut().enumerate() {
            *a = _mm512_loadu_ps(acc.add(16 * q));
            if rescale[i] {
                *a = _mm512_mul_ps(*a, _mm512_set1_ps(alpha[i]));
            }
        }
    }
    for b in 0..NB {
        for j in (0..BS).step_by(2) {
            for q in 0..W {
                let (v0, v1) = v_rows::<PAIRS>(span[b].v, hd, j, c + 16 * q);
                for i in 0..NP {
                    let acc = _mm512_fmadd_ps(v0, _mm512_set1_ps(pj[i][b][j]), a[i][q]);
                    a[i][q] = _mm512_fmadd_ps(v1, _mm512_set1_ps(pj[i][b][j + 1]), acc);
                }
            }
        }
    }
    for i in 0..NP {
        let acc = pairs[i].st.add(2 + c);
        for (q, a) in a[i].iter().enumerate() {
            _mm512_storeu_ps(acc.add(16 * q), *a);
        }
    }
}
