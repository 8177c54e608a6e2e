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
//! result is `acc + acc2` (`Q4_1`, `Q5_1`) or `acc + c · acc2` with `m = c · d`.
//! `Q5_1` ORs each row's fifth bits (one `u32` lane per row) into bit 4 of
//! the unpacked nibbles: a shift, a multiply and two masks per 4 values of
//! 16 rows, shared by the tokens.
//!
//! Safety: every function requires the features of
//! [`super::CpuIsa::Avx512`]; callers check them at run time.

use std::arch::x86_64::*;
use std::ops::Range;

use super::act::QK;
use super::packed::{PackKind, PackedRows, PACK_ROWS};
use super::Job;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const F16: u8 = 3;
const BF16: u8 = 4;
const F32: u8 = 5;
const Q5_1: u8 = 6;
const S8X2: u8 = 7;
const Q4K: u8 = 8;
const Q6K: u8 = 9;
/// Tokens per float tile: 8 tokens × 2 accumulators fill 16 registers.
const FLOAT_TOKENS: usize = 8;
/// Most tokens per tile of the quantized kernels: 6 tokens' accumulators
/// (three vectors each) and the unpacked weights fit the 32 vector
/// registers. Against 4 (`examples/step-bench`, 2 threads, Q4_1): 25 tokens
/// 0.182 vs 0.189–0.196 ms/token, 256 tokens 0.160–0.164 vs 0.165–0.168;
/// Q4_0 and Q8_0 alike.
const QUANT_TOKENS: usize = 6;

/// Row groups `groups` of a packed job, every token.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(super) fn rows(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
    match p.kind() {
        PackKind::Q4_0 => groups_k::<Q4_0>(job, p, groups),
        PackKind::Q4_1 => groups_k::<Q4_1>(job, p, groups),
        PackKind::Q5_1 => groups_k::<Q5_1>(job, p, groups),
        PackKind::S8x2 => groups_k::<S8X2>(job, p, groups),
        PackKind::Q8_0 => groups_k::<Q8_0>(job, p, groups),
        PackKind::Q4K => groups_k::<Q4K>(job, p, groups),
        PackKind::Q6K => groups_k::<Q6K>(job, p, groups),
        PackKind::F16 => groups_f::<F16>(job, p, groups),
        PackKind::BF16 => groups_f::<BF16>(job, p, groups),
        PackKind::F32 => groups_f::<F32>(job, p, groups),
    }
}

/// Float kinds: one column of 16 rows per vector, times a broadcast
/// activation, up to 8 tokens per pass over the group's weights.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
fn groups_f<const K: u8>(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
    let cols = p.cols();
    assert!(job.x.len() >= job.n * cols && cols.is_multiple_of(2));
    assert!(groups.end * PACK_ROWS <= p.rows());
    assert!(p.bytes().len() >= groups.end * cols / QK * p.kind().group_block_bytes());
    let gbytes = cols * PACK_ROWS * if K == F32 { 4 } else { 2 };
    for g in groups {
        // As in `groups_k`: the next group is fetched during the first tile.
        let ahead = if (g + 2) * gbytes <= p.bytes().len() { (g + 1) * gbytes } else { usize::MAX };
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(FLOAT_TOKENS);
            let pf = if t == 0 { ahead } else { usize::MAX };
            // SAFETY: extents asserted above; `pf` is a group inside the bytes or `usize::MAX`.
            unsafe {
                match nt {
                    1 => tile_f::<K, 1>(job, p, g, t, pf),
                    2 => tile_f::<K, 2>(job, p, g, t, pf),
                    3 => tile_f::<K, 3>(job, p, g, t, pf),
                    4 => tile_f::<K, 4>(job, p, g, t, pf),
                    5 => tile_f::<K, 5>(job, p, g, t, pf),
                    6 => tile_f::<K, 6>(job, p, g, t, pf),
                    7 => tile_f::<K, 7>(job, p, g, t, pf),
                    _ => tile_f::<K, 8>(job, p, g, t, pf),
                }
            }
            t += nt;
        }
    }
}

/// One column of 16 rows as `f32`.
///
/// # Safety
/// 16 values of kind `K` readable at `p`.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
#[inline]
unsafe fn column<const K: u8>(p: *const u8) -> __m512 {
    match K {
        F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
        BF16 => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())))),
        _ => _mm512_loadu_ps(p.cast()),
    }
}

/// Group `g` of a float kind against tokens `t0..t0 + T`; prefetches the
/// group at byte offset `ahead` (`usize::MAX`: none) as it goes.
///
/// # Safety
/// The extents asserted in `groups_f` must hold for `g` and `t0 + T <= job.n`;
/// `ahead`, unless `usize::MAX`, is the start of a whole group inside `p`'s bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
#[inline]
unsafe fn tile_f<const K: u8, const T: usize>(job: &Job<'_>, p: &PackedRows, g: usize, t0: usize, ahead: usize) {
    let cols = p.cols();
    let es = if K == F32 { 4 } else { 2 };
    // A group's group-blocks are consecutive: column `c` starts at `16 c` values.
    let base = p.bytes().as_ptr().add(g * cols * PACK_ROWS * es);
    let x = job.x.as_ptr();
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    let next = (ahead != usize::MAX).then(|| p.bytes().as_ptr().add(ahead));
    for c in (0..cols).step_by(2) {
        if let Some(next) = next {
            // Two columns of 16 rows: 64 (half) or 128 (f32) bytes.
            let at = next.add(c * PACK_ROWS * es);
            _mm_prefetch::<_MM_HINT_T0>(at.cast());
            if es == 4 {
                _mm_prefetch::<_MM_HINT_T0>(at.add(64).cast());
            }
        }
        let w0 = column::<K>(base.add(c * PACK_ROWS * es));
        let w1 = column::<K>(base.add((c + 1) * PACK_ROWS * es));
        for (t, acc) in acc.iter_mut().enumerate() {
            let xr = x.add((t0 + t) * cols + c);
            acc[0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(*xr), acc[0]);
            acc[1] = _mm512_fmadd_ps(w1, _mm512_set1_ps(*xr.add(1)), acc[1]);
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        let mut out = [0f32; PACK_ROWS];
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_add_ps(acc[0], acc[1]));
        job.store_rows(t0 + t, g * PACK_ROWS, &out);
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
    assert!(p.bytes().len() >= groups.end * p.kind().group_bytes(nb));
    assert!(K != Q6K || act.h.len() >= job.n * nb * 2);
    let gbytes = p.kind().group_bytes(nb);
    for g in groups {
        // The next group's weights are fetched while the first token tile
        // of this one runs, so streaming them overlaps the compute.
        let ahead = if (g + 2) * gbytes <= p.bytes().len() { (g + 1) * gbytes } else { usize::MAX };
        // Tiles of at most QUANT_TOKENS tokens, as even as possible (25
        // tokens: 5 + 5 + 5 + 5 + 5, not 6 · 4 + 1): each tile unpacks the
        // group's weights once, so a tile of one token costs nearly as much
        // as a full one.
        let ntiles = job.n.div_ceil(QUANT_TOKENS);
        let mut t = 0;
        for i in 0..ntiles {
            let nt = job.n * (i + 1) / ntiles - t;
            let pf = if t == 0 { ahead } else { usize::MAX };
            // SAFETY: extents asserted above; `pf` is a group inside the bytes or `usize::MAX`.
            unsafe {
                match nt {
                    1 => tile::<K, 1>(job, p, g, t, pf),
                    2 => tile::<K, 2>(job, p, g, t, pf),
                    3 => tile::<K, 3>(job, p, g, t, pf),
                    4 => tile::<K, 4>(job, p, g, t, pf),
                    5 => tile::<K, 5>(job, p, g, t, pf),
                    _ => tile::<K, 6>(job, p, g, t, pf),
                }
            }
            t += nt;
        }
    }
}

/// Group `g` (16 rows) against tokens `t0..t0 + T`; while at it, prefetches
/// the group whose bytes start at offset `ahead` (`usize::MAX`: none).
///
/// # Safety
/// The extents asserted in `groups_k` must hold for `g` and `t0 + T <= job.n`;
/// `ahead`, unless `usize::MAX`, is the start of a whole group inside `p`'s bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
#[inline]
unsafe fn tile<const K: u8, const T: usize>(job: &Job<'_>, p: &PackedRows, g: usize, t0: usize, ahead: usize) {
    let act = job.act;
    let nb = act.nb();
    let kind = p.kind();
    let gbb = kind.group_block_bytes();
    let qo = kind.quant_offset();
    let base = p.bytes().as_ptr().add(g * kind.group_bytes(nb));
    let xq = act.q.as_ptr();
    let (xd, xs) = (act.d.as_ptr(), act.s.as_ptr());
    let nib = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); T];
    let mut acc2 = [_mm512_setzero_ps(); T];
    let next = (ahead != usize::MAX).then(|| p.bytes().as_ptr().add(ahead));
    let sup = K == Q4K || K == Q6K;
    for b in 0..nb {
        let at = if sup { kind.block_at(b) } else { b * gbb };
        let gb = base.add(at);
        if let Some(next) = next {
            let nb_at = next.add(at);
            if sup && b % 8 == 0 {
                _mm_prefetch::<_MM_HINT_T0>(next.add(kind.header_at(b)).cast());
            }
            let mut off = 0;
            while off < gbb {
                _mm_prefetch::<_MM_HINT_T0>(nb_at.add(off).cast());
                off += 64;
            }
        }
        let hdr = base.add(if sup { kind.header_at(b) } else { 0 });
        if K == Q6K {
            q6k_block::<T>(job, gb, hdr, b, t0, &mut acc);
            continue;
        }
        let (dv, mv) = if K == Q4K {
            // Row r's (sc, m) bytes as one 32-bit lane of two u16s;
            // w = d·sc·u − dmin·m.
            let pairs = _mm512_cvtepu8_epi16(_mm256_loadu_si256(gb.cast()));
            let sc = _mm512_cvtepi32_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(0xFFFF)));
            let m = _mm512_cvtepi32_ps(_mm512_srli_epi32::<16>(pairs));
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(hdr.cast()));
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(hdr.add(32).cast()));
            (_mm512_mul_ps(d, sc), _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, m)))
        } else if K == Q4_1 || K == Q5_1 || K == S8X2 {
            // m (Q4_1, Q5_1), or the second half's scale (S8x2).
            let dv = _mm512_cvtph_ps(_mm256_loadu_si256(gb.cast()));
            (dv, _mm512_cvtph_ps(_mm256_loadu_si256(gb.add(32).cast())))
        } else {
            let dv = _mm512_cvtph_ps(_mm256_loadu_si256(gb.cast()));
            (dv, dv)
        };
        // Q5_1: each row's 32 fifth bits, one u32 lane per row.
        let qh = if K == Q5_1 { _mm512_loadu_si512(gb.add(64).cast()) } else { _mm512_setzero_si512() };
        let q = gb.add(qo);
        if K == S8X2 {
            // Signed values times the activations offset to unsigned (q +
            // 128), per half of the block; the offset's share (`corr`, per
            // row) comes off at the end: Σ d·v·q = Σ d·v·(q + 128) − corr.
            let corr = _mm512_loadu_ps(gb.add(64).cast());
            let flip = _mm512_set1_epi8(-128);
            let mut ilo = [_mm512_setzero_si512(); T];
            let mut ihi = [_mm512_setzero_si512(); T];
            for k in 0..8 {
                let w = _mm512_loadu_si512(q.add(64 * k).cast());
                for t in 0..T {
                    let a = _mm512_xor_si512(x4(xq, ((t0 + t) * nb + b) * QK + 4 * k), flip);
                    if k < 4 {
                        ilo[t] = _mm512_dpbusd_epi32(ilo[t], a, w);
                    } else {
                        ihi[t] = _mm512_dpbusd_epi32(ihi[t], a, w);
                    }
                }
            }
            for t in 0..T {
                let i = (t0 + t) * nb + b;
                let sum = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(ilo[t]),
                    dv,
                    _mm512_fmsub_ps(_mm512_cvtepi32_ps(ihi[t]), mv, corr),
                );
                acc[t] = _mm512_fmadd_ps(sum, _mm512_set1_ps(*xd.add(i)), acc[t]);
            }
            continue;
        }
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
                let mut lo = _mm512_and_si512(z, nib);
                let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(z), nib);
                if K == Q5_1 {
                    // Elements 4k..4k+4 (low nibbles) and 16+4k.. (high).
                    lo = _mm512_or_si512(lo, fifth_bits(qh, 4 * k as u32));
                    hi = _mm512_or_si512(hi, fifth_bits(qh, 16 + 4 * k as u32));
                }
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
        let y = if K == S8X2 || K == Q6K {
            acc[t]
        } else if K == Q4_1 || K == Q5_1 || K == Q4K {
            _mm512_add_ps(acc[t], acc2[t])
        } else {
            _mm512_fmadd_ps(acc2[t], _mm512_set1_ps(kind.implied_m()), acc[t])
        };
        let mut out = [0f32; PACK_ROWS];
        _mm512_storeu_ps(out.as_mut_ptr(), y);
        job.store_rows(t0 + t, g * PACK_ROWS, &out);
    }
}

/// A `Q6K` group-block `gb` (block `b`, super-block header `hdr`) times
/// tokens `t0..t0 + T`, added to `acc`: as the AVX2 kernel's (module docs
/// of `avx2_packed`), 16 rows per vector, with `vpdpbusd`.
///
/// # Safety
/// As `tile`; `act.h` holds the half sums (asserted in `groups_k`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
#[inline]
unsafe fn q6k_block<const T: usize>(
    job: &Job<'_>,
    gb: *const u8,
    hdr: *const u8,
    b: usize,
    t0: usize,
    acc: &mut [__m512; T],
) {
    let act = job.act;
    let nb = act.nb();
    let (xq, xd, xh) = (act.q.as_ptr(), act.d.as_ptr(), act.h.as_ptr());
    let x = |t: usize, at: usize| x4(xq, ((t0 + t) * nb + b) * QK + at);
    // Row r's (sc₀, sc₁) as one 32-bit lane of two i16s.
    let pairs = _mm512_cvtepi8_epi16(_mm256_loadu_si256(gb.cast()));
    let sc0 = _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(pairs));
    let sc1 = _mm512_srai_epi32::<16>(pairs);
    let d = _mm512_cvtph_ps(_mm256_loadu_si256(hdr.cast()));
    let (d0, d1) = (_mm512_mul_ps(d, _mm512_cvtepi32_ps(sc0)), _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc1)));
    let (nib, two) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    let q = gb.add(QK);
    let mut lo = [_mm512_setzero_si512(); T];
    let mut hi = [_mm512_setzero_si512(); T];
    for t in 0..T {
        let i = (t0 + t) * nb + b;
        lo[t] = _mm512_set1_epi32(-32 * *xh.add(2 * i));
        hi[t] = _mm512_set1_epi32(-32 * *xh.add(2 * i + 1));
    }
    for c in 0..2 {
        let hb = _mm512_loadu_si512(q.add(4 * 64 + 64 * c).cast());
        let z0 = _mm512_loadu_si512(q.add(64 * 2 * c).cast());
        let z1 = _mm512_loadu_si512(q.add(64 * (2 * c + 1)).cast());
        let l0 = _mm512_or_si512(_mm512_and_si512(z0, nib), _mm512_and_si512(_mm512_slli_epi16::<4>(hb), two));
        let l1 = _mm512_or_si512(_mm512_and_si512(z1, nib), _mm512_and_si512(hb, two));
        let h0 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(z0), nib),
            _mm512_and_si512(_mm512_slli_epi16::<2>(hb), two),
        );
        let h1 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(z1), nib),
            _mm512_and_si512(_mm512_srli_epi16::<2>(hb), two),
        );
        for t in 0..T {
            lo[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(lo[t], l0, x(t, 8 * c)), l1, x(t, 8 * c + 4));
            hi[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(hi[t], h0, x(t, 16 + 8 * c)), h1, x(t, 20 + 8 * c));
        }
    }
    for t in 0..T {
        let sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[t]), d0, _mm512_mul_ps(_mm512_cvtepi32_ps(hi[t]), d1));
        acc[t] = _mm512_fmadd_ps(sum, _mm512_set1_ps(*xd.add((t0 + t) * nb + b)), acc[t]);
    }
}

/// Bits `at..at + 4` of each 32-bit lane of `qh`, moved to bit 4 of the
/// lane's four bytes (byte i gets bit `at + i`).
#[target_feature(enable = "avx512f")]
#[inline]
fn fifth_bits(qh: __m512i, at: u32) -> __m512i {
    let four = _mm512_and_si512(_mm512_srlv_epi32(qh, _mm512_set1_epi32(at as i32)), _mm512_set1_epi32(0xF));
    // x · 0x00204081 = x + x<<7 + x<<14 + x<<21: bit i of x lands on bit 8i.
    let spread =
        _mm512_and_si512(_mm512_mullo_epi32(four, _mm512_set1_epi32(0x0020_4081)), _mm512_set1_epi32(0x0101_0101));
    _mm512_slli_epi32::<4>(spread)
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
