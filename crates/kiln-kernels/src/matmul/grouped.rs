//! Grouped products: many weights, each over its own rows of one input
//! (the experts of a mixture-of-experts layer, each over the tokens routed
//! to it), in one dispatch over the pool. Every group's input is prepared
//! (quantized) once, however many weights read it (an expert's gate and
//! up), and the work is split over the threads by cost (weight rows times
//! the group's tokens), so a popular expert is shared by several threads
//! and many small ones by one.

use std::cell::RefCell;
use std::ops::Range;

use super::act::ActQ8;
use super::{half_sums, q8_inputs, run_units, CpuIsa, Job, OutPtr, WeightView};
use crate::pool::ThreadPool;
use crate::quant::{check_len, row_bytes, KernelError};

/// One product of [`matmul_grouped`]: `ys[out][t] = x[t] · wᵀ` for the
/// rows `t` in `rows`.
#[derive(Debug, Clone)]
pub struct Group<'a> {
    /// The weight.
    pub w: WeightView<'a>,
    /// Rows of the input (and of the output) it runs over.
    pub rows: Range<usize>,
    /// Which output it writes (`ys[out]`, rows of `w.rows` values).
    pub out: usize,
}

/// Runs every group of `groups` in one dispatch: group `g` reads rows
/// `g.rows` of `x` (`cols` per row) and writes the same rows of
/// `ys[g.out]` (`g.w.rows` per row). Groups with equal `rows` share the
/// prepared input; rows no group names are left as they were.
///
/// # Errors
/// [`KernelError`] when a weight's `cols` or an output's length do not fit.
pub fn matmul_grouped(
    pool: &ThreadPool,
    groups: &[Group<'_>],
    x: &[f32],
    cols: usize,
    ys: &mut [&mut [f32]],
) -> Result<(), KernelError> {
    let path = CpuIsa::current();
    let path = if path.is_supported() { path } else { CpuIsa::Scalar };
    for g in groups {
        check_len("grouped weight cols", cols, g.w.cols)?;
        let rb = row_bytes(g.w.ty, g.w.cols)?;
        match g.w.packed {
            Some(p) => check_len("packed weight rows", g.w.rows, p.rows())?,
            None => check_len("grouped weight bytes", g.w.rows.saturating_mul(rb), g.w.data.len())?,
        }
        let short = |what: &'static str, expected: usize, got: usize| Err(KernelError::Length { what, expected, got });
        if g.rows.start > g.rows.end || g.rows.end.saturating_mul(cols) > x.len() {
            return short("grouped input rows", g.rows.end.saturating_mul(cols), x.len());
        }
        let Some(y) = ys.get(g.out) else { return short("grouped outputs", g.out + 1, ys.len()) };
        if g.rows.end.saturating_mul(g.w.rows) > y.len() {
            return short("grouped output rows", g.rows.end.saturating_mul(g.w.rows), y.len());
        }
    }
    thread_local! {
        static ACTS: RefCell<Vec<ActQ8>> = const { RefCell::new(Vec::new()) };
    }
    ACTS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut acts) => run(path, pool, groups, x, cols, ys, &mut acts),
        Err(_) => run(path, pool, groups, x, cols, ys, &mut Vec::new()),
    });
    Ok(())
}

fn run(
    path: CpuIsa,
    pool: &ThreadPool,
    groups: &[Group<'_>],
    x: &[f32],
    cols: usize,
    ys: &mut [&mut [f32]],
    acts: &mut Vec<ActQ8>,
) {
    // One prepared input per distinct row range (groups come in runs that
    // share one: an expert's gate then up).
    let mut inputs: Vec<Range<usize>> = Vec::new();
    let mut which = Vec::with_capacity(groups.len());
    for g in groups {
        if inputs.last() != Some(&g.rows) {
            inputs.push(g.rows.clone());
        }
        which.push(inputs.len() - 1);
    }
    if acts.len() < inputs.len() {
        acts.resize_with(inputs.len(), ActQ8::default);
    }
    for (i, r) in inputs.iter().enumerate() {
        let mine = || groups.iter().zip(&which).filter(move |(_, &w)| w == i).map(|(g, _)| &g.w);
        if mine().any(q8_inputs) {
            acts[i].quantize(pool, path, &x[r.start * cols..r.end * cols], r.len(), cols, mine().any(half_sums));
        }
    }
    let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr { ptr: y.as_mut_ptr(), len: y.len() }).collect();
    let jobs: Vec<Job<'_>> = groups
        .iter()
        .zip(&which)
        .filter(|(g, _)| !g.rows.is_empty())
        .map(|(g, &i)| {
            let o = outs[g.out];
            let at = g.rows.start * g.w.rows;
            Job {
                w: g.w,
                rb: g.w.ty.row_bytes(g.w.cols).unwrap_or(0),
                x: &x[g.rows.start * cols..g.rows.end * cols],
                act: &acts[i],
                n: g.rows.len(),
                // SAFETY: `at + rows.len() · w.rows ≤ len` was checked above.
                y: OutPtr { ptr: unsafe { o.ptr.add(at) }, len: g.rows.len() * g.w.rows },
            }
        })
        .collect();
    // Cost of a unit of work (a row or a packed group of rows) of each job:
    // its rows times the job's tokens.
    let cost = |j: &Job<'_>| j.w.unit() * j.n;
    let total: usize = jobs.iter().map(|j| j.w.rows / j.w.unit() * cost(j)).sum();
    pool.run(&|ith, nth| {
        let (c0, c1) = (total * ith / nth, total * (ith + 1) / nth);
        let mut off = 0;
        for job in &jobs {
            let (units, pc) = (job.w.rows / job.w.unit(), cost(job));
            let span = units * pc;
            // Units whose start cost lies in [c0, c1): every unit is taken
            // by exactly one thread.
            let first = c0.saturating_sub(off).div_ceil(pc).min(units);
            let last = c1.saturating_sub(off).div_ceil(pc).min(units);
            if first < last {
                run_units(path, job, first..last);
            }
            off += span;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::PackedRows;
    use crate::{quant, GgmlType};

    fn weight(ty: GgmlType, rows: usize, cols: usize, seed: u32) -> Vec<u8> {
        let rb = ty.row_bytes(cols).unwrap();
        let mut b = vec![0u8; rows * rb];
        for r in 0..rows {
            let v: Vec<f32> =
                (0..cols).map(|c| (((r * 31 + c * 7 + seed as usize) % 23) as f32 - 11.0) / 13.0).collect();
            quant::quantize_row(ty, &v, &mut b[r * rb..(r + 1) * rb]).unwrap();
        }
        b
    }

    /// Grouped products equal one plain product per group, for row-major
    /// and packed weights, over uneven groups and 3 threads.
    #[test]
    fn grouped_equals_one_product_per_group() {
        let pool = ThreadPool::new(3);
        let (rows, cols, n) = (32, 256, 11);
        let x: Vec<f32> = (0..n * cols).map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0).collect();
        for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::MXFP4] {
            let bytes: Vec<Vec<u8>> = (0..3).map(|e| weight(ty, rows, cols, e)).collect();
            let packed: Vec<Option<PackedRows>> =
                bytes.iter().map(|b| PackedRows::pack(WeightView::new(ty, rows, cols, b))).collect();
            let views: Vec<WeightView<'_>> = bytes
                .iter()
                .zip(&packed)
                .map(|(b, p)| p.as_ref().map_or(WeightView::new(ty, rows, cols, b), WeightView::packed))
                .collect();
            let ranges = [0..1, 1..1, 1..9, 9..11];
            let groups: Vec<Group<'_>> = ranges
                .iter()
                .enumerate()
                .flat_map(|(i, r)| {
                    let w = views[i % 3];
                    [Group { w, rows: r.clone(), out: 0 }, Group { w: views[(i + 1) % 3], rows: r.clone(), out: 1 }]
                })
                .collect();
            let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            matmul_grouped(&pool, &groups, &x, cols, &mut [&mut a, &mut b]).unwrap();
            for g in &groups {
                let mut want = vec![0f32; g.rows.len() * rows];
                crate::matmul(&pool, g.w, &x[g.rows.start * cols..g.rows.end * cols], g.rows.len(), &mut want).unwrap();
                let got = if g.out == 0 { &a } else { &b };
                assert_eq!(&got[g.rows.start * rows..g.rows.end * rows], &want[..], "{ty} {:?}", g.rows);
            }
        }
    }
}
