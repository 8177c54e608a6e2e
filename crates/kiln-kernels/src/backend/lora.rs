//! LoRA adapters on the CPU, unmerged: each matrix's adapters by id, and
//! the blocked kernel that adds `scale·(x·Aᵀ)·Bᵀ` to the rows of a step
//! that asked for an adapter (shrink into a rank-sized vector, then
//! expand into the output row; `A` and `Bᵀ` stay in the core's cache
//! across the rows one thread takes).

use std::collections::HashMap;

use kiln_backend::{BackendError, LoraFactors, LoraGroup, Result};

use crate::ops::par::RowsMut;
use crate::pool::split_range;
use crate::ThreadPool;

/// Highest rank the kernel takes (its shrink vector lives on the stack).
pub(crate) const MAX_RANK: usize = 512;

/// Below this many multiply-adds a step's deltas run on the calling thread.
const PAR_MIN_MACS: usize = 1 << 17;

/// One part's factors: `A` (`rank × cols`) and `Bᵀ` (`rank × rows`).
#[derive(Debug)]
struct Factors {
    rank: usize,
    rows: usize,
    a: Vec<f32>,
    bt: Vec<f32>,
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
            let mut bt = vec![0f32; f.rank * rows];
            for o in 0..rows {
                for r in 0..f.rank {
                    bt[r * rows + o] = f.b[o * f.rank + r];
                }
            }
            out.push(Some(Factors { rank: f.rank, rows, a: f.a, bt }));
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
        floats * 4
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
        let mut planes: Vec<Option<RowsMut<'_>>> = Vec::with_capacity(ys.len());
        for (p, y) in ys.iter_mut().enumerate() {
            let rows = list.iter().flat_map(|a| a.parts.get(p)).flatten().map(|f| f.rows).next();
            planes.push(rows.map(|r| RowsMut::new(y, r)));
        }
        let macs: usize = list
            .iter()
            .flat_map(|a| a.parts.iter().flatten())
            .map(|f| f.rank * (cols + f.rows))
            .max()
            .unwrap_or(0)
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
}

/// `y += scale · B·(A·x)` for one row, on the best vector unit this CPU has.
fn delta(f: &Factors, x: &[f32], scale: f32, t: &mut [f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::matmul::CpuIsa;
        let isa = CpuIsa::current();
        if isa >= CpuIsa::Avx512 {
            // SAFETY: the CPU has AVX-512 F (the level implies it).
            return unsafe { delta_avx512(f, x, scale, t, y) };
        }
        if isa >= CpuIsa::Avx2 {
            // SAFETY: the CPU has AVX2 and FMA (the level implies them).
            return unsafe { delta_avx2(f, x, scale, t, y) };
        }
    }
    delta_portable(f, x, scale, t, y);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn delta_avx512(f: &Factors, x: &[f32], scale: f32, t: &mut [f32], y: &mut [f32]) {
    delta_portable(f, x, scale, t, y);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn delta_avx2(f: &Factors, x: &[f32], scale: f32, t: &mut [f32], y: &mut [f32]) {
    delta_portable(f, x, scale, t, y);
}

/// Sixteen independent sums, so that the compiler vectorizes the dot.
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[inline(always)]
fn delta_portable(f: &Factors, x: &[f32], scale: f32, t: &mut [f32], y: &mut [f32]) {
    let cols = x.len();
    for (r, tr) in t.iter_mut().enumerate() {
        *tr = scale * dot16(&f.a[r * cols..(r + 1) * cols], x);
    }
    // Four ranks per pass over y.
    let mut r = 0;
    while r + 4 <= f.rank {
        let (c0, c1, c2, c3) = (t[r], t[r + 1], t[r + 2], t[r + 3]);
        let b0 = &f.bt[r * f.rows..(r + 1) * f.rows];
        let b1 = &f.bt[(r + 1) * f.rows..(r + 2) * f.rows];
        let b2 = &f.bt[(r + 2) * f.rows..(r + 3) * f.rows];
        let b3 = &f.bt[(r + 3) * f.rows..(r + 4) * f.rows];
        for ((((yo, &v0), &v1), &v2), &v3) in y.iter_mut().zip(b0).zip(b1).zip(b2).zip(b3) {
            *yo += c0 * v0 + c1 * v1 + c2 * v2 + c3 * v3;
        }
        r += 4;
    }
    for r in r..f.rank {
        let c = t[r];
        for (yo, b) in y.iter_mut().zip(&f.bt[r * f.rows..(r + 1) * f.rows]) {
            *yo += c * b;
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
        let t: Vec<f64> = (0..f.rank)
            .map(|r| (0..cols).map(|c| f64::from(f.a[r * cols + c]) * f64::from(x[c])).sum())
            .collect();
        (0..rows).map(|o| f64::from(scale) * (0..f.rank).map(|r| f64::from(f.b[o * f.rank + r]) * t[r]).sum::<f64>()).collect()
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
                    assert!((f64::from(*g) - w).abs() < 1e-5, "row {row}: {g} vs {w}");
                }
            }
        }
        assert_eq!(l.bytes(1), 4 * rank * (rows + cols));
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
