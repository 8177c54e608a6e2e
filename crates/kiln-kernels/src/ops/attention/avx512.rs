//! The tile kernel with AVX-512 F + F16C + FMA, for blocks of 16 tokens.
//!
//! The (row, head) pairs of a tile are processed up to four at a time
//! against each block, reading K and V straight from the `f16` cache: each
//! K row (16 keys of one dimension) and each V row chunk is widened once
//! and used by every pair of the batch, and the query element (or the
//! softmax weight) is a broadcast memory operand of the multiply-add, so the
//! inner loops are one load+convert per 1–4 fused multiply-adds. Per pair
//! the 16 scores are one vector (two accumulators over alternating
//! dimensions), the online-softmax update works on that vector, and the
//! output accumulates 64 dimensions (four vectors) at a time in registers.
//!
//! Safety: callers check the CPU features, `block_size == 16` and
//! `head_dim % 16 == 0` ([`super::AttnPath::supports`]).

use std::arch::x86_64::*;
use std::ops::Range;

use super::tile::{pair_stride, Tile};
use super::Call;
use crate::ops::vmath::exp512;

const BS: usize = 16;
/// How many blocks ahead K/V are prefetched.
const PREFETCH_BLOCKS: usize = 1;
/// Pairs processed together.
const MAX_NP: usize = 4;

/// Prefetches every cache line of `data` into L1.
#[inline(always)]
fn prefetch(data: &[u16]) {
    let p = data.as_ptr().cast::<i8>();
    for off in (0..data.len() * 2).step_by(64) {
        // SAFETY: prefetching is a hint: the address is inside `data`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
    }
}

/// One (row, head) pair of the current block.
#[derive(Clone, Copy)]
struct Pair {
    q: *const f32,
    st: *mut f32,
    mask: __mmask16,
}

#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
pub(super) fn run(
    call: &Call<'_>,
    tile: &Tile<'_>,
    range: Range<usize>,
    state: &mut [f32],
    _kbuf: &mut [f32],
    _vbuf: &mut [f32],
) {
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
    let mut batch = [Pair { q: std::ptr::null(), st: std::ptr::null_mut(), mask: 0 }; MAX_NP];
    for bi in blocks.clone() {
        let Some(&blk) = tile.table.get(bi) else { break };
        let base = call.layout.head_offset(blk as usize, tile.kvh);
        let (Some(kb), Some(vb)) = (call.k_cache.get(base..base + len), call.v_cache.get(base..base + len)) else {
            continue;
        };
        // Blocks are scattered in memory: fetch the next one ahead of
        // its use (hardware prefetchers do not cross into it).
        if let Some(&ahead) = tile.table.get(bi + PREFETCH_BLOCKS).filter(|_| bi + PREFETCH_BLOCKS < blocks.end) {
            let at = call.layout.head_offset(ahead as usize, tile.kvh);
            if at + len <= call.k_cache.len() && at + len <= call.v_cache.len() {
                prefetch(&call.k_cache[at..at + len]);
                prefetch(&call.v_cache[at..at + len]);
            }
        }
        let p0 = bi * BS;
        let mut n = 0;
        for r in 0..tile.nrows {
            let cols = tile.valid_cols(r, p0, BS, &range);
            if cols.is_empty() {
                continue;
            }
            let mask = (((1u32 << cols.end) - 1) & !((1u32 << cols.start) - 1)) as u16;
            for g in 0..group {
                let st = state[(r * group + g) * stride..][..stride].as_mut_ptr();
                batch[n] = Pair { q: tile.query(call, r, g).as_ptr(), st, mask };
                n += 1;
                if n == MAX_NP {
                    // SAFETY: K/V blocks of `len` elements (checked above),
                    // query and state pointers of `hd` / `hd + 2` floats.
                    unsafe { update(kb.as_ptr(), vb.as_ptr(), hd, call.scale, &batch[..n]) };
                    n = 0;
                }
            }
        }
        if n > 0 {
            // SAFETY: as above.
            unsafe { update(kb.as_ptr(), vb.as_ptr(), hd, call.scale, &batch[..n]) };
        }
    }
}

/// Dispatches a batch of pairs to the kernel of its size.
///
/// # Safety
/// `kp` and `vp` point to `16 * hd` readable `f16` values; each pair's `q`
/// to `hd` floats and `st` to `hd + 2` writable floats, distinct per pair.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
unsafe fn update(kp: *const u16, vp: *const u16, hd: usize, scale: f32, pairs: &[Pair]) {
    match pairs.len() {
        1 => update_n::<1>(kp, vp, hd, scale, pairs),
        2 => update_n::<2>(kp, vp, hd, scale, pairs),
        3 => update_n::<3>(kp, vp, hd, scale, pairs),
        _ => update_n::<4>(kp, vp, hd, scale, pairs),
    }
}

/// Widens 16 `f16` values at `p`.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn load16(p: *const u16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
}

/// `NP` pairs against one block: scores, online softmax, V accumulation.
///
/// # Safety
/// As [`update`], with `pairs.len() >= NP`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn update_n<const NP: usize>(kp: *const u16, vp: *const u16, hd: usize, scale: f32, pairs: &[Pair]) {
    // Scores: two accumulators per pair over alternating dimensions.
    let mut s = [[_mm512_setzero_ps(); 2]; NP];
    for d in (0..hd).step_by(2) {
        let k0 = load16(kp.add(d * BS));
        let k1 = load16(kp.add((d + 1) * BS));
        for i in 0..NP {
            let q = pairs[i].q;
            s[i][0] = _mm512_fmadd_ps(k0, _mm512_set1_ps(*q.add(d)), s[i][0]);
            s[i][1] = _mm512_fmadd_ps(k1, _mm512_set1_ps(*q.add(d + 1)), s[i][1]);
        }
    }
    // Online softmax per pair.
    let mut pj = [[0f32; BS]; NP];
    let mut alpha = [1f32; NP];
    let mut rescale = [false; NP];
    for i in 0..NP {
        let Pair { st, mask, .. } = pairs[i];
        let sc = _mm512_mul_ps(_mm512_add_ps(s[i][0], s[i][1]), _mm512_set1_ps(scale));
        let sc = _mm512_mask_mov_ps(_mm512_set1_ps(f32::NEG_INFINITY), mask, sc);
        let m_old = *st;
        let m_new = m_old.max(_mm512_reduce_max_ps(sc));
        let p = _mm512_maskz_mov_ps(mask, exp512(_mm512_sub_ps(sc, _mm512_set1_ps(m_new))));
        _mm512_storeu_ps(pj[i].as_mut_ptr(), p);
        // The running max rarely changes after the first blocks: rescale
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
        *st.add(1) = *st.add(1) * alpha[i] + _mm512_reduce_add_ps(p);
    }
    // acc = acc · alpha + Σ_j p_j · V_j, 64 dimensions at a time.
    let mut c = 0;
    while c + 64 <= hd {
        pv::<NP, 4>(vp, hd, c, pairs, &pj, &alpha, &rescale);
        c += 64;
    }
    while c < hd {
        pv::<NP, 1>(vp, hd, c, pairs, &pj, &alpha, &rescale);
        c += 16;
    }
}

/// Dimensions `c..c + 16 W` of the V accumulation for `NP` pairs.
///
/// # Safety
/// As [`update`]; `c + 16 W <= hd`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn pv<const NP: usize, const W: usize>(
    vp: *const u16,
    hd: usize,
    c: usize,
    pairs: &[Pair],
    pj: &[[f32; BS]; NP],
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
    for j in 0..BS {
        let row = vp.add(j * hd + c);
        for q in 0..W {
            let v = load16(row.add(16 * q));
            for i in 0..NP {
                a[i][q] = _mm512_fmadd_ps(v, _mm512_set1_ps(pj[i][j]), a[i][q]);
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
