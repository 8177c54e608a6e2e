//! One part's LoRA factors as the CPU keeps them, and the expand kernel.
//!
//! - `A` (`rank × cols`) is a weight of the product kernels: `Q8_0` rows
//!   (a scale per 32 inputs); on AVX2 packed like a base weight (its
//!   integer kernels read packed rows only), the rank padded by zero rows
//!   to the packing group of 16. Its shrink `x·Aᵀ` then runs in the same dispatch as the
//!   base product, on the 8-bit activations that product already makes.
//!   Inputs that are not whole 32-blocks keep `A` in `F16` (float kernels).
//! - `Bᵀ` (`rank × rows`) is signed bytes with an `f32` scale per rank and
//!   32 outputs; the expand `y += Σ_r t_r·Bᵀ_r` converts them on the fly.
//!
//! Both are about a quarter of the `f32` factors' bytes (a rank-16 adapter on
//! every projection of SmolLM2-135M: 5.3 MB against 19.5 MB in `f32`).

use std::ops::Range;

use kiln_backend::{BackendError, LoraFactors, Result};

use crate::matmul::{CpuIsa, PackedRows, PACK_ROWS};
use crate::{quant, GgmlType, WeightView};

/// Outputs of `Bᵀ` under one scale, and the expand's unit of work.
pub(super) const BLOCK: usize = 32;

/// `A` in the form its kernels read.
#[derive(Debug)]
enum AFactor {
    Packed(PackedRows),
    Rows { ty: GgmlType, bytes: Vec<u8> },
}

/// One part's factors.
#[derive(Debug)]
pub(super) struct Factors {
    /// The adapter's rank.
    pub(super) rank: usize,
    /// Rows of `A` as stored (the rank, padded for packing): the width of
    /// the shrink's output.
    pub(super) t_len: usize,
    /// Output features.
    pub(super) rows: usize,
    cols: usize,
    a: AFactor,
    /// `Bᵀ` in signed bytes by blocks of 32 outputs, each block's ranks
    /// together (`blocks × rank × 32`, the last block padded with zeros),
    /// so that the expand reads it in one sequential pass.
    bt: Vec<i8>,
    /// The scale of block `b`'s rank `r` at `bs[b · rank + r]`.
    bs: Vec<f32>,
}

impl Factors {
    /// Converts checked `f32` factors of a `rows × cols` part.
    pub(super) fn new(f: &LoraFactors, rows: usize, cols: usize) -> Result<Self> {
        f.check(rows, cols)?;
        if !all_finite(&f.a) || !all_finite(&f.b) {
            return Err(BackendError::Weight("LoRA factors hold a value that is not a finite number".into()));
        }
        let rank = f.rank;
        let a = if cols.is_multiple_of(BLOCK) {
            // AVX2 has integer kernels for packed rows only; AVX-512 reads
            // Q8_0 rows as they are (packing would cost the load more).
            let pack = matches!(CpuIsa::current(), CpuIsa::Avx2 | CpuIsa::Avx2Vnni);
            let t_len = if pack { rank.next_multiple_of(PACK_ROWS) } else { rank };
            let bytes = quantize_rows(GgmlType::Q8_0, &f.a, t_len, cols)?;
            let view = WeightView::new(GgmlType::Q8_0, t_len, cols, &bytes);
            match pack.then(|| PackedRows::pack(view)).flatten() {
                Some(p) => AFactor::Packed(p),
                None => AFactor::Rows { ty: GgmlType::Q8_0, bytes },
            }
        } else {
            AFactor::Rows { ty: GgmlType::F16, bytes: quantize_rows(GgmlType::F16, &f.a, rank, cols)? }
        };
        let t_len = match &a {
            AFactor::Packed(p) => p.rows(),
            AFactor::Rows { ty, bytes } => bytes.len() / ty.row_bytes(cols).unwrap_or(1).max(1),
        };
        let (bt, bs) = quantize_bt(&f.b, rank, rows);
        Ok(Self { rank, t_len, rows, cols, a, bt, bs })
    }

    /// `A` as a weight of the product kernels (`t_len × cols`).
    pub(super) fn a_view(&self) -> WeightView<'_> {
        match &self.a {
            AFactor::Packed(p) => WeightView::packed(p),
            AFactor::Rows { ty, bytes } => WeightView::new(*ty, self.t_len, self.cols, bytes),
        }
    }

    /// Bytes kept.
    pub(super) fn n_bytes(&self) -> usize {
        let a = match &self.a {
            AFactor::Packed(p) => p.n_bytes(),
            AFactor::Rows { bytes, .. } => bytes.len(),
        };
        a + self.bt.len() + 4 * self.bs.len()
    }

    /// Blocks of 32 outputs (the last may be short).
    pub(super) fn blocks(&self) -> usize {
        self.rows.div_ceil(BLOCK)
    }

    /// `y += Σ_r t[r]·Bᵀ[r][o]` for the outputs `o` of `blocks`, where `y`
    /// holds the outputs from `blocks.start · 32` on.
    pub(super) fn expand(&self, t: &[f32], y: &mut [f32], blocks: Range<usize>) {
        let nb = self.blocks();
        let (rank, rows, full) = (self.rank, self.rows, self.rank * BLOCK);
        let t = &t[..rank.min(t.len())];
        let base = blocks.start * BLOCK;
        let isa = CpuIsa::current();
        for b in blocks.start..blocks.end.min(nb) {
            let o0 = b * BLOCK;
            let m = BLOCK.min(rows - o0);
            let Some(yb) = y.get_mut(o0 - base..o0 - base + m) else { return };
            let (q, d) = (&self.bt[b * full..(b + 1) * full], &self.bs[b * rank..(b + 1) * rank]);
            #[cfg(target_arch = "x86_64")]
            if m == BLOCK && isa >= CpuIsa::Avx2 {
                // SAFETY: the level implies AVX2 and FMA (AVX-512F for
                // `block512`); `q` holds `rank × 32` values, `d` `rank`,
                // `t` at most `rank` and `yb` 32.
                unsafe {
                    if isa == CpuIsa::Avx512 {
                        x86::block512(q, d, t, yb);
                    } else {
                        x86::block(q, d, t, yb);
                    }
                }
                continue;
            }
            for (r, &tr) in t.iter().enumerate() {
                let c = tr * d[r];
                for (yo, &v) in yb.iter_mut().zip(&q[r * BLOCK..r * BLOCK + m]) {
                    *yo += c * f32::from(v);
                }
            }
        }
    }

    /// [`Self::expand`] for many rows at once (a prompt's): the blocks of
    /// `Bᵀ` in `blocks` are widened to f32 once (into `w`, a chunk of at
    /// most [`WIDE_BYTES`] at a time), then added into every row, row by
    /// row so that each row's outputs are swept in order, four rows at a
    /// time on AVX-512 so that eight independent FMA chains run. Row `i`'s
    /// coefficients (`rank`, scale applied) are at `c[i · rank..]`;
    /// `ys[i]` points at its output 0.
    ///
    /// # Safety
    ///
    /// Each `ys[i]` must be valid for `self.rows` values, written by no
    /// one else at the outputs of `blocks` during the call, and `c` must
    /// hold `ys.len() · rank` values.
    pub(super) unsafe fn expand_rows(&self, c: &[f32], ys: &[*mut f32], blocks: Range<usize>, w: &mut Vec<f32>) {
        let (rank, rows, full) = (self.rank, self.rows, self.rank * BLOCK);
        let per_chunk = (WIDE_BYTES / (4 * full)).max(1);
        #[cfg(target_arch = "x86_64")]
        let wide = CpuIsa::current() == CpuIsa::Avx512;
        let mut b0 = blocks.start;
        let b_end = blocks.end.min(self.blocks());
        while b0 < b_end {
            let b1 = (b0 + per_chunk).min(b_end);
            w.resize((b1 - b0) * full, 0.0);
            // Block `b` widened: `w[(b - b0)·full + r·32 + j] = d·q`.
            for b in b0..b1 {
                let (q, d) = (&self.bt[b * full..(b + 1) * full], &self.bs[b * rank..(b + 1) * rank]);
                let wb = &mut w[(b - b0) * full..(b - b0 + 1) * full];
                for (r, &dr) in d.iter().enumerate() {
                    for (wv, &qv) in wb[r * BLOCK..(r + 1) * BLOCK].iter_mut().zip(&q[r * BLOCK..(r + 1) * BLOCK]) {
                        *wv = dr * f32::from(qv);
                    }
                }
            }
            let mut i = 0;
            #[cfg(target_arch = "x86_64")]
            if wide {
                while i + 4 <= ys.len() {
                    let cr = &c[i * rank..(i + 4) * rank];
                    for b in b0..b1 {
                        let o0 = b * BLOCK;
                        if rows - o0 < BLOCK {
                            break;
                        }
                        let y = [ys[i].add(o0), ys[i + 1].add(o0), ys[i + 2].add(o0), ys[i + 3].add(o0)];
                        // SAFETY: AVX-512F is present; the block holds
                        // `rank × 32` values, `cr` four rows of `rank`,
                        // each `y` 32 outputs.
                        x86::rows4(&w[(b - b0) * full..(b - b0 + 1) * full], cr, rank, y);
                    }
                    i += 4;
                }
            }
            for (k, &y) in ys.iter().enumerate() {
                for b in b0..b1 {
                    let o0 = b * BLOCK;
                    let m = BLOCK.min(rows - o0);
                    // Rows the four-row kernel did, except a short last block.
                    #[cfg(target_arch = "x86_64")]
                    if k < i && m == BLOCK {
                        continue;
                    }
                    let yb = std::slice::from_raw_parts_mut(y.add(o0), m);
                    let wb = &w[(b - b0) * full..(b - b0 + 1) * full];
                    for (r, &cv) in c[k * rank..(k + 1) * rank].iter().enumerate() {
                        for (yo, &wv) in yb.iter_mut().zip(&wb[r * BLOCK..r * BLOCK + m]) {
                            *yo += cv * wv;
                        }
                    }
                }
            }
            b0 = b1;
        }
    }
}

/// Whether every value is finite (a fold without early exit, by chunks, so
/// that it vectorizes).
fn all_finite(v: &[f32]) -> bool {
    v.chunks(256).all(|c| c.iter().fold(true, |ok, x| ok & x.is_finite()))
}

/// The largest magnitude in `x` (in a form that vectorizes; the values are
/// finite).
fn max_abs(x: &[f32]) -> f32 {
    x.iter().map(|v| v.abs()).fold(0f32, |a, b| if b > a { b } else { a })
}

/// Rows of one group above which the expand widens each block of `Bᵀ` once
/// for all of them ([`Factors::expand_rows`]) instead of once per row.
pub(super) const MANY_ROWS: usize = 4;

/// Bytes of `Bᵀ` widened to f32 at a time by [`Factors::expand_rows`]
/// (within L2 with the rows' outputs).
const WIDE_BYTES: usize = 64 << 10;

/// `v` rounded to the nearest integer (ties to even) for `|v| < 2^22`,
/// without a call into libm (`f32::round` is one on baseline x86-64).
#[inline(always)]
fn round(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    (v + MAGIC) - MAGIC
}

/// `rows` rows of `cols` values of `m` (rows past its end are zeros) in
/// `ty` (`Q8_0` or `F16`).
fn quantize_rows(ty: GgmlType, m: &[f32], rows: usize, cols: usize) -> Result<Vec<u8>> {
    let rb = ty.row_bytes(cols).ok_or_else(|| BackendError::Weight(format!("LoRA A: {cols} columns in {ty}")))?;
    let mut out = vec![0u8; rows * rb];
    let have = m.len() / cols.max(1);
    for (r, o) in out.chunks_exact_mut(rb).enumerate().take(have) {
        let src = &m[r * cols..(r + 1) * cols];
        if ty == GgmlType::Q8_0 {
            for (x, b) in src.chunks_exact(BLOCK).zip(o.chunks_exact_mut(2 + BLOCK)) {
                let d = max_abs(x) / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                b[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
                for (q, &v) in b[2..].iter_mut().zip(x) {
                    *q = round(v * id).clamp(-127.0, 127.0) as i8 as u8;
                }
            }
        } else {
            quant::quantize_row(ty, src, o).map_err(|e| BackendError::Weight(format!("LoRA A: {e}")))?;
        }
    }
    Ok(out)
}

/// `Bᵀ` of `b` (`rows × rank`) in signed bytes by blocks of 32 outputs
/// (`blocks × rank × 32`), with a scale per block and rank (their largest
/// magnitude over 127).
fn quantize_bt(b: &[f32], rank: usize, rows: usize) -> (Vec<i8>, Vec<f32>) {
    let nb = rows.div_ceil(BLOCK);
    let mut bt = vec![0i8; nb * rank * BLOCK];
    let mut bs = vec![0f32; nb * rank];
    // One rank's 32 outputs of a block, gathered (the last block padded
    // with zeros), then scaled and rounded in contiguous passes.
    let mut col = [0f32; BLOCK];
    for blk in 0..nb {
        let os = blk * BLOCK..(blk * BLOCK + BLOCK).min(rows);
        for r in 0..rank {
            col.fill(0.0);
            for (c, o) in col.iter_mut().zip(os.clone()) {
                *c = b[o * rank + r];
            }
            let d = max_abs(&col) / 127.0;
            bs[blk * rank + r] = d;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let out = &mut bt[(blk * rank + r) * BLOCK..(blk * rank + r + 1) * BLOCK];
            for (q, &v) in out.iter_mut().zip(&col) {
                *q = round(v * inv).clamp(-127.0, 127.0) as i8;
            }
        }
    }
    (bt, bs)
}

/// The expand of one block of 32 outputs (AVX2 + FMA, AVX-512).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `y[0..32] += Σ_r t[r]·d[r]·q[32r..32r + 32]` (`q`: at least
    /// `32 · t.len()` values, `d` at least `t.len()`, `y` at least 32).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block(q: &[i8], d: &[f32], t: &[f32], y: &mut [f32]) {
        let yp = y.as_mut_ptr();
        let mut acc =
            [_mm256_loadu_ps(yp), _mm256_loadu_ps(yp.add(8)), _mm256_loadu_ps(yp.add(16)), _mm256_loadu_ps(yp.add(24))];
        for (r, &tr) in t.iter().enumerate() {
            let c = _mm256_set1_ps(tr * *d.get_unchecked(r));
            let p = q.as_ptr().add(32 * r);
            for (v, a) in acc.iter_mut().enumerate() {
                let w = _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(8 * v).cast()));
                *a = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(w), *a);
            }
        }
        for (v, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(yp.add(8 * v), *a);
        }
    }

    /// [`block`] in 512-bit registers, the ranks in two interleaved halves
    /// (even and odd) so that four accumulators hide the FMA latency: a
    /// chain of `rank` dependent FMAs per half register was the bound.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block512(q: &[i8], d: &[f32], t: &[f32], y: &mut [f32]) {
        let yp = y.as_mut_ptr();
        let (mut a0, mut a1) = (_mm512_loadu_ps(yp), _mm512_loadu_ps(yp.add(16)));
        let (mut b0, mut b1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        // One rank's term: its scale times `t`, and its 32 weights in f32.
        macro_rules! term {
            ($r:expr) => {{
                let r = $r;
                let c = _mm512_set1_ps(*t.get_unchecked(r) * *d.get_unchecked(r));
                let p = q.as_ptr().add(32 * r);
                let w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast())));
                let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(16).cast())));
                (c, w0, w1)
            }};
        }
        let pairs = t.len() / 2;
        for i in 0..pairs {
            let (c, w0, w1) = term!(2 * i);
            a0 = _mm512_fmadd_ps(c, w0, a0);
            a1 = _mm512_fmadd_ps(c, w1, a1);
            let (c, w0, w1) = term!(2 * i + 1);
            b0 = _mm512_fmadd_ps(c, w0, b0);
            b1 = _mm512_fmadd_ps(c, w1, b1);
        }
        if t.len() % 2 == 1 {
            let (c, w0, w1) = term!(t.len() - 1);
            a0 = _mm512_fmadd_ps(c, w0, a0);
            a1 = _mm512_fmadd_ps(c, w1, a1);
        }
        _mm512_storeu_ps(yp, _mm512_add_ps(a0, b0));
        _mm512_storeu_ps(yp.add(16), _mm512_add_ps(a1, b1));
    }

    /// `y[k][0..32] += Σ_r c[k·rank + r]·w[32r..32r + 32]` for four rows
    /// `k` (`w`: `rank × 32` f32, `c`: `4 · rank`, each `y[k]` 32 values).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows4(w: &[f32], c: &[f32], rank: usize, y: [*mut f32; 4]) {
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        for (a, &yk) in acc.iter_mut().zip(&y) {
            *a = [_mm512_loadu_ps(yk), _mm512_loadu_ps(yk.add(16))];
        }
        for r in 0..rank {
            let (w0, w1) = (_mm512_loadu_ps(w.as_ptr().add(32 * r)), _mm512_loadu_ps(w.as_ptr().add(32 * r + 16)));
            for (k, a) in acc.iter_mut().enumerate() {
                let cv = _mm512_set1_ps(*c.get_unchecked(k * rank + r));
                a[0] = _mm512_fmadd_ps(cv, w0, a[0]);
                a[1] = _mm512_fmadd_ps(cv, w1, a[1]);
            }
        }
        for (a, &yk) in acc.iter().zip(&y) {
            _mm512_storeu_ps(yk, a[0]);
            _mm512_storeu_ps(yk.add(16), a[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many rows at once equal each row alone (AVX-512's four-row kernel,
    /// the remainder rows and a short last block).
    #[test]
    fn expand_rows_equals_each_row_alone() {
        // Rank 300 widens one block per chunk (`WIDE_BYTES`).
        for (rows, cols, rank, n) in [(70, 64, 5, 7), (100, 32, 300, 5)] {
            let val = |i: usize, m: usize, k: usize| ((i * m % k) as f32 - (k / 2) as f32) / (3 * k) as f32;
            let a: Vec<f32> = (0..rank * cols).map(|i| val(i, 7, 31)).collect();
            let b: Vec<f32> = (0..rows * rank).map(|i| val(i, 13, 37)).collect();
            let f = Factors::new(&LoraFactors { rank, a, b }, rows, cols).unwrap();
            let c: Vec<f32> = (0..n * rank).map(|i| val(i, 5, 11)).collect();
            let mut each = vec![0.5f32; n * rows];
            for i in 0..n {
                f.expand(&c[i * rank..(i + 1) * rank], &mut each[i * rows..(i + 1) * rows], 0..f.blocks());
            }
            let mut many = vec![0.5f32; n * rows];
            let ys: Vec<*mut f32> = (0..n).map(|i| many[i * rows..].as_mut_ptr()).collect();
            let mut w = Vec::new();
            // SAFETY: each pointer holds `rows` values; `c` holds n rows.
            unsafe { f.expand_rows(&c, &ys, 0..f.blocks(), &mut w) };
            for (o, (x, y)) in each.iter().zip(&many).enumerate() {
                assert!((x - y).abs() <= 1e-4 * x.abs().max(1.0), "rank {rank}, output {o}: {x} vs {y}");
            }
        }
    }

    /// The stored `Bᵀ` is within half a step (scale / 2) of `B`, block by
    /// block, and `A`'s view has the padded rank.
    #[test]
    fn factors_round_trip_within_half_a_step() {
        let (rows, cols, rank) = (70, 64, 5);
        let a: Vec<f32> = (0..rank * cols).map(|i| ((i * 7 % 31) as f32 - 15.0) / 40.0).collect();
        let b: Vec<f32> = (0..rows * rank).map(|i| ((i * 13 % 37) as f32 - 18.0) / 90.0).collect();
        let f = Factors::new(&LoraFactors { rank, a, b: b.clone() }, rows, cols).unwrap();
        assert!(f.t_len >= rank && f.a_view().rows == f.t_len);
        for o in 0..rows {
            for r in 0..rank {
                let (blk, i) = (o / BLOCK, o % BLOCK);
                let d = f.bs[blk * rank + r];
                let got = d * f32::from(f.bt[(blk * rank + r) * BLOCK + i]);
                assert!((got - b[o * rank + r]).abs() <= d / 2.0 + 1e-7, "B[{o}][{r}]");
            }
        }
        let bad = LoraFactors { rank: 1, a: vec![f32::NAN; cols], b: vec![0.0; rows] };
        assert!(Factors::new(&bad, rows, cols).is_err(), "a NaN factor is refused");
    }
}
