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

use crate::matmul::{quantize_block, CpuIsa, PackedRows, PACK_ROWS};
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
            let (isa, mut qb) = (CpuIsa::current(), [0i8; BLOCK]);
            for (x, b) in src.chunks_exact(BLOCK).zip(o.chunks_exact_mut(2 + BLOCK)) {
                let (d, _) = quantize_block(isa, x, &mut qb);
                b[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
                for (q, &v) in b[2..].iter_mut().zip(&qb) {
                    *q = v as u8;
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
    // with zeros), then quantized as a block of activations is.
    let (isa, mut col, mut qb) = (CpuIsa::current(), [0f32; BLOCK], [0i8; BLOCK]);
    for blk in 0..nb {
        let os = blk * BLOCK..(blk * BLOCK + BLOCK).min(rows);
        for r in 0..rank {
            col.fill(0.0);
            for (c, o) in col.iter_mut().zip(os.clone()) {
                *c = b[o * rank + r];
            }
            let (d, _) = quantize_block(isa, &col, &mut qb);
            bs[blk * rank + r] = d;
            bt[(blk * rank + r) * BLOCK..(blk * rank + r + 1) * BLOCK].copy_from_slice(&qb);
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
