//! LoRA adapters on the CPU, unmerged: each matrix's adapters by id, and
//! the products that add `scale·(x·Aᵀ)·Bᵀ` to the rows of a step that asked
//! for an adapter.
//!
//! A step with adapters runs each product as one grouped dispatch (see
//! [`crate::matmul::matmul_grouped`]): the base weights over every row and
//! each adapter's `A` over its own rows, on the 8-bit activations the base
//! product makes anyway, so the shrink costs no pass of its own. The
//! expand then adds `t·Bᵀ` into the outputs (on the calling thread when it
//! is small, as a decode step's is; split over the threads by blocks of 32
//! outputs otherwise). A step without adapters runs the plain product.
//! [`factors`] holds the factors' format.

mod factors;

use std::collections::HashMap;

use kiln_backend::{BackendError, LoraFactors, LoraGroup, Result};

use super::matrix::{kernel_err, CpuMatrix};
use crate::matmul::{matmul_grouped, Group};
use crate::pool::split_range;
use crate::ThreadPool;
use factors::{Factors, BLOCK};

/// Highest rank the kernel takes (its coefficients live on the stack).
pub(crate) const MAX_RANK: usize = 512;

/// Below this many multiply-adds a step's expand runs on the calling thread.
const PAR_MIN_MACS: usize = 1 << 17;

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
    /// The shrink's outputs, per (group, part): rows × `t_len`.
    t: Vec<f32>,
}

/// One (group, part) of a product: its factors, the group's scale and
/// where its shrink outputs start in the scratch.
struct Slot<'a> {
    group: usize,
    part: usize,
    f: &'a Factors,
    scale: f32,
    at: usize,
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
        parts: &[Option<&LoraFactors>],
    ) -> Result<()> {
        if parts.len() != part_shapes.len() {
            return Err(BackendError::Weight(format!(
                "LoRA factors for {} parts of a matrix of {}",
                parts.len(),
                part_shapes.len()
            )));
        }
        let mut out = Vec::with_capacity(parts.len());
        for (f, &(rows, cols)) in parts.iter().zip(part_shapes) {
            let Some(f) = f else {
                out.push(None);
                continue;
            };
            if f.rank > MAX_RANK {
                return Err(BackendError::Unsupported {
                    device: "cpu",
                    what: format!("LoRA rank {} (at most {MAX_RANK})", f.rank),
                });
            }
            out.push(Some(Factors::new(f, rows, cols)?));
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
        self.tables
            .values()
            .flatten()
            .filter(|a| a.adapter == adapter)
            .flat_map(|a| a.parts.iter().flatten())
            .map(Factors::n_bytes)
            .sum()
    }

    /// Takes the step's groups of rows (see [`kiln_backend::lora_groups`]).
    pub(crate) fn begin(&mut self, batch: &kiln_backend::ForwardBatch) -> Result<()> {
        if !batch.has_lora() {
            self.groups.clear();
            return Ok(());
        }
        kiln_backend::lora_groups(batch, &mut self.groups);
        for g in &self.groups {
            if !self.tables.values().flatten().any(|a| a.adapter == g.adapter) {
                let adapter = g.adapter;
                self.groups.clear();
                return Err(BackendError::Batch(format!("LoRA adapter {adapter} is not attached")));
            }
        }
        Ok(())
    }

    /// `ys[p] = x·Wₚᵀ (+ bias)` for every part `p` of `m` over the `n` rows
    /// of `x`, plus the delta of each row's adapter on `m`.
    pub(crate) fn product(
        &mut self,
        pool: &ThreadPool,
        m: &CpuMatrix,
        x: &[f32],
        n: usize,
        ys: &mut [&mut [f32]],
    ) -> Result<()> {
        let Self { tables, groups, t, .. } = self;
        let list = if groups.is_empty() { None } else { tables.get(&m.lora_key) };
        let Some(list) = list else { return m.forward(pool, x, n, ys) };
        let mut slots = Vec::new();
        let mut len = 0;
        for (gi, g) in groups.iter().enumerate() {
            let Some(att) = list.iter().find(|a| a.adapter == g.adapter) else { continue };
            if g.runs.iter().any(|&(s, l)| s + l > n) {
                return Err(BackendError::Batch(format!("LoRA rows past the step's {n} rows")));
            }
            for (part, f) in att.parts.iter().enumerate() {
                if let Some(f) = f {
                    slots.push(Slot { group: gi, part, f, scale: g.scale, at: len });
                    len += n * f.t_len;
                }
            }
        }
        if slots.is_empty() {
            return m.forward(pool, x, n, ys);
        }
        if ys.len() != m.n_parts() || slots.iter().any(|s| ys[s.part].len() < n * s.f.rows) {
            return Err(BackendError::Batch(format!("{} outputs for a product of {} parts", ys.len(), m.n_parts())));
        }
        if t.len() < len {
            t.resize(len, 0.0);
        }
        shrink(pool, m, x, n, ys, groups, &slots, &mut t[..len])?;
        m.add_bias(n, ys);
        expand(pool, groups, &slots, &t[..len], ys);
        Ok(())
    }
}

/// The base product of every part over all rows and each slot's `x·Aᵀ`
/// over its group's rows, in one grouped dispatch (runs of one range in a
/// row, so they share one quantized input).
#[allow(clippy::too_many_arguments)]
fn shrink(
    pool: &ThreadPool,
    m: &CpuMatrix,
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
    groups: &[LoraGroup],
    slots: &[Slot<'_>],
    t: &mut [f32],
) -> Result<()> {
    let views = m.part_views();
    let parts = views.len();
    let mut work: Vec<Group<'_>> = views.iter().enumerate().map(|(p, &w)| Group { w, rows: 0..n, out: p }).collect();
    let mut at = 0;
    while at < slots.len() {
        let g = slots[at].group;
        let end = at + slots[at..].iter().take_while(|s| s.group == g).count();
        for &(start, len) in &groups[g].runs {
            for (i, s) in slots.iter().enumerate().take(end).skip(at) {
                work.push(Group { w: s.f.a_view(), rows: start..start + len, out: parts + i });
            }
        }
        at = end;
    }
    let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut **y).collect();
    let mut rest = t;
    for s in slots {
        let (mine, tail) = rest.split_at_mut(n * s.f.t_len);
        outs.push(mine);
        rest = tail;
    }
    matmul_grouped(pool, &work, x, m.cols(), &mut outs).map_err(kernel_err)
}

/// `ys[p][row] += scale·t[row]·Bᵀ` for every row of every slot's group.
fn expand(pool: &ThreadPool, groups: &[LoraGroup], slots: &[Slot<'_>], t: &[f32], ys: &mut [&mut [f32]]) {
    let outs: Vec<Ptr> = ys.iter_mut().map(|y| Ptr(y.as_mut_ptr())).collect();
    let macs: usize = slots.iter().map(|s| groups[s.group].num_rows() * s.f.rank * s.f.rows).sum();
    let work = |ith: usize, nth: usize| {
        let mut c = [0f32; MAX_RANK];
        for s in slots {
            let f = s.f;
            let blocks = split_range(f.blocks(), ith, nth);
            if blocks.is_empty() {
                continue;
            }
            let (lo, hi) = (blocks.start * BLOCK, (blocks.end * BLOCK).min(f.rows));
            for &(start, len) in &groups[s.group].runs {
                for row in start..start + len {
                    let tr = &t[s.at + row * f.t_len..s.at + row * f.t_len + f.rank];
                    for (ci, &v) in c.iter_mut().zip(tr) {
                        *ci = s.scale * v;
                    }
                    // SAFETY: `ys[part]` holds at least `n · rows` values
                    // (checked in `product`), a row is in one group only,
                    // and each thread writes its own outputs `lo..hi`.
                    let y =
                        unsafe { std::slice::from_raw_parts_mut(outs[s.part].get().add(row * f.rows + lo), hi - lo) };
                    f.expand(&c[..f.rank], y, blocks.clone());
                }
            }
        }
    };
    if macs < PAR_MIN_MACS || pool.n_threads() == 1 {
        work(0, 1);
    } else {
        pool.run(&work);
    }
}

/// A raw pointer shared by the pool's threads, each writing its own part.
#[derive(Clone, Copy)]
struct Ptr(*mut f32);
// SAFETY: the users write disjoint elements (see `expand`).
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}
impl Ptr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_backend::{ForwardBatch, HostWeight, LogitsWant, LoraUse, MatrixDesc, MatrixUse, SharedBytes};

    struct Rng(u32);
    impl Rng {
        fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (self.0 >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        }
        fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
            (0..n).map(|_| self.next() * scale).collect()
        }
    }

    /// An F32 Q/K/V matrix of `parts` (rows each) over `cols` inputs.
    fn matrix(rng: &mut Rng, parts: &[usize], cols: usize) -> (CpuMatrix, Vec<Vec<f32>>) {
        let ws: Vec<Vec<f32>> = parts.iter().map(|&r| rng.vec(r * cols, 0.2)).collect();
        let host = ws
            .iter()
            .zip(parts)
            .map(|(w, &r)| {
                let bytes = w.iter().flat_map(|v| v.to_le_bytes()).collect();
                HostWeight::new("w", crate::GgmlType::F32, r, cols, SharedBytes::from_vec(bytes)).unwrap()
            })
            .collect();
        let desc = MatrixDesc { parts: host, bias: None, usage: MatrixUse::Qkv };
        (CpuMatrix::new(desc, true).unwrap(), ws)
    }

    /// `x·Wᵀ + scale·(x·Aᵀ)·Bᵀ` in f64 for one row, and the largest delta.
    fn reference(w: &[f32], f: Option<(&LoraFactors, f32)>, x: &[f32]) -> (Vec<f64>, f64) {
        let cols = x.len();
        let rows = w.len() / cols;
        let dot = |a: &[f32]| a.iter().zip(x).map(|(&a, &x)| f64::from(a) * f64::from(x)).sum::<f64>();
        let mut y: Vec<f64> = (0..rows).map(|o| dot(&w[o * cols..(o + 1) * cols])).collect();
        let mut max = 0f64;
        if let Some((f, s)) = f {
            let t: Vec<f64> = (0..f.rank).map(|r| dot(&f.a[r * cols..(r + 1) * cols])).collect();
            for (o, yo) in y.iter_mut().enumerate() {
                let d = f64::from(s) * (0..f.rank).map(|r| f64::from(f.b[o * f.rank + r]) * t[r]).sum::<f64>();
                max = max.max(d.abs());
                *yo += d;
            }
        }
        (y, max)
    }

    /// Two adapters and the base in one step, on a three-part matrix, equal
    /// the float64 reference of `x·Wᵀ + scale·(x·Aᵀ)·Bᵀ` row by row: within
    /// 2% of the row's largest delta with `A` in Q8_0 (8-bit inputs; the
    /// error of each 8-bit value is at most half of 1/127 of its block's
    /// largest), 1% with `A` in F16 (inputs not whole 32-blocks), and rows
    /// without an adapter equal the base product. Small steps (the expand
    /// on the caller) and large ones (split over 2 and 3 threads).
    #[test]
    fn deltas_go_to_the_rows_of_their_adapter() {
        for (rows, cols, rank, n) in [(37, 64, 5, 4), (37, 29, 5, 4), (300, 96, 16, 40)] {
            let mut rng = Rng(rows as u32 * 7 + cols as u32);
            let parts = [rows, rows / 2 + 3, rows / 2 + 3];
            let (m, ws) = matrix(&mut rng, &parts, cols);
            let mut fac =
                |rows: usize| LoraFactors { rank, a: rng.vec(rank * cols, 1.0), b: rng.vec(rank * rows, 1.0) };
            let f1: Vec<LoraFactors> = parts.iter().map(|&r| fac(r)).collect();
            let f2 = fac(parts[0]);
            let mut l = CpuLora::default();
            let key = m.lora_key;
            let shapes = m.part_shapes();
            l.attach(key, &shapes, 1, &[Some(&f1[0]), Some(&f1[1]), Some(&f1[2])]).unwrap();
            l.attach(key, &shapes, 2, &[Some(&f2), None, None]).unwrap();
            // Rows: 0..2 adapter 2 at 0.5, then alternating none / adapter 1.
            let mut b = ForwardBatch::new();
            b.push_seq(&[1, 2], 0, &[0], 4, LogitsWant::Last).unwrap();
            b.set_lora(Some(LoraUse { adapter: 2, scale: 0.5 }));
            let mut uses = vec![(Some(2), 0.5), (Some(2), 0.5)];
            for i in 2..n {
                b.push_seq(&[3], 0, &[0], 4, LogitsWant::Last).unwrap();
                let u = (i % 2 == 1).then_some(LoraUse { adapter: 1, scale: 1.0 });
                b.set_lora(u);
                uses.push((u.map(|u| u.adapter), 1.0));
            }
            l.begin(&b).unwrap();
            let x = rng.vec(n * cols, 2.0);
            let tol = if cols % 32 == 0 { 2e-2 } else { 1e-2 };
            for threads in [1, 2, 3] {
                let pool = ThreadPool::new(threads);
                let mut ys: Vec<Vec<f32>> = parts.iter().map(|&r| vec![0f32; n * r]).collect();
                let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(Vec::as_mut_slice).collect();
                l.product(&pool, &m, &x, n, &mut outs).unwrap();
                for (row, &(ad, s)) in uses.iter().enumerate() {
                    for (p, &pr) in parts.iter().enumerate() {
                        let f = match ad {
                            Some(1) => Some((&f1[p], s)),
                            Some(2) if p == 0 => Some((&f2, s)),
                            _ => None,
                        };
                        let xr = &x[row * cols..(row + 1) * cols];
                        let (want, max) = reference(&ws[p], f, xr);
                        let got = &ys[p][row * pr..(row + 1) * pr];
                        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                            let bound = tol * max + 1e-4 * w.abs().max(1.0);
                            assert!(
                                (f64::from(*g) - w).abs() <= bound,
                                "{rows}x{cols} rank {rank}, {threads} threads, row {row} part {p} out {o}: {g} vs {w} (largest delta {max})"
                            );
                        }
                    }
                }
            }
            assert!(l.bytes(1) > 0 && l.bytes(1) < 4 * rank * (parts.iter().sum::<usize>() + 3 * cols));
            l.detach(2);
            assert!(l.begin(&b).is_err(), "a step naming a detached adapter is refused");
        }
    }

    #[test]
    fn factors_of_the_wrong_shape_are_refused() {
        let mut l = CpuLora::default();
        let f = LoraFactors { rank: 2, a: vec![0.0; 2 * 3], b: vec![0.0; 2 * 4] };
        assert!(l.attach(1, &[(4, 3)], 1, &[Some(&f)]).is_ok());
        assert!(l.attach(1, &[(5, 3)], 1, &[Some(&f)]).is_err());
        let big =
            LoraFactors { rank: MAX_RANK + 1, a: vec![0.0; (MAX_RANK + 1) * 3], b: vec![0.0; (MAX_RANK + 1) * 4] };
        assert!(l.attach(1, &[(4, 3)], 1, &[Some(&big)]).is_err());
    }
}
