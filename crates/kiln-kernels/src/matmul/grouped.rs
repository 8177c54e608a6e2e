//! Grouped products: many weights, each over its own rows of one input
//! (the experts of a mixture-of-experts layer, each over the tokens routed
//! to it), in one dispatch over the pool. The input rows are prepared
//! (quantized) once, in one dispatch, however many weights read them (an
//! expert's gate and up; a LoRA shrink over some of the base's rows), and
//! the work is split over the threads by cost (weight rows times
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
/// `ys[g.out]` (`g.w.rows` per row). The rows the groups span are
/// prepared once, whichever groups read them; output rows no group names
/// are left as they were.
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
        static ACT: RefCell<ActQ8> = RefCell::new(ActQ8::default());
    }
    ACT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut act) => run(path, pool, groups, x, cols, ys, &mut act),
        Err(_) => run(path, pool, groups, x, cols, ys, &mut ActQ8::default()),
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
    act: &mut ActQ8,
) {
    // One quantization of the rows that the integer kernels' groups span
    // (an expert's gate and up share their rows; LoRA's shrinks read rows
    // of the base product's), in one dispatch; each group reads its rows of
    // it in place.
    let (mut lo, mut hi, mut halves) = (usize::MAX, 0, false);
    for g in groups.iter().filter(|g| !g.rows.is_empty() && q8_inputs(&g.w)) {
        (lo, hi, halves) = (lo.min(g.rows.start), hi.max(g.rows.end), halves || half_sums(&g.w));
    }
    if hi > lo {
        act.quantize(pool, path, &x[lo * cols..hi * cols], hi - lo, cols, halves);
    }
    let act = &*act;
    let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr { ptr: y.as_mut_ptr(), len: y.len() }).collect();
    let jobs: Vec<Job<'_>> = groups
        .iter()
        .filter(|g| !g.rows.is_empty())
        .map(|g| {
            let o = outs[g.out];
            let at = g.rows.start * g.w.rows;
            Job {
                w: g.w,
                rb: g.w.ty.row_bytes(g.w.cols).unwrap_or(0),
                x: &x[g.rows.start * cols..g.rows.end * cols],
                // Groups whose kernels read no quantized input get none.
                act: if q8_inputs(&g.w) { act.rows(g.rows.start - lo..g.rows.end - lo) } else { act.rows(0..0) },
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

    /// Groups over rows inside other groups' rows (LoRA's shrinks inside
    /// the base product), not starting at row 0, with weights of several
    /// types in one call (Q6_K's kernel reads the half sums, Q8_0 rows and
    /// f32 none) read the one quantization in place: each equals its own
    /// product, bit for bit.
    #[test]
    fn nested_groups_of_mixed_types_read_one_quantization() {
        let pool = ThreadPool::new(2);
        let (rows, cols, n) = (32, 256, 12);
        let x: Vec<f32> = (0..n * cols).map(|i| ((i * 17 % 31) as f32 - 15.0) / 7.0).collect();
        let q6 = weight(GgmlType::Q6_K, rows, cols, 1);
        let q6p = PackedRows::pack(WeightView::new(GgmlType::Q6_K, rows, cols, &q6));
        let base = q6p.as_ref().map_or(WeightView::new(GgmlType::Q6_K, rows, cols, &q6), WeightView::packed);
        let q8 = weight(GgmlType::Q8_0, 16, cols, 2);
        let f32w = weight(GgmlType::F32, 16, cols, 3);
        let (a8, af) =
            (WeightView::new(GgmlType::Q8_0, 16, cols, &q8), WeightView::new(GgmlType::F32, 16, cols, &f32w));
        let groups = [
            Group { w: base, rows: 2..12, out: 0 },
            Group { w: a8, rows: 3..5, out: 1 },
            Group { w: af, rows: 5..7, out: 1 },
            Group { w: a8, rows: 9..12, out: 1 },
        ];
        let (mut y0, mut y1) = (vec![0f32; n * rows], vec![0f32; n * 16]);
        matmul_grouped(&pool, &groups, &x, cols, &mut [&mut y0, &mut y1]).unwrap();
        for g in &groups {
            let mut want = vec![0f32; g.rows.len() * g.w.rows];
            crate::matmul(&pool, g.w, &x[g.rows.start * cols..g.rows.end * cols], g.rows.len(), &mut want).unwrap();
            let got = if g.out == 0 { &y0 } else { &y1 };
            assert_eq!(&got[g.rows.start * g.w.rows..g.rows.end * g.w.rows], &want[..], "{} {:?}", g.w.ty, g.rows);
        }
    }
}
