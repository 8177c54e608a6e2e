//! Running row-wise ops over the pool's threads.
//!
//! Elementwise work (norms, RoPE, SwiGLU, K/V writes) is small for one token
//! and worth splitting only for prefill chunks: [`for_rows`] runs inline
//! below [`PAR_MIN_ROWS`] rows and over the pool above, each thread taking a
//! contiguous range of rows. [`RowsMut`] hands each range its own rows of a
//! mutable buffer.

use std::marker::PhantomData;
use std::ops::Range;

use crate::pool::{split_range, ThreadPool};

/// Fewest rows (tokens) worth a pool dispatch.
pub const PAR_MIN_ROWS: usize = 16;

/// Calls `f` on contiguous, disjoint ranges covering `0..n`: inline when
/// `n` is small, else one range per pool thread.
pub(crate) fn for_rows(pool: &ThreadPool, n: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    if n < PAR_MIN_ROWS || pool.n_threads() == 1 {
        if n > 0 {
            f(0..n);
        }
        return;
    }
    pool.run(&|ith, nth| {
        let r = split_range(n, ith, nth);
        if !r.is_empty() {
            f(r);
        }
    });
}

/// A mutable buffer of rows that [`for_rows`] ranges can share: each range
/// takes only its own rows.
pub(crate) struct RowsMut<'a, T = f32> {
    ptr: *mut T,
    n_rows: usize,
    row: usize,
    _buf: PhantomData<&'a mut [T]>,
}

// SAFETY: only hands out disjoint rows (see `rows`), like `chunks_mut`.
unsafe impl<T: Send> Send for RowsMut<'_, T> {}
unsafe impl<T: Send> Sync for RowsMut<'_, T> {}

impl<'a, T> RowsMut<'a, T> {
    /// Rows of `row` elements of `buf` (a trailing partial row is not used).
    pub(crate) fn new(buf: &'a mut [T], row: usize) -> Self {
        let n_rows = buf.len().checked_div(row).unwrap_or(0);
        Self { ptr: buf.as_mut_ptr(), n_rows, row, _buf: PhantomData }
    }

    /// Rows `r` (clamped to the buffer).
    ///
    /// # Safety
    /// Ranges used at the same time must not overlap: callers pass the
    /// disjoint ranges of one [`for_rows`] call.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn rows(&self, r: Range<usize>) -> &mut [T] {
        let (a, b) = (r.start.min(self.n_rows), r.end.min(self.n_rows));
        std::slice::from_raw_parts_mut(self.ptr.add(a * self.row), (b.max(a) - a) * self.row)
    }
}
