//! LoRA adapters on the CPU, unmerged: each matrix's adapters by id, and
//! the blocked kernel that adds `scale·(x·Aᵀ)·Bᵀ` to the rows of a step
//! that asked for an adapter (shrink into a rank-sized vector, then
//! expand into the output row; `A` and `Bᵀ` are kept in f16, half the
//! bytes a decode step reads, and stay in the core's cache across the rows
//! one thread takes).

use std::collections::HashMap;

use kiln_backend::{BackendError, LoraFactors, LoraGroup, Result};

use crate::ops::par::RowsMut;
use crate::pool::split_range;
use crate::ThreadPool;

/// Highest rank the kernel takes (its shrink vector lives on the stack).
pub(crate) const MAX_RANK: usize = 512;

/// Below this many multiply-adds a step's deltas run on the calling thread.
const PAR_MIN_MACS: usize = 1 << 17;

/// From this many multiply-adds, a step of few rows splits each row's
/// work over the threads (two pool runs: the shrink, then the expand).
const SPLIT_MIN_MACS: usize = 1 << 14;

/// One part's factors: `A` (`rank × cols`) and `Bᵀ` (`rank × rows`) in
/// f16, each divided by a power of two that brings its largest value near
/// 2^10 (so that small factors keep f16's full precision).
#[derive(Debug)]
struct Factors {
    rank: usize,
    rows: usize,
    a: Vec<u16>,
    a_scale: f32,
    bt: Vec<u16>,
    b_scale: f32,
}

/// `v` in f16 after dividing by a power of two; returns the bits and the
/// power of two to multiply back.
fn to_f16(v: impl Iterator<Item = f32> + Clone) -> (Vec<u16>, f32) {
    let max = v.clone().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 && max.is_finite() { 2f32.powi(max.log2().ceil() as i32 - 10) } else { 1.0 };
    (v.map(|x| half::f16::from_f32(x / scale).to_bits()).collect(), scale)
}

/// One adapter on one matrix: factors per part.
#[derive(Debug)]
struct Attached {
    adapter: u32,
    parts: Vec<Option<Factors>>,
}

/// The adapters of every matrix, and the current step's groups of rows.
#[derive(Debug, Default)]
pub(crate) struct CpuLora {
    next_key: u32,
    tables: HashMap<u32, Vec<Attached>>,
    groups: Vec<LoraGroup>,
    /// The step's rows with an adapter: (group, row).
    rows: Vec<(u32, u32)>,
}

impl CpuLora {
    /// A new matrix's key.
    pub(crate) fn next_key(&mut self) -> u32 {
        self.next_key += 1;
        self.next_key
    }

    /// Attaches `adapter`'s factors to the matrix `key` of `part_shapes`
    /// (rows, cols) per part.
    pub(crate) fn attach(
        &mut self,
        key: u32,
        part_shapes: &[(usize, usize)],
        adapter: u32,
        parts: Vec<Option<LoraFactors>>,
    ) -> Result<()> {
        if parts.len() != part_shapes.len() {
            return Err(BackendError::Weight(format!(
                "LoRA factors for {} parts of a matrix of {}",
                parts.len(),
                part_shapes.len()
            )));
        }
        let mut out = Vec::with_capacity(parts.len());
        for (f, &(rows, cols)) in parts.into_iter().zip(part_shapes) {
            let Some(f) = f else {
                out.push(None);
                continue;
            };
            f.check(rows, cols)?;
            if f.rank > MAX_RANK {
                return Err(BackendError::Unsupported {
                    device: "cpu",
                    what: format!("LoRA rank {} (at most {MAX_RANK})", f.rank),
                });
            }
            let rank = f.rank;
            let (a, a_scale) = to_f16(f.a.iter().copied());
            let (bt, b_scale) = to_f16((0..rank * rows).map(|i| f.b[(i % rows) * rank + i / rows]));
            out.push(Some(Factors { rank, rows, a, a_scale, bt, b_scale }));
        }
        let list = self.tables.entry(key).or_default();
        list.retain(|a| a.adapter != adapter);
        if out.iter().any(Option::is_some) {
            list.push(Attached { adapter, parts: out });
        }
        Ok(())
    }

    /// Drops `adapter` from every matrix.
    pub(crate) fn detach(&mut self, adapter: u32) {
        for list in self.tables.values_mut() {
            list.retain(|a| a.adapter != adapter);
        }
        self.tables.retain(|_, l| !l.is_empty());
    }

    /// Bytes of `adapter`'s factors.
    pub(crate) fn bytes(&self, adapter: u32) -> usize {
        let floats: usize = self
            .tables
            .values()
            .flatten()
            .filter(|a| a.adapter == adapter)
            .flat_map(|a| a.parts.iter().flatten())
            .map(|f| f.a.len() + f.bt.len())
            .sum();
        floats * 2
    }

    /// Takes the step's groups of rows (see [`kiln_backend::lora_groups`]).
    pub(crate) fn begin(&mut self, batch: &kiln_backend::ForwardBatch) -> Result<()> {
        self.rows.clear();
        if !batch.has_lora() {
            self.groups.clear();
            return Ok(());
        }
        kiln_backend::lora_groups(batch, &mut self.groups);
        for (gi, g) in self.groups.iter().enumerate() {
            if !self.tables.values().flatten().any(|a| a.adapter == g.adapter) {
                return Err(BackendError::Batch(format!("LoRA adapter {} is not attached", g.adapter)));
            }
            for &(start, len) in &g.runs {
                self.rows.extend((start..start + len).map(|r| (gi as u32, r as u32)));
            }
        }
        Ok(())
    }

    /// Adds the deltas of the step's adapters on matrix `key` to its
    /// outputs: `ys[p]` holds part `p`'s rows (`n × rows_p`) of the product
    /// of `x` (`n × cols`).
    pub(crate) fn apply(&self, pool: &ThreadPool, key: u32, x: &[f32], cols: usize, ys: &mut [&mut [f32]]) {
        if self.rows.is_empty() {
            return;
        }
        let Some(list) = self.tables.get(&key) else { return };
        let per_group: Vec<Option<&Attached>> =
            self.groups.iter().map(|g| list.iter().find(|a| a.adapter == g.adapter)).collect();
        if per_group.iter().all(Option::is_none) {
            return;
        }
        let macs1: usize = list.iter().flat_map(|a| a.parts.iter().flatten()).map(|f| f.rank * (cols + f.rows)).sum();
        if self.rows.len() < 2 * pool.n_threads() && pool.n_threads() > 1 && macs1 * self.rows.len() >= SPLIT_MIN_MACS {
            let ptrs: Vec<(Ptr, usize)> = ys.iter_mut().map(|y| (Ptr(y.as_mut_ptr()), y.len())).collect();
            self.apply_split(pool, &per_group, x, cols, &ptrs);
            return;
        }
        let mut planes: Vec<Option<RowsMut<'_>>> = Vec::with_capacity(ys.len());
        for (p, y) in ys.iter_mut().enumerate() {
            let rows = list.iter().flat_map(|a| a.parts.get(p)).flatten().map(|f| f.rows).next();
            planes.push(rows.map(|r| RowsMut::new(y, r)));
        }
        let macs: usize =
            list.iter().flat_map(|a| a.parts.iter().flatten()).map(|f| f.rank * (cols + f.rows)).max().unwrap_or(0)
                * self.rows.len();
        let work = |ith: usize, nth: usize| {
            let mut t = [0f32; MAX_RANK];
            for &(g, row) in &self.rows[split_range(self.rows.len(), ith, nth)] {
                let Some(att) = per_group[g as usize] else { continue };
                let scale = self.groups[g as usize].scale;
                let row = row as usize;
                let Some(xr) = x.get(row * cols..(row + 1) * cols) else { continue };
                for (f, plane) in att.parts.iter().zip(&planes) {
                    let (Some(f), Some(plane)) = (f, plane) else { continue };
                    // SAFETY: every row of the step is in at most one group
                    // and `split_range` hands each thread disjoint rows.
                    let y = unsafe { plane.rows(row..row + 1) };
                    if y.len() == f.rows {
                        delta(f, xr, scale, &mut t[..f.rank], y);
                    }
                }
            }
        };
        if macs < PAR_MIN_MACS || pool.n_threads() == 1 || self.rows.len() < 2 {
            work(0, 1);
        } else {
            pool.run(&|ith, nth| work(ith, nth));
        }
    }

    /// [`CpuLora::apply`] for a few rows (decode): every thread takes a
    /// share of the shrink's dot products, then a share of each output row.
    fn apply_split(
        &self,
        pool: &ThreadPool,
        per_group: &[Option<&Attached>],
        x: &[f32],
        cols: usize,
        ys: &[(Ptr, usize)],
    ) {
        // (row, factors, output plane, scale) and where its ranks start in `t`.
        let mut jobs: Vec<(usize, &Factors, usize, f32, usize)> = Vec::new();
        let mut total = 0;
        for &(g, row) in &self.rows {
            let Some(att) = per_group[g as usize] else { continue };
            for (p, f) in att.parts.iter().enumerate() {
                let Some(f) = f else { continue };
                let row = row as usize;
                if ys.get(p).is_some_and(|y| y.1 >= (row + 1) * f.rows) && x.len() >= (row + 1) * cols {
                    jobs.push((row, f, p, self.groups[g as usize].scale, total));
                    total += f.rank;
                }
            }
        }
        let mut t = vec![0f32; total];
        let tp = Ptr(t.as_mut_ptr());
        pool.run(&|ith, nth| {
            let mine = split_range(total, ith, nth);
            for &(row, f, _, scale, at) in &jobs {
                let (lo, hi) = (mine.start.max(at), mine.end.min(at + f.rank));
                for k in lo..hi {
                    let r = k - at;
                    let v = scale * f.a_scale * dot(&f.a[r * cols..(r + 1) * cols], &x[row * cols..(row + 1) * cols]);
                    // SAFETY: `k` is in this thread's range of `t` only.
                    unsafe { *tp.get().add(k) = v };
                }
            }
        });
        pool.run(&|ith, nth| {
            for &(row, f, p, _, at) in &jobs {
                let cols_out = split_range(f.rows.div_ceil(8), ith, nth);
                let (lo, hi) = (cols_out.start * 8, (cols_out.end * 8).min(f.rows));
                if lo >= hi {
                    continue;
                }
                // SAFETY: each thread writes its own outputs `lo..hi` of the row.
                let y = unsafe { std::slice::from_raw_parts_mut(ys[p].0.get().add(row * f.rows + lo), hi - lo) };
                expand(f, &t[at..at + f.rank], y, lo);
            }
        });
    }
}

/// A raw pointer shared by the pool's threads, each writing its own part.
#[derive(Clone, Copy)]
struct Ptr(*mut f32);
// SAFETY: the users write disjoint elements (see `apply_split`).
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}
impl Ptr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Whether this CPU runs the F16C/FMA forms.
fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::matmul::CpuIsa::current() >= crate::matmul::CpuIsa::Avx2;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `a · x` with `a` in f16.
fn dot(a: &[u16], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: the level implies AVX2, FMA and F16C.
        return unsafe { x86::dot(a, x) };
    }
    a.iter().zip(x).map(|(&w, &v)| half::f16::from_bits(w).to_f32() * v).sum()
}

/// `y += Σ_r t[r] · Bᵀ[r][lo..lo + y.len()]` (t already scaled).
fn expand(f: &Factors, t: &[f32], y: &mut [f32], lo: usize) {
    let n = y.len();
    let row = |r: usize| &f.bt[r * f.rows + lo..r * f.rows + lo + n];
    let mut r = 0;
    while r < f.rank {
        let k = (f.rank - r).min(4);
        let mut c = [0f32; 4];
        let mut b = [row(r); 4];
        for j in 0..k {
            c[j] = t[r + j] * f.b_scale;
            b[j] = row(r + j);
        }
        #[cfg(target_arch = "x86_64")]
        if simd() {
            // SAFETY: the level implies AVX2, FMA and F16C; every row of `b` has `n` values.
            unsafe { x86::axpy4(y, c, b) };
            r += k;
            continue;
        }
        for (o, yo) in y.iter_mut().enumerate() {
            *yo += (0..4).map(|j| c[j] * half::f16::from_bits(b[j][o]).to_f32()).sum::<f32>();
        }
        r += k;
    }
}

/// `y += scale · B·(A·x)` for one row: a shrink of `rank` dot products,
/// then an expand four ranks per pass over `y`.
fn delta(f: &Factors, x: &[f32], scale: f32, t: &mut [f32], y: &mut [f32]) {
    let cols = x.len();
    for (r, tr) in t.iter_mut().enumerate() {
        *tr = scale * f.a_scale * dot(&f.a[r * cols..(r + 1) * cols], x);
    }
    expand(f, t, y, 0);
}

/// f16 factors → f32 on the fly (F16C), with FMA.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `Σ a[i]·x[i]` with `a` in f16.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot(a: &[u16], x: &[f32]) -> f32 {
        let n = a.len().min(x.len());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            let a0 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i).cast()));
            let a1 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i + 8).cast()));
            s0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x.as_ptr().add(i)), s0);
            s1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(x.as_ptr().add(i + 8)), s1);
            i += 16;
        }
        let s = _mm256_add_ps(s0, s1);
        let q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        let q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
        let mut r = _mm_cvtss_f32(q);
        while i < n {
            r += half::f16::from_bits(a[i]).to_f32() * x[i];
            i += 1;
        }
        r
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn ld(r: &[u16], i: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(r.as_ptr().add(i).cast()))
    }

    /// `y += Σ_j c[j]·b[j]` with the rows `b[j]` (each at least `y.len()`) in f16.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn axpy4(y: &mut [f32], c: [f32; 4], b: [&[u16]; 4]) {
        let n = y.len();
        let (c0, c1, c2, c3) = (_mm256_set1_ps(c[0]), _mm256_set1_ps(c[1]), _mm256_set1_ps(c[2]), _mm256_set1_ps(c[3]));
        let mut i = 0;
        while i + 8 <= n {
            let mut acc = _mm256_loadu_ps(y.as_ptr().add(i));
            acc = _mm256_fmadd_ps(c0, ld(b[0], i), acc);
            acc = _mm256_fmadd_ps(c1, ld(b[1], i), acc);
            acc = _mm256_fmadd_ps(c2, ld(b[2], i), acc);
            acc = _mm256_fmadd_ps(c3, ld(b[3], i), acc);
            _mm256_storeu_ps(y.as_mut_ptr().add(i), acc);
            i += 8;
        }
        while i < n {
            y[i] += (0..4).map(|j| c[j] * half::f16::from_bits(b[j][i]).to_f32()).sum::<f32>();
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_backend::{ForwardBatch, LogitsWant, LoraUse};

    fn naive(f: &LoraFactors, x: &[f32], scale: f32) -> Vec<f64> {
        let cols = x.len();
        let rows = f.rows();
        let t: Vec<f64> =
            (0..f.rank).map(|r| (0..cols).map(|c| f64::from(f.a[r * cols + c]) * f64::from(x[c])).sum()).collect();
        (0..rows)
            .map(|o| f64::from(scale) * (0..f.rank).map(|r| f64::from(f.b[o * f.rank + r]) * t[r]).sum::<f64>())
            .collect()
    }

    #[test]
    fn deltas_go_to_the_rows_of_their_adapter() {
        let (rows, cols, rank) = (37, 29, 5);
        let mut seed = 1u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let mut fac = || LoraFactors {
            rank,
            a: (0..rank * cols).map(|_| rnd()).collect(),
            b: (0..rank * rows).map(|_| rnd()).collect(),
        };
        let (f1, f2) = (fac(), fac());
        let mut l = CpuLora::default();
        let key = l.next_key();
        l.attach(key, &[(rows, cols)], 1, vec![Some(f1.clone())]).unwrap();
        l.attach(key, &[(rows, cols)], 2, vec![Some(f2.clone())]).unwrap();
        let mut b = ForwardBatch::new();
        b.push_seq(&[1, 2], 0, &[0], 4, LogitsWant::Last).unwrap();
        b.set_lora(Some(LoraUse { adapter: 2, scale: 0.5 }));
        b.push_seq(&[3], 0, &[0], 4, LogitsWant::Last).unwrap();
        b.push_seq(&[4], 0, &[0], 4, LogitsWant::Last).unwrap();
        b.set_lora(Some(LoraUse { adapter: 1, scale: 1.0 }));
        l.begin(&b).unwrap();
        let n = 4;
        let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            let mut y = vec![0f32; n * rows];
            l.apply(&pool, key, &x, cols, &mut [&mut y]);
            for (row, want) in [(0, Some((&f2, 0.5))), (1, Some((&f2, 0.5))), (2, None), (3, Some((&f1, 1.0)))] {
                let got = &y[row * rows..(row + 1) * rows];
                let want = want.map_or(vec![0.0; rows], |(f, s)| naive(f, &x[row * cols..(row + 1) * cols], s));
                for (g, w) in got.iter().zip(&want) {
                    // f16 factors: within f16's precision of the delta.
                    assert!((f64::from(*g) - w).abs() < 2e-3, "row {row}: {g} vs {w}");
                }
            }
        }
        assert_eq!(l.bytes(1), 2 * rank * (rows + cols));
        l.detach(2);
        assert!(l.begin(&b).is_err(), "a step naming a detached adapter is refused");
    }

    #[test]
    fn factors_of_the_wrong_shape_are_refused() {
        let mut l = CpuLora::default();
        let f = LoraFactors { rank: 2, a: vec![0.0; 2 * 3], b: vec![0.0; 2 * 4] };
        assert!(l.attach(1, &[(4, 3)], 1, vec![Some(f.clone())]).is_ok());
        assert!(l.attach(1, &[(5, 3)], 1, vec![Some(f)]).is_err());
    }
}
