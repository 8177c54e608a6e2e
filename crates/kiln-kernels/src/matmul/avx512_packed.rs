//! AVX-512 VNNI kernels over [`PackedRows`] (layout in `packed`).
//!
//! One call computes 16 output rows (one group) for up to 4 tokens at a
//! time. Per group-block: the 16 rows' scales are widened once; each 64-byte
//! quant chunk is loaded once (and split into low and high nibbles for
//! `Q4_x`) and multiplied, with `vpdpbusd`, against 4 activation bytes of
//! each token broadcast to all lanes, so every lane accumulates its own row's
//! exact integer dot product over the block. Per token and block this costs
//! one conversion, one multiply and two fused multiply-adds for 16 rows:
//! `acc += (d · dx) · Σu·q` and `acc2 += m · s` (see `packed`), and the
//! result is `acc + acc2` (`Q4_1`) or `acc + c · acc2` with `m = c · d`.
//!
//! Safety: every function requires the features of
//! [`super::SimdPath::Avx512`]; callers check them at run time.

use std::arch::x86_64::*;
use std::ops::Range;

use super::act::QK;
use super::packed::{PackKind, PackedRows, PACK_ROWS};
use super::Job;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;

/// Row groups `groups` of a packed job, every token.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(super) fn rows(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
    match p.kind() {
        PackKind::Q4_0 => groups_k::<Q4_0>(job, p, groups),
        PackKind::Q4_1 => groups_k::<Q4_1>(job, p, groups),
        PackKind::Q8_0 => groups_k::<Q8_0>(job, p, groups),
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
fn groups_k<const K: u8>(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
    let act = job.act;
    let nb = act.nb();
    // The tile reads activations and packed bytes through raw pointers:
    // check the extents once.
    assert!(act.q.len() >= job.n * nb * QK && act.d.len() >= job.n * nb && act.s.len() >= job.n * nb);
    assert!(nb * QK == p.cols() && groups.end * PACK_ROWS <= p.rows());
    assert!(p.bytes().len() >= groups.end * nb * p.kind().group_block_bytes());
    for g in groups {
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(4);
            // SAFETY: extents asserted above.
            unsafe {
                match nt {
                    1 => tile::<K, 1>(job, p, g, t),
                    2 => tile::<K, 2>(job, p, g, t),
                    3 => tile::<K, 3>(job, p, g, t),
                    _ => tile::<K, 4>(job, p, g, t),
                }
            }
            t += nt;
        }
    }
}

/// Group `g` (16 rows) against tokens `t0..t0 + T`.
///
/// # Safety
/// The extents asserted in `groups_k` must hold for `g` and `t0 + T <= job.n`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
#[inline]
unsafe fn tile<const K: u8, const T: usize>(job: &Job<'_>, p: &PackedRows, g: usize, t0: usize) {
    let act = job.act;
    let nb = act.nb();
    let kind = p.kind();
    let gbb = kind.group_block_bytes();
    let qo = kind.quant_offset();
    let base = p.bytes().as_ptr().add(g * nb * gbb);
    let xq = act.q.as_ptr();
    let (xd, xs) = (act.d.as_ptr(), act.s.as_ptr());
    let nib = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); T];
    let mut acc2 = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        let gb = base.add(b * gbb);
        let dv = _mm512_cvtph_ps(_mm256_loadu_si256(gb.cast()));
        let mv = if K == Q4_1 { _mm512_cvtph_ps(_mm256_loadu_si256(gb.add(32).cast())) } else { dv };
        let q = gb.add(qo);
        let mut isum = [_mm512_setzero_si512(); T];
        if K == Q8_0 {
            for k in 0..8 {
                let w = _mm512_loadu_si512(q.add(64 * k).cast());
                for (t, s) in isum.iter_mut().enumerate() {
                    *s = _mm512_dpbusd_epi32(*s, w, x4(xq, ((t0 + t) * nb + b) * QK + 4 * k));
                }
            }
        } else {
            for k in 0..4 {
                let z = _mm512_loadu_si512(q.add(64 * k).cast());
                let lo = _mm512_and_si512(z, nib);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(z), nib);
                for (t, s) in isum.iter_mut().enumerate() {
                    *s = _mm512_dpbusd_epi32(*s, lo, x4(xq, ((t0 + t) * nb + b) * QK + 4 * k));
                    *s = _mm512_dpbusd_epi32(*s, hi, x4(xq, ((t0 + t) * nb + b) * QK + 16 + 4 * k));
                }
            }
        }
        for t in 0..T {
            let i = (t0 + t) * nb + b;
            let scale = _mm512_mul_ps(dv, _mm512_set1_ps(*xd.add(i)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scale, acc[t]);
            acc2[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(*xs.add(i)), acc2[t]);
        }
    }
    for t in 0..T {
        let y = if K == Q4_1 {
            _mm512_add_ps(acc[t], acc2[t])
        } else {
            _mm512_fmadd_ps(acc2[t], _mm512_set1_ps(kind.implied_m()), acc[t])
        };
        let mut out = [0f32; PACK_ROWS];
        _mm512_storeu_ps(out.as_mut_ptr(), y);
        job.store_rows(t0 + t, g * PACK_ROWS, &out);
    }
}

/// The 4 activation bytes at `xq + at`, on every lane.
///
/// # Safety
/// `xq + at .. xq + at + 4` must be readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn x4(xq: *const i8, at: usize) -> __m512i {
    _mm512_set1_epi32(std::ptr::read_unaligned(xq.add(at).cast::<i32>()))
}
