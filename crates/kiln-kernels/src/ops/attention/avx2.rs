//! The tile kernel with AVX2 + F16C + FMA, for blocks of 16 tokens of an
//! `f16` cache.
//!
//! The AVX-512 kernel (`avx512`) with 8-lane vectors: a block's 16 scores
//! are two vectors, (row, head) pairs go two at a time against a span of
//! two blocks (32 keys), so the score accumulators (2 pairs × 2 blocks × 2
//! halves) and one dimension's K rows fit the 16 registers. Each K row (16
//! keys of one dimension) and each V row chunk is widened once with F16C
//! and used by both pairs; the online-softmax update runs once per span;
//! the output accumulates 32 dimensions at a time in registers.
//!
//! Safety: callers check the CPU features, `block_size == 16`,
//! `head_dim % 8 == 0` and the `F16` format ([`super::AttnPath::supports`]).

use std::arch::x86_64::*;
use std::ops::Range;

use super::tile::{pair_stride, Tile};
use super::Call;
use crate::ops::vmath::exp256;

const BS: usize = 16;
/// Blocks per online-softmax update.
const SPAN: usize = 2;
/// Pairs processed together.
const MAX_NP: usize = 2;

/// One (row, head) pair of the current span: its valid keys per block
/// (bit `j` for key `j`).
#[derive(Clone, Copy)]
struct Pair {
    q: *const f32,
    st: *mut f32,
    masks: [u16; SPAN],
}

/// The blocks of the current span: K and V pointers.
#[derive(Clone, Copy)]
struct Blk {
    k: *const u16,
    v: *const u16,
}

#[target_feature(enable = "avx2,f16c,fma")]
pub(super) fn run(call: &Call<'_>, tile: &Tile<'_>, range: Range<usize>, state: &mut [f32]) {
    let hd = call.layout.head_dim;
    let group = call.group();
    let stride = pair_stride(hd);
    let len = BS * hd;
    assert!(state.len() >= tile.nrows * group * stride);
    assert!(hd.is_multiple_of(8) && call.layout.block_size == BS);
    // Query vectors are read through raw pointers: check them once.
    for r in 0..tile.nrows {
        for g in 0..group {
            assert_eq!(tile.query(call, r, g).len(), hd);
        }
    }
    let blocks = range.start / BS..range.end.div_ceil(BS);
    let none = Blk { k: std::ptr::null(), v: std::ptr::null() };
    let mut batch = [Pair { q: std::ptr::null(), st: std::ptr::null_mut(), masks: [0; SPAN] }; MAX_NP];
    let mut bi = blocks.start;
    while bi < blocks.end {
        // The next SPAN blocks that are in the table and the cache (a table
        // that ends early ends the context there).
        let mut span = [none; SPAN];
        let mut p0 = [0usize; SPAN];
        let mut nb = 0;
        while nb < SPAN && bi < blocks.end {
            let Some(&blk) = tile.table.get(bi) else {
                bi = blocks.end;
                break;
            };
            let base = call.layout.head_offset(blk as usize, tile.kvh);
            if let (Some(kb), Some(vb)) = (call.k_cache.get(base..base + len), call.v_cache.get(base..base + len)) {
                span[nb] = Blk { k: kb.as_ptr(), v: vb.as_ptr() };
                p0[nb] = bi * BS;
                nb += 1;
            }
            bi += 1;
        }
        if nb == 0 {
            continue;
        }
        super::avx512::prefetch_span(call, tile, bi..(bi + SPAN).min(blocks.end));
        let span = &span[..nb];
        let mut n = 0;
        for r in 0..tile.nrows {
            let mut masks = [0u16; SPAN];
            for (m, &p0) in masks.iter_mut().zip(&p0[..nb]) {
                let cols = tile.valid_cols(r, p0, BS, &range);
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
                    unsafe { update(span, hd, call.scale, &batch[..n]) };
                    n = 0;
                }
            }
        }
        if n > 0 {
            // SAFETY: as above.
            unsafe { update(span, hd, call.scale, &batch[..n]) };
        }
    }
}

/// Dispatches a batch of pairs and a span of blocks to the kernel of their sizes.
///
/// # Safety
/// Each block's `k` and `v` point to `16 * hd` readable `f16` values; each
/// pair's `q` to `hd` floats and `st` to `hd + 2` writable floats, distinct
/// per pair.
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn update(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match (span.len(), pairs.len()) {
        (1, 1) => update_n::<1, 1>(span, hd, scale, pairs),
        (1, _) => update_n::<2, 1>(span, hd, scale, pairs),
        (_, 1) => update_n::<1, 2>(span, hd, scale, pairs),
        _ => update_n::<2, 2>(span, hd, scale, pairs),
    }
}

/// Widens 8 `f16` values at `p`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load8(p: *const u16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
}

/// All-ones lanes where bit `8 h + lane` of `m` is set.
#[target_feature(enable = "avx2")]
#[inline]
fn lane_mask(m: u16, h: usize) -> __m256 {
    let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let v = _mm256_and_si256(_mm256_set1_epi32(i32::from(m >> (8 * h))), bits);
    _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, bits))
}

/// Largest lane.
#[target_feature(enable = "avx2")]
#[inline]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
}

/// Sum of the lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `NP` pairs against `NB` blocks: scores, online softmax, V accumulation.
///
/// # Safety
/// As [`update`], with `pairs.len() >= NP` and `span.len() >= NB`.
#[target_feature(enable = "avx2,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn update_n<const NP: usize, const NB: usize>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    // Scores: one accumulator per pair, block and half block.
    let mut s = [[[_mm256_setzero_ps(); 2]; NB]; NP];
    for d in 0..hd {
        let mut k = [[_mm256_setzero_ps(); 2]; NB];
        for b in 0..NB {
            k[b] = [load8(span[b].k.add(d * BS)), load8(span[b].k.add(d * BS + 8))];
        }
        for i in 0..NP {
            let q = _mm256_set1_ps(*pairs[i].q.add(d));
            for b in 0..NB {
                s[i][b][0] = _mm256_fmadd_ps(k[b][0], q, s[i][b][0]);
                s[i][b][1] = _mm256_fmadd_ps(k[b][1], q, s[i][b][1]);
            }
        }
    }
    // Online softmax per pair, once for the span.
    let mut pj = [[[0f32; BS]; NB]; NP];
    let mut alpha = [1f32; NP];
    let mut rescale = [false; NP];
    let neg = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in 0..NP {
        let Pair { st, masks, .. } = pairs[i];
        let mut sc = [[neg; 2]; NB];
        let mut mx = neg;
        for b in 0..NB {
            for h in 0..2 {
                let v = _mm256_mul_ps(s[i][b][h], _mm256_set1_ps(scale));
                sc[b][h] = _mm256_blendv_ps(neg, v, lane_mask(masks[b], h));
                mx = _mm256_max_ps(mx, sc[b][h]);
            }
        }
        let m_old = *st;
        let m_new = m_old.max(hmax(mx));
        let mv = _mm256_set1_ps(m_new);
        let mut sum = _mm256_setzero_ps();
        for b in 0..NB {
            for h in 0..2 {
                let p = _mm256_and_ps(lane_mask(masks[b], h), exp256(_mm256_sub_ps(sc[b][h], mv)));
                sum = _mm256_add_ps(sum, p);
                _mm256_storeu_ps(pj[i][b][8 * h..].as_mut_ptr(), p);
            }
        }
        // The running max rarely changes after the first spans: rescale
        // only when it does.
        rescale[i] = m_new != m_old;
        alpha[i] = if !rescale[i] {
            1.0
        } else if m_old == f32::NEG_INFINITY {
            0.0
        } else {
            (m_old - m_new).exp()
        };
        *st = m_new;
        *st.add(1) = *st.add(1) * alpha[i] + hsum(sum);
    }
    // acc = acc · alpha + Σ_j p_j · V_j, 32 dimensions at a time.
    let mut c = 0;
    while c + 32 <= hd {
        pv::<NP, NB, 4>(span, hd, c, pairs, &pj, &alpha, &rescale);
        c += 32;
    }
    while c < hd {
        pv::<NP, NB, 1>(span, hd, c, pairs, &pj, &alpha, &rescale);
        c += 8;
    }
}

/// Dimensions `c..c + 8 W` of the V accumulation for `NP` pairs over the
/// span's `NB` blocks, the accumulators kept in registers throughout.
///
/// # Safety
/// As [`update`]; `c + 8 W <= hd`.
#[target_feature(enable = "avx2,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn pv<const NP: usize, const NB: usize, const W: usize>(
    span: &[Blk],
    hd: usize,
    c: usize,
    pairs: &[Pair],
    pj: &[[[f32; BS]; NB]; NP],
    alpha: &[f32; NP],
    rescale: &[bool; NP],
) {
    let mut a = [[_mm256_setzero_ps(); W]; NP];
    for i in 0..NP {
        let acc = pairs[i].st.add(2 + c);
        for (q, a) in a[i].iter_mut().enumerate() {
            *a = _mm256_loadu_ps(acc.add(8 * q));
            if rescale[i] {
                *a = _mm256_mul_ps(*a, _mm256_set1_ps(alpha[i]));
            }
        }
    }
    for b in 0..NB {
        for j in 0..BS {
            for q in 0..W {
                let v = load8(span[b].v.add(j * hd + c + 8 * q));
                for i in 0..NP {
                    a[i][q] = _mm256_fmadd_ps(v, _mm256_set1_ps(pj[i][b][j]), a[i][q]);
                }
            }
        }
    }
    for i in 0..NP {
        let acc = pairs[i].st.add(2 + c);
        for (q, a) in a[i].iter().enumerate() {
            _mm256_storeu_ps(acc.add(8 * q), *a);
        }
    }
}
