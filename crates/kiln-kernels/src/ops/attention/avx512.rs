//! The tile kernel with AVX-512 F + F16C + FMA, for blocks of 16 tokens.
//!
//! A block's transposed K (`head_dim` rows of 16 keys) and its V rows are
//! widened to `f32` once per block. The 16 scores of one query are then
//! `head_dim` multiply-adds of a broadcast query element with a K row (four
//! independent accumulators), the online-softmax update is done on the
//! 16-lane vector, and `acc += p[j] · V[j]` runs 16 lanes of `acc` at a time.
//!
//! Safety: callers check the CPU features, `block_size == 16` and
//! `head_dim % 16 == 0` ([`super::AttnPath::supports`]).

use std::arch::x86_64::*;
use std::ops::Range;

use super::tile::{pair_stride, Tile};
use super::Call;
use crate::ops::vmath::exp512;

const BS: usize = 16;

#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
pub(super) fn run(
    call: &Call<'_>,
    tile: &Tile<'_>,
    range: Range<usize>,
    state: &mut [f32],
    kbuf: &mut [f32],
    vbuf: &mut [f32],
) {
    let hd = call.layout.head_dim;
    let group = call.group();
    let stride = pair_stride(hd);
    let len = BS * hd;
    assert!(kbuf.len() >= len && vbuf.len() >= len && state.len() >= tile.nrows * group * stride);
    assert!(hd.is_multiple_of(16) && call.layout.block_size == BS);
    for bi in range.start / BS..range.end.div_ceil(BS) {
        let Some(&blk) = tile.table.get(bi) else { break };
        let base = call.layout.head_offset(blk as usize, tile.kvh);
        let (Some(kb), Some(vb)) = (call.k_cache.get(base..base + len), call.v_cache.get(base..base + len)) else {
            continue;
        };
        widen(kb, &mut kbuf[..len]);
        widen(vb, &mut vbuf[..len]);
        let p0 = bi * BS;
        for r in 0..tile.nrows {
            let cols = tile.valid_cols(r, p0, BS, &range);
            if cols.is_empty() {
                continue;
            }
            let mask: __mmask16 = (((1u32 << cols.end) - 1) & !((1u32 << cols.start) - 1)) as u16;
            for g in 0..group {
                let qv = tile.query(call, r, g);
                let st = &mut state[(r * group + g) * stride..][..stride];
                pair_update(qv, kbuf, vbuf, call.scale, mask, st);
            }
        }
    }
}

/// Widens `f16` bits to `f32`, 16 at a time (`src.len()` a multiple of 16).
#[target_feature(enable = "avx512f,f16c")]
#[inline]
fn widen(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len()) / 16 * 16;
    for i in (0..n).step_by(16) {
        // SAFETY: `i + 16 <= n` for both slices.
        unsafe {
            let h = _mm256_loadu_si256(src.as_ptr().add(i).cast());
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
        }
    }
}

/// One (row, head) pair against one widened block: scores, online softmax,
/// and the V accumulation. `mask` selects the valid keys (at least one).
#[target_feature(enable = "avx512f,avx512vl,fma")]
#[inline]
fn pair_update(qv: &[f32], kbuf: &[f32], vbuf: &[f32], scale: f32, mask: __mmask16, st: &mut [f32]) {
    let hd = qv.len();
    assert!(kbuf.len() >= hd * BS && vbuf.len() >= hd * BS && st.len() >= hd + 2 && hd.is_multiple_of(4));
    // SAFETY: every pointer offset below stays within the lengths asserted above.
    unsafe {
        let kp = kbuf.as_ptr();
        let mut s = [_mm512_setzero_ps(); 4];
        for d in (0..hd).step_by(4) {
            for (i, s) in s.iter_mut().enumerate() {
                *s = _mm512_fmadd_ps(
                    _mm512_set1_ps(*qv.get_unchecked(d + i)),
                    _mm512_loadu_ps(kp.add((d + i) * BS)),
                    *s,
                );
            }
        }
        let sc =
            _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])), _mm512_set1_ps(scale));
        let sc = _mm512_mask_mov_ps(_mm512_set1_ps(f32::NEG_INFINITY), mask, sc);
        let m_old = st[0];
        let m_new = m_old.max(_mm512_reduce_max_ps(sc));
        let alpha = if m_old == f32::NEG_INFINITY { 0.0 } else { (m_old - m_new).exp() };
        let p = _mm512_maskz_mov_ps(mask, exp512(_mm512_sub_ps(sc, _mm512_set1_ps(m_new))));
        st[0] = m_new;
        st[1] = st[1] * alpha + _mm512_reduce_add_ps(p);
        let mut pj = [0f32; BS];
        _mm512_storeu_ps(pj.as_mut_ptr(), p);
        let acc = st.as_mut_ptr().add(2);
        let va = _mm512_set1_ps(alpha);
        let vp = vbuf.as_ptr();
        for c in (0..hd).step_by(16) {
            let mut a = _mm512_mul_ps(_mm512_loadu_ps(acc.add(c)), va);
            for (j, &pv) in pj.iter().enumerate() {
                a = _mm512_fmadd_ps(_mm512_set1_ps(pv), _mm512_loadu_ps(vp.add(j * hd + c)), a);
            }
            _mm512_storeu_ps(acc.add(c), a);
        }
    }
}
